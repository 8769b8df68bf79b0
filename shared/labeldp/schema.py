"""The wire schema: the one message the labels party sends to the features party.

Everything in a :class:`LabelRelease` is ε-DP in the labels (DESIGN.md invariant 2):
mechanism parameters and the prior come from the noisy prior, ids are the public
id set in sorted order, and the label column holds privatized values only.
Mechanism specs form a discriminated union on ``name`` that later mechanisms extend.
"""

from __future__ import annotations

import base64
import hashlib
import io
from datetime import datetime
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = "1"
SIGNATURE_HEADER = "X-Labeldp-Signature"
ARROW_THRESHOLD_ROWS = 10_000


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LabelDomainSpec(_Frozen):
    """The public range of the labels, declared by the labels party."""

    kind: Literal["real", "integer"] = "real"
    low: float
    high: float


class RROnBinsSpec(_Frozen):
    """RR-on-Bins (Ghazi et al. 2023, Alg. 1–2) fitted to the noisy prior.

    The features party can debias with E[ŷ | y] = debias_a · Φ(y) + debias_b.
    """

    name: Literal["rr_on_bins"] = "rr_on_bins"
    epsilon: float = Field(gt=0, description="ε of the randomizer (ε₂)")
    loss: Literal["squared", "absolute", "poisson"] = "squared"
    outputs: list[float] = Field(description="bin values Ŷ, ascending")
    cut_points: list[float] = Field(description="label thresholds between consecutive bins")
    keep_probability: float = Field(description="Pr[ŷ = Φ(y)] = e^ε / (e^ε + |Ŷ| − 1)")
    debias_a: float
    debias_b: float


class LaplaceSpec(_Frozen):
    """Additive Laplace baseline (Ghazi et al. App. D), clipped to the domain.

    ``variant='discrete'`` adds two-sided geometric noise on the lattice
    low + step·j, so every output is a lattice point (Mironov 2012).
    """

    name: Literal["laplace"] = "laplace"
    epsilon: float = Field(gt=0)
    variant: Literal["discrete", "continuous"] = "discrete"
    domain: LabelDomainSpec
    step: float = Field(gt=0, description="lattice step in label units")
    scale: float = Field(gt=0, description="noise scale b in label units (Δ/ε)")
    clipped: bool = True


MechanismSpec = Annotated[Union[RROnBinsSpec, LaplaceSpec], Field(discriminator="name")]


class NoisyPrior(_Frozen):
    """The prior used to fit the mechanism: a Laplace histogram (ε₁ > 0) or public (ε₁ = 0)."""

    source: Literal["laplace_histogram", "public"] = "laplace_histogram"
    grid: list[float]
    probs: list[float]
    epsilon: float = Field(ge=0)


class EpsilonPart(_Frozen):
    name: str
    epsilon_micro: int = Field(ge=0)


class PrivacyAccounting(_Frozen):
    """How the release's ε was spent: basic composition of the parts."""

    adjacency: Literal["replace-one-label"] = "replace-one-label"
    composition: Literal["basic"] = "basic"
    parts: list[EpsilonPart]
    total_epsilon_micro: int = Field(gt=0)

    @property
    def total_epsilon(self) -> float:
        return self.total_epsilon_micro / 1_000_000


class JsonPayload(_Frozen):
    format: Literal["json"] = "json"
    ids: list[str]
    labels: list[float]


class ArrowPayload(_Frozen):
    """Arrow IPC stream (columns ``id``: string, ``label``: float64), base64 encoded."""

    format: Literal["arrow"] = "arrow"
    data: str


Payload = Annotated[Union[JsonPayload, ArrowPayload], Field(discriminator="format")]


class LabelRelease(_Frozen):
    schema_version: Literal["1"] = SCHEMA_VERSION
    release_id: str
    label_set_id: str
    feature_table: str | None = None
    created_at: datetime
    mechanism: MechanismSpec
    prior: NoisyPrior | None = None
    accounting: PrivacyAccounting
    row_count: int = Field(ge=0)
    payload_digest: str = Field(description="sha256 of the canonical columns, see payload_digest()")
    payload: Payload

    def columns(self) -> tuple[list[str], np.ndarray]:
        return decode_payload(self.payload)


def payload_digest(ids: list[str], labels: np.ndarray) -> str:
    """sha256 over ids (newline-joined UTF-8) and labels (float64 little-endian)."""
    h = hashlib.sha256()
    h.update("\n".join(ids).encode("utf-8"))
    h.update(b"\x00")
    h.update(np.ascontiguousarray(labels, dtype="<f8").tobytes())
    return h.hexdigest()


def encode_payload(ids: list[str], labels: np.ndarray) -> JsonPayload | ArrowPayload:
    """JSON columns for small releases, Arrow IPC for large ones."""
    labels = np.asarray(labels, dtype=np.float64)
    if len(ids) < ARROW_THRESHOLD_ROWS:
        return JsonPayload(ids=list(ids), labels=labels.tolist())
    import pyarrow as pa

    table = pa.table({"id": pa.array(ids, pa.string()), "label": pa.array(labels, pa.float64())})
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return ArrowPayload(data=base64.b64encode(sink.getvalue()).decode("ascii"))


def decode_payload(payload: JsonPayload | ArrowPayload) -> tuple[list[str], np.ndarray]:
    if isinstance(payload, JsonPayload):
        return list(payload.ids), np.asarray(payload.labels, dtype=np.float64)
    import pyarrow as pa

    reader = pa.ipc.open_stream(base64.b64decode(payload.data))
    table = reader.read_all()
    return table.column("id").to_pylist(), table.column("label").to_numpy().astype(np.float64)
