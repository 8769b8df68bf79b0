"""Which prior grid and which ε₁ make the two-step RR-on-Bins randomizer best?

Usage:
    python research/studies/prior_rules.py [--housing /work/shared/data/california_housing.csv]
        [--quick] [--draws 8] [--out research/results/prior_rules.md]

The labels party spends ε₁ on a Laplace histogram over a public grid (k points,
uniform or logarithmic over the declared domain) and ε₂ = ε − ε₁ on RR-on-Bins
fitted to that noisy prior (Ghazi et al. Alg. 3). For every data set, subsample
size n, ε, grid (kind, k) and ε₁ this computes the EXACT expected squared error
of the resulting mechanism on the n true labels,

    E[(ŷ − y)²] = mean over y of  p·(Φ(y) − y)² + q·Σ_{o ≠ Φ(y)} (o − y)²,

(prefix sums over the sorted labels; checked against RROnBins.expected_loss),
averaged over ``draws`` subsamples × prior-noise draws (common random numbers:
draw r uses the same subsample and noise seed for every configuration).

Rules compared, per (data, n, ε) — all label-independent (public domain, n, ε):
* ``current``: uniform grid, k(n) = clip(round(4·n^{1/3}), 16, 256), ε₁ = min(√(k/n), ε/2)
  (Thm 7, capped at half);
* ``k(n, ε)``: labeldp.mechanisms.prior.real_grid_size(n, ε) = clip(round(4·m̂(ε)), 16, k(n)),
  m̂(ε) = max(2, e^{ε/3}) the bin count of optimal RR-on-Bins for a uniform prior;
* ε₁ "bound": min(√(k/n), 0.9·ε) (labeldp.mechanisms.budget_split);
* ``proposed``: what the library does by default, default_grid(domain, n, ε) +
  prior_epsilon("default", k, n, ε).
On an integer domain (the ``counts`` set) every grid holds integers only, at most one per
integer; ``every integer`` is the former integer-domain rule. Each is compared with the
best (kind, k, ε₁) of the whole sweep (an oracle choice that
looks at the labels, so not a usable rule). ``oracle`` is RR-on-Bins with the true
histogram on a 1024-point uniform grid and the full ε (no budget spent on the prior):
what a free, exact prior would give.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import math
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from labeldp.mechanisms import LaplaceHistogramPrior, RROnBins
from labeldp.mechanisms.budget_split import prior_epsilon
from labeldp.mechanisms.contract import Prior
from labeldp.mechanisms.prior import (
    LabelDomain,
    default_grid,
    integer_grid,
    log_grid,
    real_grid_size,
    snap_to_grid,
    uniform_grid,
)
from labeldp.synthetic import make_conversions

EPSILONS = [0.05, 0.1, 0.3, 0.5, 1.0, 2.0, 4.0, 8.0]
KS = [8, 16, 32, 64, 128, 256, 512, 1024]
NS = [1_000, 10_000, 100_000]
KINDS = ["uniform", "log"]
# ε₁ candidates: multiples c·√(k/n) of the Thm 7 choice capped at ε/2 or at 0.9·ε, and fixed fractions f·ε.
THM7_MULTIPLES = [0.25, 0.5, 1.0, 2.0]
CAPS = [0.5, 0.9]
FRACTIONS = [0.02, 0.05, 0.1, 0.2, 0.5, 0.75, 0.9]


def eps1_candidates(k: int, n: int, eps: float) -> dict[str, float]:
    cands = {}
    for cap in CAPS:
        for c in THM7_MULTIPLES:
            name = ("" if c == 1 else f"{c:g}·") + "√(k/n)" + ("" if cap == 0.5 else f" ≤{cap:g}ε")
            cands[name] = min(c * math.sqrt(k / n), cap * eps)
    return cands | {f"{f:g}ε": f * eps for f in FRACTIONS}


def _eps1(rule: str):
    return lambda k, n, e: prior_epsilon(rule, k, n, e)


def _grid(kind: str, k_rule):
    return lambda domain, n, e: make_grid(domain, kind, k_rule(n, e))


# Named label-independent rules: (grid(domain, n, ε), ε₁(k, n, ε)). The last one is
# what the library does by default: default_grid(domain, n, ε) + prior_epsilon("default").
RULES = {
    "current: k(n), Thm 7 ε₁": (_grid("uniform", lambda n, e: real_grid_size(n)), _eps1("thm7")),
    "k(n), bound ε₁": (_grid("uniform", lambda n, e: real_grid_size(n)), _eps1("bound")),
    "k(n, ε), Thm 7 ε₁": (_grid("uniform", lambda n, e: real_grid_size(n, e)), _eps1("thm7")),
    "k = 16, Thm 7 ε₁": (_grid("uniform", lambda n, e: 16), _eps1("thm7")),
    "log k(n, ε), bound ε₁": (_grid("log", lambda n, e: real_grid_size(n, e)), _eps1("bound")),
    "every integer (the former integer rule), default ε₁": (
        lambda d, n, e: integer_grid(d, int(d.width) + 1) if d.kind == "integer" else default_grid(d, n, e),
        _eps1("default"),
    ),
    "proposed: default_grid + default ε₁": (lambda d, n, e: default_grid(d, n, e), _eps1("default")),
}
PROPOSED = "proposed: default_grid + default ε₁"


# --------------------------------------------------------------------------- data


@dataclass
class Dataset:
    name: str
    labels: np.ndarray
    domain: LabelDomain


def load_housing(path: str) -> Dataset:
    with open(path, newline="") as fh:
        y = np.array([float(r["median_house_value"]) / 100_000 for r in csv.DictReader(fh)])
    return Dataset("housing", y, LabelDomain("real", 0.0, 5.00001))


def load_counts() -> Dataset:
    """The benchmark's ``counts`` set: 20 000 Poisson counts on the integer domain [0, 30]."""
    from labeldp_research.datasets import counts

    data = counts()
    assert data.domain is not None  # a regression set
    return Dataset("counts", data.labels, data.domain)


def load_conversions(n: int) -> Dataset:
    data = make_conversions(n, seed=0)
    return Dataset("conversions", data.labels, LabelDomain("real", 0.0, data.clip))


# --------------------------------------------------------------------------- exact loss on real labels


class Labels:
    """Sorted true labels with prefix sums, for the exact loss of any RR-on-Bins in O(m log n)."""

    def __init__(self, y: np.ndarray) -> None:
        self.y = np.sort(np.asarray(y, dtype=np.float64))
        self.n = self.y.size
        self.c1 = np.concatenate([[0.0], np.cumsum(self.y)])
        self.c2 = np.concatenate([[0.0], np.cumsum(self.y * self.y)])

    def loss(self, mech: RROnBins) -> float:
        """E[(ŷ − y)²] averaged over the labels: q·Σ_o Σ_y (o − y)² + (p − q)·Σ_y (Φ(y) − y)²."""
        o = mech.outputs_
        n, s1, s2 = self.n, self.c1[-1], self.c2[-1]
        every = float(np.sum(n * o * o - 2.0 * o * s1 + s2))
        # Φ(y) = #{cut < y}: bin j holds the labels with cut[j−1] < y <= cut[j].
        ends = np.concatenate([[0], np.searchsorted(self.y, mech.cut_points_, side="right"), [n]])
        cnt = np.diff(ends)
        b1 = np.diff(self.c1[ends])
        b2 = np.diff(self.c2[ends])
        own = float(np.sum(cnt * o * o - 2.0 * o * b1 + b2))
        return (mech.other_probability_ * every + mech.debias_a_ * own) / n


def self_check() -> None:
    """The prefix-sum loss equals RROnBins.expected_loss on the labels' own empirical prior."""
    rng = np.random.default_rng(0)
    y = np.round(rng.gamma(2.0, 1.5, size=3000), 2)
    values, counts = np.unique(y, return_counts=True)
    for eps in (0.3, 3.0):
        mech = RROnBins(eps).fit_to(Prior(np.linspace(0, y.max(), 50), rng.random(50)))
        exact = mech.loss_under(Prior(values, counts))
        assert math.isclose(Labels(y).loss(mech), exact, rel_tol=1e-9), (Labels(y).loss(mech), exact)


# --------------------------------------------------------------------------- one configuration


def make_grid(domain: LabelDomain, kind: str, k: int) -> np.ndarray:
    """k points of ``kind``; on an integer domain integers only, at most one per integer."""
    if domain.kind == "integer":
        return integer_grid(domain, k) if kind == "uniform" else np.unique(np.round(log_grid(domain, k)))
    return uniform_grid(domain, k) if kind == "uniform" else log_grid(domain, k)


def noisy_probs(counts: np.ndarray, grid: np.ndarray, eps1: float, rng: np.random.Generator) -> np.ndarray:
    """The release's prior on precomputed counts: ``LaplaceHistogramPrior.fit_counts`` (ε₁ = 0: the true one)."""
    if eps1 <= 0:
        return counts / counts.sum()
    return LaplaceHistogramPrior(eps1, grid).fit_counts(counts, rng).probs_


class Cell:
    """One (data, n) pair: R subsamples, their sorted labels and grid histograms (cached)."""

    def __init__(self, data: Dataset, n: int, draws: int) -> None:
        self.data, self.n, self.draws = data, n, draws
        self.samples = []
        for r in range(draws):
            rng = np.random.default_rng([17, n, r])
            y = data.labels if n >= data.labels.size else rng.choice(data.labels, size=n, replace=False)
            self.samples.append(Labels(y))
        self._counts: dict = {}

    def counts(self, grid_key, grid: np.ndarray, r: int) -> np.ndarray:
        key = (grid_key, r)
        if key not in self._counts:
            self._counts[key] = np.bincount(snap_to_grid(self.samples[r].y, grid), minlength=grid.size).astype(np.int64)
        return self._counts[key]

    def loss(self, grid_key, grid: np.ndarray, eps: float, eps1: float) -> float:
        """Mean exact loss over the R (subsample, noise) draws."""
        total = 0.0
        for r in range(self.draws):
            rng = np.random.default_rng([23, self.n, r, int(round(eps * 1e6))])
            probs = noisy_probs(self.counts(grid_key, grid, r), grid, eps1, rng)
            total += self.samples[r].loss(RROnBins(eps - eps1).fit_to(Prior(grid, probs)))
        return total / self.draws

    def oracle(self, eps: float) -> float:
        grid = make_grid(self.data.domain, "uniform", 1024)
        return self.loss(("uniform", 1024), grid, eps, 0.0)


# --------------------------------------------------------------------------- the sweep


def run(datasets: list[Dataset], ns: list[int], epsilons: list[float], ks: list[int], draws: int):
    results: list[dict[str, Any]] = []  # one dict per (data, n, eps)
    for data in datasets:
        for n in ns:
            if n > data.labels.size:
                n = data.labels.size
                if any(r["data"] == data.name and r["n"] == n for r in results):
                    continue
            cell = Cell(data, n, draws)
            grids = {(kind, k): make_grid(data.domain, kind, k) for kind in KINDS for k in ks}
            for eps in epsilons:
                t0 = time.perf_counter()
                row: dict[str, Any] = {"data": data.name, "n": n, "eps": eps, "sweep": {}, "rules": {}}
                # Every rule's grid joins the sweep, so "best" is never worse than a rule's.
                eps_grids = dict(grids)
                rule_keys = {}
                for name, (grid_rule, _) in RULES.items():
                    grid = grid_rule(data.domain, n, eps)
                    key = next((k for k, g in eps_grids.items() if np.array_equal(g, grid)), (name, grid.size))
                    eps_grids.setdefault(key, grid)
                    rule_keys[name] = key
                row["oracle"] = cell.oracle(eps)
                for key, grid in eps_grids.items():
                    done: dict[float, float] = {}
                    for label, eps1 in eps1_candidates(grid.size, n, eps).items():
                        if eps1 not in done:
                            done[eps1] = cell.loss(key, grid, eps, eps1)
                        row["sweep"][(key, label)] = (eps1, done[eps1])
                for name, (_, eps1_rule) in RULES.items():
                    key = rule_keys[name]
                    grid = eps_grids[key]
                    eps1 = eps1_rule(grid.size, n, eps)
                    row["rules"][name] = (f"k={grid.size}, ε₁={eps1:.3g}", cell.loss(key, grid, eps, eps1))
                row["proposed_key"] = rule_keys[PROPOSED]
                results.append(row)
                print(
                    f"{data.name:12s} n={n:<7d} ε={eps:<5g} oracle={row['oracle']:.4g} "
                    f"current={row['rules'][next(iter(RULES))][1]:.4g} proposed={row['rules'][PROPOSED][1]:.4g} "
                    f"best={min(v[1] for v in row['sweep'].values()):.4g}  ({time.perf_counter() - t0:.1f}s)",
                    flush=True,
                )
    return results


# --------------------------------------------------------------------------- report


def _on_grid(grid_key: tuple) -> Callable[[tuple], bool]:
    """Sweep-key filter: cells on ``grid_key`` (bound here, not in a loop's closure)."""
    return lambda key: key[0] == grid_key


def _eps1_on(label: str, any_grid: bool, grid: object) -> Callable[[tuple], bool]:
    """Sweep-key filter: the ε₁ candidate ``label``, on ``grid`` unless ``any_grid``."""
    return lambda key: key[1] == label and (any_grid or key[0] == grid)


def best_of(sweep: dict, predicate=lambda key: True):
    items = [(v[1], key, v[0]) for key, v in sweep.items() if predicate(key)]
    return min(items)


def _stats(vals) -> str:
    v = np.asarray(vals)
    return f"{math.exp(np.mean(np.log(v))):.3f} | {np.median(v):.3f} | {v.max():.3f}"


def report(results: list[dict], args, elapsed: float) -> str:
    rule_names = list(results[0]["rules"]) if results else []
    eps1_labels = list(eps1_candidates(16, 1000, 1.0))
    lines = [
        "# Prior grid and ε₁ rules for two-step RR-on-Bins",
        "",
        "`python research/studies/prior_rules.py " + " ".join(sys.argv[1:]) + "`",
        "",
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}, "
        f"{platform.machine()}, python {platform.python_version()}, {elapsed / 60:.1f} min",
        f"- draws per configuration: {args.draws} (subsample + prior noise, common across configurations)",
        f"- sweep: kinds {KINDS} × k ∈ {args.ks} (plus every rule's grid) × ε₁ candidates "
        f"{{min(c·√(k/n), cap·ε), c ∈ {THM7_MULTIPLES}, cap ∈ {CAPS}}} ∪ {{f·ε, f ∈ {FRACTIONS}}}",
        "- loss: exact E[(ŷ − y)²] on the n true labels (squared label units), mean over draws;",
        "  ratio = loss / best loss of the whole sweep for that (data, n, ε)",
        "- m̂(ε) = max(2, e^{ε/3}): the bin count of optimal RR-on-Bins for a uniform prior at ε",
        "- log grids: labeldp.mechanisms.prior.log_grid (ratio 100)",
        "",
        "## Summary: loss / best loss over all (data, n, ε)",
        "",
        "| rule | geometric mean | median | max |",
        "|---|---:|---:|---:|",
    ]
    for name in rule_names:
        lines.append(f"| {name} | " + _stats([r["rules"][name][1] / best_of(r["sweep"])[0] for r in results]) + " |")
    lines.append(
        "| best (kind, k) with Thm 7 ε₁ (oracle choice) | "
        + _stats([best_of(r["sweep"], lambda key: key[1] == "√(k/n)")[0] / best_of(r["sweep"])[0] for r in results])
        + " |"
    )
    lines.append(
        "| oracle: true prior, full ε (not attainable) | "
        + _stats([r["oracle"] / best_of(r["sweep"])[0] for r in results])
        + " |"
    )

    data_names = list(dict.fromkeys(r["data"] for r in results))
    lines += [
        "",
        "## Summary per data set: geometric mean of loss / best loss over (n, ε)",
        "",
        "| rule | " + " | ".join(data_names) + " |",
        "|---|" + "---:|" * len(data_names),
    ]
    for name in rule_names:
        cells = []
        for d in data_names:
            v = np.array([r["rules"][name][1] / best_of(r["sweep"])[0] for r in results if r["data"] == d])
            cells.append(f"{math.exp(np.mean(np.log(v))):.3f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Per (data, n, ε)",
        "",
        "| data | n | ε | oracle | best loss | best (kind, k, ε₁) | best k @ Thm 7 ε₁ | "
        + " | ".join(rule_names)
        + " |",
        "|---|---:|---:|---:|---:|---|---|" + "---:|" * len(rule_names),
    ]
    for row in results:
        b_loss, (b_grid, b_lab), b_eps1 = best_of(row["sweep"])
        t_loss, (t_grid, _), _ = best_of(row["sweep"], lambda key: key[1] == "√(k/n)")
        cells = [f"{row['rules'][nm][1] / b_loss:.3f} ({row['rules'][nm][0]})" for nm in rule_names]
        lines.append(
            f"| {row['data']} | {row['n']} | {row['eps']:g} | {row['oracle']:.4g} | {b_loss:.4g} | "
            f"{b_grid[0]} {b_grid[1]}, {b_lab} = {b_eps1:.3g} | {t_grid[0]} {t_grid[1]} ({t_loss / b_loss:.3f}) | "
            + " | ".join(cells)
            + " |"
        )

    lines += [
        "",
        "## Resolution profile (best ε₁ candidate per grid): loss / best loss",
        "",
        "| data | n | ε | " + " | ".join(f"{kind[0]}{k}" for kind in KINDS for k in args.ks) + " |",
        "|---|---:|---:|" + "---:|" * (len(KINDS) * len(args.ks)),
    ]
    for row in results:
        b_loss = best_of(row["sweep"])[0]
        cells = [f"{best_of(row['sweep'], _on_grid((kind, k)))[0] / b_loss:.2f}" for kind in KINDS for k in args.ks]
        lines.append(f"| {row['data']} | {row['n']} | {row['eps']:g} | " + " | ".join(cells) + " |")

    for title, on_grid in [
        ("best grid of the sweep for each ε₁ candidate", None),
        ("on the proposed default grid", "proposed_key"),
    ]:
        if on_grid and not (results and on_grid in results[0]):
            continue
        lines += [
            "",
            f"## ε₁ profile, {title}: loss / best loss",
            "",
            "| data | n | ε | " + " | ".join(eps1_labels) + " |",
            "|---|---:|---:|" + "---:|" * len(eps1_labels),
        ]
        for row in results:
            b_loss = best_of(row["sweep"])[0]
            grid = None if on_grid is None else row.get(on_grid)
            cells = [
                f"{best_of(row['sweep'], _eps1_on(lab, on_grid is None, grid))[0] / b_loss:.2f}" for lab in eps1_labels
            ]
            lines.append(f"| {row['data']} | {row['n']} | {row['eps']:g} | " + " | ".join(cells) + " |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--housing", default=None, help="path to california_housing.csv")
    ap.add_argument("--quick", action="store_true", help="smaller sweep: 3 draws, fewer k, n and ε")
    ap.add_argument("--draws", type=int, default=None)
    ap.add_argument("--out", default=str(Path(__file__).parent.parent / "results" / "prior_rules.md"))
    args = ap.parse_args(argv)
    args.ks = [16, 64, 256, 1024] if args.quick else KS
    ns = [1_000, 10_000] if args.quick else NS
    epsilons = [0.1, 0.5, 2.0, 8.0] if args.quick else EPSILONS
    args.draws = args.draws or (3 if args.quick else 24)

    self_check()
    datasets = [load_conversions(max(ns)), load_counts()]
    if args.housing:
        datasets.insert(0, load_housing(args.housing))
    start = time.perf_counter()
    results = run(datasets, ns, epsilons, args.ks, args.draws)
    text = report(results, args, time.perf_counter() - start)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
