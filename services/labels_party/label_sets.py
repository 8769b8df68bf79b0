"""Label sets: public ids registered in a privacy domain's ledger, labels in versioned objects.

A label set's ids come inline (JSON, up to ``MAX_INLINE_IDS``) or as one upload of an
``id`` column (CSV, Parquet, Arrow, JSON; :mod:`.uploads`). They are validated, sorted
(the canonical order of every release) and registered in the domain's ledger — so an id
that earlier label sets already spent on starts from what it has spent.
"""

from __future__ import annotations

import contextlib
import json
import math
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pa_compute
import pyarrow.ipc as ipc
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr, model_validator
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from labeldp.epsilon import EpsilonIn, InvalidEpsilon, exact_micro, from_delta_units, from_micro
from labeldp.errors import Conflict, InvalidInput, NotFound, StorageError
from labeldp.parquet_batches import check_unicode, is_unicode
from labeldp.service.idempotency import Claim, StoredResponse
from labeldp.service.pagination import ASC, Order, after, check_limit, next_cursor, ordered
from labeldp.service.settings import ApiKey
from labeldp.service.timestamps import iso
from labeldp.storage import ObjectStore

from . import audit, external_sort, id_lookup, ledger, responses
from .columnar import get_array, get_table, npy_slices, put_table, release_unused_memory
from .context import LabelsContext, label_set_prefix
from .privacy_domains import default_domain_id, find_domain
from .store import LabelSetRow, PrivacyDomainRow, ReleaseRow

# pyarrow-stubs type the compute kernels' results as `object`; their call sites are read untyped.
pc: Any = pa_compute

MAX_ID_LENGTH = 128
MAX_CLASSES = 1000
MAX_INLINE_IDS = 1_000_000
MAX_REPORTED = 100
LABELS_DELETED = -1  # labels_version of a set whose raw labels were deleted


class DomainIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    low: StrictFloat | StrictInt
    high: StrictFloat | StrictInt


class LabelSetCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    label_type: Literal["real", "integer", "categorical"] = "real"
    domain: DomainIn | None = Field(None, description="label range; real and integer label sets")
    classes: list[StrictStr] | None = Field(None, description="class names; categorical label sets")
    privacy_domain: str | None = Field(
        None, min_length=1, max_length=200,
        description="the id (`pd_…`) of the privacy domain whose per-id ledger it charges (default: the "
        "`default` domain); a name is 404 `privacy_domain_not_found` (find the id with "
        "`GET /v1/privacy-domains?name=…`)",
    )
    total_epsilon: EpsilonIn | None = Field(
        None, description="optional cap on this label set's own releases (default: the domain's per-id budget)"
    )
    ids: list[StrictStr | StrictInt] | None = Field(
        None,
        max_length=MAX_INLINE_IDS,
        description=f"the public example ids (at most {MAX_INLINE_IDS}); or omit and upload them to "
        "/v1/label-sets/{id}/ids",
    )

    @model_validator(mode="after")
    def _unicode_text(self) -> LabelSetCreate:
        """JSON may spell a lone surrogate ("\\ud800") that no UTF-8 store, fingerprint or answer can hold.

        Checked while the body is parsed — before the idempotency fingerprint serializes it —
        and raised as the domain's 422 (pydantic passes non-ValueError exceptions through).
        """
        check_unicode(self.ids or (), code="invalid_id", what="id")
        for field, texts in (("name", [self.name]), ("privacy_domain", [self.privacy_domain]),
                             ("classes", self.classes or [])):
            if not all(is_unicode(t) for t in texts if isinstance(t, str)):
                raise InvalidInput("invalid_request", f"{field} is not valid Unicode text (a lone surrogate)",
                                   [{"loc": ["body", field]}])
        return self


def _validate_domain(body: LabelSetCreate) -> tuple[float, float, list[str] | None]:
    """(low, high, classes): categorical sets have low = 0, high = K − 1 over class indices."""
    if body.label_type == "categorical":
        classes = body.classes or []
        if not (2 <= len(classes) <= MAX_CLASSES):
            raise InvalidInput("invalid_classes", f"a categorical label set needs 2 to {MAX_CLASSES} classes")
        if len(set(classes)) != len(classes) or any(not c or len(c) > 200 for c in classes):
            raise InvalidInput("invalid_classes", "class names must be unique, non-empty, at most 200 characters")
        if body.domain is not None:
            raise InvalidInput("invalid_domain", "a categorical label set has classes, not a domain")
        return 0.0, float(len(classes) - 1), list(classes)
    if body.domain is None:
        raise InvalidInput("invalid_domain", "real and integer label sets need a domain {low, high}")
    if body.classes is not None:
        raise InvalidInput("invalid_classes", "classes are only for categorical label sets")
    low, high = float(body.domain.low), float(body.domain.high)
    if not (math.isfinite(low) and math.isfinite(high) and low < high and max(abs(low), abs(high)) <= 1e15):
        raise InvalidInput("invalid_domain", "domain needs finite low < high, each within ±1e15")
    if body.label_type == "integer" and not (low.is_integer() and high.is_integer()):
        raise InvalidInput("invalid_domain", "an integer domain needs integer ends")
    return low, high, None


def _bad_ids(ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Indices of the ids that are null, empty, longer than ``MAX_ID_LENGTH`` or hold control characters."""
    lengths = pc.fill_null(pc.utf8_length(ids), 0).to_numpy(zero_copy_only=False)
    control = pc.fill_null(pc.match_substring_regex(ids, r"[\x00-\x1f]"), True).to_numpy(zero_copy_only=False)
    return np.flatnonzero((lengths < 1) | (lengths > MAX_ID_LENGTH) | control)


def _invalid_ids(count: int, first: list[int]) -> InvalidInput:
    return InvalidInput(
        "invalid_ids",
        f"{count} ids are empty, longer than {MAX_ID_LENGTH} characters or hold control characters",
        [{"index": int(n)} for n in first[:MAX_REPORTED]],
    )


def _repeats(ordered: pa.Array) -> np.ndarray:
    """Positions ``k`` of a sorted array whose id equals the one before it (``k - 1``)."""
    if len(ordered) < 2:
        return np.zeros(0, dtype=np.int64)
    same = pc.equal(ordered.slice(1), ordered.slice(0, len(ordered) - 1)).to_numpy(zero_copy_only=False)
    return np.flatnonzero(same) + 1


def canonical_ids(ids: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The ids sorted (the canonical release order) as one ``large_string`` array, or 422 naming what
    is wrong with them. ``large_string``: the ids of a set may hold more than 2 GiB of text.

    In memory: for inline ids (at most ``MAX_INLINE_IDS``); an upload goes through :func:`set_ids`,
    which sorts externally and gives the same order and the same errors."""
    ids = ids.cast(pa.large_string())
    bad = _bad_ids(ids)
    if bad.size:
        raise _invalid_ids(int(bad.size), bad[:MAX_REPORTED].tolist())
    ordered = id_lookup.flat_ids(ids.take(pc.sort_indices(ids)))
    dups = _repeats(ordered)
    if dups.size:
        names = ordered.take(dups[:MAX_REPORTED]).to_pylist()
        raise InvalidInput("duplicate_ids", f"{dups.size} duplicate ids", [{"id": d} for d in names])
    return ordered


def create_label_set(
    ctx: LabelsContext, body: LabelSetCreate, claim: Claim | None, key: ApiKey | None = None
) -> StoredResponse:
    """Validate and store a label set (with its ids when given inline); no labels yet. Its creation
    is an audit event under ``key`` (the caller's) in the same transaction."""
    low, high, classes = _validate_domain(body)
    cap = None
    if body.total_epsilon is not None:
        try:
            cap = exact_micro(body.total_epsilon)
        except InvalidEpsilon as exc:
            raise InvalidInput("invalid_epsilon", f"total_epsilon: {exc}") from exc
    ids = None
    if body.ids is not None:
        if not body.ids:
            raise InvalidInput("invalid_ids", "ids must not be empty (or omit them and upload them)")
        ids = canonical_ids(pa.array([str(i) for i in body.ids], pa.string()))
    if body.privacy_domain is None:
        domain_id = default_domain_id(ctx)
    else:
        with ctx.sessions() as s:
            domain_id = find_domain(s, body.privacy_domain).id  # an id only: 404 before anything is written
    id_remaining = None
    if ids is not None:
        ledger.register_ids(ctx, domain_id, ids)  # before the set exists: see register_ids
        with ctx.sessions() as s:
            domain_row = find_domain(s, domain_id)
        id_remaining = ledger.remaining_for(ctx, None, domain_row, ids)  # outside the transaction below
    label_set_id = "ls_" + uuid.uuid4().hex
    with ctx.sessions.begin() as s:
        domain = find_domain(s, domain_id)
        row = LabelSetRow(
            id=label_set_id,
            name=body.name,
            privacy_domain_id=domain.id,
            label_type=body.label_type,
            classes_json=None if classes is None else json.dumps(classes),
            domain_low=low,
            domain_high=high,
            cap_micro=domain.epsilon_budget_micro if cap is None else cap,
            spent_micro=0,
            n_ids=0,
            ids_ready=0,
            labeled=0,
            labels_version=0,
        )
        s.add(row)
        if ids is not None:
            _attach_ids(ctx, s, row, ids)
        s.flush()
        audit.record(
            s, audit.LABEL_SET_CREATED, key=key, scope="release", domain_id=domain.id, domain=domain.name,
            subject_id=label_set_id,
            details={"name": row.name, "label_type": row.label_type, "cap_micro": row.cap_micro, "ids": row.n_ids},
        )
        out = StoredResponse(
            201, describe(ctx, s, row, id_remaining).model_dump(), {"Location": f"/v1/label-sets/{label_set_id}"}
        )
        if claim is not None:
            claim.complete(s, out)
    return out


def _attach_ids(ctx: LabelsContext, s: Session, row: LabelSetRow, ordered: pa.Array) -> None:
    """Store the set's sorted ids; the caller registered them in the domain's ledger first."""
    put_table(ctx.store, ids_key(row.id), pa.table({"id": id_lookup.string_chunks(ordered, id_lookup.ID_CHUNK_ROWS)}))
    row.n_ids = len(ordered)
    row.ids_ready = 1


def set_ids(
    ctx: LabelsContext,
    label_set_id: str,
    chunks: pa.Array | pa.ChunkedArray | Iterable[pa.Array],
    claim: Claim | None,
    *,
    run_rows: int = external_sort.RUN_ROWS,
    group_ids: int = ledger.GROUP_IDS,
) -> StoredResponse:
    """Give a label set created without ids its ids (once), read a chunk at a time.

    Memory is bounded whatever the number of ids: the ids are sorted externally (sorted runs
    of ``run_rows`` ids, merged a range at a time: :mod:`.external_sort`) into one sorted
    object, written a chunk at a time; that object is split by ledger bucket into groups of
    about ``group_ids`` ids (with the domain's ids in those buckets), and each group is
    registered in the ledger by its own short compare-and-swap — touching only its buckets.
    Runs, the merged object and the groups are the request's own working files, in its local
    scratch (``LabelsContext.scratch``, removed at the end whatever happened); the shared store
    gets the sorted ids once (streamed from scratch) and the ledger's new bucket bases. The
    sorted object is the set's ids object: the lock only names it (``ids_object``), so the time
    under the lock does not grow with the ids. The errors and their order are those of the
    in-memory path (:func:`canonical_ids`): 422 ``invalid_ids`` and ``duplicate_ids`` before 404
    and 409.
    """
    if isinstance(chunks, pa.Array):
        chunks = [chunks]
    elif isinstance(chunks, pa.ChunkedArray):
        chunks = chunks.chunks
    sorted_key = f"{label_set_prefix(label_set_id)}/{IDS_OBJECT_PREFIX}{uuid.uuid4().hex}.arrow"
    named = False
    with ctx.scratch() as scratch:
        runs = external_sort.SortedRuns(scratch, "runs", run_rows=run_rows)
        try:
            bad_count, bad_first = 0, list[int]()
            for chunk in chunks:
                bad = _bad_ids(chunk)
                if bad.size:
                    bad_count += int(bad.size)
                    bad_first += (bad[: MAX_REPORTED - len(bad_first)] + runs.n).tolist()
                elif not bad_count:
                    runs.add(chunk)
                    continue
                runs.n += len(chunk)  # counted for the error's indices; a refused upload is not sorted
            if runs.n == 0:
                raise InvalidInput("invalid_ids", "the upload holds no ids")
            if bad_count:
                raise _invalid_ids(bad_count, bad_first)
            _write_sorted(runs, scratch, "sorted.arrow")
            runs.close()
            release_unused_memory()
            with ctx.sessions() as s:
                domain_id = load_label_set(s, label_set_id).privacy_domain_id
            # the one copy of the ids that outlives the request: streamed to the shared store once
            ctx.store.put_file(sorted_key, scratch.local_path("sorted.arrow"))
            n_buckets = ledger.ensure_bucketed(ctx, domain_id)
            with ctx.sessions() as s:
                domain_row = s.get(PrivacyDomainRow, domain_id)
                assert domain_row is not None
                s.expunge(domain_row)
            # Registered a group of buckets at a time (the ledger's own split: ledger.spill_ids), each by
            # its own short transaction. What the set's ids have left is what the registration read,
            # outside any lock: a concurrent release of another set may charge some of them meanwhile,
            # which the next GET shows.
            most_eps, most_delta = domain_row.epsilon_budget_micro, domain_row.delta_budget_units
            total = runs.n + domain_row.n_ids
            sorted_chunks = _chunks_of(scratch, "sorted.arrow")
            with ledger.spill_ids(scratch, "groups", sorted_chunks, n_buckets, total, group_ids) as spilled:
                for group in spilled.groups():
                    _, spent_eps, spent_delta = ledger.register_ids_spent(ctx, domain_id, group)
                    most_eps = min(most_eps, domain_row.epsilon_budget_micro - spent_eps)
                    most_delta = min(most_delta, domain_row.delta_budget_units - spent_delta)
                    del group
                    release_unused_memory()  # one group's peak at a time, not the sum of the pool's leftovers
            with ctx.sessions.begin() as s:
                ledger.lock_domain(s, domain_id)  # lock order everywhere: domain, then label set
                row = load_label_set(s, label_set_id, for_update=True)
                if row.ids_ready:
                    raise Conflict("ids_already_set", "this label set already has its ids")
                # named under the lock, written before it: a concurrent upload to the same set wrote its
                # own object, never over the winner's
                row.ids_object = sorted_key
                row.n_ids = runs.n
                row.ids_ready = 1
                out = StoredResponse(200, describe(ctx, s, row, (most_eps, most_delta)).model_dump())
                if claim is not None:
                    claim.complete(s, out)
            named = True
        finally:
            runs.close()
            if not named:
                ctx.store.delete(sorted_key)
            release_unused_memory()
    return out


_IDS = pa.schema({"id": pa.string()})


def _write_sorted(runs: external_sort.SortedRuns, store: ObjectStore, key: str) -> None:
    """Merge the runs into the object ``key`` of ``store`` (the layout of a set's ids: ``string`` chunks
    of at most 2²⁰ ids), or 422 ``duplicate_ids`` naming the first ones — and then no object is left."""
    dup_count, dup_names = 0, list[Any]()
    with store.open_output_stream(key) as out, ipc.new_file(out, _IDS) as writer:
        last: str | None = None
        for part in runs.merged():
            if last is not None and part[0].as_py() == last:  # ranges never split equal ids; kept as a guard
                dup_count += 1
                dup_names.append(last)
            dups = _repeats(part)
            if dups.size:
                dup_count += int(dups.size)
                dup_names += part.take(dups[: max(0, MAX_REPORTED - len(dup_names))]).to_pylist()
            last = part[len(part) - 1].as_py()
            if not dup_count:
                for piece in id_lookup.string_chunks(part, id_lookup.ID_CHUNK_ROWS).chunks:
                    writer.write_batch(pa.record_batch([piece], schema=_IDS))
        if dup_count:
            raise InvalidInput(
                "duplicate_ids", f"{dup_count} duplicate ids", [{"id": d} for d in dup_names[:MAX_REPORTED]]
            )


def _chunks_of(store: ObjectStore, key: str) -> Iterator[pa.Array]:
    """The ``string`` chunks of the ids object ``key`` of ``store``, one in memory at a time."""
    with store.open_input_file(key) as source:
        reader = ipc.open_file(source)
        for k in range(reader.num_record_batches):
            yield reader.get_batch(k).column(0)


def class_names(row: LabelSetRow) -> list[str] | None:
    return None if row.classes_json is None else list(json.loads(row.classes_json))


def load_label_set(s: Session, label_set_id: str, for_update: bool = False) -> LabelSetRow:
    stmt = select(LabelSetRow).where(LabelSetRow.id == label_set_id)
    row = s.scalar(stmt.with_for_update() if for_update else stmt)
    if row is None:
        raise NotFound("label_set_not_found", "no such label set")
    if for_update:
        s.refresh(row)
    return row


def read_ids(ctx: LabelsContext, row: LabelSetRow) -> pa.Table:
    """Column ``id``, sorted, in ``string`` chunks of at most 2²⁰ ids (sets stored before the bucketed
    ledger have it in one chunk, and an unused ``pos``)."""
    if not row.ids_ready:
        return pa.table({"id": pa.array([], pa.string())})
    return get_table(ctx.store, current_ids_key(row))


def iter_id_chunks(ctx: LabelsContext, row: LabelSetRow) -> Iterator[pa.Array]:
    """The set's sorted ids a stored chunk at a time (at most 2²⁰ ids each): memory bounded by one chunk."""
    if row.ids_ready:
        yield from _chunks_of(ctx.store, current_ids_key(row))


def iter_labelled_chunks(ctx: LabelsContext, row: LabelSetRow) -> Iterator[tuple[pa.Array, np.ndarray]]:
    """(ids, float64 labels) a stored ids chunk at a time, in the canonical sorted order; NaN where no
    label was uploaded yet. 409 ``labels_deleted`` before anything is read.

    The one way the release path reads a set's labels: memory holds one chunk of ids and its
    labels (each labels array a private, writable copy), whatever the set's size — the labels
    object is read a record batch at a time, a set stored as one ``.npy`` a ranged read at a time.
    """
    if row.labels_version == LABELS_DELETED:
        raise Conflict("labels_deleted", "this label set's raw labels were deleted")
    with labels_chunks(ctx, row) as labels:
        for k, (ids, start) in enumerate(_with_starts(iter_id_chunks(ctx, row))):
            yield ids, labels(k, start, len(ids))


def _with_starts(chunks: Iterator[pa.Array]) -> Iterator[tuple[pa.Array, int]]:
    start = 0
    for chunk in chunks:
        yield chunk, start
        start += len(chunk)


LABELS_SCHEMA = pa.schema({"label": pa.float64()})
"""A labels object: record batch k holds the float64 labels (NaN: none yet) of the ids object's batch k."""
LABELS_SUFFIX = ".arrow"


@contextlib.contextmanager
def labels_chunks(ctx: LabelsContext, row: LabelSetRow) -> Iterator[Callable[[int, int, int], np.ndarray]]:
    """``read(k, start, n)``: a private copy of the labels of ids chunk ``k`` (ids ``[start, start + n)``).

    Either layout: an Arrow IPC labels object (batch ``k``, aligned with the ids object's) or,
    for sets labelled before it, one ``.npy`` array (elements ``[start, start + n)``).
    """
    if row.labels_version == LABELS_DELETED:
        raise Conflict("labels_deleted", "this label set's raw labels were deleted")
    if row.labels_version == 0:
        yield lambda k, start, n: np.full(n, np.nan)
        return
    key = current_labels_key(row)
    if not key.endswith(LABELS_SUFFIX):
        with npy_slices(ctx.store, key) as read:
            yield lambda k, start, n: read(start, n)
        return
    with _named_labels(ctx, key) as reader:

        def batch(k: int, start: int, n: int) -> np.ndarray:
            values = reader.get_batch(k).column(0).to_numpy(zero_copy_only=False)
            if len(values) != n:
                raise ValueError(f"labels batch {k} of {key!r} holds {len(values)} labels, its ids chunk {n}")
            return np.array(values, dtype=np.float64)  # a private, writable copy

        yield batch


@contextlib.contextmanager
def _named_labels(ctx: LabelsContext, key: str) -> Iterator[Any]:
    try:
        source = ctx.store.open_input_file(key)
    except NotFound as exc:
        raise StorageError("stored_object_missing", f"the stored object {key!r} is missing from the store") from exc
    with source:
        yield ipc.open_file(source)


def ids_key(label_set_id: str) -> str:
    """Where inline ids are kept, and uploaded ids were before ``ids_object`` named them."""
    return f"{label_set_prefix(label_set_id)}/ids.arrow"


IDS_OBJECT_PREFIX = "ids-"


def current_ids_key(row: LabelSetRow) -> str:
    return row.ids_object or ids_key(row.id)


def is_ids_object(key: str) -> bool:
    """An uploaded ids object (``label_sets/<id>/ids-<uuid>.arrow``), named by its row or not yet."""
    return key.rsplit("/", 1)[-1].startswith(IDS_OBJECT_PREFIX)


def labels_key(label_set_id: str, version: int) -> str:
    """Where labels were kept before they were content-addressed (rows whose ``labels_object`` is null)."""
    return f"{label_set_prefix(label_set_id)}/labels-{version:09d}.npy"


def labels_prefix(label_set_id: str) -> str:
    """Every labels object of a set: ``<prefix>/<sha256 of the float64 labels>[.arrow]`` (see
    :func:`labels_object_key`; without the suffix, the ``.npy`` of a set labelled before it)."""
    return f"{label_set_prefix(label_set_id)}/labels"


def labels_object_key(label_set_id: str, digest: str) -> str:
    """The labels object whose labels, in the ids' order as float64, have the SHA-256 ``digest``."""
    return ObjectStore.content_key(labels_prefix(label_set_id), digest) + LABELS_SUFFIX


def current_labels_key(row: LabelSetRow) -> str:
    return row.labels_object or labels_key(row.id, row.labels_version)


def is_labels_key(key: str) -> bool:
    name = key.rsplit("/", 2)
    return name[-2] == "labels" or name[-1].startswith("labels-")


def read_labels(ctx: LabelsContext, row: LabelSetRow) -> np.ndarray:
    """Every float64 label at once, aligned with the sorted ids; NaN where no label was uploaded yet.

    Whole: the tests' reference reader; the upload and the release path read a chunk at a time
    (:func:`iter_labelled_chunks`).
    """
    if row.labels_version == LABELS_DELETED:
        raise Conflict("labels_deleted", "this label set's raw labels were deleted")
    if row.labels_version == 0:
        return np.full(row.n_ids, np.nan)
    key = current_labels_key(row)
    if not key.endswith(LABELS_SUFFIX):
        return get_array(ctx.store, key)
    labels = get_table(ctx.store, key).column("label")
    return np.array(labels.to_numpy(), dtype=np.float64) if len(labels) else np.zeros(0)


def ids_remaining(ctx: LabelsContext, s: Session | None, domain: PrivacyDomainRow, row: LabelSetRow) -> tuple[int, int]:
    """(min remaining µε, min remaining δ units) over the set's ids (:func:`ledger.remaining_for`).

    Memory bounded whatever the set's size: in a domain of one bucket group (at most
    :data:`ledger.GROUP_IDS` ids) the ids are read at once; otherwise a stored chunk at a time,
    split by bucket group (:func:`ledger.spill_ids`) and checked a group at a time, each bucket
    read once. ``s``: as for :func:`ledger.remaining_for`.
    """
    if not row.ids_ready:
        return domain.epsilon_budget_micro, domain.delta_budget_units
    if int(ledger.bucket_groups(domain.n_buckets, domain.n_ids, ledger.GROUP_IDS).max()) == 0:
        return ledger.remaining_for(ctx, s, domain, read_ids(ctx, row).column("id"))
    with ctx.scratch() as scratch, ledger.spill_ids(
        scratch, "groups", iter_id_chunks(ctx, row), domain.n_buckets, domain.n_ids
    ) as spilled:
        return ledger.remaining_for_spilled(ctx, s, domain, spilled)


def budget(
    ctx: LabelsContext, s: Session, row: LabelSetRow, id_remaining: tuple[int, int] | None = None
) -> responses.Budget:
    """Total/spent/remaining: remaining is the minimum over the set's ids and its own cap.

    ``id_remaining``: what :func:`ledger.remaining_for` answered for the set's ids, computed by a
    caller before its transaction (reading every bucket the ids touch must not hold a lock).
    """
    domain = s.get(PrivacyDomainRow, row.privacy_domain_id)
    assert domain is not None
    id_eps, id_delta = id_remaining or ids_remaining(ctx, s, domain, row)
    remaining = max(0, min(row.cap_micro - row.spent_micro, id_eps))
    return responses.Budget(
        total_epsilon=from_micro(row.cap_micro),
        spent_epsilon=from_micro(row.spent_micro),
        remaining_epsilon=from_micro(remaining),
        total_micro=row.cap_micro,
        spent_micro=row.spent_micro,
        remaining_micro=remaining,
        remaining_delta=from_delta_units(max(0, id_delta)),
        privacy_domain=domain.name,
        per_id_epsilon=from_micro(domain.epsilon_budget_micro),
    )


def describe(
    ctx: LabelsContext, s: Session, row: LabelSetRow, id_remaining: tuple[int, int] | None = None
) -> responses.LabelSet:
    releases = s.execute(
        select(ReleaseRow.id, ReleaseRow.status, ReleaseRow.mechanism, ReleaseRow.epsilon_micro)
        .where(ReleaseRow.label_set_id == row.id)
        .order_by(ReleaseRow.created_at)
    ).all()
    spend = budget(ctx, s, row, id_remaining)
    return responses.LabelSet(
        id=row.id,
        name=row.name,
        label_type=row.label_type,
        domain=None if row.label_type == "categorical" else responses.Domain(low=row.domain_low, high=row.domain_high),
        classes=class_names(row),
        privacy_domain=spend.privacy_domain,
        privacy_domain_id=row.privacy_domain_id,
        counts=_counts(row),
        ids_ready=bool(row.ids_ready),
        labels_deleted=row.labels_version == LABELS_DELETED,
        budget=spend,
        releases=[
            responses.ReleaseSummary(
                id=r.id, status=r.status, mechanism=r.mechanism, epsilon=from_micro(r.epsilon_micro)
            )
            for r in releases
        ],
        created_at=iso(row.created_at),
    )


def _counts(row: LabelSetRow) -> responses.Counts:
    return responses.Counts(ids=row.n_ids, labeled=row.labeled, missing=row.n_ids - row.labeled)


def get_label_set(ctx: LabelsContext, label_set_id: str) -> responses.LabelSet:
    with ctx.sessions() as s:
        return describe(ctx, s, load_label_set(s, label_set_id))


def list_label_sets(
    ctx: LabelsContext, limit: int, cursor: str | None, order: Order = ASC, name: str | None = None
) -> responses.LabelSetPage:
    """A page of label sets in creation ``order`` (``name``: only the sets of that name): catalogue
    facts only (no file is read)."""
    limit = check_limit(limit)
    stmt = select(LabelSetRow, PrivacyDomainRow.name).join(
        PrivacyDomainRow, PrivacyDomainRow.id == LabelSetRow.privacy_domain_id
    )
    if name is not None:
        stmt = stmt.where(LabelSetRow.name == name)
    where = after(LabelSetRow.created_at, LabelSetRow.id, cursor, order)
    if where is not None:
        stmt = stmt.where(where)
    with ctx.sessions() as s:
        rows = s.execute(stmt.order_by(*ordered(LabelSetRow.created_at, LabelSetRow.id, order)).limit(limit + 1)).all()
    items = [
        responses.LabelSetItem(
            id=r.id,
            name=r.name,
            label_type=r.label_type,
            privacy_domain=domain,
            privacy_domain_id=r.privacy_domain_id,
            counts=_counts(r),
            labels_deleted=r.labels_version == LABELS_DELETED,
            spent_epsilon=from_micro(r.spent_micro),
            created_at=iso(r.created_at),
        )
        for r, domain in rows[:limit]
    ]
    last = rows[limit - 1][0] if len(rows) > limit else None
    return responses.LabelSetPage(
        items=items, next_cursor=next_cursor(last, LabelSetRow.created_at, LabelSetRow.id, order)
    )


def delete_labels(
    ctx: LabelsContext, label_set_id: str, caller: ApiKey | None = None
) -> responses.LabelSet:
    """Delete a label set's raw labels once they are spent; the ids, ledger and releases stay.

    Raw labels need not be kept once released: what the features party holds is the
    privatized message, and the per-id ledger keeps every id's spend. The set can make no
    further release or upload.
    """
    with ctx.sessions.begin() as s:
        row = load_label_set(s, label_set_id, for_update=True)
        if row.labels_version == LABELS_DELETED:
            raise Conflict("labels_deleted", "this label set's raw labels were already deleted")
        row.labels_version = LABELS_DELETED
        domain_id, domain = audit.domain_of_label_set(s, label_set_id)
        audit.record(
            s, audit.LABELS_DELETED, key=caller, scope="release", domain_id=domain_id, domain=domain,
            subject_id=label_set_id, details={"ids": row.n_ids, "spent_micro": row.spent_micro},
        )
        s.flush()
        out = describe(ctx, s, row)
    for key in ctx.store.list(label_set_prefix(label_set_id)):
        if is_labels_key(key):
            ctx.store.delete(key)
    return out


def delete_label_set(ctx: LabelsContext, label_set_id: str) -> None:
    """Delete a label set that no release used: its row, then its objects (ids, labels).

    A set with any release — even a failed job, which charged nothing — is 409 ``label_set_in_use``:
    a release's row names its set, and what was spent stays in the per-id ledger either way (the
    ledger is the domain's, never the set's: nothing here touches spent budget). To drop raw labels
    that were released, delete only the labels (:func:`delete_labels`).

    The row goes in one transaction that holds the set's row lock, which a release takes before it
    inserts its row (``releases.py``), so a release and a delete never both succeed. The objects
    go after the commit: a failure there leaves objects no row names, which the sweep removes
    (``sweep.py``); the set itself is gone or whole, never half.
    """
    with ctx.sessions.begin() as s:
        load_label_set(s, label_set_id, for_update=True)
        used = s.scalar(select(func.count()).select_from(ReleaseRow).where(ReleaseRow.label_set_id == label_set_id))
        if used:
            raise Conflict(
                "label_set_in_use",
                f"{used} releases were made from this label set: it cannot be deleted (its raw labels can)",
                [{"releases": int(used)}],
            )
        s.execute(delete(LabelSetRow).where(LabelSetRow.id == label_set_id))
    for key in ctx.store.list(label_set_prefix(label_set_id)):
        with contextlib.suppress(NotFound):
            ctx.store.delete(key)
