"""Privatization speed of every mechanism: the numba kernel vs its plain-numpy twin, one core.

Usage:
    python bench/bench_privatize_speed.py [--n 1000000,10000000] [--repeats 5]
        [--only name,name] [--fast-only] [--streams] [--out bench/results/privatize_speed.md]

For every mechanism of the catalogue (rr_on_bins, rp_with_prior, laplace continuous and
discrete, staircase, gaussian, exponential, unbiased, randomized_response, rr_with_prior,
block_rr) in its default configuration (clipped, default lattice), both sides privatize
the same labels with a fresh cryptographically seeded generator
(labeldp.randomness.secure_generator), labels in → released labels out:

* kernel — ``mech.privatize`` (what a release runs);
* numpy  — ``labeldp.mechanisms.reference.privatize_reference(mech, …)``: the same law in
  plain vectorized numpy (the twin the unit tests compare the kernels against).

The process is pinned to one CPU and NUMBA_NUM_THREADS=1. Time is the thread's CPU
time (``time.thread_time``), so on a shared machine the time other processes hold the
core does not count (their cache pressure still does). Reported: the median over
``repeats`` interleaved runs after one warm-up, labels per CPU-second, and the ratio.
``--fast-only`` times ``mech.privatize`` alone (used for the "before" column, when no
numpy twin existed).

``--streams`` times ``mech.privatize`` on both noise streams side by side, in one run: the
PCG64DXSM generator releases used before (``labeldp.randomness.pcg64_generator``, not a CSPRNG)
and the ChaCha20 keystream every release now draws from (``secure_generator``), with the ratio;
plus the raw words alone and the ε₁ priors' noise (numpy's float geometric on PCG64 vs the exact
integer discrete Laplace on ChaCha20).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

os.environ["NUMBA_NUM_THREADS"] = "1"
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numba
import numpy as np

from labeldp.mechanisms import (
    BlockRR,
    Exponential,
    Gaussian,
    LabelDomain,
    Laplace,
    RandomizedResponse,
    RPWithPrior,
    RROnBins,
    RRWithPrior,
    SplitPriorRandomizer,
    Staircase,
    UnbiasedRandomizer,
)
from labeldp.mechanisms.contract import Prior
from labeldp.mechanisms.exact_noise import discrete_laplace, rate_from_epsilon
from labeldp.mechanisms.prior import sample_two_sided_geometric
from labeldp.mechanisms.sampling import raw_words
from labeldp.randomness import pcg64_generator, secure_generator

REAL = LabelDomain("real", 0.0, 5.0)
INTEGER = LabelDomain("integer", 0.0, 100.0)
EPSILON = 1.0
CLASSES = 10


def _real(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(0.0, 5.0, n)


def _integer(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, 101, n).astype(np.float64)


def _classes(n: int, rng: np.random.Generator) -> np.ndarray:
    # A skewed class prior, so the prior-based mechanisms pick a proper subset.
    p = 0.6 ** np.arange(CLASSES)
    return rng.choice(CLASSES, size=n, p=p / p.sum()).astype(np.int64)


def _rr_on_bins() -> Any:
    grid = np.linspace(0.0, 5.0, 64)
    return RROnBins(8.0, REAL).fit_to(Prior(grid, np.ones(grid.size)))


def _split(cls: type) -> Any:
    return SplitPriorRandomizer(cls, EPSILON, CLASSES)


Case = tuple[str, Callable[[], Any], Callable[[int, np.random.Generator], np.ndarray]]

CASES: list[Case] = [
    ("rr_on_bins (ε = 8, m = 15)", _rr_on_bins, _real),
    ("rp_with_prior", lambda: RPWithPrior(EPSILON, REAL).fit_to(), _real),
    ("laplace continuous", lambda: Laplace(EPSILON, REAL, "continuous").fit_to(), _real),
    ("laplace discrete (integer 0..100)", lambda: Laplace(EPSILON, INTEGER, "discrete").fit_to(), _integer),
    ("staircase continuous", lambda: Staircase(EPSILON, REAL).fit_to(), _real),
    ("staircase discrete (integer 0..100)", lambda: Staircase(EPSILON, INTEGER).fit_to(), _integer),
    ("gaussian (δ = 1e-6)", lambda: Gaussian(EPSILON, REAL, 1e-6).fit_to(), _real),
    ("exponential", lambda: Exponential(EPSILON, REAL).fit_to(), _real),
    ("unbiased (K = 33)", lambda: UnbiasedRandomizer(EPSILON, REAL).fit_to(), _real),
    ("randomized_response (K = 10)", lambda: RandomizedResponse(EPSILON, CLASSES).fit_to(), _classes),
    ("rr_with_prior (split prior)", lambda: _split(RRWithPrior), _classes),
    ("block_rr (split prior)", lambda: _split(BlockRR), _classes),
]


NOTES = [
    "numpy: `labeldp.mechanisms.reference.privatize_reference`, the plain-numpy twin of each kernel (the same",
    "alias-table lookups, lattice arithmetic and rejection steps, vectorized). Where a kernel reads its raw words in",
    "a fixed pattern (clipped additive noise, unbiased, categorical, RR-on-Bins) the twin returns identical outputs",
    "for the same generator state (tests/unit/test_sampling.py checks this); exponential and RPWithPrior's uniform",
    "integers consume words in a different order there, same law. `before`: `mech.privatize` of the code before this",
    "change, timed the same way (`--fast-only`), where laplace, staircase, gaussian and exponential drew float",
    "geometric / normal variates from numpy and categorical mechanisms sorted the labels by class.",
    "",
    "Laws. Every output law is the one the mechanism states: the same lattice, the same pmf (clipped additive noise:",
    "the folded pmf of the noise; exponential: α^|i−j| on the lattice), the same cells where cells were already",
    "used (categorical cells_ out of 2^63, unbiased counts out of 2^53, RR-on-Bins, RPWithPrior's T/2^53). What",
    "changed is how the randomness is consumed: one raw 64-bit word of the release's stream per draw,",
    "mapped through an integer alias table in which each output owns exactly its cells, instead of numpy's float",
    "samplers — for the additive mechanisms the realized law is now the stated pmf rounded to cells of 2^-63 (small",
    "entries rounded up) rather than the float error of numpy's inversion and ziggurat samplers. The committed",
    "utility tables were computed with the old samplers: same laws, a different random stream, so they remain valid",
    "as they are (a rerun differs by sampling noise only, as it would with another seed).",
]


def _reference() -> Callable[[Any, np.ndarray, np.random.Generator], np.ndarray]:
    from labeldp.mechanisms.reference import privatize_reference

    return privatize_reference


CLOCK = time.thread_time
"""CPU time of this thread: on a shared machine, time spent waiting for the core does not count."""


def timed(
    fns: dict[str, Callable[[np.ndarray, np.random.Generator], Any]],
    labels: np.ndarray,
    repeats: int,
    streams: dict[str, Callable[[], np.random.Generator]] | None = None,
) -> dict:
    """Median seconds per function, runs interleaved so load drift hits all alike; each function
    gets a fresh generator from ``streams[key]`` (default: the release stream, ``secure_generator``)."""
    make = streams or {}
    for key, fn in fns.items():
        fn(labels[:1000], make.get(key, secure_generator)())  # warm-up (and JIT)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for key, fn in fns.items():
            rng = make.get(key, secure_generator)()
            start = CLOCK()
            fn(labels, rng)
            times[key].append(CLOCK() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def _before_column(path: str) -> dict[tuple[str, str], str]:
    """(mechanism, labels) → the kernel column of the first table of an earlier ``--fast-only`` results file."""
    cells: dict[tuple[str, str], str] = {}
    for line in Path(path).read_text().splitlines():
        if line.startswith("## "):
            break  # the first table only
        parts = [p.strip() for p in line.strip().strip("|").split("|")]
        if len(parts) == 3 and parts[1].replace(",", "").isdigit():
            cells[(parts[0], parts[1])] = parts[2]
    return cells


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
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {platform.machine()}, {cpu}, {os.cpu_count()} logical CPUs (process pinned to one)",
        f"- python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__}",
        f"- load average at start: {', '.join(f'{x:.2f}' for x in load)} (shared machine: timings are noisy)",
    ]


STREAMS: dict[str, Callable[[], np.random.Generator]] = {"pcg64": pcg64_generator, "chacha20": secure_generator}

STREAM_NOTES = [
    "pcg64: `labeldp.randomness.pcg64_generator`, the PCG64DXSM generator (256 OS bits) releases drew from",
    "before; chacha20: `labeldp.randomness.secure_generator`, the ChaCha20 keystream under a fresh os.urandom key",
    "that every release now draws from (whole blocks from OpenSSL through `cryptography`, single words from the",
    "numba block function). Both columns run the same `mech.privatize` (the kernels) on the same labels.",
    "`raw words`: `random_raw` alone, one word per 'label'. `ε₁ prior noise`: the per-label noise of the",
    "noised-labels prior (rate ε₁/J, J = 2^16) — numpy's float geometric on pcg64 (before) vs the exact integer",
    "discrete Laplace (`exact_noise.discrete_laplace`, ~10 words a draw) on chacha20 (now); the histogram prior",
    "draws only one per grid point (≤ 256), too few to matter.",
]


def _streams(args: argparse.Namespace, argv: list[str] | None, info: list[str], sizes: list[int], only) -> int:
    """mech.privatize on PCG64DXSM vs ChaCha20, one table, ratios in the same run."""
    rows = [
        "| mechanism | labels | pcg64 (labels/s) | chacha20 (labels/s) | chacha20 / pcg64 |",
        "|---|---:|---:|---:|---:|",
    ]
    data_rng = np.random.default_rng(0)
    rate = rate_from_epsilon(EPSILON, 1 << 16)
    alpha = float(np.exp(-EPSILON / (1 << 16)))
    extra: list[Case] = [
        ("raw words", lambda: None, _real),
        ("ε₁ prior noise (float geometric → exact)", lambda: None, _real),
    ]
    for name, build, make_labels in [*extra, *CASES]:
        if only is not None and not any(name.startswith(p) for p in only):
            continue
        mech = build()
        for n in sizes:
            labels = make_labels(n, data_rng)
            fns: dict[str, Callable[[np.ndarray, np.random.Generator], Any]]
            if name == "raw words":
                fns = {k: lambda x, rng: raw_words(rng, x.size) for k in STREAMS}
            elif name.startswith("ε₁"):
                fns = {
                    "pcg64": lambda x, rng: sample_two_sided_geometric(alpha, x.size, rng),
                    "chacha20": lambda x, rng: discrete_laplace(*rate, x.size, rng),
                }
            else:
                fns = dict.fromkeys(STREAMS, mech.privatize)
            t = timed(fns, labels, args.repeats, STREAMS)
            rows.append(
                f"| {name} | {n:,} | {n / t['pcg64'] / 1e6:.1f} M | {n / t['chacha20'] / 1e6:.1f} M"
                f" | {t['pcg64'] / t['chacha20']:.2f}× |"
            )
            print(rows[-1], flush=True)
    command = "`NUMBA_NUM_THREADS=1 .venv/bin/python bench/bench_privatize_speed.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    text = "\n".join(
        [
            "# Privatization speed: the PCG64DXSM stream vs the ChaCha20 stream",
            "",
            command.rstrip() + "`",
            "",
            *info,
            "",
            f"ε = {EPSILON:g} (rr_on_bins: ε = 8), real labels on [0, 5], integer labels on 0..100, "
            f"{CLASSES} classes; median of {args.repeats} interleaved runs, one core, labels per CPU-second.",
            "",
            *rows,
            "",
            *STREAM_NOTES,
            "",
        ]
    )
    return _write(Path(args.out), text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--n", default="1000000,10000000", help="comma-separated label counts")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default=None, help="comma-separated case-name prefixes")
    ap.add_argument("--fast-only", action="store_true", help="time mech.privatize only")
    ap.add_argument("--streams", action="store_true", help="PCG64DXSM vs ChaCha20: mech.privatize on each stream")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "privatize_speed.md"))
    ap.add_argument("--no-pin", action="store_true", help="do not pin the process to one CPU")
    ap.add_argument("--before", default=None, help="a --fast-only results file of older code: its column is added")
    args = ap.parse_args(argv)

    if not args.no_pin and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    info = machine_info()
    sizes = [int(float(s)) for s in args.n.split(",")]
    only = None if args.only is None else [s.strip() for s in args.only.split(",")]
    reference = None if args.fast_only else _reference()

    if args.streams:
        return _streams(args, argv, info, sizes, only)
    before = _before_column(args.before) if args.before else None
    header = ["| mechanism | labels | kernel (labels/s) |"]
    if reference is not None:
        header = ["| mechanism | labels | numpy (labels/s) | kernel (labels/s) | ratio |"]
    if before is not None:
        header = [header[0] + " before (labels/s) |"]
    rows = [*header, "|---|---:|" + "---:|" * (len(header[0].split("|")) - 4)]
    data_rng = np.random.default_rng(0)
    for name, build, make_labels in CASES:
        if only is not None and not any(name.startswith(p) for p in only):
            continue
        mech = build()
        for n in sizes:
            labels = make_labels(n, data_rng)
            fns: dict[str, Callable[[np.ndarray, np.random.Generator], Any]] = {"kernel": mech.privatize}
            if reference is not None:
                fns["numpy"] = partial(reference, mech)
            t = timed(fns, labels, args.repeats)
            if reference is None:
                row = f"| {name} | {n:,} | {n / t['kernel'] / 1e6:.1f} M |"
            else:
                row = (
                    f"| {name} | {n:,} | {n / t['numpy'] / 1e6:.1f} M | {n / t['kernel'] / 1e6:.1f} M"
                    f" | {t['numpy'] / t['kernel']:.1f}× |"
                )
            if before is not None:
                row += f" {before.get((name, f'{n:,}'), '–')} |"
            rows.append(row)
            print(rows[-1], flush=True)

    command = "`NUMBA_NUM_THREADS=1 .venv/bin/python bench/bench_privatize_speed.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    text = "\n".join(
        [
            "# Privatization speed, every mechanism",
            "",
            command.rstrip() + "`",
            "",
            *info,
            "",
            f"ε = {EPSILON:g} (rr_on_bins: ε = 8), real labels on [0, 5], integer labels on 0..100, "
            f"{CLASSES} classes; median of {args.repeats} interleaved runs, one core.",
            "",
            *rows,
            "",
            *NOTES,
            "",
        ]
    )
    return _write(Path(args.out), text)


def _write(out: Path, text: str) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
