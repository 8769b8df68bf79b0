"""Does ``auto``'s tail rule (record 0025) hold at full size? Its sets had 1 600–2 400 rows; fitted again with n.

Usage:
    python research/studies/tail_rule_size.py --housing PATH [--datasets california_housing,simulated_nonlinear]
        [--trials 5] [--epochs 20] [--epsilons 0.5,1,2] [--base research/results/tail_rule.json]
        [--out research/results/tail_rule_size]

Record 0025 was fitted leave one data set out on six small sets (``tail_rule.py``: 1 600–2 400 release rows,
where the default learning often falls back to the release's private mean, which RPWithPrior's clipped
interval pulls off). This study measures the same two arms (RPWithPrior and RR-on-Bins on the same DP prior,
the default learning, same split and seed, ``tail_rule.measure``) on full-size sets, adds the small sets' rows
of ``--base`` (``tail_rule.json``, unchanged), and replays rules that switch where ``clip > τ`` (τ stays
0.12) and the release's rows n (public) are below N. Score = mean log(test MSE / the band's pick's), lower is
better. LODO: the rule with the best score on the other sets (ties: the largest N, the rule closest to
record 0025), scored on the held-out set against today's rule (``clip>0.12``); it wins or ties there when its
held-out difference is ≤ 0 or within one SE. Writes ``<out>.json`` and ``<out>.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import tail_rule

from labeldp.release.defaults import TAIL_CLIP_ABOVE
from labeldp_research import utility

ARMS = ("rp_with_prior", "rr_on_bins")
ROWS_BELOW = (math.inf, 24_000, 12_000, 6_000, 3_000)  # largest first: ties go to the rule closest to 0025
TODAY = f"clip>{TAIL_CLIP_ABOVE:g}&n<inf"
BAND = "band"
CANDIDATES = [BAND] + [f"clip>{TAIL_CLIP_ABOVE:g}&n<{n:g}" for n in ROWS_BELOW]  # τ stays record 0025's
SMALL_ROWS = {"simulated_linear": 2_000, "simulated_nonlinear": 2_000, "bounded_wide": 1_600, "counts_small": 2_000,
              "california_housing_small": 2_000, "demo_conversions": 2_400}
"""Release rows of the base study's sets (80 % of 2 500, 2 000 and 3 000 rows): its rows predate the ``n`` field."""


def rule_mse(row: dict[str, Any], rule: str) -> float:
    rp = float(row["mse"]["rp_with_prior"])
    if rule == BAND or row["auto"] != "rp_with_prior":
        return rp if row["auto"] == "rp_with_prior" else float(row["mse"][row["auto"]])
    clip, rows_below = rule.split("&")
    switch = row["stats"]["clip"] > float(clip.split(">")[1]) and row["n"] < float(rows_below.split("<")[1])
    return float(row["mse"]["rr_on_bins"]) if switch else rp


def diffs(rows: list[dict[str, Any]], rule: str, against: str = BAND) -> np.ndarray:
    return np.array([math.log(rule_mse(r, rule) / rule_mse(r, against)) for r in rows])


def mean_se(d: np.ndarray) -> tuple[float, float]:
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else float("nan")


def lodo(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for held in sorted({r["dataset"] for r in rows}):
        train = [r for r in rows if r["dataset"] != held]
        test = [r for r in rows if r["dataset"] == held]
        chosen = min(CANDIDATES, key=lambda c: (round(float(diffs(train, c).mean()), 6), CANDIDATES.index(c)))
        s, se = mean_se(diffs(test, chosen, TODAY))
        out.append({"held_out": held, "chosen": chosen, "vs_today": s, "se": se,
                    "wins_or_ties": bool(s <= 0.0 or s <= se)})
    return out


def cell_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| data set | release rows | ε | switched by today's rule | mean clip stat | `rp_with_prior` | "
             "`rr_on_bins` | today's rule | true mean |", "|---|---|---|---|---|---|---|---|---|"]
    for name, eps in sorted({(r["dataset"], r["epsilon"]) for r in rows}):
        cell = [r for r in rows if (r["dataset"], r["epsilon"]) == (name, eps)]
        switched = sum(rule_mse(r, TODAY) != rule_mse(r, BAND) for r in cell)
        m = {a: float(np.mean([r["mse"][a] for r in cell])) for a in ARMS}
        lines.append(
            f"| `{name}` | {cell[0]['n']:,} | {eps:g} | {switched} of {len(cell)} | "
            f"{np.mean([r['stats']['clip'] for r in cell]):.3f} | {m['rp_with_prior']:.4g} | {m['rr_on_bins']:.4g} | "
            f"{np.mean([rule_mse(r, TODAY) for r in cell]):.4g} | {np.mean([r['mean_mse'] for r in cell]):.4g} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--housing", required=True)
    parser.add_argument("--datasets", default="california_housing,simulated_nonlinear")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--epsilons", default="0.5,1,2")
    parser.add_argument("--sim-n", type=int, default=20_000)
    parser.add_argument("--base", default="research/results/tail_rule.json")
    parser.add_argument("--out", default="research/results/tail_rule_size")
    args = parser.parse_args()
    t0, load_before = time.perf_counter(), os.getloadavg()[0]
    base = json.loads(Path(args.base).read_text())["rows"]
    for r in base:
        r.setdefault("n", SMALL_ROWS[r["dataset"]])
    plans = utility.default_plans(housing=args.housing, epochs=args.epochs, sim_n=args.sim_n)
    epsilons = [float(e) for e in args.epsilons.split(",")]
    measured: list[dict[str, Any]] = []
    for name in args.datasets.split(","):
        data = plans[name].load()
        trials = [(t, data.domain) for t in utility.protocol_trials(plans[name], data, args.trials)]
        label = f"{name}_n{data.n}" if name in SMALL_ROWS else name  # not the base study's small set
        measured += tail_rule.measure(label, trials, epsilons, ARMS)
    rows = base + measured
    folds = lodo(rows)
    seconds = time.perf_counter() - t0
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps({"rows": measured, "lodo": folds, "args": vars(args)}, indent=1))
    adopt = all(f["wins_or_ties"] for f in folds) and any(f["chosen"] != TODAY for f in folds)
    lines = [
        "# `auto`'s tail rule at full size: does it need the release's rows?",
        "",
        f"Command: `python research/studies/tail_rule_size.py --housing ../shared/data/california_housing.csv "
        f"--datasets {args.datasets} --trials {args.trials} --epochs {args.epochs} --epsilons {args.epsilons} "
        f"--sim-n {args.sim_n}`",
        "",
        f"- New rows: {', '.join(f'`{d}`' for d in args.datasets.split(','))}, {args.trials} trials, {args.epochs} "
        f"epochs (as `tail_rule.md`), ε ∈ {{{args.epsilons}}}; with the {len(base)} rows of `{args.base}` (six "
        "sets of 1 600–2 400 release rows). Same prior in both arms: "
        f"{all(r['same_prior'] for r in measured)}. {seconds:.0f} s on a shared 2-core machine (1-minute load "
        f"average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after); written "
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC.",
        "- Rule `clip>τ&n<N`: `rr_on_bins` where the prior's clipped share of its mean passes τ (0.12, record 0025) "
        "and the release "
        f"has fewer than N rows (public); today's rule is `{TODAY}` (record 0025), `band` never switches.",
        f"- Verdict: {'adopt (wins or ties against today in every fold)' if adopt else 'not adopted (see the folds)'}.",
        "",
        "## Leave one data set out (held-out score: mean log(test MSE of the chosen rule / today's), SE)",
        "",
        "| held out | rule chosen on the others | held-out score vs today (SE) | wins or ties |",
        "|---|---|---|---|",
        *(f"| `{f['held_out']}` | `{f['chosen']}` | {f['vs_today']:+.4f} ({f['se']:.4f}) | "
          f"{'yes' if f['wins_or_ties'] else '**no**'} |" for f in folds),
        "",
        "## Score of each rule against the band's pick, all data sets (mean log ratio)",
        "",
        "| rule | all sets | small sets (n < 3 000) | full-size sets |",
        "|---|---|---|---|",
        *(f"| `{c}` | {diffs(rows, c).mean():+.4f} | {diffs([r for r in rows if r['n'] < 3000], c).mean():+.4f} | "
          + (f"{diffs(measured, c).mean():+.4f} |" if measured else "— |") for c in CANDIDATES),
        "",
        "## Cells (test MSE, mean over trials)",
        "",
        *cell_table(rows),
        "",
    ]
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
