"""Cross-fitted evidence for the continuous guard: does it make the model-vs-anchor decision better or steadier?

Usage:
    python research/studies/crossfit_guard.py --housing PATH [--datasets a,b] [--trials 6] [--epochs 20]
        [--epsilons 0.5,1,2] [--sim-n 2500] [--out research/results/crossfit_guard]

The product's guard (``labeldp.learning.selection.evidence_weight``) scores the selected predictor's
gain over the anchor on the same validation rows that selected it (epoch, λ, w): its z score carries
the winner's curse. Cross-fitting removes it: the validation rows are cut into K folds; on each fold
the predictor that the OTHER folds select (the product's ``Selector`` run on them, every epoch) is
scored against the anchor; the per-row held-out gains of all folds are pooled into one (gain, SE),
z_cf. The guard's share of the full selection's weight is then a ramp in z_cf instead of z.

For every data set, ε and trial the release is drawn with the runner's seed for the mechanism
``auto`` picks (the default configuration); the default learning trains ONCE with the release's
prior (the product as it is), keeping every epoch's validation outputs. Every guard is replayed on
that one training: test predictions anchor + v·(s − anchor), v = w·share (s: the selected epoch's
predictor, w its selected weight), or the private mean where the share is 0. Candidates: evidence
``full`` (the product's z) or ``cfK`` (K = 2, 5, 10), each with a smoothstep from z = lo to hi.

Chosen leave one data set out: the candidate with the lowest mean log(test MSE / private mean's) over
the OTHER sets, scored on the held-out one. Also reported: the spread of the decision (per cell, the
SD over trials of the share and of log(test MSE / private mean's)). Small on purpose (a shared 2-core
machine): the numbers say which way, not how far. Writes ``<out>.json`` and ``<out>.md``.
Its answer: docs/decisions/0020-crossfit-guard-evidence.md.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime as dt
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from labeldp.epsilon import to_micro_floor
from labeldp.learning import regression
from labeldp.learning import selection as sel
from labeldp.learning.config import LearningConfig
from labeldp.learning.debiasing import label_law, private_mean
from labeldp.learning.regression import fit_private_regressor
from labeldp.learning.selection import DETECTABLE_Z, Selector, mean_and_se
from labeldp.mechanisms.registry import auto_pick
from labeldp.release.randomizer import randomize
from labeldp_research import utility

DATASETS = ("simulated_linear", "simulated_nonlinear", "bounded_wide", "counts_small", "california_housing_small")
FOLDS = (2, 5, 10)
RAMPS = ((0.0, 2.0), (-1.0, 1.0), (1.0, 3.0))
EVIDENCE = ("full", *(f"cf{k}" for k in FOLDS))
CANDIDATES = [f"{e}@{lo:g}:{hi:g}" for e in EVIDENCE for lo, hi in RAMPS]
PRODUCT = f"full@{sel.MEAN_FALLBACK_Z - sel.GUARD_RAMP:g}:{sel.MEAN_FALLBACK_Z:g}"  # what the product does now


def mse(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean((pred - y) ** 2))


def _recording(store: list[tuple[Any, int, np.ndarray]]) -> Callable[..., Any]:
    """``Selection.inspector`` that also keeps each epoch's validation outputs (label units)."""
    original = regression.Selection.inspector

    def inspector(self: regression.Selection) -> Any:
        inner = original(self)
        if inner is None:
            return None

        def inspect(epoch: int, outputs: np.ndarray, model: Any) -> Any:
            store.append((self, epoch, np.asarray(outputs, dtype=np.float64) * self.std + self.mean))
            return inner(epoch, outputs, model)

        return inspect

    return inspector


def crossfit_z(selection: regression.Selection, outputs: list[np.ndarray], k: int, seed: int) -> tuple[float, float]:
    """(gain, se) of the pooled held-out gains over the anchor, each fold scored with the predictor the
    other folds select (every epoch, λ and w as the product's Selector chooses them)."""
    full = selection.selectors[0]
    ref, anchor = full.reference, full.anchor
    assert anchor is not None
    folds = np.random.default_rng(seed).permutation(ref.size) % k
    gains = []
    for f in range(k):
        inside, held = folds != f, folds == f
        chooser = Selector(full.law, full.debias, ref[inside], full.shrinkage, full.select_epoch, "private", anchor)
        for epoch, out in enumerate(outputs, start=1):
            chooser.observe(epoch, out[inside])
        assert chooser.epoch_ is not None and chooser.shrinkage_ is not None
        scorer = Selector(full.law, full.debias, ref[held], full.shrinkage, full.select_epoch, "private", anchor)
        gains.append(scorer.gains(outputs[chooser.epoch_ - 1][held], chooser.shrinkage_, chooser.model_weight_))
    return mean_and_se(np.concatenate(gains))


def measure(plan: utility.DatasetPlan, trials: int, epsilons: list[float]) -> list[dict[str, Any]]:
    data = plan.load()
    rows = []
    for trial in utility.protocol_trials(plan, data, trials):
        config = trial.config.replace(validation_fraction=utility.PrivateRegressor().validation_fraction)
        for eps in epsilons:
            n = int(trial.y_train.size)
            mech = auto_pick(data.domain.kind if data.domain else "real", eps, n)
            rng = np.random.default_rng(utility._seed(0, plan.name, trial.index, mech, to_micro_floor(eps)))
            out = randomize(trial.y_train, data.domain, mech, to_micro_floor(eps), rng)
            labels = out.labels[trial.fit_pos]
            law = label_law(out.mechanism)
            seen: list[tuple[Any, int, np.ndarray]] = []
            saved = regression.Selection.inspector
            regression.Selection.inspector = _recording(seen)  # type: ignore[method-assign]
            try:
                model = fit_private_regressor(
                    trial.fit_table, labels, out.mechanism, config, LearningConfig(), prior=out.prior
                )
            finally:
                regression.Selection.inspector = saved  # type: ignore[method-assign]
            selection = seen[0][0]
            outputs = [o for _, _, o in seen]
            raw = copy.copy(model)
            raw.postprocessing_ = dataclasses.replace(model.postprocessing_, anchor=None, model_weight=1.0)
            s = raw.predict(trial.test_table)
            summary = model.selection_ or {}
            gain = summary["gain_over_mean"] or {"gain": 0.0, "se": 0.0}
            anchor = float(summary["private_mean"])
            final_anchor = private_mean(labels, law, prior=out.prior)
            step, gap = s - anchor, trial.y_test - anchor
            evidence = {"full": (gain["gain"], gain["se"])}
            for k in FOLDS:
                evidence[f"cf{k}"] = crossfit_z(selection, outputs, k, seed=1000 * trial.index + k)
            row: dict[str, Any] = {
                "dataset": plan.name, "mechanism": mech, "epsilon": eps, "trial": trial.index,
                "detectable_z": summary["detectable_z"], "w": float(summary["selected_model_weight"]),
                "quadratic": [float(np.mean(gap * gap)), float(np.mean(step * gap)), float(np.mean(step * step))],
                "mean": mse(np.full_like(s, final_anchor), trial.y_test),
                "product": mse(model.predict(trial.test_table), trial.y_test),
                "evidence": {k: list(v) for k, v in evidence.items()},
            }
            row["guards"] = {c: replay(row, c) for c in CANDIDATES}
            rows.append(row)
            zs = ", ".join(f"{k} {g / se if se > 0 else math.inf:.2f}" for k, (g, se) in evidence.items())
            print(f"[{plan.name}] trial {trial.index} ε={eps:g} {mech}: z {zs}; product {row['product']:.4g} "
                  f"mean {row['mean']:.4g}", flush=True)
    return rows


def share(row: dict[str, Any], candidate: str) -> float:
    """The guard's share under ``candidate`` (evidence@lo:hi), as ``evidence_weight`` computes it."""
    evidence, ramp = candidate.split("@")
    lo, hi = (float(v) for v in ramp.split(":"))
    g, se = row["evidence"][evidence]
    det = math.inf if row["detectable_z"] is None else row["detectable_z"]
    if det < DETECTABLE_Z or g <= 0.0:
        return 0.0
    if se <= 0.0:
        return 1.0
    return sel.smooth_ramp(g / se, lo, hi)


def replay(row: dict[str, Any], candidate: str) -> dict[str, float]:
    """Test MSE and share of the model with this guard: anchor + v·(s − anchor), v = w·share; 0: the mean."""
    rho = share(row, candidate)
    if rho == 0.0:
        return {"mse": float(row["mean"]), "share": 0.0}
    a, b, c = row["quadratic"]
    v = row["w"] * rho
    return {"mse": a - 2.0 * v * b + v * v * c, "share": rho}


def score(rows: list[dict[str, Any]], candidate: str) -> float:
    """Mean log(test MSE / the private mean's) over trials: lower is better."""
    return float(np.mean([math.log(r["guards"][candidate]["mse"] / r["mean"]) for r in rows]))


def cells(rows: list[dict[str, Any]]) -> dict[tuple[str, float], list[dict[str, Any]]]:
    out: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault((r["dataset"], r["epsilon"]), []).append(r)
    return out


def spread(rows: list[dict[str, Any]], candidate: str, what: str) -> float:
    """Mean over cells of the SD over trials of the share (``share``) or of log(test MSE / mean's)."""
    sds = []
    for cell in cells(rows).values():
        if what == "share":
            values = [r["guards"][candidate]["share"] for r in cell]
        else:
            values = [math.log(r["guards"][candidate]["mse"] / r["mean"]) for r in cell]
        if len(values) > 1:
            sds.append(float(np.std(values, ddof=1)))
    return float(np.mean(sds)) if sds else float("nan")


def over_mean(rows: list[dict[str, Any]], candidate: str) -> int:
    """Cells whose mean test MSE is more than one SE (of the paired difference) above the private mean's."""
    count = 0
    for cell in cells(rows).values():
        diff = np.array([r["guards"][candidate]["mse"] - r["mean"] for r in cell])
        se = float(diff.std(ddof=1) / math.sqrt(diff.size)) if diff.size > 1 else 0.0
        count += int(diff.mean() > se)
    return count


def lodo(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for held in sorted({r["dataset"] for r in rows}):
        train = [r for r in rows if r["dataset"] != held]
        test = [r for r in rows if r["dataset"] == held]
        chosen = min(CANDIDATES, key=lambda c: (round(score(train, c), 6), CANDIDATES.index(c)))
        out.append({"held_out": held, "chosen": chosen, "held_out_score": score(test, chosen),
                    "held_out_product": score(test, PRODUCT),
                    "best_on_held_out": min(CANDIDATES, key=lambda c: score(test, c))})
    return out


def cell_table(rows: list[dict[str, Any]], other: str) -> list[str]:
    lines = [f"| data set | ε | mechanism | product `{PRODUCT}` | `{other}` | paired difference (SE) | private mean | "
             "shares product | shares other |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (name, eps), cell in sorted(cells(rows).items()):
        ours = np.array([r["guards"][PRODUCT]["mse"] for r in cell])
        theirs = np.array([r["guards"][other]["mse"] for r in cell])
        diff = theirs - ours
        se = float(diff.std(ddof=1) / math.sqrt(diff.size)) if diff.size > 1 else float("nan")
        lines.append(
            f"| `{name}` | {eps:g} | `{cell[0]['mechanism']}` | {ours.mean():.4g} | {theirs.mean():.4g} | "
            f"{diff.mean():+.3g} ({se:.2g}) | {np.mean([r['mean'] for r in cell]):.4g} | "
            f"{', '.join(format(r['guards'][PRODUCT]['share'], '.2f') for r in cell)} | "
            f"{', '.join(format(r['guards'][other]['share'], '.2f') for r in cell)} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--housing", default=None)
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--epsilons", default="0.5,1,2")
    parser.add_argument("--sim-n", type=int, default=2_500)
    parser.add_argument("--out", default="research/results/crossfit_guard")
    args = parser.parse_args()
    t0 = time.perf_counter()
    plans = utility.default_plans(housing=args.housing, epochs=args.epochs, sim_n=args.sim_n)
    epsilons = [float(e) for e in args.epsilons.split(",")]
    rows: list[dict[str, Any]] = []
    for name in args.datasets.split(","):
        rows += measure(plans[name], args.trials, epsilons)
    folds = lodo(rows)
    replay_gap = max(abs(r["product"] - r["guards"][PRODUCT]["mse"]) for r in rows)
    print(f"largest |model - replay| at the product's guard: {replay_gap:.3g}")
    best_cf = min((c for c in CANDIDATES if not c.startswith("full")), key=lambda c: score(rows, c))
    seconds = time.perf_counter() - t0
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps({"rows": rows, "lodo": folds, "args": vars(args)}, indent=1))
    lines = [
        "# Cross-fitted evidence for the continuous guard: LODO fit and the spread of the decision",
        "",
        f"Command: `python research/studies/crossfit_guard.py --housing ../shared/data/california_housing.csv "
        f"--datasets {args.datasets} --trials {args.trials} --epochs {args.epochs} --epsilons {args.epsilons} "
        f"--sim-n {args.sim_n}`",
        "",
        f"- Small on purpose (shared 2-core machine): {args.trials} trials, {args.epochs} epochs, simulated sets "
        f"of {args.sim_n} rows. Default configuration: the mechanism `auto` picks, the default learning with the "
        "release's prior; ONE training per trial, every guard replayed on it.",
        "- Candidates `evidence@lo:hi`: evidence `full` (the product's z, on the rows that selected the model) or "
        "`cfK` (pooled held-out gains of K-fold cross-fitting); the share a smoothstep in z from lo to hi. "
        f"The product is `{PRODUCT}`. Largest |model − replay| at the product's guard: {replay_gap:.2g}.",
        f"- {seconds:.0f} s; written {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC.",
        "",
        "## Leave one data set out (score: mean log test MSE / private mean's; lower is better)",
        "",
        "| held out | guard chosen on the others | held-out score with it | with the product's | best on held out |",
        "|---|---|---|---|---|",
        *(f"| `{f['held_out']}` | `{f['chosen']}` | {f['held_out_score']:+.4f} | {f['held_out_product']:+.4f} | "
          f"`{f['best_on_held_out']}` |" for f in folds),
        "",
        "## Every candidate, all data sets",
        "",
        "Score as above; spread: mean over cells of the SD over trials of the guard's share, and of log(test MSE "
        "/ private mean's); over: cells more than one SE above the private mean.",
        "",
        "| guard | score | spread of the share | spread of log ratio | cells over the mean |",
        "|---|---|---|---|---|",
        *(f"| `{c}` | {score(rows, c):+.4f} | {spread(rows, c, 'share'):.3f} | {spread(rows, c, 'log'):.3f} | "
          f"{over_mean(rows, c)} |" for c in CANDIDATES),
        "",
        f"## Paired per cell: the product against the best cross-fitted guard (`{best_cf}`), test MSE",
        "",
        *cell_table(rows, best_cf),
        "",
    ]
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
