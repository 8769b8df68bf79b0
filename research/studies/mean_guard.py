"""The mean-fallback guard: the current paired t test against alternatives, side by side.

Usage:
    python research/studies/mean_guard.py [--housing PATH] [--datasets a,b] [--mechanisms a,b]
        [--epsilons 0.05,0.1,...] [--trials 5] [--threads 1] [--out research/results/mean_guard.md]

The features party keeps its selected model over the release's private mean only when the
estimated gain — a paired mean of per-row loss differences g on the privatized validation
rows — exceeds ``MEAN_FALLBACK_Z`` = 2 standard errors (``labeldp.learning.selection``). One
row whose label is far out in a heavy tail can hold a gain of 100 times the others'; it
raises the mean a little and the standard error a lot, so the guard drops a model that is
clearly better (2 000 Poisson counts, ε = ∞: gain 2.02 ± 1.07 with the row, 1.01 ± 0.35
without it; the dropped model's test MSE 1.9 against the mean's 3.8).

The alternative caps g from above at its 99th percentile before the same test. Capping
only lowers g, so under the null (no gain: E[g] ≤ 0) the capped mean has E ≤ 0 as well and
the test keeps its level; it only stops positive outliers from inflating the standard error.

The third, ``crossfit``, answers the winner's curse instead: the selected epoch is the
minimum of some 50 noisy estimates, so its gain is biased upward. The validation rows are
split into two halves (alternate rows); a selector like the training's chooses (epoch, λ,
w) on each half alone, and each choice is scored on the OTHER half. The concatenated
per-row gains are free of that selection (each row scores a candidate chosen without it),
and the same z test runs on them. The model kept is still the one selected on every row.

All rules are applied to ONE training run per cell (the runner's release, split, seed and
recipe; the default learning), so their difference is the rule alone. Each cell: the test
MSE of what each rule predicts (the selected model, or the private mean when it falls
back) and of the private-mean predictor, mean ± SE over trials.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

import labeldp.learning.regression as regression
from labeldp.epsilon import to_micro_floor
from labeldp.learning.config import LearningConfig
from labeldp.learning.loop import make_plan
from labeldp.learning.selection import MEAN_FALLBACK_Z, Selector, gains_over_anchor, keeps_model, mean_and_se
from labeldp.release.randomizer import randomize
from labeldp_research import utility

SETS = ("counts_small", "california_housing_small", "bounded_wide", "counts", "california_housing")
MECHANISMS = ("rr_on_bins", "rp_with_prior", "laplace", "staircase", "gaussian", "exponential", "unbiased")
UPPER_QUANTILE = 0.99


class _Recording(regression.Selection):
    """The training's Selection, kept for the bench (it holds the anchors and the selector)."""

    seen: ClassVar[list[regression.Selection]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _Recording.seen.append(self)


class _RecordingSelector(Selector):
    """The training's Selector, keeping every epoch's validation outputs (for the cross-fitted rule)."""

    def observe(self, epoch: int, outputs: np.ndarray) -> bool:
        self.history_outputs = [*getattr(self, "history_outputs", []), np.array(outputs, copy=True)]
        return super().observe(epoch, outputs)


def crossfit_gains(selector: Selector, outputs: list[np.ndarray]) -> np.ndarray:
    """Per-row gains over the anchor of candidates each chosen on the other half of the validation rows."""
    assert selector.anchor is not None
    n = selector.reference.size
    halves = (np.arange(0, n, 2), np.arange(1, n, 2))
    parts = []
    for chosen_on, scored_on in (halves, halves[::-1]):
        sub, scorer = (
            Selector(
                selector.law, selector.debias, selector.reference[rows], selector.shrinkage, True, "private",
                selector.anchor,
            )
            for rows in (chosen_on, scored_on)
        )
        gains = np.zeros(scored_on.size)
        for epoch, out in enumerate(outputs, 1):
            if sub.observe(epoch, out[chosen_on]):
                assert sub.shrinkage_ is not None
                gains = scorer.gains(out[scored_on], sub.shrinkage_, sub.model_weight_)
        parts.append(gains)
    return np.concatenate(parts)


def unselected(selector: Selector) -> dict[str, np.ndarray]:
    """Validation outputs of candidates no epoch selection chose: the last epoch, and every epoch's mean."""
    outputs = selector.history_outputs  # type: ignore[attr-defined]
    return {"last": outputs[-1], "average": np.mean(outputs, axis=0)}


def unselected_gains(selector: Selector, outputs: np.ndarray) -> np.ndarray:
    """Per-row gains over the anchor of one fixed candidate, its λ and w chosen as the training's selector does."""
    lam, weight, _ = selector.score(outputs)
    return selector.gains(outputs, lam, weight)


def z_score(gains: np.ndarray) -> float:
    """Mean gain over its standard error (0 where every gain is 0: the candidate was the mean itself)."""
    mean, se = mean_and_se(gains)
    return mean / se if se > 0 else 0.0


def keeps_t(gains: np.ndarray) -> bool:
    """The current rule (``labeldp.learning.selection.keeps_model``): mean gain > z·SE."""
    return keeps_model(*mean_and_se(gains))


def keeps_capped(gains: np.ndarray) -> bool:
    """The same test on the gains capped from above at their ``UPPER_QUANTILE``."""
    return keeps_t(np.minimum(gains, np.quantile(gains, UPPER_QUANTILE)))


RULES = ("t", "capped", "crossfit")
ALTERNATIVES = RULES[1:]  # each compared with "t", the current guard


def one_cell(trial: utility.Trial, plan_name: str, mech: str, eps: float, domain: Any) -> dict[str, Any]:
    rng = np.random.default_rng(utility._seed(0, plan_name, trial.index, mech, to_micro_floor(eps)))
    out = randomize(trial.y_train, domain, mech, to_micro_floor(eps), rng)
    labels = out.labels[trial.fit_pos]
    config = trial.config.replace(validation_fraction=0.1)
    _Recording.seen.clear()
    model = regression.fit_private_regressor(trial.fit_table, labels, out.mechanism, config, LearningConfig())
    selection = _Recording.seen[-1]
    selector = selection.selectors[0]
    assert selector.anchor is not None and selector.gain_ is not None
    keep_post = dataclasses.replace(
        model.postprocessing_, anchor=selector.anchor, model_weight=float(selector.model_weight_)
    )
    model.postprocessing_ = keep_post
    val_idx = make_plan(trial.fit_table.num_rows, config).val_idx
    predicted = model.predict(trial.fit_table.take(val_idx))
    gains = gains_over_anchor(selector.anchor, predicted, selector.reference)
    if not math.isclose(float(gains.mean()), selector.gain_[0], rel_tol=1e-6, abs_tol=1e-9):
        raise AssertionError(f"recomputed gain {gains.mean()} != the selector's {selector.gain_[0]}")
    crossed = crossfit_gains(selector, selector.history_outputs)  # type: ignore[attr-defined]
    model_mse = float(np.mean((model.predict(trial.test_table) - trial.y_test) ** 2))
    mean_mse = float(np.mean((selection.final_anchor - trial.y_test) ** 2))
    return {
        "mechanism": mech, "epsilon": eps, "trial": trial.index, "model": model_mse, "mean": mean_mse,
        "t": keeps_t(gains), "capped": keeps_capped(gains), "crossfit": keeps_t(crossed),
        "z_t": z_score(gains), "z_crossfit": z_score(crossed),
        **{f"z_{name}": z_score(unselected_gains(selector, out)) for name, out in unselected(selector).items()},
    }


def rules_in(rows: list[dict[str, Any]]) -> tuple[str, ...]:
    """The rules these measurements have (a file written before a rule existed lacks it)."""
    return tuple(r for r in RULES if rows and r in rows[0])


def summarize(rows: list[dict[str, Any]]) -> dict[tuple[str, float], dict[str, tuple[float, float]]]:
    cells: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["mechanism"], r["epsilon"]), []).append(r)
    out = {}
    for key, rs in cells.items():
        stats = {}
        for name in (*rules_in(rows), "mean"):
            v = np.array([r["mean"] if name == "mean" or not r[name] else r["model"] for r in rs])
            stats[name] = (float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0)
        out[key] = stats
    return out


def predicted(r: dict[str, Any], rule: str) -> float:
    """Test MSE of what ``rule`` predicts in row ``r``: the model when it keeps it, else the mean."""
    return float(r["model"] if r[rule] else r["mean"])


def better_worse(rows: list[dict[str, Any]], mech: str, eps: float, rule: str) -> int:
    """-1, +1 or 0: ``rule`` better, worse than ``t`` beyond one SE of the paired difference."""
    mine = [r for r in rows if r["mechanism"] == mech and r["epsilon"] == eps]
    diff = np.array([predicted(r, rule) - predicted(r, "t") for r in mine])
    margin = (float(diff.std(ddof=1) / math.sqrt(diff.size)) if diff.size > 1 else 0.0) * (1 + 1e-9)
    if not np.any(diff != 0):
        return 0  # one changed trial has |mean| = SE exactly: neither better nor worse
    return -1 if diff.mean() < -margin else (1 if diff.mean() > margin else 0)


def render(doc: dict[str, Any]) -> str:
    first = next(iter(doc["sets"].values()))["rows"]
    rules = rules_in(first)
    alternatives = [r for r in ALTERNATIVES if r in rules]
    described = {
        "t": f"`t` (the current guard: keep the model iff mean gain > {MEAN_FALLBACK_Z:g} SE)",
        "capped": f"`capped` (the same test on the per-row gains capped from above at their {UPPER_QUANTILE:g} "
        "quantile)",
        "crossfit": "`crossfit` (the same test on gains of candidates chosen on the other half of the validation rows)",
    }
    lines = [
        "# The mean-fallback guard: the paired t test against " + ", ".join(f"`{a}`" for a in alternatives),
        "",
        f"Command: `{doc['command']}`",
        "",
        "- Rules: " + "; ".join(described[r] for r in rules) + ". All on ONE training per cell (the runner's "
        "release, split and recipe; the default learning).",
        "- Cell: test MSE of what the rule predicts (the model or the private mean), mean ± SE over trials; "
        "`mean`: the private-mean predictor. Over: cells more than one SE above `mean` (issue 12, item 1).",
        f"- Machine: AMD EPYC; {doc['seconds']:.0f} s; measured {doc['written']}.",
        "",
        "## Summary per data set",
        "",
        "| data set | trials | cells | "
        + " | ".join(f"rule `{r}`: over the mean" for r in rules)
        + " | "
        + " | ".join(f"`{a}` better, worse than `t` (1 SE of the paired difference)" for a in alternatives)
        + " | "
        + " | ".join(f"decisions of `{a}` that differ from `t`" for a in alternatives)
        + " |",
        "|---|---|---|" + "---|" * (len(rules) + 2 * len(alternatives)),
    ]
    detail: list[str] = []
    for name, part in doc["sets"].items():
        rows = part["rows"]
        summ = summarize(rows)
        over = dict.fromkeys(rules, 0)
        moved = {a: [0, 0] for a in alternatives}
        for (mech, eps), stats in summ.items():
            m = stats["mean"][0]
            for rule in rules:
                mu, se = stats[rule]
                over[rule] += mu > m + se
            for a in alternatives:
                side = better_worse(rows, mech, eps, a)
                if side:
                    moved[a][side > 0] += 1
        flips = {a: sum(r["t"] != r[a] for r in rows) for a in alternatives}
        lines.append(
            f"| `{name}` | {part['trials']} | {len(summ)} | "
            + " | ".join(str(over[r]) for r in rules)
            + " | "
            + " | ".join(f"{moved[a][0]}, {moved[a][1]}" for a in alternatives)
            + " | "
            + " | ".join(f"{flips[a]} of {len(rows)}" for a in alternatives)
            + " |"
        )
        detail += [
            "",
            f"## `{name}`: test MSE, mean ± SE over {part['trials']} trials",
            "",
            "| mechanism | ε | " + " | ".join(f"rule `{r}`" for r in rules) + " | private mean | decisions kept ("
            + " / ".join(rules) + ") |",
            "|---|---|" + "---|" * (len(rules) + 2),
        ]
        for (mech, eps), stats in sorted(summ.items(), key=lambda kv: (MECHANISMS.index(kv[0][0]), kv[0][1])):
            kept = [sum(r[rule] for r in rows if r["mechanism"] == mech and r["epsilon"] == eps) for rule in rules]
            cells = " | ".join(f"{stats[k][0]:.4g} ± {stats[k][1]:.2g}" for k in (*rules, "mean"))
            mark = " ◆" if len(set(kept)) > 1 else ""
            detail.append(f"| `{mech}` | {eps:g} | {cells} | {' / '.join(map(str, kept))}{mark} |")
    return "\n".join(lines + detail) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--housing", type=Path, help="california_housing.csv (the Housing sets are skipped without it)")
    parser.add_argument("--datasets", default=",".join(SETS))
    parser.add_argument("--mechanisms", default=",".join(MECHANISMS))
    parser.add_argument("--epsilons", default="0.05,0.1,0.3,0.5,1,2,4,8")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("research/results/mean_guard.md"))
    parser.add_argument("--from-measurements", action="store_true", help="render the report from the .json only")
    parser.add_argument("--merge", action="store_true",
                        help="keep the sets already in the .json beside --out and add (or replace) the ones run now")
    args = parser.parse_args(argv)
    saved = args.out.with_suffix(".json")
    if args.from_measurements:
        args.out.write_text(render(json.loads(saved.read_text())))
        return 0
    import torch

    torch.set_num_threads(args.threads)
    regression.Selection = _Recording  # type: ignore[misc]
    regression.Selector = _RecordingSelector  # type: ignore[misc]
    plans = utility.default_plans(housing=args.housing)
    names = [s for s in args.datasets.split(",") if s in plans]
    mechanisms = args.mechanisms.split(",")
    epsilons = [float(e) for e in args.epsilons.split(",")]
    started = time.perf_counter()
    command = "python research/studies/mean_guard.py " + " ".join(argv or [])
    doc: dict[str, Any] = {"command": command, "sets": {}}
    if args.merge and saved.is_file():  # one table from several runs (tables.toml: mean_guard_crossfit)
        earlier = json.loads(saved.read_text())
        doc = {"command": f"{earlier['command']}` and `{command}", "sets": earlier["sets"],
               "seconds": earlier.get("seconds", 0.0)}
    for name in names:
        plan = plans[name]
        data = plan.load()
        rows = []
        for trial in utility.protocol_trials(plan, data, args.trials, threads=args.threads):
            for mech in mechanisms:
                for eps in epsilons:
                    rows.append(one_cell(trial, name, mech, eps, data.domain))
                    r = rows[-1]
                    print(
                        f"[{name}] trial {trial.index} {mech} ε={eps:g}: model {r['model']:.4g} mean {r['mean']:.4g} "
                        + " ".join(f"{rule} {'keep' if r[rule] else 'mean'}" for rule in RULES),
                        flush=True,
                    )
        doc["sets"][name] = {"trials": args.trials, "rows": rows}
    doc["seconds"] = doc.get("seconds", 0.0) + time.perf_counter() - started
    doc["written"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(doc, indent=1))
    args.out.write_text(render(doc))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
