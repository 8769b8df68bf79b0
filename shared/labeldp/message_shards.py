"""The message as a signed manifest of shards: how a release's privatized labels cross parties.

A release's message is a set of objects under one prefix of an :class:`~labeldp.storage.ObjectStore`:

- **shards** ``shard-000000.parquet``, …: consecutive runs of the release's rows in id order
  (Parquet, zstd; columns ``id`` string and ``label`` float64), each at most
  ``shard_rows`` rows and small enough for the inbox's published request limit;
- **the manifest** ``manifest.json``: the release's public metadata (a
  :class:`~labeldp.schema.ReleaseMetadata`) and, per shard, its index, the sha256 of its exact
  bytes, its row count, byte size and id range. The sender signs the manifest's exact bytes
  (:func:`labeldp.signing.sign`), so the signature covers every shard through its digest.

Because shards are consecutive in id order and the manifest's ranges strictly increase, a
receiver checks "ids unique and sorted" one shard at a time: its memory is bounded by one
shard, whatever the message's size. Everything here is ε-DP in the labels (privacy invariant 2):
the metadata as before, ids as the public id set, labels privatized.

The writer never holds the whole message (one shard at a time, each streamed to the store);
the reader verifies every shard's digest before it parses it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, cast

import numpy as np
from pydantic import Field, ValidationError, model_validator

from labeldp.errors import InvalidInput, PayloadTooLarge
from labeldp.schema import ReleaseMetadata
from labeldp.specs.base import SpecModel

if TYPE_CHECKING:
    import pyarrow as pa

    from labeldp.storage import ObjectStore

MANIFEST_SCHEMA_VERSION: Final = "2"
SHARD_FORMAT: Final = "parquet-zstd"
MANIFEST_NAME: Final = "manifest.json"
SHARD_OVERHEAD_BYTES: Final = 64 * 1024
"""Room left under the byte limit for Parquet's own footer and page headers."""
_HEX64 = r"^[0-9a-f]{64}$"


class ShardEntry(SpecModel):
    """One shard as the manifest lists it."""

    index: int = Field(ge=0)
    sha256: str = Field(pattern=_HEX64, description="of the shard's exact bytes")
    rows: int = Field(ge=1)
    bytes: int = Field(ge=1)
    first_id: str = Field(min_length=1)
    last_id: str = Field(min_length=1)


class ReleaseManifest(ReleaseMetadata):
    """A release's metadata and its shards; the sender signs its exact bytes (:func:`manifest_bytes`)."""

    schema_version: Literal["2"] = MANIFEST_SCHEMA_VERSION
    shard_format: Literal["parquet-zstd"] = SHARD_FORMAT
    shards: list[ShardEntry]

    @model_validator(mode="after")
    def _consistent(self) -> ReleaseManifest:
        if [s.index for s in self.shards] != list(range(len(self.shards))):
            raise ValueError("shards must be listed by index 0, 1, 2, …")
        if sum(s.rows for s in self.shards) != self.row_count:
            raise ValueError("row_count is not the sum of the shards' rows")
        for shard in self.shards:
            if shard.first_id > shard.last_id or (shard.rows == 1 and shard.first_id != shard.last_id):
                raise ValueError("a shard's id range is empty")
        for before, after in zip(self.shards, self.shards[1:], strict=False):
            if not before.last_id < after.first_id:
                raise ValueError("the shards' id ranges must strictly increase")
        return self

    @property
    def message_bytes(self) -> int:
        """The shards' bytes together (the manifest not included)."""
        return sum(s.bytes for s in self.shards)


def manifest_bytes(manifest: ReleaseManifest) -> bytes:
    """The manifest's canonical bytes: what is stored, signed, sent and deduplicated on."""
    return manifest.model_dump_json().encode("utf-8")


def parse_manifest(raw: bytes) -> ReleaseManifest:
    """A manifest from its bytes, or :class:`InvalidInput` ``invalid_message`` naming the fields only."""
    try:
        return ReleaseManifest.model_validate_json(raw)
    except ValidationError as exc:
        # Field locations only: pydantic's input echo could quote an id.
        details = [{"loc": [str(p) for p in e.get("loc", ())], "type": e.get("type")} for e in exc.errors()]
        raise InvalidInput(
            "invalid_message", "the manifest does not match the ReleaseManifest schema", details
        ) from None


def shard_name(index: int) -> str:
    return f"shard-{index:06d}.parquet"


def shard_key(manifest_key: str, index: int) -> str:
    """The object of shard ``index`` of the message whose manifest is ``manifest_key``."""
    prefix, _, _ = manifest_key.rpartition("/")
    return f"{prefix}/{shard_name(index)}" if prefix else shard_name(index)


@dataclass(frozen=True)
class MessageLimits:
    """What the inbox publishes it takes (settings shared by both parties)."""

    shard_rows: int
    max_shard_bytes: int
    max_manifest_bytes: int


@dataclass(frozen=True)
class WrittenMessage:
    manifest_key: str
    manifest: ReleaseManifest
    manifest_sha256: str
    total_bytes: int
    """The manifest's and every shard's bytes."""
    keys: tuple[str, ...]
    """Every object written (the manifest last): what to delete if the release is not committed."""




def write_message(
    store: ObjectStore,
    prefix: str,
    metadata: ReleaseMetadata,
    ids: pa.Array | pa.ChunkedArray | list[str],
    labels: np.ndarray,
    limits: MessageLimits,
) -> WrittenMessage:
    """:func:`write_message_chunks` with the whole release as one chunk (``ids`` and ``labels`` of equal length)."""
    import pyarrow as pa

    id_array = pa.chunked_array([pa.array(ids, pa.string())]) if isinstance(ids, list) else ids
    labels = np.asarray(labels, dtype=np.float64)
    if len(id_array) != len(labels):
        raise ValueError("ids and labels differ in length")
    return write_message_chunks(store, prefix, metadata, [(id_array, labels)], limits)


def write_message_chunks(
    store: ObjectStore,
    prefix: str,
    metadata: ReleaseMetadata,
    chunks: Iterable[tuple[pa.Array | pa.ChunkedArray, np.ndarray]],
    limits: MessageLimits,
) -> WrittenMessage:
    """Write a release's shards, then its manifest, under ``prefix``; one shard in memory at a time.

    ``chunks``: the release's ids (sorted, unique) with their privatized labels, consecutive runs
    of rows read one at a time (their ``metadata.row_count`` rows in all); the shards are cut as
    from the whole arrays, whatever the chunks (:func:`_first_shard_rows`), so the manifest does
    not depend on them. A message the inbox could not take (a manifest over
    ``max_manifest_bytes``, a shard over ``max_shard_bytes``) is :class:`PayloadTooLarge`
    ``message_too_large`` and leaves no object: the caller raises it before anything is charged.
    """
    written: list[str] = []
    entries: list[ShardEntry] = []
    total = 0
    try:
        for index, (shard_ids, shard_labels) in enumerate(_shards(chunks, limits)):
            data = _shard_bytes(shard_ids, shard_labels)
            if len(data) > limits.max_shard_bytes:
                raise _too_large(f"shard {index} is {len(data)} bytes; the inbox takes {limits.max_shard_bytes}")
            key = f"{prefix}/{shard_name(index)}"
            store.put_bytes(key, data)
            written.append(key)
            total += len(data)
            rows = len(shard_ids)
            entries.append(ShardEntry(
                index=index, sha256=hashlib.sha256(data).hexdigest(), rows=rows, bytes=len(data),
                first_id=str(shard_ids[0].as_py()), last_id=str(shard_ids[rows - 1].as_py()),
            ))
            del data, shard_ids, shard_labels
        if sum(e.rows for e in entries) != metadata.row_count:
            raise ValueError("the chunks' rows are not the release's row_count")
        fields = {name: getattr(metadata, name) for name in ReleaseMetadata.model_fields if name != "schema_version"}
        manifest = ReleaseManifest(**fields, shards=entries)
        raw = manifest_bytes(manifest)
        if len(raw) > limits.max_manifest_bytes:
            raise _too_large(
                f"the manifest of {len(entries)} shards is {len(raw)} bytes; "
                f"the inbox takes {limits.max_manifest_bytes}"
            )
        manifest_key = f"{prefix}/{MANIFEST_NAME}"
        store.put_bytes(manifest_key, raw)
        written.append(manifest_key)
    except BaseException:
        for key in written:
            with contextlib.suppress(Exception):  # the sweep removes what is left; the first error wins
                store.delete(key)
        raise
    return WrittenMessage(manifest_key, manifest, hashlib.sha256(raw).hexdigest(), total + len(raw), tuple(written))


def _too_large(message: str) -> PayloadTooLarge:
    return PayloadTooLarge("message_too_large", message)


def _shards(
    chunks: Iterable[tuple[pa.Array | pa.ChunkedArray, np.ndarray]], limits: MessageLimits
) -> Iterator[tuple[pa.ChunkedArray, np.ndarray]]:
    """The rows of ``chunks`` cut into shards: a shard is cut once ``shard_rows`` rows (or the last
    row) are buffered, so at most a shard and a chunk are held."""
    import pyarrow as pa

    id_parts: list[pa.Array] = []
    label_parts: list[np.ndarray] = []
    buffered = 0

    def cut(final: bool) -> Iterator[tuple[pa.ChunkedArray, np.ndarray]]:
        nonlocal id_parts, label_parts, buffered
        while buffered >= limits.shard_rows or (final and buffered > 0):
            ids = pa.chunked_array(id_parts, pa.string())
            labels = np.concatenate(label_parts) if len(label_parts) > 1 else label_parts[0]
            rows = _first_shard_rows(ids, min(limits.shard_rows, buffered), limits)
            yield ids.slice(0, rows), labels[:rows]
            rest = ids.slice(rows)
            id_parts = [c for c in rest.chunks if len(c)]
            label_parts = [labels[rows:]] if rows < buffered else []
            buffered -= rows

    for ids, labels in chunks:
        labels = np.asarray(labels, dtype=np.float64)
        if len(ids) != len(labels):
            raise ValueError("ids and labels differ in length")
        if not len(ids):
            continue
        id_parts += list(ids.chunks) if isinstance(ids, pa.ChunkedArray) else [ids]
        label_parts.append(labels)
        buffered += len(labels)
        yield from cut(final=False)
    yield from cut(final=True)


def _first_shard_rows(ids: pa.ChunkedArray | pa.Array, rows: int, limits: MessageLimits) -> int:
    """How many of the first ``rows`` rows form the next shard: ``rows``, halved until their raw size
    fits one request.

    Raw size: the ids' UTF-8 bytes plus 12 bytes a row (the label, a string length): an upper
    bound of the Parquet shard's bytes, less what zstd saves, plus :data:`SHARD_OVERHEAD_BYTES`.
    """
    import pyarrow.compute as pc

    budget = max(limits.max_shard_bytes - SHARD_OVERHEAD_BYTES, 1)
    while rows > 1:
        raw = int(cast(Any, pc).sum(cast(Any, pc).binary_length(ids.slice(0, rows))).as_py() or 0)
        if raw + 12 * rows <= budget:
            break
        rows = max(rows // 2, 1)
    return rows


def _shard_bytes(ids: pa.ChunkedArray | pa.Array, labels: np.ndarray) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": ids, "label": pa.array(labels, pa.float64())})
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", write_statistics=False, store_schema=False)
    return sink.getvalue()


# --- reading ---------------------------------------------------------------------------------


def file_sha256(stream: Any, chunk: int = 1 << 20) -> tuple[str, int]:
    """sha256 and size of what a binary stream holds, read in chunks."""
    h, size = hashlib.sha256(), 0
    for block in iter(lambda: stream.read(chunk), b""):
        h.update(block)
        size += len(block)
    return h.hexdigest(), size


def check_digest(entry: ShardEntry, sha256: str, size: int) -> None:
    """:class:`InvalidInput` ``digest_mismatch`` unless the bytes are the ones the manifest lists."""
    if size != entry.bytes or sha256 != entry.sha256:
        raise InvalidInput("digest_mismatch", f"shard {entry.index} does not match the manifest's digest")


def decode_shard(source: Any, entry: ShardEntry) -> tuple[pa.Array, np.ndarray]:
    """A shard's ids and labels, checked against its manifest entry (digest checked before this).

    ``source`` is anything :func:`pyarrow.parquet.read_table` reads (a path, a buffer, a file).
    Checks: the two columns and their types, the row count, ids non-empty, strictly increasing
    and spanning exactly the listed range, labels finite; else :class:`InvalidInput` ``invalid_message``.
    """
    import pyarrow as pa
    import pyarrow.compute as pa_compute
    import pyarrow.parquet as pq

    pc: Any = pa_compute

    def invalid(why: str) -> InvalidInput:
        return InvalidInput("invalid_message", f"shard {entry.index}: {why}")

    try:
        table = pq.read_table(source)
    except Exception:  # a malformed Parquet file fails in many ways
        raise invalid("not a Parquet file") from None
    if table.schema.names != ["id", "label"]:
        raise invalid("the columns must be id and label")
    ids = table.column("id").combine_chunks()
    label_column = table.column("label")
    if ids.type != pa.string() or label_column.type != pa.float64():
        raise invalid("id must be a string column, label a float64 column")
    if len(ids) != entry.rows:
        raise invalid("its row count is not the manifest's")
    if ids.null_count or label_column.null_count or pc.min(pc.utf8_length(ids)).as_py() == 0:
        raise invalid("ids must be non-empty strings, labels present")
    if len(ids) > 1 and not pc.all(pc.less(ids.slice(0, len(ids) - 1), ids.slice(1))).as_py():
        raise invalid("ids must be unique and in sorted order")
    if ids[0].as_py() != entry.first_id or ids[len(ids) - 1].as_py() != entry.last_id:
        raise invalid("its ids are not the manifest's id range")
    labels = label_column.to_numpy().astype(np.float64)
    if not np.all(np.isfinite(labels)):
        raise invalid("labels must be finite numbers")
    return ids, labels


def iter_columns(store: ObjectStore, manifest_key: str, manifest: ReleaseManifest,
                 keys: list[str] | None = None) -> Iterator[tuple[pa.Array, np.ndarray]]:
    """Each shard's ids and labels in turn, in id order, its digest verified before it is read: one
    shard held at a time (a consumer that streams, such as a training's stage, never holds the message).

    ``keys``: where each shard is stored (by index); by default next to ``manifest_key``.
    """
    import pyarrow as pa

    for entry in manifest.shards:
        key = keys[entry.index] if keys is not None else shard_key(manifest_key, entry.index)
        data = store.get_bytes(key)
        check_digest(entry, hashlib.sha256(data).hexdigest(), len(data))
        ids, labels = decode_shard(pa.py_buffer(data), entry)
        del data
        yield ids, labels


def read_columns(store: ObjectStore, manifest_key: str, manifest: ReleaseManifest,
                 keys: list[str] | None = None) -> tuple[pa.Array, np.ndarray]:
    """Every row of a message, in id order, each shard's digest verified before it is read
    (:func:`iter_columns`, joined).

    ``keys``: where each shard is stored (by index); by default next to ``manifest_key``.
    """
    import pyarrow as pa

    id_parts: list[pa.Array] = []
    label_parts: list[np.ndarray] = []
    for ids, labels in iter_columns(store, manifest_key, manifest, keys):
        id_parts.append(ids)
        label_parts.append(labels)
    ids_all = pa.chunked_array(id_parts, pa.string()).combine_chunks() if id_parts else pa.array([], pa.string())
    labels_all = np.concatenate(label_parts) if label_parts else np.zeros(0, dtype=np.float64)
    return ids_all, labels_all
