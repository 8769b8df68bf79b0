"""Should ``auto``'s tail rule (records 0025, 0032) stop at some ε? Fitted leave one set out, confirmed held out.

Usage:
    python research/studies/tail_rule_eps.py --housing PATH [--trials 5] [--epochs 20] [--epsilons 0.5,1]
        [--threads 1] [--heldout heldout_conversions,...] [--out research/results/tail_rule_eps] [--rows JSON]

Rule ``eps<E``: today's rule (``clip>0.12&n<12000``, ``tail_rule_size.py``) where ε < E, the band's
``rp_with_prior`` from E on; E = inf is today's. Fit: the rows of ``tail_rule.json`` and
``tail_rule_size.json`` (both arms, same DP prior, default learning, same split and seed; ε ∈ {0.5, 1, 2}),
leave one data set out, score = mean log(test MSE of the rule / the band's pick), ties to today's rule.
Confirm: the same two arms (``tail_rule.measure``) on ``utility.HELDOUT_SETS`` (never used to fit), the
fitted E against today's rule, paired per trial. Adopted only if an E < inf wins or ties in every fold, is
chosen in most, and on the held-out sets gains at least two SE of the paired difference over the sets.
Writes ``<out>.json`` and ``<out>.md``. Not adopted: docs/decisions/0041-tail-rule-epsilon-cap.md.
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
from default_rule import NOISE_SE
from tail_rule_size import ARMS, BAND, SMALL_ROWS, mean_se
from tail_rule_size import rule_mse as size_rule_mse

from labeldp.epsilon import to_micro_floor
from labeldp.release.defaults import TAIL_CLIP_ABOVE, TAIL_ROWS_BELOW
from labeldp.release.randomizer import randomize
from labeldp_research import utility

EPS_BELOW = (math.inf, 2.0, 1.5, 1.0, 0.75)  # today's first: ties go to it
TODAY_BASE = f"clip>{TAIL_CLIP_ABOVE:g}&n<{TAIL_ROWS_BELOW:g}"
CANDIDATES = [f"eps<{e:g}" for e in EPS_BELOW]
TODAY = CANDIDATES[0]


def rule_mse(row: dict[str, Any], rule: str) -> float:
    """Today's rule below the rule's ε cap, the band's pick from it on."""
    cap = float(rule.split("<")[1])
    return size_rule_mse(row, TODAY_BASE if row["epsilon"] < cap else BAND)


def diffs(rows: list[dict[str, Any]], rule: str, against: str | None = None) -> np.ndarray:
    return np.array([math.log(rule_mse(r, rule) / (rule_mse(r, against) if against else size_rule_mse(r, BAND)))
                     for r in rows])


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


def per_set(rows: list[dict[str, Any]], rule: str) -> dict[str, float]:
    """Mean log(rule / today's) per data set (the paired difference, trial by trial, averaged)."""
    return {d: float(diffs([r for r in rows if r["dataset"] == d], rule, TODAY).mean())
            for d in sorted({r["dataset"] for r in rows})}


def product_matches(name: str, trials: list[tuple[utility.Trial, Any]], epsilons: list[float]) -> tuple[int, int]:
    """Trials where the product's ``auto`` release (``Release(auto=True)``), drawn with ``tail_rule.measure``'s
    seed, gives the very labels of the arm today's rule picks: the arms are the product's, not a replay of it."""
    same = total = 0
    for trial, domain in trials:
        for eps in epsilons:
            seed = utility._seed(0, name, trial.index, "tail_rule", to_micro_floor(eps))
            auto = randomize(trial.y_train, domain, "rp_with_prior", to_micro_floor(eps), np.random.default_rng(seed),
                             auto=True)
            arm = randomize(trial.y_train, domain, auto.mechanism.name, to_micro_floor(eps),
                            np.random.default_rng(seed))
            same += bool(np.array_equal(auto.labels, arm.labels))
            total += 1
    return same, total


def per_eps(rows: list[dict[str, Any]], rule: str) -> list[str]:
    """Per ε: trials switched, today's rule against the band and ``rule`` against today's (paired, over sets)."""
    lines = [f"| ε | trials switched by today's rule | today's vs band, over sets (SE) | `{rule}` vs today's, "
             "over sets (SE) | sets better / worse |", "|---|---|---|---|---|"]
    for eps in sorted({r["epsilon"] for r in rows}):
        at = [r for r in rows if r["epsilon"] == eps]
        switched = sum(rule_mse(r, TODAY) != size_rule_mse(r, BAND) for r in at)
        sets = sorted({r["dataset"] for r in at})
        vs_band = np.array([diffs([r for r in at if r["dataset"] == d], TODAY).mean() for d in sets])
        capped = np.array(list(per_set(at, rule).values()))
        (b, b_se), (c, c_se) = mean_se(vs_band), mean_se(capped)
        lines.append(f"| {eps:g} | {switched} of {len(at)} | {b:+.4f} ({b_se:.4f}) | {c:+.4f} ({c_se:.4f}) | "
                     f"{int((capped < 0).sum())} / {int((capped > 0).sum())} |")
    return lines


def held_line(rows: list[dict[str, Any]], rule: str) -> str:
    if not rows:
        return f"| `{rule}` | — | — |"
    d = np.array(list(per_set(rows, rule).values()))
    m, se = mean_se(d)
    return f"| `{rule}` | {m:+.4f} ({se:.4f}) | {int((d < 0).sum())} / {int((d > 0).sum())} |"


def load_fit_rows(base: Path, size: Path) -> list[dict[str, Any]]:
    rows = json.loads(base.read_text())["rows"]
    for r in rows:
        r.setdefault("n", SMALL_ROWS[r["dataset"]])
    return rows + json.loads(size.read_text())["rows"]


def cells(rows: list[dict[str, Any]], rule: str) -> list[str]:
    lines = [f"| data set | release rows | ε | switched by today's rule | `rp_with_prior` | `rr_on_bins` | "
             f"today's rule | `{rule}` | log({rule} / today) (SE) |", "|---|---|---|---|---|---|---|---|---|"]
    for name, eps in sorted({(r["dataset"], r["epsilon"]) for r in rows}):
        cell = [r for r in rows if (r["dataset"], r["epsilon"]) == (name, eps)]
        switched = sum(rule_mse(r, TODAY) != size_rule_mse(r, BAND) for r in cell)
        m = {a: float(np.mean([r["mse"][a] for r in cell])) for a in ARMS}
        s, se = mean_se(diffs(cell, rule, TODAY))
        lines.append(f"| `{name}` | {cell[0]['n']:,} | {eps:g} | {switched} of {len(cell)} | "
                     f"{m['rp_with_prior']:.4g} | {m['rr_on_bins']:.4g} | "
                     f"{np.mean([rule_mse(r, TODAY) for r in cell]):.4g} | "
                     f"{np.mean([rule_mse(r, rule) for r in cell]):.4g} | {s:+.4f} ({se:.4f}) |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--housing", required=True)
    parser.add_argument("--heldout", default=",".join(utility.HELDOUT_SETS))
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=20, help="0: each plan's own recipe (the held-out runner's)")
    parser.add_argument("--epsilons", default="0.5,1")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--base", default="research/results/tail_rule.json")
    parser.add_argument("--size", default="research/results/tail_rule_size.json")
    parser.add_argument("--out", default="research/results/tail_rule_eps")
    parser.add_argument("--rows", help="a previous run's <out>.json: its held-out rows, not measured again")
    args = parser.parse_args()
    t0, load_before = time.perf_counter(), os.getloadavg()[0]
    fit = load_fit_rows(Path(args.base), Path(args.size))
    folds = lodo(fit)
    chosen_all = min(CANDIDATES, key=lambda c: (round(float(diffs(fit, c).mean()), 6), CANDIDATES.index(c)))
    fitted = max({f["chosen"] for f in folds}, key=lambda c: ([f["chosen"] for f in folds].count(c), c == TODAY))
    lodo_ok = fitted != TODAY and all(f["wins_or_ties"] for f in folds)
    plans = utility.default_plans(housing=args.housing, epochs=args.epochs or None)
    epsilons = [float(e) for e in args.epsilons.split(",")]
    matches = [0, 0]
    held: list[dict[str, Any]] = json.loads(Path(args.rows).read_text())["heldout_rows"] if args.rows else []
    for name in [s for s in args.heldout.split(",") if s and not args.rows]:
        data = plans[name].load()
        trials = [(t, data.domain) for t in utility.protocol_trials(plans[name], data, args.trials,
                                                                           threads=args.threads)]
        held += tail_rule.measure(name, trials, epsilons, ARMS)
        same, total = product_matches(name, trials, epsilons)
        matches[0], matches[1] = matches[0] + same, matches[1] + total
    # The confirmation compares the best capped rule on the fit (the fitted one, or eps<1 where none was fitted:
    # the cap the auto cells at ε = 1 point to) with today's, paired.
    tested = fitted if fitted != TODAY else "eps<1"
    sets = per_set(held, tested) if held else {}
    over = np.array(list(sets.values()))
    gain, gain_se = mean_se(over) if over.size else (float("nan"), float("nan"))
    trial_gain, trial_se = mean_se(diffs(held, tested, TODAY)) if held else (float("nan"), float("nan"))
    confirmed = bool(over.size > 1 and gain < 0 and -gain >= NOISE_SE * gain_se)
    adopt = lodo_ok and confirmed and fitted == tested
    seconds = time.perf_counter() - t0
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps({"heldout_rows": held, "lodo": folds, "fitted": fitted,
                                                    "tested": tested, "per_set": sets, "args": vars(args)}, indent=1))
    lines = [
        "# Should `auto`'s tail rule stop at some ε?",
        "",
        f"Command: `python research/studies/tail_rule_eps.py --housing ../shared/data/california_housing.csv "
        f"--heldout {args.heldout} --trials {args.trials} --epochs {args.epochs} --epsilons {args.epsilons} "
        f"--threads {args.threads} --out {args.out}`",
        "",
        f"- Rule `eps<E`: today's tail rule (`{TODAY_BASE}`, records 0025, 0032) where ε < E, the band's "
        f"`rp_with_prior` from E on; `{TODAY}` is today's. Candidates {', '.join(f'`{c}`' for c in CANDIDATES)} "
        "(ties to today's). On the fit's ε grid {0.5, 1, 2}, `eps<2` = `eps<1.5` and `eps<1` = `eps<0.75`.",
        f"- Fit: the {len(fit)} rows of `{args.base}` and `{args.size}` (nine sets), leave one set out. "
        f"Confirm: `tail_rule.measure` on the held-out sets, {args.trials} trials, "
        f"{args.epochs or 'the plan recipe (50)'} epochs, "
        f"ε ∈ {{{args.epsilons}}}; same prior in both arms: {all(r['same_prior'] for r in held)}; "
        "the product's `auto` release, drawn with "
        f"the same seed, equals the arm today's rule picks in {matches[0]} of {matches[1]} trials.",
        f"- {seconds:.0f} s, one process, one thread, on a shared 2-core machine (1-minute load average "
        f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after); "
        f"written {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC.",
        f"- Fitted (most folds): `{fitted}`; on all nine sets: `{chosen_all}`. Held-out comparison: `{tested}` "
        f"against today's, mean over sets of the paired log ratio {gain:+.4f} (SE over sets {gain_se:.4f}); "
        f"over trials {trial_gain:+.4f} (SE {trial_se:.4f}).",
        f"- Verdict: {'adopt' if adopt else 'not adopted'} (leave-one-set-out {'passes' if lodo_ok else 'fails'}; "
        f"held-out gain of two SE over sets {'met' if confirmed else 'not met'}).",
        "",
        "## Leave one data set out (held-out score: mean log(test MSE of the chosen rule / today's), SE)",
        "",
        "| held out | rule chosen on the others | held-out score vs today (SE) | wins or ties |",
        "|---|---|---|---|",
        *(f"| `{f['held_out']}` | `{f['chosen']}` | {f['vs_today']:+.4f} ({f['se']:.4f}) | "
          f"{'yes' if f['wins_or_ties'] else '**no**'} |" for f in folds),
        "",
        "## Score of each rule against the band's pick (mean log ratio; fit sets, held-out sets)",
        "",
        "| rule | fit sets | held-out sets |",
        "|---|---|---|",
        *(f"| `{c}` | {diffs(fit, c).mean():+.4f} | "
          + (f"{diffs(held, c).mean():+.4f} |" if held else "— |") for c in CANDIDATES),
        "",
        "## Each rule against today's, held-out sets (paired; mean over sets of the mean log ratio, SE over sets)",
        "",
        "| rule | held-out sets vs today (SE) | sets better / worse |",
        "|---|---|---|",
        *(held_line(held, c) for c in CANDIDATES[1:]),
        "",
        "## Per ε (held-out sets; log ratios of test MSE, mean over sets of each set's mean over trials)",
        "",
        *(per_eps(held, tested) if held else ["(none run)"]),
        "",
        "## Per ε (fit sets)",
        "",
        *per_eps(fit, tested),
        "",
        f"## Held-out cells (test MSE, mean over trials; paired `{tested}` vs today)",
        "",
        *(cells(held, tested) if held else ["(none run)"]),
        "",
        "## Fit cells",
        "",
        *cells(fit, tested),
        "",
    ]
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
