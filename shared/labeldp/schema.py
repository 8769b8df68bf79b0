"""The wire schema: what the labels party sends to the features party about a release.

A release's message is a signed manifest of shards (:mod:`labeldp.message_shards`): the manifest
is :class:`ReleaseMetadata` plus its shards. :class:`LabelRelease` is the single-body message
releases were received as before shards, only read now.

Everything in a message is ε-DP in the labels (docs/architecture.md, privacy invariant 2):
mechanism parameters and the prior come from the noisy prior, ids are the public
id set in sorted order, and the label column holds privatized values only.
Mechanism specs form a discriminated union on ``name``, derived from the mechanism registry
(``labeldp.mechanisms.registry``; docs/architecture.md, "The mechanism contract").
"""

from __future__ import annotations

import base64
import hashlib
import io
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, Union, cast

import numpy as np
from pydantic import Field, TypeAdapter

from labeldp.mechanisms.registry import ENTRIES
from labeldp.specs.base import MechanismSpecBase, NoisyPrior, SpecModel
from labeldp.specs.laplace import LaplaceSpec as LaplaceSpec  # importable from here, as before the registry
from labeldp.specs.rp_with_prior import HistogramPriorSpec
from labeldp.specs.rr_on_bins import RROnBinsSpec as RROnBinsSpec

if TYPE_CHECKING:
    import pyarrow as pa

SCHEMA_VERSION: Final = "1"
SIGNATURE_HEADER = "X-Labeldp-Signature"
ARROW_THRESHOLD_ROWS = 10_000


if TYPE_CHECKING:
    MechanismSpec = MechanismSpecBase
else:
    # The specs of the registry's entries, discriminated by ``name`` (one entry per mechanism).
    MechanismSpec = Annotated[Union[tuple(entry.spec for entry in ENTRIES)], Field(discriminator="name")]  # noqa: UP007
CATEGORICAL_SPECS = tuple(entry.spec for entry in ENTRIES if entry.categorical)
_SPEC_ADAPTER: TypeAdapter[MechanismSpec] | None = None


def mechanism_spec(spec: MechanismSpecBase | Mapping[str, Any]) -> MechanismSpecBase:
    """A mechanism spec from its object or its JSON dict (as a release row stores it)."""
    global _SPEC_ADAPTER
    if not isinstance(spec, Mapping):
        return spec
    if _SPEC_ADAPTER is None:
        _SPEC_ADAPTER = TypeAdapter(MechanismSpec)
    return _SPEC_ADAPTER.validate_python(dict(spec))


class EpsilonPart(SpecModel):
    name: str
    epsilon_micro: int = Field(ge=0)


class PrivacyAccounting(SpecModel):
    """How the release's ε was spent: basic composition of the parts."""

    adjacency: Literal["replace-one-label"] = "replace-one-label"
    composition: Literal["basic"] = "basic"
    parts: list[EpsilonPart]
    total_epsilon_micro: int = Field(gt=0)
    delta: float = Field(0.0, ge=0, lt=1, description="δ of an (ε, δ) mechanism (Gaussian); 0 otherwise")

    @property
    def total_epsilon(self) -> float:
        return self.total_epsilon_micro / 1_000_000


class JsonPayload(SpecModel):
    format: Literal["json"] = "json"
    ids: list[str]
    labels: list[float]


class ArrowPayload(SpecModel):
    """Arrow IPC stream (columns ``id``: string, ``label``: float64), base64 encoded."""

    format: Literal["arrow"] = "arrow"
    data: str


Payload = Annotated[JsonPayload | ArrowPayload, Field(discriminator="format")]


FEATURE_TABLE_NAME: Final = r"^[A-Za-z0-9_.-]{1,64}$"
"""A feature table's name, and so all a release's ``feature_table`` hint may hold (it crosses parties)."""


class ReleaseMetadata(SpecModel):
    """A release's public metadata: everything a message says besides its rows.

    A sharded message's manifest (:mod:`labeldp.message_shards`) is this plus its shards; a
    :class:`LabelRelease` (the single-body message of releases received before shards) is
    this plus its payload.
    """

    schema_version: str = SCHEMA_VERSION
    release_id: str
    label_set_id: str
    feature_table: str | None = None
    created_at: datetime
    mechanism: MechanismSpec
    prior: NoisyPrior | HistogramPriorSpec | None = None
    accounting: PrivacyAccounting
    row_count: int = Field(ge=0)


class LabelRelease(ReleaseMetadata):
    """The single-body message (schema 1): what the inbox stored before messages came in shards.

    Only read now (releases received before the features party's revision 0003)."""

    schema_version: Literal["1"] = SCHEMA_VERSION
    payload_digest: str = Field(description="sha256 of the canonical columns, see payload_digest()")
    payload: Payload

    def columns(self) -> tuple[list[str], np.ndarray]:
        return decode_payload(self.payload)


IdColumn = Union[list[str], "pa.Array", "pa.ChunkedArray"]
_DIGEST_CHUNK = 1 << 18


def payload_digest(ids: IdColumn, labels: np.ndarray) -> str:
    """sha256 over ids (newline-joined UTF-8) and labels (float64 little-endian).

    ``ids`` may be a list or an Arrow string array; both hash identically, the Arrow one
    in bounded chunks so a 10⁸-row release never becomes one Python string.
    """
    h = hashlib.sha256()
    if isinstance(ids, list):
        h.update("\n".join(ids).encode("utf-8"))
    else:
        for start in range(0, len(ids), _DIGEST_CHUNK):
            chunk = cast("list[str]", ids.slice(start, _DIGEST_CHUNK).to_pylist())
            h.update((("\n" if start else "") + "\n".join(chunk)).encode("utf-8"))
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


def decode_columns(payload: JsonPayload | ArrowPayload) -> tuple[pa.Array, np.ndarray]:
    """The payload's ids as an Arrow string array and its labels: no Python object per row."""
    import pyarrow as pa

    if isinstance(payload, JsonPayload):
        return pa.array(payload.ids, pa.string()), np.asarray(payload.labels, dtype=np.float64)
    table = pa.ipc.open_stream(base64.b64decode(payload.data)).read_all()
    ids = table.column("id").combine_chunks()
    if ids.type != pa.string():
        raise ValueError("the id column is not a string column")
    return ids, table.column("label").to_numpy().astype(np.float64)


def decode_payload(payload: JsonPayload | ArrowPayload) -> tuple[list[str], np.ndarray]:
    if isinstance(payload, JsonPayload):
        return list(payload.ids), np.asarray(payload.labels, dtype=np.float64)
    import pyarrow as pa

    reader = pa.ipc.open_stream(base64.b64decode(payload.data))
    table = reader.read_all()
    return cast("list[str]", table.column("id").to_pylist()), table.column("label").to_numpy().astype(np.float64)
