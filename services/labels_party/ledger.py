"""The per-id privacy ledger of a privacy domain (docs/architecture.md, "The per-id ledger").

Every id of a domain has a position in the domain's append-only id column; what each
position has spent is a pair of int64 columns (µε, δ units) stored as one immutable file
per version. A charge runs while its caller holds the domain row's lock (SQLite: the
``BEGIN IMMEDIATE`` write lock; PostgreSQL: ``SELECT … FOR UPDATE``): read the current
version, check ``spent[positions] + charge ≤ budget`` for every position at once, write
the next version, and move the row to it in the caller's transaction. Nothing is one SQL
row per id, and a crash before the commit leaves only an unreferenced file.

The spent columns may be shorter than the id column: positions past their end have
spent nothing (new ids are appended without rewriting the spent files).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
from sqlalchemy import select
from sqlalchemy.orm import Session

from . import id_lookup
from .columnar import read_array, read_table, write_array, write_table
from .store import PrivacyDomainRow

KEEP_VERSIONS = 4  # readers that looked up an older version can still open it


class BudgetExhausted(Exception):
    """A charge some id cannot afford; holds counts only, never ids' labels."""

    def __init__(self, ids_over: int, resource: str) -> None:
        super().__init__(f"{ids_over} ids lack the {resource} budget")
        self.ids_over = ids_over
        self.resource = resource


@dataclass(frozen=True)
class Spent:
    """Spent µε and δ units per ledger position (read-only arrays)."""

    epsilon_micro: np.ndarray
    delta_units: np.ndarray


def domain_dir(data_dir: Path, domain_id: str) -> Path:
    return data_dir / "domains" / domain_id


def lock_domain(s: Session, domain_id: str) -> PrivacyDomainRow:
    """The domain row, locked until the caller's transaction ends."""
    row = s.execute(
        select(PrivacyDomainRow).where(PrivacyDomainRow.id == domain_id).with_for_update()
    ).scalar_one()
    s.refresh(row)  # another transaction may have moved it since this session last read it
    return row


def _spent_path(data_dir: Path, domain_id: str, version: int, kind: str) -> Path:
    return domain_dir(data_dir, domain_id) / f"spent-{kind}-{version:012d}.npy"


def read_spent(data_dir: Path, domain: PrivacyDomainRow, mmap: bool = True) -> Spent:
    if domain.spent_version == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Spent(empty, empty)
    v = domain.spent_version
    return Spent(
        read_array(_spent_path(data_dir, domain.id, v, "eps"), mmap=mmap),
        read_array(_spent_path(data_dir, domain.id, v, "delta"), mmap=mmap),
    )


def _gather(column: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """column[positions], zero where a position lies past the column's end."""
    out = np.zeros(positions.shape, dtype=np.int64)
    inside = positions < column.shape[0]
    out[inside] = column[positions[inside]]
    return out


def spent_at(data_dir: Path, domain: PrivacyDomainRow, positions: np.ndarray) -> Spent:
    spent = read_spent(data_dir, domain)
    return Spent(_gather(spent.epsilon_micro, positions), _gather(spent.delta_units, positions))


def remaining_at(data_dir: Path, domain: PrivacyDomainRow, positions: np.ndarray) -> tuple[int, int]:
    """(min remaining µε, min remaining δ units) over ``positions``: what one more release may spend."""
    if positions.size == 0:
        return domain.epsilon_budget_micro, domain.delta_budget_units
    spent = spent_at(data_dir, domain, positions)
    return (
        int(domain.epsilon_budget_micro - spent.epsilon_micro.max()),
        int(domain.delta_budget_units - spent.delta_units.max()),
    )


def charge(
    data_dir: Path, domain: PrivacyDomainRow, positions: np.ndarray, epsilon_micro: int, delta_units: int
) -> None:
    """Charge every position once; raises :class:`BudgetExhausted` and writes nothing if any id cannot pay.

    The caller holds the domain lock (:func:`lock_domain`) and commits the row change
    together with whatever the charge pays for.
    """
    if epsilon_micro <= 0 or delta_units < 0:
        raise ValueError("a charge is positive in ε and non-negative in δ")
    if np.unique(positions).size != positions.size:
        raise ValueError("a release charges each id once")
    eps = _full_column(data_dir, domain, "eps")
    over = int(np.count_nonzero(eps[positions] > domain.epsilon_budget_micro - epsilon_micro))
    if over:
        raise BudgetExhausted(over, "epsilon")
    version = domain.spent_version + 1
    if delta_units:
        delta = _full_column(data_dir, domain, "delta")
        over = int(np.count_nonzero(delta[positions] > domain.delta_budget_units - delta_units))
        if over:
            raise BudgetExhausted(over, "delta")
        delta[positions] += delta_units
        write_array(_spent_path(data_dir, domain.id, version, "delta"), delta)
        del delta
    else:
        # δ unchanged: the new version shares the old column's bytes (no copy, no memory).
        _carry_over(data_dir, domain, version, "delta")
    eps[positions] += epsilon_micro
    write_array(_spent_path(data_dir, domain.id, version, "eps"), eps)
    domain.spent_version = version
    _forget_old_versions(data_dir, domain.id, version)


def _full_column(data_dir: Path, domain: PrivacyDomainRow, kind: str) -> np.ndarray:
    """The current spent column of ``kind`` as a writable array covering every id."""
    n = int(domain.n_ids)
    if domain.spent_version == 0:
        return np.zeros(n, dtype=np.int64)
    column = read_array(_spent_path(data_dir, domain.id, domain.spent_version, kind))
    if column.shape[0] < n:
        column = np.concatenate([column, np.zeros(n - column.shape[0], dtype=np.int64)])
    return column


def _carry_over(data_dir: Path, domain: PrivacyDomainRow, version: int, kind: str) -> None:
    target = _spent_path(data_dir, domain.id, version, kind)
    target.unlink(missing_ok=True)  # a leftover of an uncommitted attempt at this version
    if domain.spent_version == 0:
        write_array(target, np.zeros(int(domain.n_ids), dtype=np.int64))
    else:
        os.link(_spent_path(data_dir, domain.id, domain.spent_version, kind), target)


def _forget_old_versions(data_dir: Path, domain_id: str, current: int) -> None:
    # Versions below current - KEEP_VERSIONS are no longer named by any committed row
    # and no reader that started recently still needs them.
    for kind in ("eps", "delta"):
        old = current - KEEP_VERSIONS - 1
        if old >= 1:
            _spent_path(data_dir, domain_id, old, kind).unlink(missing_ok=True)


# --------------------------------------------------------------------------- ids


def _segment_path(data_dir: Path, domain_id: str, segment: int) -> Path:
    return domain_dir(data_dir, domain_id) / f"ids-{segment:06d}.arrow"


def read_ids(data_dir: Path, domain: PrivacyDomainRow) -> pa.ChunkedArray:
    """Every id of the domain, in ledger-position order."""
    chunks = [
        read_table(_segment_path(data_dir, domain.id, k)).column("id").combine_chunks()
        for k in range(1, domain.id_segments + 1)
    ]
    return pa.chunked_array(chunks, type=pa.string())


def register_ids(data_dir: Path, domain: PrivacyDomainRow, ids: pa.Array) -> np.ndarray:
    """Ledger positions of ``ids`` (unique and sorted), appending the ids the domain has not seen.

    An id already known keeps its position — and so everything it has spent. Each
    segment holds sorted ids (a filtered slice of a sorted set), so lookups are binary
    searches per segment with no hash table of the domain. Needs the domain lock; the
    caller commits the row's new ``n_ids``/``id_segments``.
    """
    positions = np.full(len(ids), -1, dtype=np.int64)
    base = 0
    for k in range(1, domain.id_segments + 1):
        segment = read_table(_segment_path(data_dir, domain.id, k)).column("id")
        found = id_lookup.positions(segment, ids)
        hit = found >= 0
        positions[hit] = base + found[hit]
        base += len(segment)
    new = positions < 0
    n_new = int(np.count_nonzero(new))
    if n_new:
        new_ids = ids if n_new == len(ids) else ids.filter(pa.array(new))
        segment_no = domain.id_segments + 1
        write_table(_segment_path(data_dir, domain.id, segment_no), pa.table({"id": new_ids}))
        positions[new] = np.arange(domain.n_ids, domain.n_ids + n_new, dtype=np.int64)
        domain.id_segments = segment_no
        domain.n_ids = domain.n_ids + n_new
    return positions
