"""Memory of the staging join (labeldp.learning.staging): a release joined by id with its feature table.

    .venv/bin/python bench/bench_staging.py --sizes 1000000 --partition-rows 0,262144 --out bench/results/staging.md

For each n the synthetic feature table of ``bench/bench_training.py`` (8 numeric + 3
categorical columns, ids ``r000000000…``, written in file order, in row groups of 10⁶ rows or
``--table-row-group``) is joined with a release
holding every id in another order. Each configuration runs in its own process, which first
holds what the service holds while it stages (the release's ids and labels, the training
targets and the split, as ``streamed.fit_release_streamed`` does), then stages. Measured:
the process's resident memory sampled every 2 ms while ``stage_release`` runs, minus the
resident memory just before it (the join's own cost), also per release row; and the wall time.

``--partition-rows``: the ``partition_rows`` argument of ``stage_release`` per
configuration; ``0`` makes one partition (the whole table at once: the join before
partitioning), ``-`` leaves the argument out (for running this program against a
``stage_release`` that has none). The side-by-side table divides each configuration's
peak by the first one's; with ``--before FILE.json`` (the JSON another run wrote next to its
``--out``, e.g. on the code before a change) a second table divides that run's join memory
and time by this run's. ``--before-ref REF[,REF…]`` runs each configuration also with ``shared/``
as of each git commit ``REF`` (exported by ``git archive`` onto the children's ``PYTHONPATH``),
in the same run, interleaved with this checkout's (the first REF is the ratios' base);
``--repeat R`` runs each R times and keeps
the median (the machine may be shared). CPU s: the child's user + system time during
``stage_release``, less disturbed by other jobs than the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_training import write_data  # the same synthetic table as the training benchmark


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def child(data: Path, work: Path, partition_rows: str) -> dict[str, Any]:
    from labeldp.learning.config import TrainingConfig
    from labeldp.learning.loop import make_plan
    from labeldp.learning.staging import stage_release

    source = pq.read_table(data, columns=["id", "y"])
    order = np.random.default_rng(7).permutation(source.num_rows)
    ids = source.column("id").combine_chunks().take(order)  # the release's ids, in another order
    labels = source.column("y").to_numpy()[order]
    del source, order
    plan = make_plan(len(labels), TrainingConfig(seed=1, device="cpu"))
    is_val = np.zeros(len(labels), bool)
    is_val[plan.val_idx] = True
    del plan
    targets = labels.copy()
    pa.default_memory_pool().release_unused()
    extra: dict[str, Any] = {} if partition_rows == "-" else {"partition_rows": int(partition_rows) or 2**62}
    before = rss_mb()
    peak = before
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_mb())
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    cpu = os.times()
    started = time.perf_counter()
    staged = stage_release(data, "id", ids, labels, targets, is_val, work / "stage", 65_536, **extra)
    seconds = time.perf_counter() - started
    cpu_seconds = sum(os.times()[:2]) - sum(cpu[:2])
    done.set()
    sampler.join()
    peak = max(peak, rss_mb())
    n = len(labels)
    return {"n": n, "seconds": seconds, "cpu_seconds": cpu_seconds, "before_mb": before, "peak_mb": peak,
            "join_mb": peak - before, "bytes_per_row": (peak - before) * 2**20 / n,
            "rows": staged.n_train + staged.n_validation}


def measure(data: Path, work: Path, partition_rows: str, code: Path | None = None) -> dict[str, Any] | None:
    """One configuration in a fresh process; ``code``: a ``shared/`` folder put first on its ``PYTHONPATH``."""
    cmd = [sys.executable, __file__, "--child", partition_rows, "--data", str(data), "--work", str(work)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(code), env.get("PYTHONPATH", "")])
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    sys.stderr.write(done.stderr[-3000:])
    return None


def median_run(runs: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Per measure, the median over the repeats (None if any failed); ``repeats`` holds each run's seconds."""
    if not runs or any(r is None for r in runs):
        return None
    done = [r for r in runs if r is not None]
    out: dict[str, Any] = {key: float(np.median([r[key] for r in done])) for key in done[0] if key != "rows"}
    out["rows"] = done[0]["rows"]
    out["repeats"] = [round(r["seconds"], 2) for r in done]
    return out


def label(partition_rows: str) -> str:
    config, _, ref = partition_rows.partition("@")
    suffix = f" — code of {ref}" if ref else ""
    if config == "-":
        return "(no argument)" + suffix
    return ("one partition" if config == "0" else f"partitions of {int(config):,} rows") + suffix


def before_and_after(before: list[Any], results: list[tuple[int, str, dict[str, Any] | None]]) -> list[str]:
    """Rows of the ``--before`` table: that run's first configuration per n ÷ each configuration of this run."""
    lines = ["", "## Before ÷ now (join memory and time of the `--before` run ÷ this run's)", "",
             "| n | before | now | join MB before | join MB now | before ÷ now (memory) | before ÷ now (time) |",
             "|---:|---|---|---:|---:|---:|---:|"]
    first = {}
    for n, config, r in before:
        if r is not None and n not in first:
            first[n] = (config, r)
    for n, config, r in results:
        if r is None or n not in first:
            continue
        old_config, old = first[n]
        lines.append(f"| {n:,} | {label(old_config)} | {label(config)} | {old['join_mb']:,.0f} | {r['join_mb']:,.0f} | "
                     f"{old['join_mb'] / r['join_mb']:.2f}× | {old['seconds'] / r['seconds']:.2f}× |")
    return lines


def render(results: list[tuple[int, str, dict[str, Any] | None]], args: argparse.Namespace, wall: float) -> str:
    lines = [
        "# Staging join memory (features party, streaming training)",
        "",
        f"`{' '.join(['python', 'bench/bench_staging.py', *sys.argv[1:]])}` — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"{platform.node()}, {os.cpu_count()} cores (shared with other jobs), Python {platform.python_version()}, "
        f"pyarrow {pa.__version__}, wall {wall:.0f} s.",
        "",
        "The join's own memory: resident memory sampled every 2 ms during `stage_release`, minus the resident "
        "memory just before it (when the process already holds the release's ids, labels, targets and split). "
        "Per row: divided by the release's rows.",
        "",
        "| n | configuration | join MB | B/row | RSS before MB | peak RSS MB | s | CPU s | staged rows |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, config, r in results:
        if r is None:
            lines.append(f"| {n:,} | {label(config)} | failed | | | | | | |")
            continue
        cpu = f"{r['cpu_seconds']:.1f}" if "cpu_seconds" in r else ""
        lines.append(f"| {n:,} | {label(config)} | {r['join_mb']:,.0f} | {r['bytes_per_row']:,.0f} | "
                     f"{r['before_mb']:,.0f} | {r['peak_mb']:,.0f} | {r['seconds']:.1f} | {cpu} | {r['rows']:,} |")
    if args.repeat > 1:
        lines += ["", f"Each row: the median of {args.repeat} runs, interleaved; the runs' seconds: "
                  + "; ".join(f"{label(c)} at {n:,}: {r['repeats']}" for n, c, r in results if r is not None) + "."]
    lines += ["", "## Side by side (÷ the first configuration of the same n)", "",
              "| n | configuration | join MB ratio | time ratio | CPU time ratio |", "|---:|---|---:|---:|---:|"]
    for n in dict.fromkeys(n for n, _, _ in results):
        rows = [(c, r) for m, c, r in results if m == n and r is not None]
        if not rows:
            continue
        base = rows[0][1]
        for config, r in rows[1:]:
            cpu = (f"{r['cpu_seconds'] / base['cpu_seconds']:.2f}×"
                   if "cpu_seconds" in r and "cpu_seconds" in base else "")
            lines.append(f"| {n:,} | {label(config)} | {r['join_mb'] / base['join_mb']:.2f}× | "
                         f"{r['seconds'] / base['seconds']:.2f}× | {cpu} |")
    if args.before:
        lines += before_and_after(json.loads(Path(args.before).read_text()), results)
        lines += ["", f"The `--before` run: {json.loads(Path(args.before).with_suffix('.cmd').read_text())}"
                  if Path(args.before).with_suffix(".cmd").exists() else ""]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000")
    parser.add_argument("--partition-rows", default="0,262144",
                        help="partition_rows per configuration, comma-separated (0: one partition, -: no argument)")
    parser.add_argument("--table-row-group", type=int, default=0,
                        help="rewrite the feature table in row groups of this many rows (default: as written, 10^6)")
    parser.add_argument("--out", default="bench/results/staging.md")
    parser.add_argument("--before", help="the .json of an earlier run to compare with (side by side)")
    parser.add_argument("--before-ref", help="also run each configuration with shared/ as of these git commits "
                        "(comma-separated; side by side, same run, the first is the ratios' base)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per configuration (the median is kept)")
    parser.add_argument("--work", default=None, help="scratch folder (default: the system's)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        with tempfile.TemporaryDirectory(dir=args.work) as work:
            result = child(Path(args.data), Path(work), args.child)
        print("RESULT " + json.dumps(result))
        return
    started = time.perf_counter()
    results: list[tuple[int, str, dict[str, Any] | None]] = []
    with tempfile.TemporaryDirectory(dir=args.work) as scratch:
        before_codes: list[tuple[str, Path]] = []
        for ref in filter(None, (args.before_ref or "").split(",")):
            folder = Path(scratch) / f"before-{len(before_codes)}"
            folder.mkdir()
            archive = subprocess.run(["git", "archive", ref, "shared"], check=True, capture_output=True)
            subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
            before_codes.append((ref, folder / "shared"))
        for n in (int(s) for s in args.sizes.split(",")):
            data = Path(scratch) / f"data_{n}.parquet"
            write_data(data, n)
            if args.table_row_group:
                pq.write_table(pq.read_table(data), data, row_group_size=args.table_row_group)
            for config in args.partition_rows.split(","):
                codes: list[tuple[str, Path | None]] = [(f"{config}@{ref}", code) for ref, code in before_codes]
                codes.append((config, None))
                runs: dict[str, list[dict[str, Any] | None]] = {name: [] for name, _ in codes}
                for _ in range(max(1, args.repeat)):
                    for name, code in codes:
                        runs[name].append(measure(data, Path(scratch), config, code))
                for name, _ in codes:
                    r = median_run(runs[name])
                    results.append((n, name, r))
                    print(n, name, r, flush=True)
            data.unlink()
    text = render(results, args, time.perf_counter() - started)
    Path(args.out).write_text(text)
    Path(args.out).with_suffix(".json").write_text(json.dumps(results))
    command = " ".join(["python", "bench/bench_staging.py", *sys.argv[1:]])
    Path(args.out).with_suffix(".cmd").write_text(json.dumps(f"`{command}`, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC"))
    print(text)


if __name__ == "__main__":
    main()
