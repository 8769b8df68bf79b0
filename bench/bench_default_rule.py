"""Which default configuration (mechanism and learning, by ε) should a user get without tuning?

Usage:
    python bench/bench_default_rule.py [--results bench/results] [--out bench/results/default_rule.md]

Reads the privacy–utility benchmark's regression summaries (``utility_<data set>.json``
written by ``labeldp bench utility``: 10 trials, 13 ε, every mechanism with the
``plain`` and ``private`` learners) and replays candidate default rules on their cells.
Nothing is trained here: a rule picks, per ε, one (mechanism, learner) cell that the
benchmark already measured, exactly as the report's ``default`` column does.

A rule is a few public thresholds on ε (the label type is real):
  rr_on_bins below ``t_bins``; an additive mechanism (``laplace`` or ``staircase``) on
  [t_bins, t_unbiased); ``unbiased`` from ``t_unbiased`` on; and the learner ``plain``
  (every row, last epoch) instead of ``private`` (held-out selection) for ``unbiased``
  from ``t_all_rows`` on.

Per (data set, ε) the rule's regret is its mean test MSE over the best mean of every
mechanism × deployable learner (``plain``, ``private``; not ``oracle``), minus 1, and it
*meets the goal* when the gap is at most its own standard error (the tables' † rule).
Rules are ranked by the mean log regret over every data set and ε. Because the rule is
chosen on the very cells it is scored on, the table also reports a leave-one-data-set-out
check: the rule chosen on the other data sets, scored on the held-out one.

The adopted rule (``labels_party.defaults`` and the features party's default learning,
``labeldp.benchmarks.utility.default_learner``) is scored the same way beside the winner.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from labeldp.benchmarks import report
from labeldp.benchmarks.utility import DEFAULT, RunResult

DATASETS = ("california_housing", "simulated_linear", "simulated_nonlinear", "criteo_like")
LEARNERS = ("plain", "private")
GRID = (0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)


@dataclass(frozen=True)
class Rule:
    t_bins: float
    t_unbiased: float
    additive: str
    t_all_rows: float

    def mechanism(self, eps: float) -> str:
        if eps < self.t_bins:
            return "rr_on_bins"
        return self.additive if eps < self.t_unbiased else "unbiased"

    def learner(self, eps: float) -> str:
        return "plain" if self.mechanism(eps) == "unbiased" and eps >= self.t_all_rows else "private"

    def describe(self) -> str:
        parts = [f"rr_on_bins < {self.t_bins:g}"]
        if self.t_unbiased > self.t_bins:
            parts.append(f"{self.additive} < {self.t_unbiased:g}")
        parts.append("unbiased")
        tail = "" if math.isinf(self.t_all_rows) else f"; every row from {self.t_all_rows:g}"
        return " ≤ ".join(parts) + tail


class AdoptedRule:
    """The library's own defaults, read from the services' modules."""

    def mechanism(self, eps: float) -> str:
        from labels_party.defaults import default_mechanism

        return default_mechanism("real", eps)

    def learner(self, eps: float) -> str:
        from labeldp.benchmarks.utility import default_learner

        return default_learner("real", eps, list(LEARNERS))

    def describe(self) -> str:
        return "adopted (labels_party.defaults; the features party's default learning)"


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
        _STATS[key] = _stats(result, mech, eps, learner)
    return _STATS[key]


def _stats(result: RunResult, mech: str, eps: float, learner: str) -> tuple[float, float] | None:
    v = result.values(mech, eps, "test_mse", learner)
    if v.size < 2:
        return None
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size))


def best_of_field(result: RunResult, eps: float) -> tuple[float, str] | None:
    field = [(s[0], f"{m}/{lr}") for m in result.mechanisms if m != DEFAULT for lr in LEARNERS
             if (s := stats(result, m, eps, lr)) is not None]
    return min(field) if field else None


def score(rule, results: dict[str, RunResult]) -> Score:
    logs, met, worst = [], 0, (0.0, "", 0.0)
    for name, result in results.items():
        for eps in GRID:
            best = best_of_field(result, eps)
            mine = stats(result, rule.mechanism(eps), eps, rule.learner(eps))
            if best is None or mine is None:
                continue
            logs.append(math.log(mine[0] / best[0]))
            met += (mine[0] - best[0]) <= mine[1]
            worst = max(worst, (mine[0] / best[0] - 1, name, eps))
    return Score(float(np.mean(logs)) if logs else math.inf, met, len(logs), worst)


def candidates() -> list[Rule]:
    cuts = (0.05, *GRID[1:], math.inf)  # t = 0.05: never below; inf: never above
    rules = []
    for t_bins, t_unbiased in itertools.product(cuts, cuts):
        if t_unbiased < t_bins:
            continue
        for additive in ("laplace", "staircase"):
            if t_unbiased == t_bins and additive == "staircase":
                continue  # no additive band: one rule is enough
            for t_all in (*GRID, math.inf):
                rules.append(Rule(t_bins, t_unbiased, additive, t_all))
    return rules


def load(results_dir: Path) -> dict[str, RunResult]:
    out = {}
    for name in DATASETS:
        path = results_dir / f"utility_{name}.json"
        if not path.is_file():
            print(f"[{name}] no {path}: skipped", file=sys.stderr)
            continue
        doc = json.loads(path.read_text())
        if doc.get("quick") or doc.get("trials", 0) < 10:
            print(f"[{name}] {path} is not a full-protocol run: skipped", file=sys.stderr)
            continue
        out[name] = report.result_from_summary(doc)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=Path("bench/results"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/default_rule.md"))
    args = parser.parse_args(argv)
    results = load(args.results)
    if not results:
        print("no full-protocol regression summaries found", file=sys.stderr)
        return 2
    rules = candidates()
    scored = sorted(((score(r, results), r) for r in rules), key=lambda sr: (sr[0].log_regret, -sr[0].met))
    adopted = AdoptedRule()
    lines = [
        "# Default configuration: candidate rules replayed on the benchmark's cells",
        "",
        f"Command: `python bench/bench_default_rule.py --results {args.results}`",
        "",
        f"- Data sets (full protocol, 10 trials): {', '.join(f'`{n}`' for n in results)}; "
        f"ε ∈ {{{', '.join(f'{e:g}' for e in GRID)}}}.",
        f"- {len(rules)} candidate rules: rr_on_bins below t_bins, laplace or staircase up to t_unbiased, "
        "unbiased above;"
        " learner `plain` (every row) instead of `private` (held-out private selection) for unbiased from t_all_rows.",
        "- Regret: rule's mean test MSE / best mean of every mechanism × learner (`plain`, `private`) − 1."
        " Met: gap ≤ the rule's own standard error (std/√10), the † rule of the tables.",
        f"- Written {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}.",
        "",
        "## Best rules (all data sets)",
        "",
        "| rank | rule | mean log regret | met | worst |",
        "|---|---|---|---|---|",
    ]

    def row(label: str, s: Score, desc: str) -> str:
        w = f"+{s.worst[0]:.1%} ({s.worst[1]}, ε={s.worst[2]:g})" if s.worst[1] else "—"
        return f"| {label} | {desc} | {s.log_regret:.4f} | {s.met}/{s.cells} | {w} |"

    for i, (s, r) in enumerate(scored[:10], 1):
        lines.append(row(str(i), s, r.describe()))
    keep = next((sr for sr in scored if math.isinf(sr[1].t_all_rows)), None)
    if keep:
        lines.append(row(f"{scored.index(keep) + 1}", keep[0], "best with the default learning: " + keep[1].describe()))
    lines.append(row("—", score(adopted, results), adopted.describe()))
    session1 = Rule(0.3, 0.3, "laplace", math.inf)
    lines.append(row("—", score(session1, results), "session-1 default: " + session1.describe() + ", always `private`"))
    lines += [
        "",
        "## Per data set: the adopted rule",
        "",
        "| data set | mean log regret | met | worst |",
        "|---|---|---|---|",
    ]
    for name, result in results.items():
        s = score(adopted, {name: result})
        w = f"+{s.worst[0]:.1%} (ε={s.worst[2]:g})" if s.worst[1] else "—"
        lines.append(f"| `{name}` | {s.log_regret:.4f} | {s.met}/{s.cells} | {w} |")
    lines += ["", "## Per ε: the adopted rule against the best of every mechanism × learner", "",
              "Each cell: the rule's pick, its regret, ✓ when the gap is within its standard error.", "",
              "| ε | " + " | ".join(f"`{n}`" for n in results) + " |", "|---|" + "---|" * len(results)]
    for eps in GRID:
        cells = []
        for result in results.values():
            best = best_of_field(result, eps)
            mech, learner = adopted.mechanism(eps), adopted.learner(eps)
            mine = stats(result, mech, eps, learner)
            if best is None or mine is None:
                cells.append("—")
                continue
            ok = " ✓" if mine[0] - best[0] <= mine[1] else f" (best `{best[1]}`)"
            cells.append(f"`{mech}`/`{learner}` {mine[0] / best[0] - 1:+.1%}{ok}")
        lines.append(f"| {eps:g} | " + " | ".join(cells) + " |")
    if len(results) > 1:
        lines += ["", "## Leave one data set out", "",
                  "The rule with the lowest mean log regret on the other data sets, scored on the held-out one.", "",
                  "| held out | rule chosen without it | its mean log regret there | met there | adopted rule there |",
                  "|---|---|---|---|---|"]
        for name in results:
            rest = {k: v for k, v in results.items() if k != name}
            pick = min(rules, key=lambda r: score(r, rest).log_regret)
            held = score(pick, {name: results[name]})
            mine = score(adopted, {name: results[name]})
            lines.append(f"| `{name}` | {pick.describe()} | {held.log_regret:.4f} | {held.met}/{held.cells} |"
                         f" {mine.log_regret:.4f}, {mine.met}/{mine.cells} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
