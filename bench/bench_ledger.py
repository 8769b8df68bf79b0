"""The per-id ledger: lock held and bytes written per release, the full-domain rewrite against buckets.

    .venv/bin/python bench/bench_ledger.py --domain 1000000 --sizes 10000,100000 --releases 20 \
        --out bench/results/ledger.md

One SQLite catalogue and one local object store in a temporary folder. A domain of
``--domain`` random 16-character ids, then ``--releases`` releases of each size in
``--sizes`` (random sorted subsets, ε = 0.001 each: nothing runs out), charged twice:

- **full rewrite** — the ledger before buckets (its code, copied here): under the domain
  row's lock, read the whole spent column, ``np.unique`` the positions, check, write the
  next whole column (temp file, fsync, rename; δ unchanged shares the old file by a hard
  link);
- **buckets** — ``labels_party.ledger``: ``plan_charge`` computes the touched buckets' next
  versions outside the lock, then one transaction locks the domain row and
  compare-and-swaps them (``commit_charge``).

Measured per release: the lock held (BEGIN IMMEDIATE … COMMIT), the work outside it, and the
bytes of files/objects it wrote (a bucketed release's share of folds included: the mean over
the run), and for buckets the catalogue rows its swap rewrote (the old code rewrote one).
Each approach charges its own copy of the same domain with the same releases.

``--register upload`` (for domains too large to build in memory, e.g. 10⁸): the new domain's ids
are ``bench_labels_path``'s 16-character ids in random order, registered through the bounded
upload path (``label_sets.set_ids``: external sort, then a group of buckets at a time); each
release is a random subset of them (drawn by row number, then sorted), and the full rewrite's
positions are those row numbers. The process's peak RSS is reported for the registration and
for the releases (reset between them).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import select

from labeldp.service.database import make_engine, make_session_factory
from labeldp.service.settings import Settings
from labels_party import ledger
from labels_party.columnar import write_array
from labels_party.context import LabelsContext
from labels_party.store import Base, PrivacyDomainRow

sys.path.insert(0, str(Path(__file__).parent))
from bench_labels_path import ids_at, ids_chunk

EPS = 1_000  # µε per release: 0.001


def random_ids(n: int, seed: int) -> pa.Array:
    """n distinct 16-character hex ids, sorted (a label set's canonical order)."""
    rng = np.random.default_rng(seed)
    raw = np.unique(rng.integers(0, 2**63, size=int(n * 1.01) + 16, dtype=np.int64))[:n]
    rng.shuffle(raw)
    ids = pa.array(np.char.mod("%016x", raw[:n]).astype(object), pa.string())
    return ids.take(pc.sort_indices(ids))


# --------------------------------------------------------------------------- the full rewrite


def _spent_path(folder: Path, version: int, kind: str) -> Path:
    return folder / f"spent-{kind}-{version:012d}.npy"


def full_rewrite_charge(folder: Path, version: int, n: int, positions: np.ndarray, budget: int) -> int:
    """The ledger before buckets: ``ledger.charge`` of that code, for ε only; returns bytes written."""
    if np.unique(positions).size != positions.size:
        raise ValueError("a release charges each id once")
    if version == 0:
        eps = np.zeros(n, dtype=np.int64)
    else:
        eps = np.load(_spent_path(folder, version, "eps"))
    if np.count_nonzero(eps[positions] > budget - EPS):
        raise RuntimeError("over budget")
    target = _spent_path(folder, version + 1, "delta")  # δ unchanged: a hard link, no bytes
    if version == 0:
        write_array(target, np.zeros(n, dtype=np.int64))
    else:
        os.link(_spent_path(folder, version, "delta"), target)
    eps[positions] += EPS
    path = _spent_path(folder, version + 1, "eps")
    write_array(path, eps)
    written = path.stat().st_size + (target.stat().st_size if version == 0 else 0)
    for kind in ("eps", "delta"):  # the old code kept the last 4 versions
        if version - 4 >= 1:
            _spent_path(folder, version - 4, kind).unlink(missing_ok=True)
    return written


# --------------------------------------------------------------------------- the run


def _kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _register_upload(ctx: LabelsContext, n: int, budget: int) -> str:
    """A domain ``new`` whose n ids (the label-path bench's, in random order) arrive through
    ``label_sets.set_ids`` in chunks of 2¹⁸, as an ids upload registers them."""
    from labels_party import label_sets
    from labels_party.privacy_domains import PrivacyDomainCreate, create_privacy_domain

    create_privacy_domain(ctx, PrivacyDomainCreate(name="new", id_source="new", epsilon=1), None)
    with ctx.sessions.begin() as s:
        row = s.scalar(select(PrivacyDomainRow).where(PrivacyDomainRow.name == "new"))
        assert row is not None
        row.epsilon_budget_micro = budget
        domain_id = row.id
    body = {"name": "ids", "domain": {"low": 0, "high": 1}, "privacy_domain": "new"}
    set_id = label_sets.create_label_set(ctx, label_sets.LabelSetCreate.model_validate(body), None).body["id"]
    chunk = 1 << 18
    label_sets.set_ids(ctx, set_id, (ids_chunk(a, min(n, a + chunk)) for a in range(0, n, chunk)), None)
    return str(domain_id)


def _total_spent(ctx: LabelsContext, domain_id: str) -> int:
    """Every id's spent µε summed, a bucket at a time (bounded memory whatever the domain)."""
    with ctx.sessions() as s:
        row = s.get(PrivacyDomainRow, domain_id)
        assert row is not None
        states = ledger._states(s, domain_id, range(row.n_buckets))
    total = 0
    with ledger._Reader(ctx) as reader:
        for st in states.values():
            if st.n_ids:
                total += int(reader.full(st)[1].sum())
    return total


def _row_bytes(plan: ledger.ChargePlan) -> int:
    return sum(len(n.values["chain_json"]) + len(n.values["object_key"]) + 64 for n in plan.next.values())


def run(domain_n: int, sizes: list[int], releases: int, work: Path, upload: bool = False) -> dict[str, Any]:
    engine = make_engine(f"sqlite:///{work / 'catalogue.db'}")
    Base.metadata.create_all(engine)
    ctx = LabelsContext(make_session_factory(engine), work / "data", Settings())
    budget = 10**12
    with ctx.sessions.begin() as s:
        s.add(PrivacyDomainRow(id="pd_old", name="old", id_source="old", epsilon_budget_micro=budget,
                               delta_budget_units=0, n_ids=domain_n, id_segments=0, spent_version=0))
    Path("/proc/self/clear_refs").write_text("5")
    before_mb = _kib("VmRSS") / 1024
    ids: pa.Array | None = None
    if upload:
        t = time.perf_counter()
        new_id = _register_upload(ctx, domain_n, budget)
        register_s = time.perf_counter() - t
    else:
        new_id = "pd_new"
        with ctx.sessions.begin() as s:
            s.add(PrivacyDomainRow(id=new_id, name="new", id_source="new", epsilon_budget_micro=budget,
                                   delta_budget_units=0, n_ids=0, id_segments=0, spent_version=0))
        ids = random_ids(domain_n, 0)
        t = time.perf_counter()
        ledger.register_ids(ctx, new_id, ids)
        register_s = time.perf_counter() - t
    register_peak_mb = _kib("VmHWM") / 1024
    registered_bytes = sum(ctx.store.size(k) for k in ledger.object_keys(ctx, new_id))
    Path("/proc/self/clear_refs").write_text("5")
    folder = work / "old"
    folder.mkdir()
    old_version = 0
    rng = np.random.default_rng(1)
    rows: list[dict[str, Any]] = []
    for size in sizes:
        old_lock, old_bytes, new_lock, new_out, new_bytes, new_rows = [], [], [], [], [], []
        new_lock_cpu: list[float] = []
        for _ in range(releases):
            rows_drawn = rng.choice(domain_n, size=size, replace=False)
            positions = np.sort(rows_drawn)  # the old code's ledger positions
            if ids is None:
                drawn = ids_at(rows_drawn)
                subset = drawn.take(pc.sort_indices(drawn))
            else:
                subset = ids.take(positions)  # ids sorted, so these are too

            with ctx.sessions.begin() as s:
                locked = time.perf_counter()
                ledger.lock_domain(s, "pd_old")
                old_bytes.append(full_rewrite_charge(folder, old_version, domain_n, positions, budget))
                row = s.get(PrivacyDomainRow, "pd_old")
                assert row is not None
                row.spent_version = old_version + 1
            old_lock.append(time.perf_counter() - locked)
            old_version += 1

            keys = set(ledger.object_keys(ctx, new_id))
            t = time.perf_counter()
            plan = ledger.plan_charge(ctx, new_id, subset, EPS, 0)
            new_out.append(time.perf_counter() - t)
            # The catalogue rows the swap rewrites (their text columns and 8 bytes per number).
            new_rows.append(_row_bytes(plan))
            with ctx.sessions.begin() as s:
                locked, locked_cpu = time.perf_counter(), time.thread_time()
                ledger.commit_charge(s, ledger.lock_domain(s, new_id), plan)
            new_lock.append(time.perf_counter() - locked)
            new_lock_cpu.append(time.thread_time() - locked_cpu)
            new_bytes.append(sum(ctx.store.size(k) for k in set(ledger.object_keys(ctx, new_id)) - keys))
        rows.append({
            "domain": domain_n, "release": size, "releases": releases,
            "old_lock_ms": 1000 * statistics.median(old_lock), "old_lock_max_ms": 1000 * max(old_lock),
            "old_mb": statistics.mean(old_bytes) / 1e6, "old_total_mb": sum(old_bytes) / 1e6,
            "new_total_mb": (sum(new_bytes) + sum(new_rows)) / 1e6,
            "new_lock_ms": 1000 * statistics.median(new_lock), "new_lock_max_ms": 1000 * max(new_lock),
            "new_lock_cpu_ms": 1000 * statistics.median(new_lock_cpu),
            "new_outside_ms": 1000 * statistics.median(new_out),
            "new_mb": statistics.mean(new_bytes) / 1e6, "new_max_mb": max(new_bytes) / 1e6,
            "new_rows": len(plan.next), "new_catalogue_kb": statistics.mean(new_rows) / 1e3,
        })
        print(rows[-1], flush=True)
    releases_peak_mb = _kib("VmHWM") / 1024
    old = np.load(_spent_path(folder, old_version, "eps"))
    assert _total_spent(ctx, new_id) == int(old.sum()), "both ledgers hold the same total spend"
    return {"rows": rows, "register_s": register_s, "registered_mb": registered_bytes / 1e6,
            "before_mb": before_mb, "register_peak_mb": register_peak_mb, "releases_peak_mb": releases_peak_mb,
            "upload": upload}


def table(results: list[dict[str, Any]]) -> str:
    out = [
        "| domain ids | release ids | releases | lock held, full rewrite (median / max ms) | lock held, buckets "
        "(median / max ms; its CPU, median ms) | buckets: work outside the lock (median ms) "
        "| written per release, full rewrite (MB) "
        "| written per release, buckets (mean / max MB) | buckets: catalogue rows swapped (last release) and their "
        "bytes (mean KB) | written in all, full rewrite / buckets with their catalogue rows (MB) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        for r in result["rows"]:
            out.append(
                f"| {r['domain']:,} | {r['release']:,} | {r['releases']} | {r['old_lock_ms']:.0f} / "
                f"{r['old_lock_max_ms']:.0f} | {r['new_lock_ms']:.1f} / {r['new_lock_max_ms']:.1f}; "
                f"{r['new_lock_cpu_ms']:.1f} | "
                f"{r['new_outside_ms']:.0f} | {r['old_mb']:.2f} | {r['new_mb']:.3f} / {r['new_max_mb']:.2f} | "
                f"{r['new_rows']:.0f} rows, {r['new_catalogue_kb']:.0f} KB | {r['old_total_mb']:.0f} / "
                f"{r['new_total_mb']:.0f} |"
            )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--domain", default="1000000", help="domain sizes, comma-separated")
    parser.add_argument("--sizes", default="10000,100000", help="release sizes, comma-separated")
    parser.add_argument("--releases", type=int, default=20, help="releases of each size")
    parser.add_argument("--register", choices=("memory", "upload"), default="memory",
                        help="build the domain in memory, or register it through label_sets.set_ids (10⁸)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    started = time.perf_counter()
    results = []
    for domain_n in [int(x) for x in args.domain.split(",")]:
        with tempfile.TemporaryDirectory(prefix="bench-ledger-") as work:
            load_start = os.getloadavg()
            result = run(domain_n, [int(x) for x in args.sizes.split(",")], args.releases, Path(work),
                         args.register == "upload")
            result["load"] = (*load_start, *os.getloadavg())
            results.append(result)
            print(f"domain {domain_n:,}: registering every id took {result['register_s']:.1f} s, "
                  f"{result['registered_mb']:.0f} MB of bucket objects", flush=True)
    text = "\n".join([
        "# The per-id ledger: lock held and bytes written per release",
        "",
        f"`{' '.join([Path(sys.executable).name, *sys.argv])}` — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{time.perf_counter() - started:.0f} s in all. SQLite catalogue, local object store.",
        "",
        table(results),
        "",
        *[f"Registering the {r['rows'][0]['domain']:,} ids into the buckets"
          f"{' (label_sets.set_ids, chunks of 2¹⁸)' if r['upload'] else ''}: {r['register_s']:.1f} s, "
          f"{r['registered_mb']:.0f} MB of objects. Peak RSS {r['register_peak_mb']:.0f} MB while registering, "
          f"{r['releases_peak_mb']:.0f} MB during the releases ({r['before_mb']:.0f} MB before). "
          f"Load average (1/5/15 min) {r['load'][0]:.1f}/{r['load'][1]:.1f}/{r['load'][2]:.1f} at the start, "
          f"{r['load'][3]:.1f}/{r['load'][4]:.1f}/{r['load'][5]:.1f} at the end." for r in results],
    ])
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
