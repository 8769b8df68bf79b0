"""Tables (markdown), plots (PNG) and a JSON summary of one data set's protocol run."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from labeldp.benchmarks.references import ReferenceTable, references_for
from labeldp.benchmarks.utility import DEFAULT, NON_PRIVATE, Cell, RunResult, default_learner

REGRESSION_BLOCKS = ("test_mse",)
CLASSIFICATION_BLOCKS = ("test_accuracy", "mean_class_accuracy")
TITLES = {
    "mechanism_mse": "Mechanism MSE (true vs privatized training labels)",
    "label_accuracy": "Mechanism: fraction of training labels released unchanged",
    "test_mse": "Test MSE",
    "test_accuracy": "Test accuracy",
    "mean_class_accuracy": "Mean per-class test accuracy",
}


def eps_label(epsilon: float) -> str:
    return "∞" if math.isinf(epsilon) else f"{epsilon:g}"


def _decimals(value: float) -> int:
    a = abs(value)
    if a >= 1000:
        return 1
    if a >= 100:
        return 2
    if a >= 10:
        return 3
    return 4


def fmt_mean_std(values: np.ndarray) -> str:
    """'mean ± std' (sample std, ddof=1; 0 for a single trial), decimals by magnitude; '—' when empty."""
    if values.size == 0:
        return "—"
    mean = float(values.mean())
    std = float(values.std(ddof=1)) if values.size > 1 else 0.0
    d = _decimals(mean)
    return f"{mean:.{d}f} ± {std:.{d}f}"


def fmt_percent(values: np.ndarray) -> str:
    if values.size == 0:
        return "—"
    mean = float(values.mean()) * 100
    std = float(values.std(ddof=1)) * 100 if values.size > 1 else 0.0
    return f"{mean:+.1f}% ± {std:.1f}%"


def _stats(values: np.ndarray) -> tuple[float, float] | None:
    if values.size == 0:
        return None
    se = float(values.std(ddof=1) / math.sqrt(values.size)) if values.size > 1 else 0.0
    return float(values.mean()), se


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _mark_best(
    cells: dict[str, str], stats: dict[str, tuple[float, float] | None], higher_is_better: bool = False
) -> None:
    """Bold the best mean; † on every other cell within one standard error (its own std/√trials) of it."""
    finite = {k: v for k, v in stats.items() if v is not None}
    if not finite:
        return
    best = (max if higher_is_better else min)(finite, key=lambda k: finite[k][0])
    for k, (mean, se) in finite.items():
        if k == best:
            cells[k] = f"**{cells[k]}**"
        elif abs(mean - finite[best][0]) <= se:
            cells[k] += " †"


def metric_block(
    result: RunResult, metric: str, learner: str | None, *, higher_is_better: bool = False, mark_best: bool = True
) -> list[str]:
    """Rows ε, columns mechanisms, cells mean ± std; best mean **bold**, † within one SE of it.

    "Within one standard error": |mean − best| ≤ std/√trials of that cell.
    """
    rows = []
    for eps in result.epsilons:
        vals = {m: result.values(m, eps, metric, learner) for m in result.mechanisms}
        cells = {m: fmt_mean_std(v) for m, v in vals.items()}
        stats = {m: _stats(v) for m, v in vals.items()}
        if mark_best and not math.isinf(eps) and sum(v is not None for v in stats.values()) > 1:
            _mark_best(cells, stats, higher_is_better)
        rows.append([eps_label(eps)] + [cells[m] for m in result.mechanisms])
    return _table(["ε"] + [f"`{m}`" for m in result.mechanisms], rows)


def learner_block(result: RunResult, mechanism: str) -> list[str]:
    """Rows ε, columns learners, for one mechanism: mean ± standard error, best **bold**, † within one SE."""
    rows = []
    for eps in result.epsilons:
        if math.isinf(eps):
            continue
        stats = {lr: _stats(result.values(mechanism, eps, "test_mse", lr)) for lr in result.learners}
        cells = {
            lr: "—" if v is None else f"{v[0]:.{_decimals(v[0])}f} ± {v[1]:.{_decimals(v[0])}f}"
            for lr, v in stats.items()
        }
        _mark_best(cells, stats)
        rows.append([eps_label(eps)] + [cells[lr] for lr in result.learners])
    return _table(["ε"] + [f"`{lr}`" for lr in result.learners], rows)


def excess_block(result: RunResult, learner: str) -> list[str]:
    """(E − E∞)/E∞ per trial, paired with the same trial's non-private model."""
    rows = []
    for eps in result.epsilons:
        if math.isinf(eps):
            continue
        base = result.values(NON_PRIVATE, math.inf, "test_mse", learner)
        row = [eps_label(eps)]
        for m in result.mechanisms:
            v = result.values(m, eps, "test_mse", learner)
            k = min(v.size, base.size)
            row.append(fmt_percent((v[:k] - base[:k]) / base[:k]) if k else "—")
        rows.append(row)
    return _table(["ε"] + [f"`{m}`" for m in result.mechanisms], rows)


def selection_gap_block(result: RunResult, private: str = "private", oracle: str = "oracle") -> list[str]:
    """(E_private − E_oracle)/E_oracle per trial: what choosing on privatized validation labels costs."""
    rows = []
    for eps in result.epsilons:
        row = [eps_label(eps)]
        for m in result.mechanisms:
            p = result.values(m, eps, "test_mse", private)
            o = result.values(m, eps, "test_mse", oracle)
            k = min(p.size, o.size)
            row.append(fmt_percent((p[:k] - o[:k]) / o[:k]) if k else "—")
        rows.append(row)
    return _table(["ε"] + [f"`{m}`" for m in result.mechanisms], rows)


def best_block(result: RunResult, refs: list[ReferenceTable]) -> list[str]:
    """Per ε and learner: the mechanism with the lowest mean test MSE (mean ± standard error),
    beside the lowest mean the reference table reports at that ε."""
    ref = next((r for r in refs if r.metric == "test MSE"), None)
    header = (
        ["ε"]
        + [f"best with `{lr}`" for lr in result.learners]
        + ([f"best in {ref.citation.split(',')[0]}"] if ref else [])
    )
    rows = []
    for eps in result.epsilons:
        if math.isinf(eps):
            continue
        row = [eps_label(eps)]
        for lr in result.learners:
            raw = {m: _stats(result.values(m, eps, "test_mse", lr)) for m in result.mechanisms}
            stats = {m: v for m, v in raw.items() if v is not None}
            if not stats:
                row.append("—")
                continue
            m = min(stats, key=lambda k: stats[k][0])
            d = _decimals(stats[m][0])
            row.append(f"`{m}` {stats[m][0]:.{d}f} ± {stats[m][1]:.{d}f}")
        if ref:
            reported = {m: ref.get(eps, m) for m in ref.mechanisms}
            vals = {m: v for m, v in reported.items() if v is not None}
            row.append(f"`{min(vals, key=lambda k: vals[k][0])}` {min(v[0] for v in vals.values())}" if vals else "—")
        rows.append(row)
    return _table(header, rows)


DEPLOYABLE_LEARNERS = ("plain", "private")
"""Learners a features party can actually run (``oracle`` reads the true labels)."""


def default_goal_block(
    result: RunResult, refs: list[ReferenceTable], metric: str, *, higher_is_better: bool = False
) -> list[str]:
    """Per ε: the default configuration (``auto`` mechanism, default learning) against the best
    mean of every mechanism × deployable learner run beside it, and the reference table's best.

    Verdicts use the rule of the † marks: within one standard error (the default's std/√trials).
    """
    from labels_party.defaults import default_mechanism

    label_type = "categorical" if result.plan.task == "classification" else "real"
    field = [lr for lr in result.learners if lr in DEPLOYABLE_LEARNERS]
    ref = next((r for r in refs if r.metric == "test MSE" and r.goal), None) if metric == "test_mse" else None
    pick = max if higher_is_better else min
    rows = []
    for eps in result.epsilons:
        if math.isinf(eps):
            continue
        learner = default_learner(label_type, eps, result.learners)
        mine = _stats(result.values(DEFAULT, eps, metric, learner))
        if mine is None:
            continue
        candidates = {
            (m, lr): _stats(result.values(m, eps, metric, lr))
            for m in result.mechanisms
            if m != DEFAULT
            for lr in field
        }
        others = {k: v for k, v in candidates.items() if v is not None}
        if not others:
            continue
        (bm, bl) = pick(others, key=lambda k: others[k][0])
        best = others[(bm, bl)]
        d = _decimals(min(mine[0], best[0]))
        gap = (mine[0] - best[0]) if not higher_is_better else (best[0] - mine[0])
        if gap <= 0:
            verdict = "**best**"
        elif gap <= mine[1]:
            verdict = "within 1 SE"
        else:
            rel = gap / abs(best[0]) if best[0] else math.inf
            verdict = (
                f"NOT MET: {'+' if not higher_is_better else '−'}{rel:.1%} ({gap / mine[1]:.1f} SE)"
                if mine[1]
                else "NOT MET"
            )
        row = [
            eps_label(eps),
            f"`{default_mechanism(label_type, eps)}` / `{learner}` {mine[0]:.{d}f} ± {mine[1]:.{d}f}",
            f"`{bm}` / `{bl}` {best[0]:.{d}f} ± {best[1]:.{d}f}",
            verdict,
        ]
        if ref:
            vals = [v[0] for m in ref.mechanisms if (v := ref.get(eps, m)) is not None]
            if vals:
                theirs = min(vals)
                row += [f"{theirs:g}", "yes" if mine[0] <= theirs else f"no (+{mine[0] / theirs - 1:.1%})"]
            else:
                row += ["—", "—"]
        rows.append(row)
    header = [
        "ε",
        "default (mechanism / learner), mean ± SE",
        "best of every mechanism × learner, mean ± SE",
        "default vs best",
    ]
    if ref:
        header += [f"best in {ref.citation.split(',')[0]}", "default ≤ it?"]
    return _table(header, rows)


def reference_block(result: RunResult, ref: ReferenceTable) -> list[str]:
    mechs = ref.mechanisms
    rows = []
    for eps in result.epsilons:
        cells = []
        for m in mechs:
            v = ref.get(eps, m)
            cells.append("—" if v is None else f"{v[0]} ± {v[1]}")
        if any(c != "—" for c in cells):
            rows.append([eps_label(eps)] + cells)
    if not rows:
        return []
    header = [f"`{m}`" + (" (their “Ours”)" if m == "rp_with_prior" else "") for m in mechs]
    return _table(["ε"] + header, rows)


def _describe_learner(name: str, info: dict[str, Any]) -> str:
    kind = info.get("learner")
    if kind == "fit_regressor":
        return (
            "`fit_regressor` on the privatized labels as they are, every training row, last epoch "
            "(the papers' protocol)"
        )
    if kind == "fit_private_regressor":
        learning = ", ".join(f"{k}={v}" for k, v in info.get("learning", {}).items())
        held = f"{info.get('validation_fraction', 0):.0%} of the training rows held out for selection"
        if name == "oracle":
            return (
                f"the same training run as `private`, but epoch and shrinkage chosen with the TRUE validation "
                f"labels ({held}) — not private, a yardstick for the private selection"
            )
        return f"`fit_private_regressor`, the default `LearningConfig` ({learning}); {held}, scored privately"
    if kind == "fit_classifier":
        return "`fit_classifier` on the privatized classes as they are, last epoch"
    return str(info or name)


def write_markdown(result: RunResult, path: str | Path, *, command: str | None = None, quick: bool = False) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    env = result.environment
    plan = result.plan
    classification = plan.task == "classification"
    title = f"# Utility benchmark: `{plan.name}`" + (" — QUICK RUN (preliminary)" if quick else "")
    lines = [title, ""]
    if quick:
        lines += [
            "> **Quick run**: fewer trials, ε values and epochs than the protocol. Preliminary numbers;",
            "> the full protocol is the same command without `--quick`.",
            "",
        ]
    command = command or result.command
    if command:
        lines += [f"Command: `{command}`", ""]
    if result.rendered_from:
        lines += [
            f"Re-rendered by `labeldp bench report {result.rendered_from}` from the cells that command computed"
            " (none recomputed; the `default` column follows today's `labels_party.defaults`).",
            "",
        ]
    recipe = plan.training
    lines += [
        f"- **Data**: {result.data_description}; {result.n_rows:,} rows, {result.n_features} feature columns.",
        f"- **Protocol**: {result.trials} trials, each a new 80/20 split "
        f"({result.n_train:,} train / {result.n_test:,} test)"
        " and a new seed; the labels party privatizes the training labels with the catalogue's randomizer at the"
        " default ε₁/ε₂ split; every mechanism trains with the same recipe, initialization and batch order within a"
        " trial; ε = ∞ is the model trained on the true labels.",
    ]
    if plan.note:
        lines.append(f"- **Note**: {plan.note}.")
    lines.append(f"- **Training**: {recipe.describe()}; trained on {result.n_train_fit:,} rows.")
    lines.append("- **Learners** (what the features party does with the release; all post-processing):")
    lines += [f"  - `{name}`: {_describe_learner(name, result.learner_info.get(name, {}))}" for name in result.learners]
    lines += [
        f"- **Machine**: {env['cpu']}, {env['cores']} cores (torch threads {env['torch_threads']}); "
        f"device **{env['device']}**.",
        f"- **Versions**: Python {env['python']}, torch {env['torch']}, numpy {env['numpy']}, numba {env['numba']},"
        f" labeldp commit `{env['labeldp_commit'] or 'unknown'}`.",
        f"- **Wall time**: {result.wall_seconds:.0f} s for this invocation ({result.computed} cells computed,"
        f" {result.cached} read from the cache); {result.compute_seconds:.0f} s to compute all cells.",
        f"- Written {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}.",
        "",
    ]
    errors = [c for c in result.cells if c.error]
    if errors:
        lines += [
            "**Failed cells**: "
            + "; ".join(f"{c.mechanism} ε={eps_label(c.epsilon)} trial {c.trial}: {c.error}" for c in errors),
            "",
        ]

    if classification:
        lines += [f"## {TITLES['label_accuracy']}", ""]
        lines += metric_block(result, "label_accuracy", None, higher_is_better=True, mark_best=False) + [""]
        for learner in result.learners:
            for metric in CLASSIFICATION_BLOCKS:
                lines += [f"## {TITLES[metric]} — learner `{learner}`, mean ± std over {result.trials} trials", ""]
                lines += ["**bold**: highest mean in the row; †: within one standard error (std/√trials) of it.", ""]
                lines += metric_block(result, metric, learner, higher_is_better=True) + [""]
        if any(m == DEFAULT for m in result.mechanisms):
            for metric in CLASSIFICATION_BLOCKS:
                lines += [f"## The default configuration against the field: {TITLES[metric].lower()}", ""]
                lines += [
                    '`mechanism: "auto"` against the highest mean of every other mechanism; '
                    "± is the standard error std/√trials.",
                    "",
                ]
                lines += default_goal_block(result, [], metric, higher_is_better=True) + [""]
    else:
        lines += [f"## {TITLES['mechanism_mse']}, mean ± std over {result.trials} trials", ""]
        lines += metric_block(result, "mechanism_mse", None) + [""]
        for learner in result.learners:
            lines += [f"## Test MSE — learner `{learner}`, mean ± std over {result.trials} trials", ""]
            lines += ["**bold**: lowest mean in the row; †: within one standard error (std/√trials) of it.", ""]
            lines += metric_block(result, "test_mse", learner) + [""]
            lines += [f"## Relative excess test MSE over the non-private model — learner `{learner}`", ""]
            lines += ["(E − E∞)/E∞ per trial, paired with the same trial's non-private model; mean ± std.", ""]
            lines += excess_block(result, learner) + [""]
        single = [m for m in result.mechanisms if m != DEFAULT]
        if len(single) == 1 and len(result.learners) > 1:  # a learner experiment: compare the learners directly
            lines += [f"## Learners side by side — `{single[0]}`, test MSE, mean ± SE", ""]
            lines += ["**bold**: lowest mean in the row; †: within one standard error (std/√trials) of it.", ""]
            lines += learner_block(result, single[0]) + [""]
        if "private" in result.learners and "oracle" in result.learners:
            lines += ["## Private vs oracle model selection", ""]
            lines += [
                "(E_private − E_oracle)/E_oracle per trial: both models come from the same training run; the "
                "oracle picks epoch and shrinkage with the true validation labels. Mean ± std.",
                "",
            ]
            lines += selection_gap_block(result) + [""]
        if any(m == DEFAULT for m in result.mechanisms):
            lines += ["## The default configuration against the field", ""]
            lines += [
                'What a user gets without tuning (`mechanism: "auto"`, the features party\'s default learning) '
                "against the lowest mean test MSE of every other mechanism with every learner a features party "
                "can run (`plain`, `private`; not `oracle`). ± is the standard error std/√trials.",
                "",
            ]
            lines += default_goal_block(result, references_for(plan.reference), "test_mse") + [""]
        lines += ["## Best mechanism per ε (lowest mean test MSE; ± is the standard error std/√trials)", ""]
        lines += best_block(result, references_for(plan.reference)) + [""]
        for ref in references_for(plan.reference):
            block = reference_block(result, ref)
            if block:
                lines += [f"## Reference: {ref.citation} — {ref.metric}, mean ± std", ""]
                if ref.caveat:
                    lines += [f"Their setup: {ref.caveat}.", ""]
                lines += block + [""]
    lines += [f"Plot: [{Path(path).with_suffix('.png').name}]({Path(path).with_suffix('.png').name})", ""]
    path.write_text("\n".join(lines))
    return path


def write_plot(result: RunResult, path: str | Path) -> Path:
    """Per mechanism against ε (log x): the mechanism block and each learner's test block."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    classification = result.plan.task == "classification"
    panels: list[tuple[str, str | None]] = [("label_accuracy" if classification else "mechanism_mse", None)]
    for lr in result.learners:
        panels += [(m, lr) for m in (CLASSIFICATION_BLOCKS if classification else REGRESSION_BLOCKS)]
    finite = [e for e in result.epsilons if not math.isinf(e)]
    ncols = min(2, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, grid = plt.subplots(nrows, ncols, figsize=(6.0 * ncols, 4.4 * nrows), squeeze=False)
    axes = list(grid.flat)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    for ax, (metric, learner) in zip(axes, panels):
        for m in result.mechanisms:
            xs, ys, es = [], [], []
            for e in finite:
                v = result.values(m, e, metric, learner)
                if v.size:
                    xs.append(e)
                    ys.append(v.mean())
                    es.append(v.std(ddof=1) if v.size > 1 else 0.0)
            if xs:
                ax.errorbar(xs, ys, yerr=es, marker="o", ms=3, capsize=2, label=m)
        if learner is not None:
            base = result.values(NON_PRIVATE, math.inf, metric, learner)
            if base.size:
                ax.axhline(base.mean(), color="k", ls="--", lw=1, label="non-private (ε = ∞)")
        ax.set_xscale("log")
        if finite:
            ax.set_xticks(finite)
            ax.set_xticklabels([f"{e:g}" for e in finite], fontsize=7)
        ax.xaxis.set_minor_formatter(NullFormatter())
        if not classification:
            ax.set_yscale("log")
            ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("ε")
        ax.set_title(TITLES[metric] + (f" [{learner}]" if learner else ""), fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    learner_axes = [ax for ax, (_, learner) in zip(axes, panels) if learner is not None]
    if len(learner_axes) > 1:  # one scale for every learner, so the panels compare by eye
        lows, highs = zip(*(ax.get_ylim() for ax in learner_axes))
        for ax in learner_axes:
            ax.set_ylim(min(lows), max(highs))
    axes[len(panels) - 1].legend(fontsize=7)
    fig.suptitle(f"{result.plan.name}: {result.trials} trials, mean ± std", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


SUMMARY_FORMAT = 2


def _eps_json(epsilon: float) -> float | str:
    return "inf" if math.isinf(epsilon) else epsilon


def _eps_from_json(value: float | str) -> float:
    return math.inf if value == "inf" else float(value)


def summary(result: RunResult, *, command: str | None = None, quick: bool = False) -> dict[str, Any]:
    """Per-trial values of every block (JSON-ready), for later analysis without rerunning.

    ``raw_cells`` holds every computed cell as it was cached, so :func:`result_from_summary`
    can rebuild the run and re-render its tables (a changed default rule, a new block)
    without recomputing a single cell.
    """
    metrics = ["label_accuracy"] if result.plan.task == "classification" else ["mechanism_mse"]
    learner_metrics = CLASSIFICATION_BLOCKS if result.plan.task == "classification" else REGRESSION_BLOCKS
    rows = []
    for eps in result.epsilons:
        for m in result.mechanisms:
            entry: dict[str, Any] = {"mechanism": m, "epsilon": _eps_json(eps)}
            for metric in metrics:
                entry[metric] = result.values(m, eps, metric).tolist()
            for learner in result.learners:
                for metric in learner_metrics:
                    entry[f"{learner}.{metric}"] = result.values(m, eps, metric, learner).tolist()
            rows.append(entry)
    plan = result.plan
    return {
        "format": SUMMARY_FORMAT,
        "dataset": plan.name,
        "command": command or result.command,
        "quick": quick,
        "plan": {
            "task": plan.task,
            "reference": plan.reference,
            "note": plan.note,
            "train_rows": plan.train_rows,
            "recipe": plan.training.model_dump(),
        },
        "description": result.data_description,
        "trials": result.trials,
        "n_rows": result.n_rows,
        "n_features": result.n_features,
        "n_train": result.n_train,
        "n_test": result.n_test,
        "n_train_fit": result.n_train_fit,
        "epsilons": [_eps_json(e) for e in result.epsilons],
        "mechanisms": [m for m in result.mechanisms if m != DEFAULT],
        "learners": result.learners,
        "learner_info": result.learner_info,
        "training": result.config,
        "environment": result.environment,
        "wall_seconds": result.wall_seconds,
        "compute_seconds": result.compute_seconds,
        "cells": rows,
        "raw_cells": [
            {
                "mechanism": c.mechanism,
                "epsilon": _eps_json(c.epsilon),
                "trial": c.trial,
                "mechanism_metrics": c.mechanism_metrics,
                "learners": c.learners,
                "seconds": c.seconds,
                "error": c.error,
            }
            for c in result.cells
            if c.mechanism != DEFAULT
        ],
    }


def _cells_from_rows(doc: dict[str, Any]) -> list[Cell]:
    """Cells of a format-1 summary (per-trial lists only). Trial = position in the list, which
    holds when no cell failed (a failed cell is listed in the markdown, never in these lists).
    Every column's ε = ∞ row repeats the non-private cells: they are read once, from the first."""
    cells: dict[tuple[str, float, int], Cell] = {}
    seen_inf = False
    for row in doc["cells"]:
        mech, eps = row["mechanism"], _eps_from_json(row["epsilon"])
        if mech == DEFAULT:
            continue  # re-derived from today's rule
        if math.isinf(eps):
            if seen_inf:
                continue
            seen_inf, mech = True, NON_PRIVATE
        for key, values in row.items():
            if key in ("mechanism", "epsilon"):
                continue
            learner, _, metric = key.rpartition(".")
            for t, v in enumerate(values):
                cell = cells.setdefault((mech, eps, t), Cell(mech, eps, t, {}, {}, 0.0, cached=True))
                if learner:
                    cell.learners.setdefault(learner, {})[metric] = v
                else:
                    cell.mechanism_metrics[metric] = v
    out = list(cells.values())
    for c in out:  # only the total was kept: spread it so the report's total stays right
        c.seconds = doc.get("compute_seconds", 0.0) / max(1, len(out))
    return out


def result_from_summary(doc: dict[str, Any], *, source: str | None = None) -> RunResult:
    """Rebuild a :class:`RunResult` from :func:`summary`'s JSON (format 1 or 2).

    The cells are the ones computed then; the ``default`` column is derived again from
    today's ``labels_party.defaults`` rule, so a re-render shows the current default.
    """
    from labeldp.benchmarks import utility

    name = doc["dataset"]
    meta = doc.get("plan")
    if meta is None:  # format 1: the plan's metadata comes from the runner's own table of data sets
        known = utility.default_plans(housing=None)
        base = known.get(name)
        task = "classification" if any("test_accuracy" in k for k in doc["cells"][0]) else "regression"
        recipe = base.training if base else utility.LIU_HUANG_TRAINING
        reference = base.reference if base else ("liu_huang_housing" if name == "california_housing" else None)
        meta = {
            "task": task,
            "reference": reference,
            "note": base.note if base else "",
            "train_rows": base.train_rows if base else None,
            "recipe": recipe.model_dump(),
        }
        raw = _cells_from_rows(doc)
    else:
        raw = [
            Cell(
                c["mechanism"],
                _eps_from_json(c["epsilon"]),
                c["trial"],
                c["mechanism_metrics"],
                c["learners"],
                c["seconds"],
                cached=True,
                error=c.get("error"),
            )
            for c in doc["raw_cells"]
        ]

    def not_loadable() -> Any:
        raise RuntimeError(f"{name}: a re-rendered run has no data loader; rerun `labeldp bench utility`")

    plan = utility.DatasetPlan(
        name,
        not_loadable,
        {},
        utility.TrainingRecipe(**meta["recipe"]),
        task=meta["task"],
        train_rows=meta["train_rows"],
        reference=meta["reference"],
        note=meta["note"],
    )
    rows = doc["cells"]
    epsilons = doc.get("epsilons") or list(dict.fromkeys(r["epsilon"] for r in rows))
    epsilons = [_eps_from_json(e) for e in epsilons]
    mechanisms = doc.get("mechanisms") or [m for m in dict.fromkeys(r["mechanism"] for r in rows) if m != DEFAULT]
    learners = doc.get("learners") or list(dict.fromkeys(k.rpartition(".")[0] for r in rows for k in r if "." in k))
    label_type = "categorical" if plan.task == "classification" else "real"
    cells = raw + utility.default_cells(raw, label_type, mechanisms)
    if any(c.mechanism == DEFAULT for c in cells):
        mechanisms = [DEFAULT, *mechanisms]
    return RunResult(
        plan=plan,
        data_description=doc["description"],
        n_rows=doc["n_rows"],
        n_features=doc.get("n_features", 0),
        n_train=doc["n_train"],
        n_test=doc["n_test"],
        n_train_fit=doc["n_train_fit"],
        trials=doc["trials"],
        epsilons=epsilons,
        mechanisms=mechanisms,
        learners=learners,
        cells=cells,
        config=doc.get("training", {}),
        environment=doc["environment"],
        wall_seconds=0.0,
        computed=0,
        cached=len(raw),
        cache_dir="",
        learner_info=doc.get("learner_info", {}),
        command=doc.get("command"),
        rendered_from=source,
    )


def write_all(result: RunResult, out_dir: str | Path, *, command: str | None = None, quick: bool = False) -> list[Path]:
    """utility_<data set>.md, .png and .json in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"utility_{result.plan.name}"
    md = write_markdown(result, stem.with_suffix(".md"), command=command, quick=quick)
    png = write_plot(result, stem.with_suffix(".png"))
    js = stem.with_suffix(".json")
    js.write_text(json.dumps(summary(result, command=command, quick=quick), indent=1))
    return [md, png, js]
