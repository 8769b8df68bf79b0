"""The continuous guard's half-width, fitted leave one data set out, and the paired before/after table.

Usage:
    python research/studies/soft_guard.py --housing PATH [--datasets a,b] [--trials 2] [--epochs 12]
        [--epsilons 0.5,1,2] [--out research/results/soft_guard]

For every data set, ε and trial the release is drawn with the runner's seed for the mechanism
``auto`` picks there (the default configuration), and the default learning trains twice on the same
split, seed and release: BEFORE (the old guard, ``GUARD_RAMP`` = 0, and the private mean
without the release's DP prior) and AFTER (the prior in the anchor). The guard acts after the
selection, so the AFTER training is replayed at every candidate half-width h without retraining:
its test predictions are anchor + w·ρ·(s − anchor), ρ the guard's share of the selected
predictor's private gain (``labeldp.learning.selection.evidence_weight``): a smoothstep in its z
score from 2 − h to 2 (``below``, the product's shape, h = ``GUARD_RAMP``) or from 2 − h to 2 + h
(``centred``); h = 0 is the old step.

The guard is chosen leave one data set out: the one with the lowest mean log test MSE (relative to the
private mean's, cell by cell) over the OTHER sets, scored on the held-out one. Small on purpose
(a shared 2-core machine): few trials, few epochs; the numbers say which way, not how far.
Writes ``<out>.json`` and ``<out>.md``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime as dt
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from labeldp.epsilon import to_micro_floor
from labeldp.learning import selection as sel
from labeldp.learning.config import LearningConfig
from labeldp.learning.debiasing import label_law, private_mean
from labeldp.learning.regression import fit_private_regressor
from labeldp.learning.selection import DETECTABLE_Z, MEAN_FALLBACK_Z
from labeldp.mechanisms.registry import auto_pick
from labeldp.release.randomizer import randomize
from labeldp_research import utility

DATASETS = ("simulated_linear", "simulated_nonlinear", "bounded_wide", "counts_small", "california_housing_small")
WIDTHS = (0.0, 0.5, 1.0, 1.5, 2.0)
CANDIDATES = [f"{shape}:{h}" for shape in ("below", "centred") for h in WIDTHS]
STEP = "below:0.0"  # the old all-or-nothing guard
ADOPTED = f"below:{sel.GUARD_RAMP}"  # what the product does now


def mse(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean((pred - y) ** 2))


def measure(plan: utility.DatasetPlan, trials: int, epsilons: list[float]) -> list[dict[str, Any]]:
    data = plan.load()
    rows = []
    for trial in utility.protocol_trials(plan, data, trials):
        config = trial.config.replace(validation_fraction=utility.PrivateRegressor().validation_fraction)
        for eps in epsilons:
            n = int(trial.y_train.size)
            mech = auto_pick(data.domain.kind if data.domain else "real", eps, n)
            rng = np.random.default_rng(utility._seed(0, plan.name, trial.index, mech, to_micro_floor(eps)))
            out = randomize(trial.y_train, data.domain, mech, to_micro_floor(eps), rng)
            labels = out.labels[trial.fit_pos]
            law = label_law(out.mechanism)
            saved = sel.GUARD_RAMP
            sel.GUARD_RAMP = 0.0
            try:
                before = fit_private_regressor(trial.fit_table, labels, out.mechanism, config, LearningConfig())
            finally:
                sel.GUARD_RAMP = saved
            after = fit_private_regressor(
                trial.fit_table, labels, out.mechanism, config, LearningConfig(), prior=out.prior
            )
            raw = copy.copy(after)
            raw.postprocessing_ = dataclasses.replace(after.postprocessing_, anchor=None, model_weight=1.0)
            s = raw.predict(trial.test_table)
            summary = after.selection_ or {}
            gain = summary["gain_over_mean"] or {"gain": 0.0, "se": 0.0}
            det = summary["detectable_z"]
            w = float(summary["selected_model_weight"])  # w before the guard's share
            anchor = float(summary["private_mean"])
            final_anchor = private_mean(labels, law, prior=out.prior)
            old_anchor = private_mean(labels, law)
            step, gap = s - anchor, trial.y_test - anchor
            quadratic = [float(np.mean(gap * gap)), float(np.mean(step * gap)), float(np.mean(step * step))]
            row = {"z": None if gain["se"] <= 0 else gain["gain"] / gain["se"], "detectable_z": det, "w": w,
                   "quadratic": quadratic, "final_mean": mse(np.full_like(s, final_anchor), trial.y_test),
                   "gain": gain["gain"], "se": gain["se"]}
            by_width = {f"{shape}:{h}": replay(row, shape, h) for shape in SHAPES for h in WIDTHS}
            rows.append({
                "dataset": plan.name, "mechanism": mech, "epsilon": eps, "trial": trial.index,
                "before": mse(before.predict(trial.test_table), trial.y_test),
                "after": mse(after.predict(trial.test_table), trial.y_test),
                "mean_before": mse(np.full_like(s, old_anchor), trial.y_test),
                "mean_after": mse(np.full_like(s, final_anchor), trial.y_test),
                **row,
                "before_fallback": bool((before.selection_ or {})["mean_fallback"]),
                "guard_weight": summary["guard_weight"],
                "widths": by_width,
            })
            print(f"[{plan.name}] trial {trial.index} ε={eps:g} {mech}: before {rows[-1]['before']:.4g} "
                  f"after {rows[-1]['after']:.4g}", flush=True)
    return rows


SHAPES = ("below", "centred")


def share(row: dict[str, Any], shape: str, h: float) -> float:
    """The guard's share for a ramp of width h below the old threshold, or centred on it (half-width h)."""
    z_max = MEAN_FALLBACK_Z if shape == "below" else MEAN_FALLBACK_Z + h
    z_min = MEAN_FALLBACK_Z - h
    det = math.inf if row["detectable_z"] is None else row["detectable_z"]
    if det < DETECTABLE_Z or row["gain"] <= 0.0:
        return 0.0
    if row["se"] <= 0.0:
        return 1.0
    return sel.smooth_ramp(row["gain"] / row["se"], z_min, z_max)


def replay(row: dict[str, Any], shape: str, h: float) -> float:
    """Test MSE of the AFTER model with this guard: anchor + v·(s − anchor), v = w·share; 0: the mean."""
    rho = share(row, shape, h)
    if rho == 0.0:
        return float(row["final_mean"])
    a, b, c = row["quadratic"]
    v = row["w"] * rho
    return a - 2.0 * v * b + v * v * c


def score(rows: list[dict[str, Any]], h: str) -> float:
    """Mean log(test MSE at h / the private mean's), over trials: lower is better."""
    return float(np.mean([math.log(r["widths"][h] / r["mean_after"]) for r in rows]))


def lodo(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for held in sorted({r["dataset"] for r in rows}):
        train = [r for r in rows if r["dataset"] != held]
        test = [r for r in rows if r["dataset"] == held]
        chosen = min(CANDIDATES, key=lambda h: (round(score(train, h), 6), CANDIDATES.index(h)))
        out.append({"held_out": held, "chosen": chosen, "held_out_score": score(test, chosen),
                    "held_out_step": score(test, STEP),
                    "best_on_held_out": min(CANDIDATES, key=lambda h: score(test, h))})
    return out


def cell_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| data set | ε | mechanism | before | after | paired after − before (SE) | private mean before | "
             "private mean after | fallbacks before | guard weight after |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["dataset"], r["epsilon"], r["mechanism"]) for r in rows})
    for name, eps, mech in keys:
        cell = [r for r in rows if (r["dataset"], r["epsilon"], r["mechanism"]) == (name, eps, mech)]
        after = [r["widths"][ADOPTED] for r in cell]  # the replay at the adopted guard
        diff = np.array(after) - np.array([r["before"] for r in cell])
        se = float(diff.std(ddof=1) / math.sqrt(diff.size)) if diff.size > 1 else float("nan")
        lines.append(
            f"| `{name}` | {eps:g} | `{mech}` | {np.mean([r['before'] for r in cell]):.4g} | "
            f"{np.mean(after):.4g} | {diff.mean():+.3g} ({se:.2g}) | "
            f"{np.mean([r['mean_before'] for r in cell]):.4g} | {np.mean([r['mean_after'] for r in cell]):.4g} | "
            f"{sum(r['before_fallback'] for r in cell)} of {len(cell)} | "
            f"{', '.join(format(r['guard_weight'], '.2f') for r in cell)} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--housing", default=None)
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--epsilons", default="0.5,1,2")
    parser.add_argument("--sim-n", type=int, default=2_500)
    parser.add_argument("--out", default="research/results/soft_guard")
    args = parser.parse_args()
    t0 = time.perf_counter()
    plans = utility.default_plans(housing=args.housing, epochs=args.epochs, sim_n=args.sim_n)
    epsilons = [float(e) for e in args.epsilons.split(",")]
    rows: list[dict[str, Any]] = []
    for name in args.datasets.split(","):
        rows += measure(plans[name], args.trials, epsilons)
    folds = lodo(rows)
    replay_gap = max(abs(r["after"] - r["widths"][ADOPTED]) for r in rows)
    print(f"largest |model - replay| at the module's half-width: {replay_gap:.3g}")
    seconds = time.perf_counter() - t0
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps({"rows": rows, "lodo": folds, "args": vars(args)}, indent=1))
    lines = [
        "# The continuous guard and the prior's anchor: LODO fit and paired before/after",
        "",
        f"Command: `python research/studies/soft_guard.py --housing ../shared/data/california_housing.csv "
        f"--datasets {args.datasets} --trials {args.trials} --epochs {args.epochs} --epsilons {args.epsilons} "
        f"--sim-n {args.sim_n}`",
        "",
        f"- Small on purpose (shared 2-core machine): {args.trials} trials, {args.epochs} epochs, simulated sets "
        f"of {args.sim_n} rows. Default configuration: the mechanism `auto` picks, the default learning.",
        "- BEFORE: the old all-or-nothing guard (`GUARD_RAMP` = 0), private mean without the prior. "
        "AFTER: the continuous guard as adopted (`GUARD_RAMP`) and the prior's mean in the anchor. Paired: same "
        "split, release, training seed.",
        f"- {seconds:.0f} s; written {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC.",
        "",
        "## Leave one data set out (score: mean log test MSE / private mean's; lower is better)",
        "",
        "| held out | guard chosen on the others | held-out score with it | with the old step | best on held out |",
        "|---|---|---|---|---|",
        *(f"| `{f['held_out']}` | `{f['chosen']}` | {f['held_out_score']:+.4f} | {f['held_out_step']:+.4f} | "
          f"`{f['best_on_held_out']}` |" for f in folds),
        "",
        "## Score by guard shape and width, all data sets",
        "",
        "| guard | " + " | ".join(f"`{h}`" for h in CANDIDATES) + " |",
        "|---|" + "---|" * len(CANDIDATES),
        "| score | " + " | ".join(f"{score(rows, h):+.4f}" for h in CANDIDATES) + " |",
        "",
        "## Paired before/after, default configuration (test MSE, mean over trials)",
        "",
        *cell_table(rows),
        "",
    ]
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
