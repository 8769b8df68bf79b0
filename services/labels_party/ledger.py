"""The per-id privacy ledger of a privacy domain (docs/architecture.md, "The per-id ledger").

A domain's ids are split into ``n_buckets`` hash buckets (fixed when the domain is created). A
bucket's state is an immutable **base** (its ids sorted, with the µε and δ units each has spent)
plus a short **chain** of charges since; both are objects under keys only their writer uses (a
fresh random name, never a content digest), and the bucket's catalogue row
(:class:`LedgerBucketRow`) names them and carries a version.

A release costs what it touches: it computes the next version of only its buckets, outside any
lock, writes them as new objects, then one short transaction checks every touched bucket still
has the version it read and swaps them (compare-and-swap; a moved bucket is recomputed and the
commit retried). Check and charge are exact; a crash before the commit leaves only unreferenced
objects.

Collection: a swap records the objects its rows stopped naming (:class:`LedgerGarbageRow`); the
sweep (:func:`collect_garbage`) deletes one once it is older than ``LABELDP_LEDGER_GRACE_SECONDS``
(longer than any lease: a reader of the old version still reads it) and no row names it. Keys are
never reused, so a key no row names can never be named again.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pa_compute
import pyarrow.ipc as ipc
from sqlalchemy import delete, func, insert, select
from sqlalchemy.orm import Session

from labeldp.errors import LabelDPError, NotFound, Unavailable
from labeldp.storage import ObjectStore

from . import id_lookup
from .columnar import read_array, read_table
from .context import LabelsContext
from .store import LedgerBucketRow, LedgerGarbageRow, PrivacyDomainRow

pc: Any = pa_compute

MAX_CHAIN = 32
"""Charges kept beside a base before they are folded into a new one: bounds the objects a check reads."""
CHAIN_PER_ID = 4
"""A chain may hold up to this many positions per id of its base before it is folded: positions are
4 bytes against ≥ 20 of a base row, so a check reads at most about twice the base, while a release
writes about 4 bytes per id it charges plus, amortized, one base row per 4 charged positions."""
MAX_ATTEMPTS = 100
GROUP_IDS = 1 << 20
"""Ids (new and already in the domain) whose buckets one registration step merges at once: a large
upload registers its ids a group of buckets at a time (:func:`bucket_groups`), so its memory is
bounded by the group, not by the upload or the domain. Decided in docs/decisions/0021-ids-upload-external-sort.md."""

_BASE_COLUMNS: dict[str, pa.DataType] = {"id": pa.string(), "eps": pa.int64(), "delta": pa.int64()}
_BASE = pa.schema(_BASE_COLUMNS)
_CHARGED = pa.schema({"pos": pa.int32()})


class BudgetExhausted(Exception):
    """A charge some id cannot afford; holds counts only, never ids' labels."""

    def __init__(self, ids_over: int, resource: str) -> None:
        super().__init__(f"{ids_over} ids lack the {resource} budget")
        self.ids_over = ids_over
        self.resource = resource


class StaleBuckets(Exception):
    """Another commit moved these buckets since the plan read them: recompute them and retry."""

    def __init__(self, buckets: set[int]) -> None:
        super().__init__(f"{len(buckets)} ledger buckets moved")
        self.buckets = buckets


# --------------------------------------------------------------------------- objects


def _prefix(domain_id: str) -> str:
    return f"ledger/{domain_id}"


def _put_batches(ctx: LabelsContext, domain_id: str, schema: pa.Schema, batches: list[pa.RecordBatch]) -> str:
    """One immutable object (Arrow IPC file) holding ``batches``, under a fresh key; its key."""
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return ctx.store.put_bytes(f"{_prefix(domain_id)}/base-{secrets.token_hex(16)}", sink.getvalue().to_pybytes())


def object_keys(ctx: LabelsContext, domain_id: str) -> list[str]:
    """Every ledger object of a domain, named by a row or not (the benchmark and tests size them)."""
    return ctx.store.list(_prefix(domain_id))


# --------------------------------------------------------------------------- buckets


@numba.njit(cache=True, nogil=True)
def _hash_buckets(offsets: np.ndarray, data: np.ndarray, n_buckets: int) -> np.ndarray:
    """FNV-1a 64 over each id's UTF-8 bytes, mixed by MurmurHash3's finalizer, modulo n_buckets."""
    n = offsets.shape[0] - 1
    out = np.empty(n, dtype=np.int32)
    prime = np.uint64(0x100000001B3)
    m1 = np.uint64(0xFF51AFD7ED558CCD)
    m2 = np.uint64(0xC4CEB93FE53EC94D)
    s33 = np.uint64(33)
    nb = np.uint64(n_buckets)
    for i in range(n):
        h = np.uint64(0xCBF29CE484222325)
        for k in range(offsets[i], offsets[i + 1]):
            h = (h ^ np.uint64(data[k])) * prime
        h ^= h >> s33
        h *= m1
        h ^= h >> s33
        h *= m2
        h ^= h >> s33
        out[i] = np.int32(h % nb)
    return out


def bucket_of(ids: pa.Array | pa.ChunkedArray, n_buckets: int) -> np.ndarray:
    """Each id's bucket: stable across processes, platforms and versions (a test pins it)."""
    chunks = ids.chunks if isinstance(ids, pa.ChunkedArray) else [ids]
    parts = []
    for chunk in chunks:
        offsets, data, _ = id_lookup.buffers(chunk)
        parts.append(_hash_buckets(offsets, data, n_buckets))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


def _group_rows(ids: pa.Array, n_buckets: int) -> dict[int, np.ndarray]:
    """The rows of ``ids`` in each bucket they fall in, in their given order (a stable sort by bucket)."""
    buckets = bucket_of(ids, n_buckets)
    order = np.argsort(buckets, kind="stable")
    ordered = buckets[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if ordered.size else np.zeros(0, np.int64)
    ends = np.r_[starts[1:], ordered.size]
    return {int(ordered[a]): order[a:b] for a, b in zip(starts, ends)}


def _groups(ids: pa.Array | pa.ChunkedArray, n_buckets: int) -> dict[int, pa.Array]:
    """The ids of each bucket they fall in, in their given order."""
    ids = id_lookup.flat_ids(ids)  # large_string: no 2 GiB limit on the whole
    rows = _group_rows(ids, n_buckets)
    if not rows:
        return {}
    taken = ids.take(np.concatenate(list(rows.values())))
    out, at = {}, 0
    for bucket, r in rows.items():
        out[bucket] = taken.slice(at, r.size)
        at += r.size
    return out


def _charge_key(domain_id: str, name: str) -> str:
    return f"{_prefix(domain_id)}/charge-{name}"


@dataclass(frozen=True)
class _State:
    """A bucket's committed version as a computation read it (version 0: no row, no ids yet)."""

    bucket: int
    version: int = 0
    key: str | None = None
    batch: int = 0
    chain: tuple[str, ...] = ()  # keys of the charge objects since the base, oldest first
    chain_ids: int = 0
    n_ids: int = 0
    max_eps: int = 0
    exhausted: int = 0

    @staticmethod
    def of(row: Any) -> _State:
        return _State(
            row.bucket, row.version, row.object_key, row.object_batch,
            tuple(_charge_key(row.domain_id, name) for name in json.loads(row.chain_json)),
            row.chain_ids, row.n_ids, row.max_epsilon_micro, row.ids_exhausted,
        )


def _states(s: Session, domain_id: str, buckets: Iterable[int]) -> dict[int, _State]:
    wanted = sorted(buckets)
    rows = s.execute(
        select(LedgerBucketRow).where(LedgerBucketRow.domain_id == domain_id, LedgerBucketRow.bucket.in_(wanted))
    ).scalars()
    found = {r.bucket: _State.of(r) for r in rows}
    return {b: found.get(b, _State(b)) for b in wanted}


class _Cache:
    """A process-wide LRU of decoded ledger objects, bounded in bytes.

    An object never changes once written (and its key is never reused), so a cached
    copy is never stale: a release re-reads only the buckets and charges that are new
    since this process last saw them. Only the catalogue says which version is current.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, str, int], tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, int]) -> Any:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: tuple[str, str, int], value: Any, size: int) -> None:
        with self._lock:
            if key in self._items:
                return
            self._items[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes and len(self._items) > 1:
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped


CACHE = _Cache(256 << 20)


class _Reader:
    """Reads bases (only the record batch of the bucket asked for) and charges (whole: they are
    small, and one serves every bucket its release touched) through :data:`CACHE`; each
    object it has to fetch is opened once. Use it in a ``with`` block (it closes them)."""

    def __init__(self, ctx: LabelsContext) -> None:
        self._objects = ctx.store
        self._files: dict[str, tuple[pa.NativeFile, ipc.RecordBatchFileReader]] = {}

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        for f, _reader in self._files.values():
            f.close()
        self._files.clear()

    def _batch(self, key: str, index: int) -> pa.RecordBatch:
        if key not in self._files:
            f = self._objects.open_input_file(key)
            self._files[key] = (f, ipc.open_file(f))
        return self._files[key][1].get_batch(index)

    def base(self, st: _State) -> tuple[pa.Array, np.ndarray, np.ndarray]:
        if st.key is None:
            return pa.array([], pa.string()), np.zeros(0, np.int64), np.zeros(0, np.int64)
        cache_key = (self._objects.url, st.key, st.batch)
        found = CACHE.get(cache_key)
        if found is None:
            batch = self._batch(st.key, st.batch)
            found = (batch.column(0), batch.column(1).to_numpy(), batch.column(2).to_numpy())
            CACHE.put(cache_key, found, batch.nbytes)
        return cast(tuple[pa.Array, np.ndarray, np.ndarray], found)

    def charged(self, key: str, bucket: int) -> tuple[np.ndarray, int, int]:
        """The in-bucket positions a charge object holds for ``bucket``, and its µε and δ units."""
        cache_key = (self._objects.url, key, 0)
        found = CACHE.get(cache_key)
        if found is None:
            batch = self._batch(key, 0)
            meta = batch.schema.metadata or {}
            index = {int(b): (int(lo), int(hi)) for b, lo, hi in json.loads(meta[b"index"])}
            found = (batch.column(0).to_numpy(), int(meta[b"eps"]), int(meta[b"delta"]), index)
            CACHE.put(cache_key, found, batch.nbytes + 40 * len(index))
        positions, eps, delta, index = found
        lo, hi = index.get(bucket, (0, 0))
        return positions[lo:hi], eps, delta

    def spent(self, st: _State, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Spent µε and δ units at in-bucket positions ``pos``: the base plus the chain's charges."""
        _, eps, delta = self.base(st)
        e, d = eps[pos].astype(np.int64), delta[pos].astype(np.int64)
        for key in st.chain:
            charged, paid_eps, paid_delta = self.charged(key, st.bucket)
            at = np.minimum(np.searchsorted(charged, pos), max(charged.size - 1, 0))
            hit = charged[at] == pos if charged.size else np.zeros(pos.size, np.bool_)
            e += paid_eps * hit
            d += paid_delta * hit
        return e, d

    def full(self, st: _State) -> tuple[pa.Array, np.ndarray, np.ndarray]:
        """The bucket's ids with the chain folded in (writable copies of the spent columns)."""
        ids, eps, delta = self.base(st)
        eps, delta = eps.copy(), delta.copy()
        for key in st.chain:
            charged, paid_eps, paid_delta = self.charged(key, st.bucket)
            eps[charged] += paid_eps
            delta[charged] += paid_delta
        return ids, eps, delta


@dataclass
class _Next:
    """A bucket's next version, computed outside any lock from the version ``read``."""

    read: _State
    values: dict[str, Any]
    new_ids: int = 0


def _base_values(key: str, batch: int, n_ids: int, max_eps: int, exhausted: int) -> dict[str, Any]:
    return {
        "object_key": key, "object_batch": batch, "chain_json": "[]", "chain_ids": 0,
        "n_ids": n_ids, "max_epsilon_micro": max_eps, "ids_exhausted": exhausted,
    }


_Bases = list[tuple[int, pa.Array, np.ndarray, np.ndarray]]  # (bucket, sorted ids, spent µε, spent δ units)


def _write_bases(ctx: LabelsContext, domain_id: str, parts: _Bases) -> tuple[str, dict[int, int]]:
    """One object holding the given buckets' new bases, a record batch each; (key, each bucket's batch)."""
    batches = [
        pa.record_batch([ids.cast(pa.string()), pa.array(eps), pa.array(delta)], schema=_BASE)
        for _, ids, eps, delta in parts
    ]
    return _put_batches(ctx, domain_id, _BASE, batches), {bucket: k for k, (bucket, _, _, _) in enumerate(parts)}


def _swap(s: Session, domain_id: str, nexts: dict[int, _Next]) -> None:
    """Compare-and-swap the touched buckets; the caller holds the domain lock (:func:`lock_domain`).

    Raises :class:`StaleBuckets` — and changes nothing — if any bucket's version is no longer
    the one its next version was computed from.
    """
    wanted = sorted(nexts)
    rows = s.execute(
        select(LedgerBucketRow.bucket, LedgerBucketRow.version, LedgerBucketRow.object_key, LedgerBucketRow.chain_json)
        .where(LedgerBucketRow.domain_id == domain_id, LedgerBucketRow.bucket.in_(wanted))
    ).all()
    current = {int(r.bucket): int(r.version) for r in rows}
    stale = {b for b in wanted if current.get(b, 0) != nexts[b].read.version}
    if stale:
        raise StaleBuckets(stale)
    table = cast(Any, LedgerBucketRow.__table__)
    inserts = [
        {"domain_id": domain_id, "bucket": b, "version": 1, **nexts[b].values} for b in wanted if b not in current
    ]
    if inserts:
        s.execute(insert(table), inserts)
    updates = [
        (current[b] + 1, *(nexts[b].values[c] for c in _SWAPPED), domain_id, b, current[b])
        for b in wanted
        if b in current
    ]
    if updates:
        # The driver's own executemany: a release may swap a thousand rows, and this is the
        # part of the commit that runs under the lock (SQLAlchemy's per-row work tripled it).
        mark = "?" if s.get_bind().dialect.paramstyle == "qmark" else "%s"
        assignments = ", ".join(f"{c} = {mark}" for c in ("version", *_SWAPPED))
        s.connection().exec_driver_sql(
            f"UPDATE {table.name} SET {assignments} WHERE domain_id = {mark} AND bucket = {mark} AND version = {mark}",
            updates,
        )
    superseded: set[str] = set()
    for r in rows:
        superseded |= _named(domain_id, r.object_key, r.chain_json) - _named(
            domain_id, nexts[r.bucket].values["object_key"], nexts[r.bucket].values["chain_json"]
        )
    if superseded:
        now = time.time()
        s.execute(insert(cast(Any, LedgerGarbageRow.__table__)), [
            {"domain_id": domain_id, "object_key": key, "superseded_at": now} for key in sorted(superseded)
        ])


def _named(domain_id: str, object_key: str, chain_json: str) -> set[str]:
    """The objects one bucket version reads: its base and its chain's charges."""
    return {object_key, *(_charge_key(domain_id, name) for name in json.loads(chain_json))}


_SWAPPED = ("object_key", "object_batch", "chain_json", "chain_ids", "n_ids", "max_epsilon_micro", "ids_exhausted")


def lock_domain(s: Session, domain_id: str) -> PrivacyDomainRow:
    """The domain row, locked until the caller's transaction ends."""
    row = s.execute(
        select(PrivacyDomainRow).where(PrivacyDomainRow.id == domain_id).with_for_update()
    ).scalar_one()
    s.refresh(row)  # another transaction may have moved it since this session last read it
    return row


# --------------------------------------------------------------------------- charges


IdsOf = Callable[[set[int]], Iterator[dict[int, pa.Array]]]
"""A charge's ids in the given buckets (each bucket's sorted), a bounded part of the buckets at a time."""


@dataclass
class ChargePlan:
    """A release's charge: where to read its ids by bucket, and each touched bucket's next version."""

    domain_id: str
    n_buckets: int
    budget_eps: int
    budget_delta: int
    eps: int
    delta: int
    ids_of: IdsOf
    buckets: set[int]
    next: dict[int, _Next] = field(default_factory=dict)


def plan_charge(
    ctx: LabelsContext, domain_id: str, ids: pa.Array | pa.ChunkedArray | SpilledIds, epsilon_micro: int,
    delta_units: int,
) -> ChargePlan:
    """Compute (outside any lock) and write the next version of every bucket ``ids`` touch.

    ``ids`` are sorted and unique (a label set's canonical order) and registered in the
    domain (:func:`register_ids`): an array, checked and charged at once, or
    :class:`SpilledIds`, a bucket group at a time (memory bounded by one group, not by the
    release). Raises :class:`BudgetExhausted` if an id cannot pay, having written nothing for
    an array; for spilled ids, groups planned before the one that found it may have written
    objects no row names (collected like a lost swap's).
    """
    if epsilon_micro <= 0 or delta_units < 0:
        raise ValueError("a charge is positive in ε and non-negative in δ")
    ensure_bucketed(ctx, domain_id)
    with ctx.sessions() as s:
        domain = s.get(PrivacyDomainRow, domain_id)
        assert domain is not None
        n_buckets, budget_eps, budget_delta = domain.n_buckets, domain.epsilon_budget_micro, domain.delta_budget_units
    if isinstance(ids, SpilledIds):
        ids_of: IdsOf = ids.of
        buckets = ids.buckets
    else:
        groups = _groups(ids, n_buckets)

        def ids_of(wanted: set[int]) -> Iterator[dict[int, pa.Array]]:
            yield {b: groups[b] for b in wanted}

        buckets = set(groups)
    plan = ChargePlan(domain_id, n_buckets, budget_eps, budget_delta, epsilon_micro, delta_units, ids_of, buckets)
    replan(ctx, plan, set(buckets))
    return plan


def replan(ctx: LabelsContext, plan: ChargePlan, buckets: set[int]) -> ChargePlan:
    """Recompute ``buckets``' next versions from their current committed versions, a part of the
    buckets at a time (``plan.ids_of``). Every part is checked; once one finds an id that cannot
    pay, the rest are only counted and :class:`BudgetExhausted` names them all."""
    over_eps = over_delta = 0
    for part in plan.ids_of(buckets):
        e, d = _replan_part(ctx, plan, part, write=not (over_eps or over_delta))
        over_eps, over_delta = over_eps + e, over_delta + d
        del part
    if over_eps:
        raise BudgetExhausted(over_eps, "epsilon")
    if over_delta:
        raise BudgetExhausted(over_delta, "delta")
    return plan


def _replan_part(ctx: LabelsContext, plan: ChargePlan, groups: dict[int, pa.Array], write: bool) -> tuple[int, int]:
    """Check, and (``write``, none over) write the next versions of the buckets of ``groups``;
    returns how many of their ids lack ε and δ."""
    with ctx.sessions() as s:
        states = _states(s, plan.domain_id, groups)
    with _Reader(ctx) as reader:
        checked: list[tuple[_State, np.ndarray, np.ndarray]] = []
        over_eps = over_delta = 0
        for b, st in states.items():
            base_ids, _, _ = reader.base(st)
            pos = id_lookup.positions(base_ids, groups[b])
            if pos.size and int(pos.min()) < 0:
                raise RuntimeError("a charge names an id its domain never registered")
            if pos.size > 1 and not bool(np.all(pos[1:] > pos[:-1])):
                raise ValueError("a release charges each id once, in sorted order")
            spent_eps, spent_delta = reader.spent(st, pos)
            over_eps += int(np.count_nonzero(spent_eps > plan.budget_eps - plan.eps))
            if plan.delta:
                over_delta += int(np.count_nonzero(spent_delta > plan.budget_delta - plan.delta))
            checked.append((st, pos, spent_eps))
        if over_eps or over_delta or not write:
            return over_eps, over_delta

        folded: _Bases = []
        chained: list[tuple[_State, np.ndarray]] = []
        stats: dict[int, tuple[int, int]] = {}
        for st, pos, spent_eps in checked:
            after = spent_eps + plan.eps
            crossed = int(np.count_nonzero((spent_eps < plan.budget_eps) & (after >= plan.budget_eps)))
            stats[st.bucket] = (max(st.max_eps, int(after.max()) if after.size else 0), st.exhausted + crossed)
            if len(st.chain) >= MAX_CHAIN or st.chain_ids + pos.size > CHAIN_PER_ID * st.n_ids:
                ids, eps, delta = reader.full(st)
                eps[pos] += plan.eps
                delta[pos] += plan.delta
                folded.append((st.bucket, ids, eps, delta))
            else:
                chained.append((st, pos))
        if folded:
            key, batches = _write_bases(ctx, plan.domain_id, folded)
            for bucket, ids, _, _ in folded:
                plan.next[bucket] = _Next(states[bucket], _base_values(key, batches[bucket], len(ids), *stats[bucket]))
        if chained:
            name = _write_charge(ctx, plan, chained)
            for st, pos in chained:
                chain = [key.rsplit("charge-", 1)[1] for key in st.chain] + [name]
                plan.next[st.bucket] = _Next(st, {
                    "object_key": st.key, "object_batch": st.batch, "chain_json": json.dumps(chain),
                    "chain_ids": st.chain_ids + pos.size, "n_ids": st.n_ids,
                    "max_epsilon_micro": stats[st.bucket][0], "ids_exhausted": stats[st.bucket][1],
                })
        return 0, 0


def _write_charge(ctx: LabelsContext, plan: ChargePlan, chained: list[tuple[_State, np.ndarray]]) -> str:
    """One object of the charged in-bucket positions of every chained bucket; returns its name.

    What it paid and where each bucket's positions lie are the object's metadata, so a bucket
    row's chain is a list of short names (80 random bits, never reused: see "Collection"):
    the catalogue row a release rewrites stays small.
    """
    index, at = [], 0
    for st, pos in chained:
        index.append([st.bucket, at, at + pos.size])
        at += pos.size
    meta = {"eps": str(plan.eps), "delta": str(plan.delta), "index": json.dumps(index)}
    positions = pa.array(np.concatenate([pos for _, pos in chained]).astype(np.int32))
    schema = _CHARGED.with_metadata(meta)
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, schema) as writer:
        writer.write_batch(pa.record_batch([positions], schema=schema))
    name = secrets.token_hex(10)
    ctx.store.put_bytes(_charge_key(plan.domain_id, name), sink.getvalue().to_pybytes())
    return name


def commit_charge(s: Session, domain: PrivacyDomainRow, plan: ChargePlan) -> None:
    """Swap in the plan's bucket versions, in the caller's transaction that holds the domain lock.

    Raises :class:`StaleBuckets` (the caller rolls back, :func:`replan`\\ s those buckets and
    retries) if another commit moved one of them since the plan read it.
    """
    _swap(s, plan.domain_id, plan.next)
    domain.spent_version = domain.spent_version + 1


# --------------------------------------------------------------------------- ids


def bucket_groups(n_buckets: int, n_ids: int, group_ids: int = GROUP_IDS) -> np.ndarray:
    """Each bucket's group (int32): contiguous bucket ranges expected to hold about ``group_ids`` of
    ``n_ids`` ids each (hashing spreads ids evenly over buckets)."""
    groups = max(1, min(n_buckets, -(-n_ids // group_ids)))
    return (np.arange(n_buckets, dtype=np.int64) * groups // n_buckets).astype(np.int32)


_IDS = pa.schema({"id": pa.string()})


class SpilledIds:
    """Sorted, unique ids split by bucket group (:func:`bucket_groups`) into work objects under
    ``prefix`` of ``store``, one per group, read back a group at a time: what a release charges or
    checks, held a group (about :data:`GROUP_IDS` ids of the domain) at a time, whatever its size.
    Private to one request: ``store`` is its scratch (``LabelsContext.scratch``), not the shared store.

    Built by :func:`spill_ids` from the ids a chunk at a time (one pass: each id hashed once);
    use it in a ``with`` block, which removes its objects.
    """

    def __init__(self, store: ObjectStore, prefix: str, n_buckets: int, groups: np.ndarray) -> None:
        self._store = store
        self.n_buckets = n_buckets
        self.group_of = groups
        self.keys = [f"{prefix}/group-{g:05d}" for g in range(int(groups.max()) + 1)]
        self._seen = np.zeros(n_buckets, np.bool_)
        self.n = 0

    @property
    def buckets(self) -> set[int]:
        """The buckets that hold at least one of the ids."""
        return set(np.flatnonzero(self._seen).tolist())

    def _write(self, chunks: Iterable[pa.Array]) -> None:
        with contextlib.ExitStack() as stack:
            writers = []
            for key in self.keys:
                out = stack.enter_context(self._store.open_output_stream(key))
                writers.append(stack.enter_context(ipc.new_file(out, _IDS)))
            for chunk in chunks:
                buckets = bucket_of(chunk, self.n_buckets)
                self._seen[buckets] = True
                self.n += len(chunk)
                of = self.group_of[buckets]
                order = np.argsort(of, kind="stable")  # within a group, the ids keep their sorted order
                taken, ordered = chunk.take(order), of[order]
                starts = np.searchsorted(ordered, np.arange(len(self.keys) + 1))
                for g in np.flatnonzero(np.diff(starts)):
                    piece = taken.slice(int(starts[g]), int(starts[g + 1] - starts[g]))
                    writers[g].write_batch(pa.record_batch([piece.cast(pa.string())], schema=_IDS))

    def groups(self) -> Iterator[pa.Array]:
        """Each group's ids (sorted), one group in memory at a time."""
        for key in self.keys:
            with self._store.open_input_file(key) as f:
                table = ipc.open_file(f).read_all()
            if table.num_rows:
                yield id_lookup.flat_ids(table.column("id"))

    def of(self, buckets: set[int]) -> Iterator[dict[int, pa.Array]]:
        """The ids of ``buckets`` by bucket, a group at a time (:data:`IdsOf`)."""
        wanted = np.zeros(self.n_buckets, np.bool_)
        wanted[sorted(buckets)] = True
        for g in np.unique(self.group_of[wanted]).tolist():
            with self._store.open_input_file(self.keys[g]) as f:
                table = ipc.open_file(f).read_all()
            part = {b: ids for b, ids in _groups(table.column("id"), self.n_buckets).items() if wanted[b]}
            del table
            if part:
                yield part

    def __enter__(self) -> SpilledIds:
        return self

    def __exit__(self, *exc: object) -> None:
        for key in self.keys:
            with contextlib.suppress(LabelDPError):  # the sweep removes what is left
                self._store.delete(key)


def spill_ids(
    store: ObjectStore, prefix: str, chunks: Iterable[pa.Array], n_buckets: int, n_domain_ids: int,
    group_ids: int | None = None,
) -> SpilledIds:
    """:class:`SpilledIds` of ``chunks`` (sorted, unique ids, read once) in ``store`` (a request's
    scratch), grouped for a domain of ``n_domain_ids`` ids (each group's buckets hold about
    ``group_ids``, default :data:`GROUP_IDS`, of the domain's ids)."""
    groups = bucket_groups(n_buckets, n_domain_ids, GROUP_IDS if group_ids is None else group_ids)
    spilled = SpilledIds(store, prefix, n_buckets, groups)
    try:
        spilled._write(chunks)
    except BaseException:
        spilled.__exit__()
        raise
    return spilled


def affordable_by_rows(
    ctx: LabelsContext, domain: PrivacyDomainRow, buckets: Iterable[int], epsilon_micro: int
) -> bool:
    """True when every id in ``buckets`` can pay ``epsilon_micro`` more, by their catalogue rows alone:
    each row's ``max_epsilon_micro`` bounds what any of its ids spent, so no object is read. False
    says only that the rows cannot tell: read the ids' spends (:func:`remaining_for`). Outside any
    lock, like :func:`remaining_for`: the charge's own compare-and-swap stays the exact check."""
    wanted = sorted(buckets)
    if not wanted:
        return epsilon_micro <= domain.epsilon_budget_micro
    with ctx.sessions() as s:
        most = s.scalar(select(func.max(LedgerBucketRow.max_epsilon_micro)).where(
            LedgerBucketRow.domain_id == domain.id, LedgerBucketRow.bucket.in_(wanted)))
    return int(most or 0) + epsilon_micro <= domain.epsilon_budget_micro


def remaining_for_spilled(
    ctx: LabelsContext, s: Session | None, domain: PrivacyDomainRow, spilled: SpilledIds
) -> tuple[int, int]:
    """:func:`remaining_for` over spilled ids: the minimum over their groups, one group at a time."""
    eps, delta = domain.epsilon_budget_micro, domain.delta_budget_units
    for group in spilled.groups():
        e, d = remaining_for(ctx, s, domain, group)
        eps, delta = min(eps, e), min(delta, d)
    return eps, delta


def register_ids(ctx: LabelsContext, domain_id: str, ids: pa.Array | pa.ChunkedArray) -> int:
    """Add the ids (sorted, unique) the domain has not seen, with nothing spent; returns how many.

    Rewrites only the bases of the buckets that gain ids, computed outside the lock and
    swapped in by its own short transaction, which commits before the caller's: an id
    registered by a request that then fails has spent nothing, as if never registered.
    An id already known keeps everything it has spent.
    """
    return register_ids_spent(ctx, domain_id, ids)[0]


def register_ids_spent(ctx: LabelsContext, domain_id: str, ids: pa.Array | pa.ChunkedArray) -> tuple[int, int, int]:
    """:func:`register_ids`, and the most µε and δ units any of ``ids`` has spent: what
    :func:`remaining_for` would read next, found in the bucket versions the registration read
    (the ones it swapped from, or that gained no ids) instead of reading the new bases back."""
    n_buckets = ensure_bucketed(ctx, domain_id)
    groups = _groups(ids, n_buckets)
    nexts: dict[int, _Next] = {}
    spent: dict[int, tuple[int, int]] = {}
    todo = set(groups)
    for _ in range(MAX_ATTEMPTS):
        with ctx.sessions() as s:
            states = _states(s, domain_id, todo)
        with _Reader(ctx) as reader:
            merged: _Bases = []
            counts: dict[int, int] = {}
            for b, st in states.items():
                nexts.pop(b, None)
                base_ids, _, _ = reader.base(st)
                group = groups[b]
                pos = id_lookup.positions(base_ids, group).astype(np.int64)
                known = pos[pos >= 0]
                if known.size:
                    e, d = reader.spent(st, known)
                    spent[b] = (int(e.max()), int(d.max()))
                else:
                    spent.pop(b, None)
                new = group.filter(pa.array(pos < 0))
                if len(new) == 0:
                    continue
                old_ids, eps, delta = reader.full(st)
                merged.append((b, *_merge(old_ids, eps, delta, new)))
                counts[b] = len(new)
            if merged:
                key, batches = _write_bases(ctx, domain_id, merged)
                for b, merged_ids, _, _ in merged:
                    st = states[b]
                    values = _base_values(key, batches[b], len(merged_ids), st.max_eps, st.exhausted)
                    nexts[b] = _Next(st, values, counts[b])
            most = (max((e for e, _ in spent.values()), default=0), max((d for _, d in spent.values()), default=0))
            if not nexts:
                return 0, *most
            try:
                with ctx.sessions.begin() as s:
                    domain = lock_domain(s, domain_id)
                    _swap(s, domain_id, nexts)
                    added = sum(n.new_ids for n in nexts.values())
                    domain.n_ids = domain.n_ids + added
                    domain.spent_version = domain.spent_version + 1
                return added, *most
            except StaleBuckets as exc:
                todo = exc.buckets
    raise Unavailable("ledger_contention", "the privacy domain's ledger is too busy; retry")


def _merge(
    ids: pa.Array, eps: np.ndarray, delta: np.ndarray, new: pa.Array
) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Sorted ``ids`` with the sorted, absent ``new`` ids inserted in order, each new id at 0 spent."""
    at = id_lookup.lower_bounds(ids, new)  # where each new id goes among the old ones
    n_old, n_new = len(ids), len(new)
    new_dest = at + np.arange(n_new, dtype=np.int64)
    old_dest = np.arange(n_old, dtype=np.int64) + np.searchsorted(at, np.arange(n_old), side="right")
    source = np.empty(n_old + n_new, dtype=np.int64)
    source[old_dest] = np.arange(n_old)
    source[new_dest] = n_old + np.arange(n_new)
    both = id_lookup.flat_ids(pa.chunked_array([ids.cast(pa.large_string()), new.cast(pa.large_string())]))
    zeros = np.zeros(n_new, np.int64)
    return (
        both.take(source),
        np.concatenate([eps, zeros])[source],
        np.concatenate([delta, zeros])[source],
    )


# --------------------------------------------------------------------------- reads


def remaining_for(
    ctx: LabelsContext, s: Session | None, domain: PrivacyDomainRow, ids: pa.Array | pa.ChunkedArray
) -> tuple[int, int]:
    """(min remaining µε, min remaining δ units) over ``ids``: what one more release may spend.

    Reads the bucket rows in ``s``, or in a session of its own that it closes before reading
    any object (``s=None``: on SQLite every session holds the write lock).
    """
    if domain.id_segments:
        raise Unavailable("ledger_not_bucketed", "this privacy domain's ledger is being converted; retry")
    if len(ids) == 0:
        return domain.epsilon_budget_micro, domain.delta_budget_units
    groups = _groups(ids, domain.n_buckets)
    with _Reader(ctx) as reader:
        most_eps = most_delta = 0
        if s is None:
            with ctx.sessions() as own:
                states = _states(own, domain.id, groups)
        else:
            states = _states(s, domain.id, groups)
        for b, st in states.items():
            base_ids, _, _ = reader.base(st)
            pos = id_lookup.positions(base_ids, groups[b]).astype(np.int64)
            known = pos[pos >= 0]  # an id not registered yet has spent nothing
            if known.size:
                e, d = reader.spent(st, known)
                most_eps, most_delta = max(most_eps, int(e.max())), max(most_delta, int(d.max()))
        return domain.epsilon_budget_micro - most_eps, domain.delta_budget_units - most_delta


def summary(s: Session, domain: PrivacyDomainRow) -> tuple[int, int]:
    """(the most any id spent in µε, how many ids have no ε left), from the catalogue alone."""
    most, exhausted = s.execute(
        select(func.max(LedgerBucketRow.max_epsilon_micro), func.sum(LedgerBucketRow.ids_exhausted)).where(
            LedgerBucketRow.domain_id == domain.id
        )
    ).one()
    return int(most or 0), int(exhausted or 0)


def spent_by_id(ctx: LabelsContext, s: Session, domain: PrivacyDomainRow) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Every id of the domain with its spent µε and δ units (bucket by bucket): for audits and tests."""
    with _Reader(ctx) as reader:
        states = _states(s, domain.id, range(domain.n_buckets))
        parts = [reader.full(st) for st in states.values() if st.n_ids]
        if not parts:
            return pa.array([], pa.string()), np.zeros(0, np.int64), np.zeros(0, np.int64)
        return (
            id_lookup.flat_ids(pa.chunked_array([p[0].cast(pa.large_string()) for p in parts])),
            np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]),
        )


HISTOGRAM_MAX_IDS = 1_000_000
"""Ids one spent-ε histogram reads at most (about 20 MB of base rows): whole buckets, in bucket
order, until the next would pass it. Buckets are hash partitions, so the buckets read are a
uniform sample of the domain's ids; a domain this small or smaller is read whole. Like a release's
check, a bucket read also folds its chain: at most :data:`MAX_CHAIN` charge objects, each read
whole once and then served from :data:`CACHE` (the objects a release check of the bucket reads)."""


@dataclass(frozen=True)
class SpentHistogram:
    counts: np.ndarray  # ids per bin of spent µε, equal bins over [0, the per-id budget]
    ids_read: int
    buckets_read: int
    buckets_with_ids: int


def spent_histogram(
    ctx: LabelsContext, s: Session, domain: PrivacyDomainRow, bins: int, max_ids: int = HISTOGRAM_MAX_IDS
) -> SpentHistogram:
    """How many ids spent how much ε, in ``bins`` equal bins over [0, budget] (the last bin holds
    the exhausted ids), from whole buckets up to ``max_ids`` ids (:data:`HISTOGRAM_MAX_IDS`):
    one catalogue query plus at most that many ids' ledger rows, whatever the domain's size."""
    counts = np.zeros(bins, np.int64)
    ids_read = buckets_read = 0
    states = [st for st in _states(s, domain.id, range(domain.n_buckets)).values() if st.n_ids]
    budget = max(domain.epsilon_budget_micro, 1)
    with _Reader(ctx) as reader:
        for st in states:
            if buckets_read and ids_read + st.n_ids > max_ids:
                break
            _, eps, _ = reader.full(st)
            at = np.minimum(eps * bins // budget, bins - 1)  # integer µε: no float edge in between
            counts += np.bincount(at, minlength=bins)
            ids_read += int(eps.size)
            buckets_read += 1
    return SpentHistogram(counts, ids_read, buckets_read, len(states))


# --------------------------------------------------------------------------- the layout before buckets


def ensure_bucketed(ctx: LabelsContext, domain_id: str) -> int:
    """Bucket a domain kept in the layout before buckets (once); returns its bucket count.

    That layout held the ids in append-only segment files and what they spent in one
    versioned column per resource (``<data dir>/domains/<id>/``). Conversion runs under the
    domain lock and writes one base object for all buckets; the old files stay where they
    were, named by nothing (remove them once every replica runs this version).
    """
    with ctx.sessions() as s:
        row = s.get(PrivacyDomainRow, domain_id)
        if row is None:
            raise KeyError(domain_id)
        if not row.id_segments:
            return int(row.n_buckets)
    with ctx.sessions.begin() as s:
        row = lock_domain(s, domain_id)
        if not row.id_segments:
            return int(row.n_buckets)
        folder = ctx.data_dir / "domains" / domain_id
        segments = [read_table(folder / f"ids-{k:06d}.arrow").column("id") for k in range(1, row.id_segments + 1)]
        ids = id_lookup.flat_ids(pa.chunked_array([c for seg in segments for c in seg.chunks], type=pa.string()))
        columns = []
        for kind in ("eps", "delta"):
            column = np.zeros(len(ids), np.int64)
            if row.spent_version:
                stored = read_array(folder / f"spent-{kind}-{row.spent_version:012d}.npy")
                column[: stored.shape[0]] = stored
            columns.append(column)
        order = np.asarray(pc.sort_indices(ids)).astype(np.int64)  # once, at conversion: never on a hot path
        sorted_ids = ids.take(order)
        parts: _Bases = []
        for bucket, rows in _group_rows(sorted_ids, row.n_buckets).items():
            source = order[rows]
            parts.append((bucket, sorted_ids.take(rows), columns[0][source], columns[1][source]))
        key, batches = _write_bases(ctx, domain_id, parts)
        nexts = {}
        for bucket, group, eps, _ in parts:
            exhausted = int(np.count_nonzero(eps >= row.epsilon_budget_micro))
            values = _base_values(key, batches[bucket], len(group), int(eps.max()), exhausted)
            nexts[bucket] = _Next(_State(bucket), values)
        _swap(s, domain_id, nexts)
        row.n_ids = len(ids)
        row.id_segments = 0
        row.spent_version = row.spent_version + 1
        return int(row.n_buckets)


def bucket_legacy_domains(ctx: LabelsContext) -> int:
    """Bucket every domain still in the layout before buckets (at start-up); returns how many."""
    with ctx.sessions() as s:
        legacy = list(s.scalars(select(PrivacyDomainRow.id).where(PrivacyDomainRow.id_segments > 0)))
    for domain_id in legacy:
        ensure_bucketed(ctx, domain_id)
    return len(legacy)


# --------------------------------------------------------------------------- collection

_COLLECT_BATCH = 1000


def _named_by_rows(s: Session, domain_ids: Iterable[str]) -> set[str]:
    """Every object the current bucket rows of these domains name."""
    named: set[str] = set()
    rows = s.execute(
        select(LedgerBucketRow.domain_id, LedgerBucketRow.object_key, LedgerBucketRow.chain_json)
        .where(LedgerBucketRow.domain_id.in_(sorted(set(domain_ids))))
    )
    for domain_id, object_key, chain_json in rows:
        named |= _named(domain_id, object_key, chain_json)
    return named


def collect_garbage(ctx: LabelsContext, grace_seconds: float, now: float | None = None) -> int:
    """Delete the ledger objects superseded more than ``grace_seconds`` ago that no bucket row names,
    and those no row ever named once as old; returns how many (module docstring, "Collection").

    Safe beside releases and other collectors: a key no row names is never named again, and
    deleting an object twice is no error. The objects go before their records, so a collector
    that stops halfway leaves records that the next one finishes.
    """
    now = time.time() if now is None else now
    cutoff = now - grace_seconds
    removed = 0
    while True:
        with ctx.sessions() as s:
            due = s.execute(
                select(LedgerGarbageRow.id, LedgerGarbageRow.domain_id, LedgerGarbageRow.object_key)
                .where(LedgerGarbageRow.superseded_at < cutoff)
                .order_by(LedgerGarbageRow.id)
                .limit(_COLLECT_BATCH)
            ).all()
            if not due:
                break
            keys = {r.object_key for r in due}
            # superseded again since (a key several buckets named): the later record decides
            recent = set(s.scalars(select(LedgerGarbageRow.object_key).where(
                LedgerGarbageRow.object_key.in_(sorted(keys)), LedgerGarbageRow.superseded_at >= cutoff
            )))
            named = _named_by_rows(s, {r.domain_id for r in due})
        for key in sorted(keys - recent - named):
            ctx.store.delete(key)
            removed += 1
        with ctx.sessions.begin() as s:
            s.execute(delete(LedgerGarbageRow).where(LedgerGarbageRow.id.in_([r.id for r in due])))
        if len(due) < _COLLECT_BATCH:
            break
    return removed + _collect_never_named(ctx, cutoff)


def _collect_never_named(ctx: LabelsContext, cutoff: float) -> int:
    """Ledger objects no row names nor any record lists, written before ``cutoff``: plans that lost
    their swap or died before it. Listed first, rows read next, records last: a key named or
    superseded meanwhile is seen by one of the two reads."""
    keys = ctx.store.list("ledger")
    if not keys:
        return 0
    domains = {key.split("/")[1] for key in keys if key.count("/") >= 2}
    with ctx.sessions() as s:
        named = _named_by_rows(s, domains)
        recorded = set(s.scalars(select(LedgerGarbageRow.object_key).where(
            LedgerGarbageRow.domain_id.in_(sorted(domains))
        )))
    removed = 0
    for key in keys:
        if key in named or key in recorded:
            continue
        try:
            if ctx.store.modified(key) >= cutoff:
                continue
        except NotFound:
            continue
        ctx.store.delete(key)
        removed += 1
    return removed
