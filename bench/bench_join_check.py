"""POST /v1/trainings' join check alone: a release's ids against a feature table, each run in a fresh process.

    .venv/bin/python bench/bench_join_check.py --release 1000000 --tables 1000000,10000000 \
        --out bench/results/join_check.md

A table of ``--tables`` rows (ids ``u<n>``, one float column, row groups of 65 536) in a temporary
folder, and a release of ``--release`` ids of it but the last three, which it lacks (the check's
worst case: it fails and names them). ``new``: ``feature_tables.missing_from_table`` (one streamed
anti join, issue 23); ``before``: the check as it was before it (a hash of the release's distinct
ids per row group, then, failed, the table's id column read whole), side by side in one run.
Reported: the missing count, wall time and the process's peak RSS above its RSS once the release is
loaded (a process writes the inputs, a fresh one runs each check).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


def _ids(start: int, stop: int) -> pa.Array:
    return pa.array(np.char.add("u", np.arange(start, stop).astype(str)), pa.string())


def write_inputs(folder: str, table_rows: int, release_rows: int) -> None:
    """The table and the release (as Arrow IPC) in ``folder``, written by a process of their own."""
    schema = pa.table({"id": pa.array([], pa.string()), "x": pa.array([], pa.float64())}).schema
    with pq.ParquetWriter(f"{folder}/t.parquet", schema) as out:
        for start in range(0, table_rows, 1_000_000):
            stop = min(table_rows, start + 1_000_000)
            out.write_table(pa.table({"id": _ids(start, stop), "x": np.zeros(stop - start)}), row_group_size=65_536)
    kept = min(release_rows, table_rows) - 3
    release = pa.table({"id": pa.concat_arrays([_ids(0, kept), pa.array(["nope1", "nope2", "nope3"])])})
    with pa.OSFile(f"{folder}/release.arrow", "wb") as sink, pa.ipc.new_file(sink, release.schema) as writer:
        writer.write_table(release, max_chunksize=100_000)


def _rss_mib() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def one(variant: str, folder: str) -> str:
    from features_party import feature_tables
    from labeldp.parquet_batches import open_for_batches
    from labeldp.storage import ObjectStore

    with pa.OSFile(f"{folder}/release.arrow", "rb") as f:
        release = pa.ipc.open_file(f).read_all().column("id")
    table_rows = pq.ParquetFile(f"{folder}/t.parquet").metadata.num_rows
    objects, row = ObjectStore.from_url(folder), SimpleNamespace(path="t.parquet", id_column="id")
    base, started = _rss_mib(), time.perf_counter()
    if variant == "new":
        missing, _ = feature_tables.missing_from_table(objects, row, release)  # type: ignore[arg-type]
    else:
        wanted = pc.unique(release.combine_chunks())
        with objects.open_input_file("t.parquet") as f:
            for batch in open_for_batches(f).iter_batches(batch_size=65_536, columns=["id"]):
                pc.is_in(batch.column(0), value_set=wanted)
        missing, _ = feature_tables.missing_ids(release, pq.read_table(f"{folder}/t.parquet", columns=["id"]).column(0))
    wall = time.perf_counter() - started
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base
    return f"| {variant} | {len(release):,} | {table_rows:,} | {missing} | {wall:.2f} | {grown:.0f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", type=int, default=1_000_000)
    parser.add_argument("--tables", default="1000000,10000000")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--write", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(one(*args.one))
        return
    if args.write:
        write_inputs(args.write[0], int(args.write[1]), args.release)
        return
    load_before = os.getloadavg()
    rows = []
    for size in args.tables.split(","):
        with tempfile.TemporaryDirectory() as folder:
            subprocess.run([sys.executable, __file__, "--release", str(args.release), "--write", folder, size],
                           check=True)
            rows += [subprocess.run([sys.executable, __file__, "--one", variant, folder], check=True,
                                    capture_output=True, text=True).stdout.strip() for variant in ("new", "before")]
    table = "\n".join([
        "# POST /v1/trainings' join check alone (issue 23)", "",
        f"`{' '.join(['.venv/bin/python', 'bench/bench_join_check.py', *sys.argv[1:]])}`", "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"pyarrow {pa.__version__}; load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after.", "",
        "| check | release ids | table rows | missing | wall s | peak RSS above start, MiB |",
        "|---|---|---|---|---|---|", *rows,
    ]) + "\n"
    print(table)
    if args.out:
        args.out.write_text(table)


if __name__ == "__main__":
    main()
