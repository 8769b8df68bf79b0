"""Should ``auto`` leave RPWithPrior when the release's own DP prior shows a heavy tail? Fitted leave one data set out.

Usage:
    python research/studies/tail_rule.py --housing PATH [--trials 3] [--epochs 20] [--epsilons 0.5,1,2]
        [--out research/results/tail_rule]

Where ``auto`` picks RPWithPrior, a rule reads the release's DP histogram prior (ε₁, already paid;
RR-on-Bins obtains the same prior with the same ε₁) and the interval RPWithPrior fits to it, and
switches to RR-on-Bins, or to Laplace at ε₂ = ε − ε₁, when the prior's tail past the interval is
heavy: ``clip`` = (E_p y − E_p t(y)) / sd_p(y) or ``mass`` = the prior's mass outside [A₁, A₂]
(post-processing of DP outputs only). Per data set, ε and trial the three releases are drawn with
the same seed (the same prior: checked), the default learning trains on each with the same split
and seed, and every rule (statistic, threshold τ, alternative) is replayed on the three test MSEs.
Score = mean log(test MSE of the rule / the product's). LODO: the rule with the best score on the
other sets, scored on the held-out one; it "wins or ties" there when its held-out score is ≤ 0 or
within one SE of the paired mean. The five sets of record 0018 plus the demo's (3 000 rows).
The product arm is the band's pick (``randomize`` without ``auto``). Small on purpose (2 shared
cores). Writes ``<out>.json`` and ``<out>.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from labeldp.epsilon import to_micro_floor
from labeldp.learning.config import LearningConfig, TrainingConfig
from labeldp.learning.regression import fit_private_regressor
from labeldp.mechanisms import LabelDomain
from labeldp.mechanisms.registry import auto_pick
from labeldp.release.randomizer import randomize
from labeldp.synthetic import make_conversions
from labeldp_research import utility

DATASETS = ("simulated_linear", "simulated_nonlinear", "bounded_wide", "counts_small", "california_housing_small")
DEMO = "demo_conversions"
ARMS = ("rp_with_prior", "rr_on_bins", "laplace")
THRESHOLDS = {
    "clip": (0.02, 0.05, 0.08, 0.1, 0.12, 0.15, 0.2, 0.3, 0.5),
    "mass": (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3),
}
PRODUCT = "product"
CANDIDATES = [PRODUCT] + [f"{s}>{t:g}:{alt}" for s, ts in THRESHOLDS.items() for t in ts
                          for alt in ("rr_on_bins", "laplace")]


def tail_statistics(prior: Any, spec: Any) -> dict[str, float]:
    """From the DP prior and RPWithPrior's interval alone: the clipped share of the mean, the mass outside."""
    data = prior.model_dump()
    grid = np.asarray(data["grid"], dtype=np.float64)
    probs = np.clip(np.asarray(data["probs"], dtype=np.float64), 0.0, None)
    probs = probs / probs.sum()
    a1, a2 = float(spec.a1), float(spec.a2)
    mean = float(probs @ grid)
    sd = math.sqrt(max(float(probs @ (grid - mean) ** 2), 1e-300))
    clipped = float(probs @ np.clip(grid, a1, a2))
    outside = float(probs[(grid < a1) | (grid > a2)].sum())
    return {"clip": abs(mean - clipped) / sd, "mass": outside}


def rule_mse(row: dict[str, Any], rule: str) -> float:
    if rule == PRODUCT or row["auto"] != "rp_with_prior":
        return float(row["mse"]["rp_with_prior"] if row["auto"] == "rp_with_prior" else row["mse"][row["auto"]])
    cond, alt = rule.split(":")
    stat, tau = cond.split(">")
    return float(row["mse"][alt] if row["stats"][stat] > float(tau) else row["mse"]["rp_with_prior"])


def score(rows: list[dict[str, Any]], rule: str) -> float:
    return float(np.mean([math.log(rule_mse(r, rule) / rule_mse(r, PRODUCT)) for r in rows]))


def score_se(rows: list[dict[str, Any]], rule: str) -> float:
    d = np.array([math.log(rule_mse(r, rule) / rule_mse(r, PRODUCT)) for r in rows])
    return float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else float("nan")


def lodo(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for held in sorted({r["dataset"] for r in rows}):
        train = [r for r in rows if r["dataset"] != held]
        test = [r for r in rows if r["dataset"] == held]
        chosen = min(CANDIDATES, key=lambda c: (round(score(train, c), 6), CANDIDATES.index(c)))
        s, se = score(test, chosen), score_se(test, chosen)
        out.append({"held_out": held, "chosen": chosen, "held_out_score": s, "se": se,
                    "wins_or_ties": bool(s <= 0.0 or s <= se)})
    return out


def demo_trials(trials: int, epochs: int, n: int = 3_000) -> list[tuple[utility.Trial, LabelDomain]]:
    """The demo's synthetic clicks (a new draw per trial), 80/20, with their public domain [0, clip]."""
    out = []
    for t in range(trials):
        data = make_conversions(n, seed=t)
        table = pacsv.read_csv(io.BytesIO(data.to_csv()),
                               convert_options=pacsv.ConvertOptions(column_types={"id": pa.string()})).drop(["id"])
        order = np.random.default_rng(t).permutation(n)
        train, test = np.sort(order[: int(0.8 * n)]), np.sort(order[int(0.8 * n):])
        config = TrainingConfig(epochs=epochs, seed=1_000 + t, threads=1, device="cpu")
        trial = utility.Trial(t, data.labels[train], data.labels[test], np.arange(train.size),
                              table.take(train), table.take(test), config)
        out.append((trial, LabelDomain("real", 0.0, data.clip)))
    return out


def measure(
    name: str, trials: list[tuple[utility.Trial, Any]], epsilons: list[float], arms: tuple[str, ...] = ARMS
) -> list[dict[str, Any]]:
    """Per trial and ε: the tail statistics of the RPWithPrior release and the test MSE of each arm in ``arms``."""
    rows = []
    for trial, domain in trials:
        config = trial.config.replace(validation_fraction=utility.PrivateRegressor().validation_fraction)
        for eps in epsilons:
            n = int(trial.y_train.size)
            pick = auto_pick("real", eps, n)
            seed = utility._seed(0, name, trial.index, "tail_rule", to_micro_floor(eps))
            releases = {m: randomize(trial.y_train, domain, m, to_micro_floor(eps), np.random.default_rng(seed))
                        for m in ("rp_with_prior", "rr_on_bins")}
            rp, rr = releases["rp_with_prior"], releases["rr_on_bins"]
            assert rp.prior is not None and rr.prior is not None
            same = rp.prior.model_dump()["probs"] == rr.prior.model_dump()["probs"]
            eps1 = next(p.epsilon_micro for p in rp.accounting.parts if p.name == "prior")
            laplace_rng = np.random.default_rng([*seed.generate_state(2), 1])
            releases["laplace"] = randomize(trial.y_train, domain, "laplace", to_micro_floor(eps) - eps1, laplace_rng)
            mse = {}
            for arm, out in releases.items():
                if arm not in arms:
                    continue
                labels = out.labels[trial.fit_pos]
                model = fit_private_regressor(trial.fit_table, labels, out.mechanism, config, LearningConfig(),
                                              prior=out.prior)
                mse[arm] = float(np.mean((model.predict(trial.test_table) - trial.y_test) ** 2))
            rows.append({"dataset": name, "epsilon": eps, "trial": trial.index, "auto": pick, "same_prior": same,
                         "stats": tail_statistics(rp.prior, rp.mechanism), "mse": mse,
                         "mean_mse": float(np.mean((trial.y_train.mean() - trial.y_test) ** 2)), "n": n})
            print(f"[{name}] trial {trial.index} ε={eps:g}: {rows[-1]['stats']} {mse}", flush=True)
    return rows


def cell_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| data set | ε | `auto` | clip stat | mass stat | rp_with_prior | rr_on_bins | laplace (ε₂) | "
             "true mean |", "|---|---|---|---|---|---|---|---|---|"]
    for name, eps in sorted({(r["dataset"], r["epsilon"]) for r in rows}):
        cell = [r for r in rows if (r["dataset"], r["epsilon"]) == (name, eps)]
        st = {k: np.mean([r["stats"][k] for r in cell]) for k in ("clip", "mass")}
        m = {a: np.mean([r["mse"][a] for r in cell]) for a in ARMS}
        lines.append(f"| `{name}` | {eps:g} | `{cell[0]['auto']}` | {st['clip']:.3f} | {st['mass']:.3f} | "
                     + " | ".join(f"{m[a]:.4g}" for a in ARMS)
                     + f" | {np.mean([r['mean_mse'] for r in cell]):.4g} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--housing", required=True)
    parser.add_argument("--datasets", default=",".join((*DATASETS, DEMO)))
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--epsilons", default="0.5,1,2")
    parser.add_argument("--sim-n", type=int, default=2_500)
    parser.add_argument("--out", default="research/results/tail_rule")
    args = parser.parse_args()
    t0 = time.perf_counter()
    plans = utility.default_plans(housing=args.housing, epochs=args.epochs, sim_n=args.sim_n)
    epsilons = [float(e) for e in args.epsilons.split(",")]
    rows: list[dict[str, Any]] = []
    for name in args.datasets.split(","):
        if name == DEMO:
            rows += measure(name, demo_trials(args.trials, args.epochs), epsilons)
            continue
        data = plans[name].load()
        trials = [(t, data.domain) for t in utility.protocol_trials(plans[name], data, args.trials)]
        rows += measure(name, trials, epsilons)
    folds = lodo(rows)
    seconds = time.perf_counter() - t0
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps({"rows": rows, "lodo": folds, "args": vars(args)}, indent=1))
    adopt = all(f["wins_or_ties"] for f in folds) and any(f["chosen"] != PRODUCT for f in folds)
    lines = [
        "# A heavy-tail rule for `auto`: leave RPWithPrior when its DP prior's tail passes its interval?",
        "",
        f"Command: `python research/studies/tail_rule.py --housing ../shared/data/california_housing.csv "
        f"--datasets {args.datasets} --trials {args.trials} --epochs {args.epochs} --epsilons {args.epsilons} "
        f"--sim-n {args.sim_n}`",
        "",
        f"- Small on purpose (shared 2-core machine): {args.trials} trials, {args.epochs} epochs, simulated sets of "
        f"{args.sim_n} rows, the demo's set at 3 000 rows. Default learning on every arm; same split and seed.",
        "- Score: mean log(test MSE of the rule / the product's `auto`), lower is better; 0 = the product. "
        "Rules read only the DP prior and the interval fitted to it.",
        f"- Same prior in the RPWithPrior and RR-on-Bins releases: {all(r['same_prior'] for r in rows)}. "
        f"{seconds:.0f} s; written {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC.",
        f"- Verdict: {'adopt (wins or ties in every fold)' if adopt else 'not adopted (see the folds)'}.",
        "",
        "## Leave one data set out",
        "",
        "| held out | rule chosen on the others | held-out score (SE) | wins or ties |",
        "|---|---|---|---|",
        *(f"| `{f['held_out']}` | `{f['chosen']}` | {f['held_out_score']:+.4f} ({f['se']:.4f}) | "
          f"{'yes' if f['wins_or_ties'] else '**no**'} |" for f in folds),
        "",
        "## Score of each rule, all data sets",
        "",
        "| rule | score |",
        "|---|---|",
        *(f"| `{c}` | {score(rows, c):+.4f} |" for c in CANDIDATES),
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
