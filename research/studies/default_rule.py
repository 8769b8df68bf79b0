"""Which default configuration (mechanism and learning, from ε and n) should a user get without tuning?

Usage:
    python research/studies/default_rule.py [--results research/results] [--out research/results/default_rule.md]
        [--housing PATH]
    python research/studies/default_rule.py --results research/results/current \
        --out research/results/current/default_rule.md

Reads the privacy–utility benchmark's regression summaries (``utility_<data set>.json``
written by ``python -m labeldp_research utility``, every mechanism with the ``plain``, ``private`` and
``oracle`` learners) and replays candidate default rules on their cells. Nothing is
trained here: a rule picks, per (data set, ε), one (mechanism, learner) cell that the
benchmark already measured, exactly as the report's ``default`` column does.

A rule sees only what the labels party knows for free before it spends anything: the
release's ε and its number of rows n (public: the features party receives n rows; here
the rows the learner trains on). It thresholds the *scaled* ε

    ε_n = ε · (n / N0)^α,   N0 = 16 000 (the simulated sets' training rows),

so α = 0 is a rule on ε alone and α = 1/2 a rule on ε·√n, the signal-to-noise of a mean of
n privatized labels. Given ε_n: rr_on_bins below ``t_bins``; a middle mechanism
(``laplace``, ``staircase`` or ``rp_with_prior``) on [t_bins, t_unbiased); ``unbiased`` from ``t_unbiased``
on. The learner is always the features party's default (``private``: the previous
report found training the unbiased randomizer's release on every row worth 0.2 %, not a
second learning rule). (The domain enters every mechanism's noise through its
width, alike for all, so it does not separate them; the DP prior costs ε₁ of the release
before anything is chosen, so it is not free for choosing. With ``--housing`` the report
also replays a rule that knows the labels' distribution — the best a DP prior could
tell — and picks the mechanism with the least bias + noise/n: see default_rule.md.)

Per (data set, ε) a rule's regret is its mean test MSE over the best mean of every
mechanism × deployable learner (``plain``, ``private``; not ``oracle``), minus 1, and it
*meets the goal* when the gap is at most its own standard error (the tables' † rule).
Rules are ranked by the mean log regret over every data set and ε. The rule is fitted
with leave-one-data-set-out validation: for each data set, the rule chosen on the others
is scored on it, and the out-of-set regret is what the report leads with.

The adopted rule (``labeldp.release.defaults`` and the features party's default learning,
``labeldp_research.utility.default_learner``) is scored the same way beside them, and the
out-of-set refit is compared with it per data set (difference of mean log regret, mean ± SE
over the held-out sets).

Tables with the default learning only (``--learners private``, e.g. ``research/results/current/``,
made with the current learner) replay as they are: the best cell is then the best *private* cell.
The ranking by mean log regret does not depend on that reference (log(rule / best) = log rule −
log best, the same shift for every rule), so the fitted rules are the same; only the "met" count
(best or within one SE) is against the best private cell rather than the best of every learner.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from labeldp_research import report
from labeldp_research.utility import DEFAULT, RunResult

DATASETS = (
    "california_housing", "simulated_linear", "simulated_nonlinear", "criteo_like", "bounded_wide", "counts",
    "california_housing_small", "counts_small",
)
LEARNERS = ("plain", "private")
N0 = 16_000
EXPONENTS = (0.0, 0.25, 0.5)
NOISE_SE = 2.0
"""A gain under about two SE (over held-out sets) is noise: the adoption bar of records 0001, 0039-0041."""

MIDDLE = ("laplace", "staircase", "rp_with_prior")  # the middle band's mechanism
CUTS = (0.0, *(round(0.05 * 2 ** (k / 2), 4) for k in range(16)), math.inf)  # 0.05 … 9.05, geometric


@dataclass(frozen=True)
class Rule:
    t_bins: float
    t_unbiased: float
    additive: str
    alpha: float

    def scaled(self, eps: float, n: int) -> float:
        return eps * (n / N0) ** self.alpha

    def mechanism(self, eps: float, n: int) -> str:
        e = self.scaled(eps, n)
        if e < self.t_bins:
            return "rr_on_bins"
        return self.additive if e < self.t_unbiased else "unbiased"

    def learner(self, eps: float, n: int) -> str:
        return "private"

    def describe(self) -> str:
        var = "ε" if self.alpha == 0 else f"ε·(n/{N0})^{self.alpha:g}"
        parts = [f"rr_on_bins < {self.t_bins:g}"] if self.t_bins > 0 else []
        if self.t_unbiased > self.t_bins:
            parts.append(f"{self.additive} < {self.t_unbiased:g}")
        if not math.isinf(self.t_unbiased):
            parts.append("unbiased")
        return f"on {var}: " + " ≤ ".join(parts)


class AdoptedRule:
    """The library's own defaults, read from the services' modules."""

    def mechanism(self, eps: float, n: int) -> str:
        from labeldp.release.defaults import default_mechanism

        return default_mechanism("real", eps, n)

    def learner(self, eps: float, n: int) -> str:
        from labeldp_research.utility import default_learner

        return default_learner("real", eps, list(LEARNERS))

    def describe(self) -> str:
        return "adopted (labeldp.release.defaults; the features party's default learning)"


@dataclass(frozen=True)
class Data:
    result: RunResult
    n: int
    grid: tuple[float, ...]


@dataclass
class Score:
    log_regret: float  # mean over (data set, ε) of log(rule / best)
    met: int
    cells: int
    worst: tuple[float, str, float]  # (regret, data set, ε)


_STATS: dict[tuple[int, str, float, str], tuple[float, float] | None] = {}


def stats(result: RunResult, mech: str, eps: float, learner: str) -> tuple[float, float] | None:
    """(mean, standard error) of one (mechanism, ε, learner) test MSE; memoized (rules reread them)."""
    key = (id(result), mech, eps, learner)
    if key not in _STATS:
        v = result.values(mech, eps, "test_mse", learner)
        _STATS[key] = None if v.size < 2 else (float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)))
    return _STATS[key]


def best_of_field(result: RunResult, eps: float) -> tuple[float, str] | None:
    field = [(s[0], f"{m}/{lr}") for m in result.mechanisms if m != DEFAULT for lr in LEARNERS
             if (s := stats(result, m, eps, lr)) is not None]
    return min(field) if field else None


def learners_present(data: dict[str, Data]) -> list[str]:
    """The deployable learners the tables hold (the reference cell is the best of these)."""
    return [lr for lr in LEARNERS if any(lr in d.result.learners for d in data.values())]


def refit_vs_adopted(
    lodo: list[tuple[str, Rule, Score]], adopted: AdoptedRule, data: dict[str, Data]
) -> list[str]:
    """Per held-out data set: the rule fitted without it against the adopted rule, on its cells."""
    lines = [
        "## Refit against the adopted rule, out of set", "",
        "Per data set: the adopted rule and the rule fitted on the other data sets, scored on it. Δ = refit − "
        "adopted (mean log regret; negative: the refit is better). The noise line is the mean Δ over data sets "
        "± its standard error (std/√sets): a refit that is better by less than about two SE is not better "
        "than noise.", "",
        "| held out | adopted: regret, met | refit: rule | refit: regret, met | Δ log regret | Δ met |",
        "|---|---|---|---|---|---|",
    ]
    deltas, met_a, met_r, cells, reg_a, reg_r = [], 0, 0, 0, 0.0, 0.0
    for name, pick, held in lodo:
        mine = score(adopted, {name: data[name]})
        deltas.append(held.log_regret - mine.log_regret)
        lines.append(
            f"| `{name}` | {mine.log_regret:.4f}, {mine.met}/{mine.cells} | {pick.describe()} | "
            f"{held.log_regret:.4f}, {held.met}/{held.cells} | {deltas[-1]:+.4f} | {held.met - mine.met:+d} |"
        )
        met_a, met_r, cells = met_a + mine.met, met_r + held.met, cells + held.cells
        reg_a, reg_r = reg_a + mine.log_regret * mine.cells, reg_r + held.log_regret * held.cells
    se = float(np.std(deltas, ddof=1) / math.sqrt(len(deltas))) if len(deltas) > 1 else math.nan
    cells = max(1, cells)
    lines += [
        f"| **all** | **{reg_a / cells:.4f}, {met_a}/{cells}** | | **{reg_r / cells:.4f}, {met_r}/{cells}** | "
        f"**{reg_r / cells - reg_a / cells:+.4f}** | **{met_r - met_a:+d}** |",
        "",
        f"Noise: mean Δ over the {len(deltas)} held-out sets {float(np.mean(deltas)):+.4f} ± {se:.4f} (SE); "
        f"the refit is better on {sum(d < 0 for d in deltas)}, worse on {sum(d > 0 for d in deltas)}, "
        f"the same on {sum(d == 0 for d in deltas)} of them.",
        "",
    ]
    return lines


def score(rule: Rule | AdoptedRule, data: dict[str, Data]) -> Score:
    logs, met, worst = [], 0, (0.0, "", 0.0)
    for name, d in data.items():
        for eps in d.grid:
            best = best_of_field(d.result, eps)
            mine = stats(d.result, rule.mechanism(eps, d.n), eps, rule.learner(eps, d.n))
            if best is None or mine is None:
                continue
            logs.append(math.log(mine[0] / best[0]))
            met += (mine[0] - best[0]) <= mine[1]
            worst = max(worst, (mine[0] / best[0] - 1, name, eps))
    return Score(float(np.mean(logs)) if logs else math.inf, met, len(logs), worst)


def candidates(exponents: tuple[float, ...] = EXPONENTS) -> list[Rule]:
    rules = []
    for alpha in exponents:
        for t_bins, t_unbiased in itertools.product(CUTS, CUTS):
            if t_unbiased < t_bins:
                continue
            for additive in MIDDLE:
                if t_unbiased == t_bins and additive != MIDDLE[0]:
                    continue  # no middle band: one rule is enough
                rules.append(Rule(t_bins, t_unbiased, additive, alpha))
    return rules


def fit(rules: list[Rule], data: dict[str, Data]) -> Rule:
    """The rule with the lowest mean log regret on ``data`` (ties: more cells met, then the simpler α).

    Thresholds between two measured ε make the same picks, so many rules tie; the middle one
    of the tied rules (ordered by their thresholds) is taken rather than the lowest cut.
    """
    scores = {r: score(r, data) for r in rules}
    keys = {r: (round(s.log_regret, 12), -s.met, r.alpha) for r, s in scores.items()}
    best = min(keys.values())
    ties = sorted((r for r in rules if keys[r] == best), key=lambda r: (r.additive, r.t_bins, r.t_unbiased))
    same = [r for r in ties if r.additive == ties[0].additive]
    return same[len(same) // 2]


def load(results_dir: Path, names: Sequence[str] = DATASETS) -> dict[str, Data]:
    """The tables of ``names`` in ``results_dir`` (a missing or quick one skipped, said on stderr)."""
    out = {}
    for name in names:
        path = results_dir / f"utility_{name}.json"
        if not path.is_file():
            print(f"[{name}] no {path}: skipped", file=sys.stderr)
            continue
        doc = json.loads(path.read_text())
        if doc.get("quick") or doc.get("trials", 0) < 3:
            print(f"[{name}] {path} is a quick run: skipped", file=sys.stderr)
            continue
        result = report.result_from_summary(doc)
        grid = tuple(e for e in result.epsilons if not math.isinf(e))
        out[name] = Data(result, int(doc["n_train_fit"]), grid)
    return out


def _worst(s: Score, with_set: bool = True) -> str:
    if not s.worst[1]:
        return "—"
    where = f"{s.worst[1]}, ε={s.worst[2]:g}" if with_set else f"ε={s.worst[2]:g}"
    return f"+{s.worst[0]:.1%} ({where})"


def leave_one_out(
    rules: list[Rule], data: dict[str, Data]
) -> list[tuple[str, Rule, Score]]:
    out = []
    for name in data:
        rest = {k: v for k, v in data.items() if k != name}
        pick = fit(rules, rest)
        out.append((name, pick, score(pick, {name: data[name]})))
    return out


def per_eps_table(rule: Rule | AdoptedRule, data: dict[str, Data]) -> list[str]:
    grid = sorted({e for d in data.values() for e in d.grid})
    lines = ["| ε | " + " | ".join(f"`{n}` (n={d.n:,})" for n, d in data.items()) + " |",
             "|---|" + "---|" * len(data)]
    for eps in grid:
        cells = []
        for d in data.values():
            best = best_of_field(d.result, eps)
            mech, learner = rule.mechanism(eps, d.n), rule.learner(eps, d.n)
            mine = stats(d.result, mech, eps, learner)
            if best is None or mine is None:
                cells.append("—")
                continue
            ok = " ✓" if mine[0] - best[0] <= mine[1] else f" (best `{best[1]}`)"
            cells.append(f"`{mech}`/`{learner}` {mine[0] / best[0] - 1:+.1%}{ok}")
        lines.append(f"| {eps:g} | " + " | ".join(cells) + " |")
    return lines


PRIOR_MECHANISMS = ("rr_on_bins", "rp_with_prior", "laplace", "staircase", "gaussian", "exponential", "unbiased")
NOISE_WEIGHTS = (0.0, *(10 ** (k / 2) for k in range(13)))  # c of B + c·V/n: 1 … 10⁶


def label_noise_parts(data: dict[str, Data], housing: Path) -> list[tuple[str, float, dict[str, tuple[float, float]]]]:
    """Per (data set, ε, mechanism): (B, V) of its debiased labels on trial 0's TRUE training labels.

    ỹ = the law's debiased label, t = its target map: B = mean (t(y) − y)², what no learner removes (bins,
    projection, linearization); V = mean (ỹ − t(y))², the noise a learner averages over n rows. Computed with
    the true label distribution, so a DP prior (which only approximates it, at a cost of ε₁) can do no better
    than this at choosing.
    """
    from labeldp.epsilon import exact_micro
    from labeldp.learning.debiasing import label_law
    from labeldp.release.randomizer import randomize
    from labeldp_research import utility

    plans = utility.default_plans(housing=housing)
    out = []
    for name, d in data.items():
        bench = plans[name].load()
        n_test = round(bench.n * 0.2)
        train, _, _ = utility.trial_split(bench.n, n_test, bench.n - n_test, 0, name, 0)
        y = bench.labels[train]
        for eps in d.grid:
            parts = {}
            for mech in PRIOR_MECHANISMS:
                if mech not in d.result.mechanisms or stats(d.result, mech, eps, "private") is None:
                    continue
                released = randomize(y, bench.domain, mech, exact_micro(eps), np.random.default_rng(0))
                law = label_law(released.mechanism)
                target = law.target(y)
                parts[mech] = (
                    float(np.mean((target - y) ** 2)),
                    float(np.mean((law.debias_labels(released.labels) - target) ** 2)),
                )
            out.append((name, eps, parts))
    return out


def prior_informed_section(data: dict[str, Data], housing: Path) -> list[str]:
    """Would the label distribution (what a DP prior estimates) choose better than ε alone? Rule: the mechanism
    with the least B + c·V/n (the bias no learner removes plus the noise it averages over n rows), learning
    `private`; c (one number) fitted leave-one-data-set-out like the ε rules."""
    parts = label_noise_parts(data, housing)

    def evaluate(c: float, names: set[str]) -> Score:
        logs, met, cells, worst = [], 0, 0, (0.0, "", 0.0)
        for name, eps, p in parts:
            if name not in names or not p:
                continue
            d = data[name]
            best = best_of_field(d.result, eps)
            pick = min(p, key=lambda m: p[m][0] + c * p[m][1] / d.n)
            mine = stats(d.result, pick, eps, "private")
            if best is None or mine is None:
                continue
            logs.append(math.log(mine[0] / best[0]))
            met += (mine[0] - best[0]) <= mine[1]
            cells += 1
            worst = max(worst, (mine[0] / best[0] - 1, name, eps))
        return Score(float(np.mean(logs)) if logs else math.inf, met, cells, worst)

    names = set(data)
    lines = [
        "", "## With the label distribution: the least bias + noise/n", "",
        "Could what a DP prior tells (the labels' distribution) pick better than ε alone? For each mechanism, on "
        "the TRUE training labels of trial 0 (so an upper bound on what a DP prior could do, before its ε₁): B = "
        "mean (t(y) − y)² of its law's target map (what no learner removes) and V = mean (ỹ − t(y))² of its "
        "debiased labels (the noise a learner averages). Rule: the least B + c·V/n, learning `private`; c fitted "
        "leave one data set out over c ∈ {0, 1, 10^0.5, …, 10⁶}.", "",
        "| held out | c fitted without it | out-of-set mean log regret | met | worst |", "|---|---|---|---|---|",
    ]
    total, met, cells = 0.0, 0, 0
    for name in data:
        c = min(NOISE_WEIGHTS, key=lambda c: evaluate(c, names - {name}).log_regret)
        s = evaluate(c, {name})
        lines.append(f"| `{name}` | {c:g} | {s.log_regret:.4f} | {s.met}/{s.cells} | {_worst(s, False)} |")
        total, met, cells = total + s.log_regret * s.cells, met + s.met, cells + s.cells
    lines.append(f"| **all** | | **{total / max(1, cells):.4f}** | **{met}/{cells}** | |")
    best_c = min(NOISE_WEIGHTS, key=lambda c: evaluate(c, names).log_regret)
    s = evaluate(best_c, names)
    lines += ["", f"In set (c = {best_c:g}, fitted on all sets): mean log regret {s.log_regret:.4f}, met "
              f"{s.met}/{s.cells}, worst {_worst(s)}."]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=Path("research/results"))
    parser.add_argument("--out", type=Path, default=Path("research/results/default_rule.md"))
    parser.add_argument("--housing", type=Path, help="california_housing.csv: also replay the prior-informed rule")
    args = parser.parse_args(argv)
    data = load(args.results)
    if not data:
        print("no regression summaries found", file=sys.stderr)
        return 2
    rules = candidates()
    eps_only = [r for r in rules if r.alpha == 0]
    adopted = AdoptedRule()
    trials = sorted({d.result.trials for d in data.values()})
    present = learners_present(data)
    reference = " × ".join(("mechanism", "learner (" + ", ".join(f"`{lr}`" for lr in present) + ")"))
    lines = [
        "# Default configuration: candidate rules replayed on the benchmark's cells",
        "",
        f"Command: `python research/studies/default_rule.py --results {args.results}"
        + (" --housing PATH`" if args.housing else "`"),
        "",
        f"- Data sets: {', '.join(f'`{n}` (n={d.n:,}, {d.result.trials} trials)' for n, d in data.items())}; "
        f"ε ∈ {{{', '.join(f'{e:g}' for e in sorted({e for d in data.values() for e in d.grid}))}}}.",
        f"- {len(rules)} candidate rules on the scaled ε_n = ε·(n/{N0})^α, "
        f"α ∈ {{{', '.join(f'{a:g}' for a in EXPONENTS)}}}"
        " (α = 0: ε alone): rr_on_bins below t_bins, laplace, staircase or rp_with_prior up to t_unbiased, "
        "unbiased above; the features party's default learning (`private`).",
        f"- Regret: the rule's mean test MSE / the best mean of every {reference} − 1. "
        f"Met: the gap is within the rule's own standard error (std/√trials, {'/'.join(map(str, trials))} trials),"
        " the † rule of the tables.",
        *(["- These tables hold the default learning (`private`) only: the best cell is the best `private` cell. "
           "The ranking by mean log regret does not depend on that reference (the same shift for every rule); "
           "the met count is against the best `private` cell, not the best of every learner."]
          if present == ["private"] else []),
        f"- Written {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}; nothing trained (1-minute load "
        f"average {os.getloadavg()[0]:.1f}; each table's header has its own).",
        "",
    ]

    if len(data) > 1:
        lines += [
            "## Out of set: leave one data set out",
            "",
            "For each data set, the rule fitted on the OTHER data sets, scored on it (the regret a user with a data "
            "set like none of ours should expect). Beside it the same for rules on ε alone (α = 0), and the adopted "
            "rule (fitted on all sets of the tables it was adopted from: in set for every row there, out of sample "
            "on tables computed after it).",
            "",
            "| held out | rule fitted without it | out-of-set mean log regret | met | worst | ε-only rule: "
            "regret, met | adopted: regret, met |",
            "|---|---|---|---|---|---|---|",
        ]
        lodo = leave_one_out(rules, data)
        lodo_eps = {name: s for name, _, s in leave_one_out(eps_only, data)}
        totals = [0.0, 0, 0, 0.0, 0, 0.0, 0]
        for name, pick, held in lodo:
            e = lodo_eps[name]
            mine = score(adopted, {name: data[name]})
            lines.append(
                f"| `{name}` | {pick.describe()} | {held.log_regret:.4f} | {held.met}/{held.cells} | "
                f"{_worst(held, False)} | {e.log_regret:.4f}, {e.met}/{e.cells} | "
                f"{mine.log_regret:.4f}, {mine.met}/{mine.cells} |"
            )
            totals[0] += held.log_regret * held.cells
            totals[1] += held.met
            totals[2] += held.cells
            totals[3] += e.log_regret * e.cells
            totals[4] += e.met
            totals[5] += mine.log_regret * mine.cells
            totals[6] += mine.met
        cells = max(1, int(totals[2]))
        lines.append(
            f"| **all** | | **{totals[0] / cells:.4f}** | **{totals[1]}/{cells}** | | "
            f"{totals[3] / cells:.4f}, {totals[4]}/{cells} | {totals[5] / cells:.4f}, {totals[6]}/{cells} |"
        )
        lines.append("")
        lines += refit_vs_adopted(lodo, adopted, data)

    scored = sorted(((score(r, data), r) for r in rules), key=lambda sr: (sr[0].log_regret, -sr[0].met, sr[1].alpha))
    lines += ["## In set: best rules on all data sets", "",
              "| rank | rule | mean log regret | met | worst |", "|---|---|---|---|---|"]

    def row(label: str, s: Score, desc: str) -> str:
        return f"| {label} | {desc} | {s.log_regret:.4f} | {s.met}/{s.cells} | {_worst(s)} |"

    for i, (s, r) in enumerate(scored[:8], 1):
        lines.append(row(str(i), s, r.describe()))
    chosen = fit(rules, data)
    lines.append(row("1", score(chosen, data), "fitted on all sets (middle of the tied rules): " + chosen.describe()))
    for label, keep in (("best on ε alone", lambda r: r.alpha == 0),):
        found = next(((i, sr) for i, sr in enumerate(scored, 1) if keep(sr[1])), None)
        if found:
            lines.append(row(str(found[0]), found[1][0], f"{label}: {found[1][1].describe()}"))
    lines.append(row("—", score(adopted, data), adopted.describe()))
    previous = Rule(0.5, 1.0, "staircase", 0.0)
    lines.append(row("—", score(previous, data), "session-2 default: " + previous.describe()))
    lines += ["", "## Per data set: the adopted rule (in set)", "",
              "| data set | mean log regret | met | worst |", "|---|---|---|---|"]
    for name, d in data.items():
        s = score(adopted, {name: d})
        lines.append(f"| `{name}` | {s.log_regret:.4f} | {s.met}/{s.cells} | {_worst(s, False)} |")
    lines += ["", f"## Per ε: the adopted rule against the best of every {reference}", "",
              "Each cell: the rule's pick, its regret, ✓ when the gap is within its standard error.", ""]
    lines += per_eps_table(adopted, data)
    lines += ["", "## Per ε: the rule fitted on all sets (in set)", "", f"{chosen.describe()}.", ""]
    lines += per_eps_table(chosen, data)
    if args.housing is not None:
        lines += prior_informed_section(data, args.housing)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
