"""What no feature-oblivious default can do: the same releases, other feature tables, other winners.

Usage:
    python research/studies/feature_blind_limit.py --housing PATH
        [--variants full,noise=1,noise=2,without=MedInc+Latitude+Longitude+ocean_proximity]
        [--mechanisms a,b] [--epsilons 0.5,1,2] [--trials 10] [--threads 1]
        [--out research/results/feature_blind_limit.md]

Issue 12 asks for a default configuration, chosen from what the labels party privately knows
(n, ε, the domain, the DP prior), that is best or within one standard error at every ε on every
data set. The labels party never sees the features, so whatever it knows is a function of the
labels alone. This program keeps the labels of California Housing and changes only the feature
table the features party joins them to (``full``: the benchmark's table; ``without=A+B``: the same
table without columns A and B; ``noise=S``: every numeric column plus Gaussian noise of S of its
standard deviations). The runner is called with the Housing plan itself, so every variant gets the
same splits, the same training seeds and, mechanism by mechanism, **the very same privatized
labels**: any rule on (n, ε, domain, prior) makes the same pick in every variant.

Each ε then lists, per variant, the best (mechanism, learner) of ``plain`` and ``private`` and the
pairs that meet the goal there (gap to the best at most the pair's own standard error, the rule of
``research/results/default_rule.md``). Where no pair meets it in every variant, no rule that picks the
mechanism and the learning from the labels side can meet item 2's goal at that ε; how far the best
such compromise stays from each variant's best is the price, shown beside the adopted rule's (`auto`)
regret. The summary's last column asks the narrower question: with the learning fixed to the default,
which mechanisms meet the goal among the ``private`` cells of every variant.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from labeldp.release.defaults import default_mechanism
from labeldp_research import utility
from labeldp_research.datasets import BenchmarkData

MECHANISMS = ("rr_on_bins", "rp_with_prior", "laplace", "staircase", "unbiased")
LEARNERS = ("plain", "private")
Pair = tuple[str, str]  # (mechanism, learner)


def variant(data: BenchmarkData, spec: str, seed: int = 0) -> BenchmarkData:
    """The same rows and labels with another feature table (see the module docstring for ``spec``)."""
    if spec == "full":
        return data
    kind, _, arg = spec.partition("=")
    if kind == "without":
        drop = arg.split("+")
        unknown = [c for c in drop if c not in data.table.column_names or c == "id"]
        if unknown:
            raise SystemExit(f"unknown feature column(s): {', '.join(unknown)}")
        return dataclasses.replace(
            data, table=data.table.drop(drop), categorical=[c for c in data.categorical if c not in drop]
        )
    if kind == "noise":
        scale = float(arg)
        rng = np.random.default_rng(seed)
        columns = {}
        for name in data.table.column_names:
            column = data.table.column(name)
            if name != "id" and name not in data.categorical and pa.types.is_floating(column.type):
                x = column.to_numpy().astype(np.float64)
                x = x + scale * x.std() * rng.standard_normal(x.size)
                columns[name] = pa.array(x)
            else:
                columns[name] = column
        return dataclasses.replace(data, table=pa.table(columns))
    raise SystemExit(f"unknown variant {spec!r}: full, without=A+B or noise=S")


def summarize(result: utility.RunResult, mechanisms: list[str], eps: float) -> dict[Pair, tuple[float, float]]:
    """(mean, SE) of the test MSE of every (mechanism, learner) at ε."""
    out = {}
    for mech in mechanisms:
        for learner in LEARNERS:
            values = result.values(mech, eps, "test_mse", learner)
            if values.size:
                out[(mech, learner)] = (float(values.mean()), float(values.std(ddof=1) / math.sqrt(values.size)))
    return out


def best_pair(cells: dict[Pair, tuple[float, float]]) -> Pair:
    return min(cells, key=lambda pair: cells[pair][0])


def meets(cells: dict[Pair, tuple[float, float]], pair: Pair) -> bool:
    best = min(mean for mean, _ in cells.values())
    mean, se = cells[pair]
    return mean - best <= se


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--housing", type=Path, required=True, help="california_housing.csv")
    parser.add_argument("--variants", default="full,noise=1,noise=2,without=MedInc+Latitude+Longitude+ocean_proximity")
    parser.add_argument("--mechanisms", default=",".join(MECHANISMS))
    parser.add_argument("--epsilons", default="0.5,1,2")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache", type=Path, default=Path("bench/cache"))
    parser.add_argument("--out", type=Path, default=Path("research/results/feature_blind_limit.md"))
    args = parser.parse_args(argv)
    plan = utility.default_plans(housing=args.housing)["california_housing"]
    base = plan.load()
    mechanisms = args.mechanisms.split(",")
    epsilons = [float(e) for e in args.epsilons.split(",")]
    specs = args.variants.split(",")
    learners = utility.learners_for("regression", list(LEARNERS))
    started = time.perf_counter()
    results = {}
    for spec in specs:
        data = variant(base, spec)
        results[spec] = utility.run_utility(
            plan, data=data, trials=args.trials, epsilons=epsilons, mechanisms=mechanisms, learners=learners,
            cache_dir=args.cache, device="cpu", threads=args.threads,
            progress=tagged(spec),
        )
    doc = render(args, results, specs, mechanisms, epsilons, time.perf_counter() - started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(doc)
    print(doc)
    return 0


def tagged(spec: str) -> Callable[[str], None]:
    """The runner's progress lines, prefixed with the variant."""

    def say(line: str) -> None:
        print(f"[{spec}] {line}", flush=True)

    return say


def render(
    args: argparse.Namespace, results: dict[str, utility.RunResult], specs: list[str], mechanisms: list[str],
    epsilons: list[float], seconds: float,
) -> str:
    trials = args.trials
    machine = utility.environment("cpu")
    lines = [
        "# The same release, other features: what a feature-oblivious default cannot do",
        "",
        f"Command: `python research/studies/feature_blind_limit.py --housing PATH --variants {args.variants} "
        f"--mechanisms {args.mechanisms} --epsilons {args.epsilons} --trials {trials} --threads {args.threads}`",
        "",
        "- Labels: California Housing's (the benchmark's `california_housing` plan: splits, seeds, training recipe), "
        "identical in every variant, and so is every release: the labels party's n, ε, domain and DP prior are the "
        "same, and any rule on them picks the same (mechanism, learner) in every variant.",
        "- Variants (the features party's table): "
        + "; ".join(f"`{s}`" for s in specs)
        + " (`without=A+B`: those columns left out; `noise=S`: S standard deviations of Gaussian noise added to "
        "every numeric column).",
        f"- Test MSE, mean ± SE over {trials} trials, learners `plain` and `private` (the default learning). "
        "✓: meets item 2's goal in that variant (gap to the variant's best ≤ the pair's own SE).",
        f"- Machine: {machine['cpu']}, {machine['cores']} cores (torch threads {args.threads}); "
        f"torch {machine['torch']}; labeldp commit `{machine['labeldp_commit']}`; computing every cell took "
        f"{sum(r.compute_seconds for r in results.values()):.0f} s (this invocation {seconds:.0f} s). "
        f"Written {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}.",
        "",
    ]
    verdicts = []
    summary = [
        "## Summary",
        "",
        "| ε | best pair per variant | pairs that meet the goal in every variant | best compromise: its worst regret "
        "| the default (`auto`/private): its worst regret | the learning fixed to `private`: mechanisms that meet "
        "the goal among `private` cells in every variant |",
        "|---|---|---|---|---|---|",
    ]
    for eps in epsilons:
        cells = {s: summarize(results[s], mechanisms, eps) for s in specs}
        pairs = [p for p in cells[specs[0]] if all(p in cells[s] for s in specs)]
        auto = (default_mechanism_for(results[specs[0]], eps), "private")
        lines += [f"## ε = {eps:g}", "", "| mechanism | learner | " + " | ".join(f"`{s}`" for s in specs) + " |",
                  "|---|---|" + "---|" * len(specs)]
        for pair in pairs:
            row = []
            for s in specs:
                mean, se = cells[s][pair]
                best = min(m for m, _ in cells[s].values())
                mark = " ✓" if meets(cells[s], pair) else f" (+{100 * (mean / best - 1):.1f} %)"
                row.append(f"{mean:.4f} ± {se:.4f}{mark}")
            tag = " (the default, `auto`)" if pair == auto else ""
            lines.append(f"| `{pair[0]}`{tag} | {pair[1]} | " + " | ".join(row) + " |")
        both = [p for p in pairs if all(meets(cells[s], p) for s in specs)]
        worst = {p: max(cells[s][p][0] / min(m for m, _ in cells[s].values()) - 1 for s in specs) for p in pairs}
        compromise = min(pairs, key=lambda p: worst[p])
        verdict = (
            f"meets the goal in every variant: {', '.join(f'`{m}`/{lr}' for m, lr in both)}"
            if both
            else f"**no pair meets the goal in every variant**; the best compromise, `{compromise[0]}`/"
            f"{compromise[1]}, is {100 * worst[compromise]:.1f} % above the best in its worse variant"
        )
        lines += ["", f"ε = {eps:g}: {verdict}; the default (`{auto[0]}`/private) is "
                  + ", ".join(f"{100 * (cells[s][auto][0] / min(m for m, _ in cells[s].values()) - 1):+.1f} % in "
                              f"`{s}`" for s in specs if auto in cells[s]) + ".", ""]
        verdicts.append((eps, bool(both)))
        fixed = {s: {p: v for p, v in cells[s].items() if p[1] == "private"} for s in specs}
        private_only = [p[0] for p in fixed[specs[0]] if all(meets(fixed[s], p) for s in specs)]
        bests = ", ".join(f"`{'/'.join(best_pair(cells[s]))}`" for s in specs)
        default_worst = max(cells[s][auto][0] / min(m for m, _ in cells[s].values()) - 1 for s in specs)
        summary.append(
            f"| {eps:g} | {bests} | {', '.join(f'`{m}/{lr}`' for m, lr in both) or 'none'} "
            f"| `{compromise[0]}/{compromise[1]}` {100 * worst[compromise]:+.1f} % | {100 * default_worst:+.1f} % "
            f"| {', '.join(f'`{m}`' for m in private_only) or 'none'} |"
        )
    failed = [f"{e:g}" for e, ok in verdicts if not ok]
    lines[lines.index("## ε = " + f"{epsilons[0]:g}"):lines.index("## ε = " + f"{epsilons[0]:g}")] = [*summary, ""]
    lines += [
        "## Verdict",
        "",
        (f"At ε ∈ {{{', '.join(failed)}}} no (mechanism, learner) is best or within one SE in every feature table "
         "although the release is the same: no rule that picks both from what the labels party knows can meet "
         "item 2's goal there. The last column of the summary says whether a mechanism alone, with the learning "
         "fixed to the default, could."
         if failed else "Every ε has a pair that meets the goal in every variant."),
        "",
    ]
    return "\n".join(lines)


def default_mechanism_for(result: utility.RunResult, eps: float) -> str:
    """What ``auto`` resolves to for this release (n training rows, ε)."""
    return default_mechanism("real", eps, result.n_train_fit)


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
