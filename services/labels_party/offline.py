"""``labeldp optimize`` and ``labeldp privatize``: the labels party's randomizer without a server.

``optimize`` fits a mechanism to a public prior and reports its parameters and
exact expected loss. ``privatize`` runs the whole randomizer (private prior,
fit, privatize) over a CSV of id,label and writes id,privatized label in the
canonical sorted-id order, printing the ε spent per part. The label domain (or
class list) is public input, never derived from the labels.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from labeldp.epsilon import InvalidEpsilon, exact_micro, from_micro
from labeldp.errors import LabelDPError
from labeldp.mechanisms import LabelDomain
from labeldp.mechanisms.contract import Prior
from labeldp.randomness import secure_generator
from labeldp.release.defaults import AUTO, default_mechanism
from labeldp.release.randomizer import fit_to_public_prior, randomize, validate_public_prior

from .uploads import LabelRules, parse_label_upload, row_errors


class OfflineError(ValueError):
    """A bad command-line input; the message is safe to print (it holds no label values).

    ``code`` is the stable error code the command line prints (the service's, where it has one).
    """

    def __init__(self, message: str, code: str = "invalid_input") -> None:
        super().__init__(message)
        self.code = code


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return value


def read_prior(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        doc = json.loads(Path(path).read_text())
        values = np.asarray(doc["values"], dtype=np.float64)
        probs = np.asarray(doc["probs"], dtype=np.float64)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise OfflineError(f'{path}: expected JSON {{"values": [...], "probs": [...]}}') from exc
    return values, probs


def optimize(
    mechanism: str,
    epsilon: float,
    prior_path: Path,
    *,
    loss: str | None = None,
    domain: tuple[float, float] | None = None,
    categorical: bool = False,
    params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Fitted parameters and exact expected loss of ``mechanism`` under a public prior."""
    values, probs = read_prior(prior_path)
    params = dict(params or {})
    if loss is not None:
        params["loss"] = loss
    if categorical:
        classes = [str(int(v)) if float(v).is_integer() else str(v) for v in values]
        grid = np.arange(values.size, dtype=np.float64)
        mech = fit_to_public_prior(mechanism, epsilon, grid, probs / probs.sum(), classes=classes, params=params)
        zero_one = mech.loss_under(Prior(grid, probs / probs.sum()))  # Pr[ŷ ≠ y]
        expected = {"expected_accuracy": 1.0 - zero_one, "expected_loss": zero_one}
    else:
        low, high = domain if domain else (float(values.min()), float(values.max()))
        kind = (
            "integer"
            if np.all(values == np.round(values)) and float(low).is_integer() and float(high).is_integer()
            else "real"
        )
        d = LabelDomain(kind, low, high)  # type: ignore[arg-type]
        prior = validate_public_prior(list(values), list(probs), d)
        mech = fit_to_public_prior(mechanism, epsilon, prior.values, prior.probs, domain=d, params=params)
        expected = {"expected_loss": float(mech.loss_under(Prior(prior.values, prior.probs)))}
    g = mech.guarantee
    return {
        "mechanism": mechanism,
        "epsilon": epsilon,
        "parameters": json.loads(mech.to_spec().model_dump_json()),
        **{k: _jsonable(v) for k, v in expected.items()},
        "guarantee": {"epsilon": g.epsilon, "delta": g.delta, "adjacency": g.adjacency, "statement": g.statement},
    }


def privatize_csv(
    mechanism: str,
    epsilon: float | str,
    input_path: Path,
    output_path: Path,
    *,
    epsilon_prior: float | str | None = None,
    domain: tuple[float, float] | None = None,
    label_type: str = "real",
    classes: list[str] | None = None,
    params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the randomizer over a CSV; returns the accounting (ε per part).

    ε is read as the service reads it (``exact_micro``: refused, never rounded, unless it is a
    multiple of 10⁻⁶; docs/architecture.md, invariant 3), before any label is read.
    """
    try:
        epsilon_micro = exact_micro(epsilon)
        epsilon_prior_micro = None if epsilon_prior is None else exact_micro(epsilon_prior)
    except InvalidEpsilon as exc:
        raise OfflineError(f"invalid epsilon: {exc}", "invalid_epsilon") from None
    if label_type == "categorical":
        if not classes:
            raise OfflineError("--classes is required for categorical labels")
        low, high = 0.0, float(len(classes) - 1)
    else:
        if domain is None:
            raise OfflineError("--domain LOW,HIGH is required: the label range must be public, not read from the data")
        low, high = domain
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise OfflineError("--domain needs finite LOW < HIGH")
    try:
        upload = parse_label_upload(Path(input_path), "text/csv", LabelRules(label_type, low, high, classes))
    except LabelDPError as exc:
        raise OfflineError(f"{input_path}: {exc.message}") from None
    except OSError as exc:
        raise OfflineError(f"{input_path}: cannot be read") from exc
    declared = pc.unique(pc.drop_null(upload.ids))
    declared = declared.take(pc.sort_indices(declared))  # row_errors searches sorted ids
    _, errors, n_bad = row_errors(upload, declared, np.zeros(len(declared), dtype=bool))
    if n_bad:
        first = "; ".join(f"row {e['row']}: {e['code']}" for e in errors[:5])
        raise OfflineError(f"{n_bad} invalid rows ({first}); nothing was written")
    order = pc.sort_indices(upload.ids).to_numpy()
    ids = upload.ids.take(pa.array(order)).to_pylist()
    labels = upload.values[order]
    requested = mechanism
    if mechanism == AUTO:  # resolved as a release resolves it: from the label type, ε and the rows n
        mechanism = default_mechanism(label_type, from_micro(epsilon_micro), int(labels.size))
    d = None if label_type == "categorical" else LabelDomain(label_type, low, high)  # type: ignore[arg-type]
    out = randomize(
        labels,
        d,
        mechanism,
        epsilon_micro,
        secure_generator(),
        classes=classes,
        params=params,
        epsilon_prior_micro=epsilon_prior_micro,
        auto=requested == AUTO,
    )
    mechanism = out.mechanism.name  # auto's rp_with_prior may have become rr_on_bins from its prior
    del labels
    with open(output_path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "label"])
        if classes is not None:
            writer.writerows((i, classes[int(v)]) for i, v in zip(ids, out.labels))
        else:
            writer.writerows((i, repr(float(v))) for i, v in zip(ids, out.labels))
    return {
        "mechanism": mechanism,
        **({"resolved_from": requested} if requested != mechanism else {}),
        "rows": len(ids),
        "epsilon_parts": {p.name: p.epsilon_micro / 1e6 for p in out.accounting.parts},
        "epsilon_total": out.accounting.total_epsilon,
        "delta": out.accounting.delta,
        "spec": json.loads(out.mechanism.model_dump_json()),
        "prior": None if out.prior is None else json.loads(out.prior.model_dump_json()),
    }
