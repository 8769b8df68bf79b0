"""Benchmark: exact fast RR-on-Bins optimizer vs the straightforward O(k³) table (Algorithm 2).

Usage: .venv/bin/python bench/bench_rr_on_bins_optimizer.py [--quick] [--out PATH]

In ONE run, for squared, absolute and Poisson loss, several ε in [0.05, 8] and three
priors (uniform; a discretized log-normal; an ε₁-DP Laplace histogram of log-normal
samples, with the zeros that clipping leaves), it times

* ``optimal_bins`` (clamped interval costs + Dinkelbach + monotone-queue DP), and
* ``optimal_bins_reference`` (the O(k³) numpy table over every bin count d) where it
  finishes quickly (k <= 1601),

checks that both return the same loss, outputs and bins wherever both ran, and writes
a markdown report (machine, versions, date, tables with ratios) to
bench/results/rr_on_bins_optimizer.md. For k beyond the reference, the reference's
cost is EXTRAPOLATED as c·k³ from its largest measured k and labelled as such.
Timings are wall-clock medians after numba compilation; the machine may be shared.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import platform
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import numba
import numpy as np
import scipy
from scipy import stats

from labeldp.mechanisms.prior import LaplaceHistogramPrior
from labeldp.mechanisms.rr_on_bins_kernels import optimal_bins, optimal_bins_reference, optimal_bins_stats

LOSSES = ("squared", "absolute", "poisson")
TARGETS_MS = {1000: 20.0, 10_000: 1000.0, 100_000: 60_000.0}


# --------------------------------------------------------------------------- priors


def prior(name: str, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Label grids are >= 0 so the same prior serves all three losses (Poisson needs it)."""
    if name == "uniform":
        return np.linspace(0.0, 100.0, k), np.full(k, 1.0 / k)
    hi = float(stats.lognorm.ppf(0.999, s=1.0, scale=10.0))
    grid = np.linspace(0.0, hi, k)
    if name == "lognormal":  # log-normal(median 10, σ = 1) mass of each grid cell
        edges = np.concatenate([[-np.inf], 0.5 * (grid[1:] + grid[:-1]), [np.inf]])
        probs = np.diff(stats.lognorm.cdf(edges, s=1.0, scale=10.0))
        return grid, probs / probs.sum()
    if name == "noisy":  # what the labels party really fits: ε₁ = 0.5 Laplace histogram of 10⁶ labels
        rng = np.random.default_rng(k)
        labels = stats.lognorm.rvs(s=1.0, scale=10.0, size=1_000_000, random_state=rng)
        return grid, LaplaceHistogramPrior(0.5, grid).fit(labels, rng).probs_
    raise ValueError(name)


# --------------------------------------------------------------------------- timing


def time_call(fn, min_total: float, max_reps: int) -> tuple[float, Any]:
    """Median wall time (s) over repetitions; at least 3 unless one call exceeds min_total."""
    t0 = time.perf_counter()
    result = fn()
    times = [time.perf_counter() - t0]
    while len(times) < max_reps and (len(times) < 3 or sum(times) < min_total):
        if times[0] > min_total:
            break
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def exact_loss(grid, probs, epsilon, loss, bins, outputs) -> float:
    """E[ℓ(ŷ, y)] of ε-RR over ``outputs`` with Φ(grid[g]) = outputs[bins[g]], evaluated directly."""
    m = outputs.size
    t = math.exp(-epsilon)
    keep, other = 1.0 / (1.0 + (m - 1) * t), t / (1.0 + (m - 1) * t)
    o, y = outputs[None, :], grid[:, None]
    table = (o - y) ** 2 if loss == "squared" else (np.abs(o - y) if loss == "absolute" else o - y * np.log(o))
    per_label = other * table.sum(axis=1) + (keep - other) * table[np.arange(grid.size), bins]
    return float(np.dot(probs / probs.sum(), per_label))


def agree(fast, ref, grid, probs, epsilon, loss) -> tuple[str, float]:
    """'same' partition and outputs, an exact 'tie' (another partition achieving the same loss,
    e.g. the mirror image of a symmetric prior), or 'MISMATCH'; and the relative loss difference."""
    rel = abs(fast[2] - ref[2]) / max(abs(ref[2]), 1e-300)
    if rel > 1e-9:
        return "MISMATCH", rel
    if fast[1].shape == ref[1].shape and np.allclose(fast[1], ref[1], rtol=1e-9, atol=1e-12) and np.array_equal(
        fast[0], ref[0]
    ):
        return "same", rel
    achieved = exact_loss(grid, probs, epsilon, loss, fast[0], fast[1])
    return ("tie" if abs(achieved - ref[2]) <= 1e-9 * max(abs(ref[2]), 1e-300) else "MISMATCH"), rel


def machine_info() -> dict[str, str]:
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "CPU": model,
        "logical cores": str(os.cpu_count()),
        "load average at start (1/5/15 min)": " / ".join(f"{x:.2f}" for x in load),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "scipy": scipy.__version__,
        "date (UTC)": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M"),
    }


def fmt_ms(seconds: float) -> str:
    ms = 1e3 * seconds
    return f"{ms:.3g}" if ms < 100 else f"{ms:,.0f}"


def fmt_duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"~{seconds / 3600:,.1f} h"
    if seconds >= 60:
        return f"~{seconds / 60:,.1f} min"
    return f"~{seconds:,.1f} s"


# --------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small ks and fewer ε (a smoke run)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "rr_on_bins_optimizer.md"))
    args = parser.parse_args()

    if args.quick:
        side_ks, side_eps = [101, 401], [0.05, 1.0, 8.0]
        fast_ks, fast_eps, priors = [1000, 10_000], [0.05, 1.0, 8.0], ["uniform", "lognormal"]
    else:
        side_ks, side_eps = [101, 201, 401, 801, 1000, 1601], [0.05, 0.5, 1.0, 2.0, 4.0, 8.0]
        fast_ks, fast_eps = [1000, 10_000, 100_000], [0.05, 0.1, 0.5, 1.0, 2.0, 4.0, 8.0]
        priors = ["uniform", "lognormal", "noisy"]
    side_priors = priors[:2]
    big_k_eps = [0.05, 1.0, 8.0]  # the reference at k > 801 only for these (it is ε-independent anyway)

    info = machine_info()
    print("machine:", info, flush=True)

    t0 = time.perf_counter()
    for loss in LOSSES:  # numba compilation (or loading the on-disk cache)
        optimal_bins(np.arange(4.0), np.ones(4), 1.0, loss)
    compile_s = time.perf_counter() - t0

    # ---------------------------------------------------------------- side by side
    side_rows = []
    ref_time: dict[tuple[str, int], list[float]] = {}
    n_agree = n_both = n_tie = 0
    worst_rel = 0.0
    for k in side_ks:
        for loss in LOSSES:
            for pname in side_priors:
                grid, probs = prior(pname, k)
                for eps in side_eps:
                    if k > 801 and eps not in big_k_eps:
                        continue
                    tf, fast = time_call(partial(optimal_bins, grid, probs, eps, loss), 0.2, 20)
                    ref_reps = 1 if k > 401 else 3
                    tr, ref = time_call(partial(optimal_bins_reference, grid, probs, eps, loss), 0.0, ref_reps)
                    status, rel = agree(fast, ref, grid, probs, eps, loss)
                    ok = status != "MISMATCH"
                    n_both += 1
                    n_agree += ok
                    n_tie += status == "tie"
                    worst_rel = max(worst_rel, rel)
                    ref_time.setdefault((loss, k), []).append(tr)
                    side_rows.append((k, loss, pname, eps, fast[1].size, tf, tr, ok, rel, status))
                    print(
                        f"k={k:5d} {loss:8s} {pname:9s} eps={eps:<5} m={fast[1].size:3d} "
                        f"fast={fmt_ms(tf):>8} ms ref={fmt_ms(tr):>8} ms ratio={tr / tf:8.1f} {status}",
                        flush=True,
                    )

    # c·k³ fit per loss from the largest measured reference k (labelled EXTRAPOLATED in the report)
    k_ref_max = max(side_ks)
    cube = {loss: statistics.median(ref_time[(loss, k_ref_max)]) / k_ref_max**3 for loss in LOSSES}

    # ---------------------------------------------------------------- targets: fast only at large k
    fast_rows = []
    for k in fast_ks:
        for loss in LOSSES:
            for pname in priors:
                grid, probs = prior(pname, k)
                for eps in fast_eps:
                    reps = 2 if k >= 100_000 else 20
                    tf, fast = time_call(partial(optimal_bins, grid, probs, eps, loss), 0.3, reps)
                    st = optimal_bins_stats(grid, probs, eps, loss)
                    fast_rows.append((k, loss, pname, eps, st["bins"], st["rounds"], tf))
                    print(
                        f"k={k:6d} {loss:8s} {pname:9s} eps={eps:<5} m={st['bins']:3d} rounds={st['rounds']} "
                        f"fast={fmt_ms(tf):>8} ms",
                        flush=True,
                    )

    info["load average at end (1/5/15 min)"] = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    report = render(info, compile_s, side_rows, fast_rows, cube, k_ref_max, (n_agree, n_both, n_tie, worst_rel), args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    print(report)
    print(f"wrote {out}")
    return 0 if n_agree == n_both else 1


def render(info, compile_s, side_rows, fast_rows, cube, k_ref_max, agreement, args) -> str:
    n_agree, n_both, n_tie, worst_rel = agreement
    lines = [
        "# RR-on-Bins optimizer: exact fast kernel vs the O(k³) reference",
        "",
        f"Command: `.venv/bin/python bench/bench_rr_on_bins_optimizer.py{' --quick' if args.quick else ''}`",
        "",
        "| machine | |",
        "|---|---|",
        *[f"| {key} | {value} |" for key, value in info.items()],
        f"| numba compile / cache load (3 losses) | {compile_s:.2f} s |",
        "",
        "**fast** = `optimal_bins`: clamped interval costs (quadrangle inequality), Dinkelbach on the",
        "ratio, monotone-queue DP, O(R·k log k) cost evaluations (R = Dinkelbach rounds, ×log k for",
        "absolute loss). **reference** = `optimal_bins_reference`: Algorithm 2 verbatim, the full",
        "O(k³) table over every bin count d, vectorized in numpy (itself far faster than the",
        "pure-Python public implementations quoted in the issue: ~11 s at k = 401, ~90 s at k = 801).",
        "Times are wall-clock medians in ms after compilation; the machine was shared, so treat",
        "them as noisy upper bounds. Priors: *uniform* on 0..100; *lognormal* = log-normal(median 10,",
        "σ = 1) discretized on [0, q₀.₉₉₉]; *noisy* = ε₁ = 0.5 Laplace histogram of 10⁶ log-normal",
        "labels on that grid (clipped at 0, many empty cells).",
        "",
        f"**Agreement where both ran: {n_agree}/{n_both} instances** return the optimal loss (equal to 1e-9",
        f"relative; worst difference {worst_rel:.1e}). {n_agree - n_tie} have the identical partition and",
        f"outputs; {n_tie} are exact ties: a different partition whose directly evaluated loss equals the",
        "reference's (e.g. the mirror image of the reference's partition on the symmetric uniform prior).",
        "",
        "## Side by side (same k, same prior, same ε)",
        "",
        "Per k and loss, over the priors and ε listed (at k > 801 the reference ran for ε ∈ {0.05, 1, 8}):",
        "",
        "| k | loss | instances | reference median (ms) | fast median (ms) | fast max (ms) "
        "| ratio ref/fast (min – max) | optimal (ties) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    groups: dict[tuple[int, str], list] = {}
    for row in side_rows:
        groups.setdefault((row[0], row[1]), []).append(row)
    for (k, loss), rows in groups.items():
        ref = [r[6] for r in rows]
        fast = [r[5] for r in rows]
        ratios = [r[6] / r[5] for r in rows]
        lines.append(
            f"| {k} | {loss} | {len(rows)} | {fmt_ms(statistics.median(ref))} | {fmt_ms(statistics.median(fast))} | "
            f"{fmt_ms(max(fast))} | {min(ratios):,.0f} – {max(ratios):,.0f} | "
            f"{sum(r[7] for r in rows)}/{len(rows)} ({sum(r[9] == 'tie' for r in rows)}) |"
        )

    eps_list = sorted({r[3] for r in fast_rows})
    lines += [
        "",
        "## Targets: fast kernel at large k (ms, median per instance)",
        "",
        "Target: k = 1 000 in ≤ 20 ms, k = 10 000 in ≤ 1 s, k = 100 000 in ≤ 60 s. The last columns give the",
        f"reference's cost **EXTRAPOLATED** as c·k³ from its measured time at k = {k_ref_max} (not run) and the",
        "resulting ratio.",
        "",
        "| k | loss | prior | "
        + " | ".join(f"ε={e:g}" for e in eps_list)
        + " | max | target | reference (extrapolated) | ratio (extrapolated) |",
        "|---:|---|---|" + "---:|" * len(eps_list) + "---:|---:|---:|---:|",
    ]
    by_key: dict[tuple[int, str, str], dict[float, float]] = {}
    for k, loss, pname, eps, _, _, tf in fast_rows:
        by_key.setdefault((k, loss, pname), {})[eps] = tf
    for (k, loss, pname), times in by_key.items():
        worst = max(times.values())
        target = TARGETS_MS.get(k)
        ok = "" if target is None else ("✅" if 1e3 * worst <= target else "❌")
        extrapolated = cube[loss] * k**3
        lines.append(
            f"| {k} | {loss} | {pname} | "
            + " | ".join(fmt_ms(times[e]) for e in eps_list)
            + f" | {fmt_ms(worst)} | {'' if target is None else f'{target:,.0f}'} {ok} | "
            f"{fmt_duration(extrapolated)} | ~{extrapolated / worst:,.0f}× |"
        )

    k_big = max(r[0] for r in fast_rows)
    lines += [
        "",
        f"## Bins m / Dinkelbach rounds R at k = {k_big}",
        "",
        "| loss | prior | " + " | ".join(f"ε={e:g}" for e in eps_list) + " |",
        "|---|---|" + "---:|" * len(eps_list),
    ]
    stats_by: dict[tuple[str, str], dict[float, str]] = {}
    for k, loss, pname, eps, bins, rounds, _ in fast_rows:
        if k == k_big:
            stats_by.setdefault((loss, pname), {})[eps] = f"{bins} / {rounds}"
    for (loss, pname), cells in stats_by.items():
        lines.append(f"| {loss} | {pname} | " + " | ".join(cells[e] for e in eps_list) + " |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
