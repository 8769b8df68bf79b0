"""RR-on-Bins privatization speed: plain numpy vs the fused numba kernel, one core.

Usage:
    python bench/bench_privatize_speed.py [--n 10000000] [--repeats 7]
        [--housing /work/shared/data/california_housing.csv] [--out bench/results/privatize_speed.md]

Both sides privatize the same labels with the same (m, cut points, outputs, p)
and a fresh cryptographically seeded generator (labeldp.randomness.secure_generator),
from float labels to float outputs:

* numpy — what RROnBins.privatize did before the kernel: check_labels,
  np.searchsorted on the cut points, rng.random < p, rng.integers for the other
  bin, np.where, then the gather outputs[idx]
  (labeldp.mechanisms.rr_sampling.randomized_response_reference);
* numba — labeldp.mechanisms.rr_sampling.privatize_values: binning and RR fused in
  one serial pass, one raw 64-bit word of the same generator per label.

The process is pinned to one CPU and NUMBA_NUM_THREADS=1 (the kernel is serial
anyway); numpy's element-wise ops are single-threaded. Reported: the median
over ``repeats`` interleaved runs after one warm-up, labels per second, and the ratio.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ["NUMBA_NUM_THREADS"] = "1"
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numba  # noqa: E402
import numpy as np  # noqa: E402

from labeldp.mechanisms import RROnBins  # noqa: E402
from labeldp.mechanisms.checks import check_labels  # noqa: E402
from labeldp.mechanisms.prior import LabelDomain, default_grid, snap_to_grid  # noqa: E402
from labeldp.mechanisms.rr_sampling import privatize_values, randomized_response_reference  # noqa: E402
from labeldp.randomness import secure_generator  # noqa: E402


def numpy_privatize(labels, cuts, outputs, p, rng):
    """The plain numpy vectorized version (RROnBins.privatize before the kernel)."""
    idx = np.searchsorted(cuts, check_labels(labels), side="left").astype(np.int64)
    return outputs[randomized_response_reference(idx, outputs.size, p, rng)]


def numba_privatize(labels, cuts, outputs, p, rng):
    return privatize_values(labels, cuts, outputs, p, rng)


def timed_pair(labels, cuts, outputs, p, repeats: int) -> tuple[float, float]:
    """Median seconds of (numpy, numba), runs interleaved so load drift hits both alike."""
    for fn in (numpy_privatize, numba_privatize):
        fn(labels[:1000], cuts, outputs, p, secure_generator())  # warm-up (and JIT)
    times: dict = {numpy_privatize: [], numba_privatize: []}
    for _ in range(repeats):
        for fn in times:
            rng = secure_generator()
            start = time.perf_counter()
            fn(labels, cuts, outputs, p, rng)
            times[fn].append(time.perf_counter() - start)
    return statistics.median(times[numpy_privatize]), statistics.median(times[numba_privatize])


def synthetic_case(m: int, epsilon: float, n: int, rng) -> tuple[str, np.ndarray, np.ndarray, np.ndarray, float]:
    outputs = np.linspace(0.0, 5.0, m)
    cuts = 0.5 * (outputs[:-1] + outputs[1:])
    p = 1.0 / (1.0 + (m - 1) * np.exp(-epsilon))
    return f"uniform labels, m = {m}", rng.uniform(0.0, 5.0, n), cuts, outputs, float(p)


def housing_cases(path: str, n: int, rng, epsilons=(0.5, 2.0, 8.0)):
    """RR-on-Bins fitted to the (non-private, for timing only) Housing histogram; labels resampled to n."""
    import csv

    with open(path, newline="") as fh:
        values = np.array([float(r["median_house_value"]) / 100_000 for r in csv.DictReader(fh)])
    domain = LabelDomain("real", 0.0, 5.00001)
    grid = default_grid(domain, values.size)
    probs = np.bincount(snap_to_grid(values, grid), minlength=grid.size).astype(float)
    labels = rng.choice(values, size=n)
    for eps in epsilons:
        mech = RROnBins(eps).fit(grid, probs)
        m = mech.outputs_.size
        yield f"Housing, RR-on-Bins ε = {eps:g} (m = {m})", labels, mech.cut_points_, mech.outputs_, mech.keep_probability_


def machine_info() -> list[str]:
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    return [
        f"- date: {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {platform.machine()}, {cpu}, {os.cpu_count()} logical CPUs (process pinned to one)",
        f"- python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__}",
        f"- load average at start: {', '.join(f'{x:.2f}' for x in load)} (shared machine: timings are noisy)",
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--housing", default=None, help="path to california_housing.csv (optional)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "privatize_speed.md"))
    ap.add_argument("--no-pin", action="store_true", help="do not pin the process to one CPU")
    args = ap.parse_args(argv)

    if not args.no_pin and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    info = machine_info()

    data_rng = np.random.default_rng(0)
    cases = [synthetic_case(m, 1.0, args.n, data_rng) for m in (2, 5, 12, 40, 200)]
    if args.housing:
        cases += list(housing_cases(args.housing, args.n, data_rng))

    rows = [
        f"{args.n:,} labels, float labels in → float outputs out, median of {args.repeats} interleaved runs, one core.",
        "",
        "| case | numpy (labels/s) | numba fused (labels/s) | ratio |",
        "|---|---:|---:|---:|",
    ]
    for name, labels, cuts, outputs, p in cases:
        t_np, t_nb = timed_pair(labels, cuts, outputs, p, args.repeats)
        rows.append(f"| {name} | {args.n / t_np / 1e6:.1f} M | {args.n / t_nb / 1e6:.1f} M | {t_np / t_nb:.1f}× |")
        print(rows[-1], flush=True)

    text = "\n".join(
        [
            "# RR-on-Bins privatization speed",
            "",
            "`python bench/bench_privatize_speed.py " + " ".join(argv if argv is not None else sys.argv[1:]) + "`",
            "",
            *info,
            "",
            *rows,
            "",
            "numpy: check_labels + np.searchsorted + rng.random < p + rng.integers + np.where + gather.",
            "numba: `labeldp.mechanisms.rr_sampling.privatize_values` (binning + RR in one serial pass,",
            "one raw 64-bit word of the same PCG64DXSM generator, seeded from the OS CSPRNG, per label).",
            "",
        ]
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
