"""Tables (markdown), plots (PNG) and a JSON summary of one data set's protocol run."""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from labeldp_research.references import ReferenceTable, references_for
from labeldp_research.utility import AUTO, DEFAULT, NON_PRIVATE, Cell, RunResult, default_learner

REGRESSION_BLOCKS = ("test_mse",)
RATIO = "test_mse_ratio"
"""The plot's fair-comparison panel: a mechanism's test MSE over the same learner's non-private one."""
CLASSIFICATION_BLOCKS = ("test_accuracy", "mean_class_accuracy")
TITLES = {
    "mechanism_mse": "Mechanism MSE (true vs privatized training labels)",
    "private_mean_mse": "Test MSE of the private-mean predictor",
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


LARGE = 1e5
"""From here on a value is written with a power-of-ten suffix and the digits its spread supports
(a house price's squared error was printed as ``23510325409.8 ± 371884140.0``)."""

_SUFFIXES = {3: "k", 6: "M", 9: "G", 12: "T", 15: "P"}


def fmt_pair(mean: float, spread: float) -> str:
    """'mean ± spread': below ``LARGE`` with decimals by magnitude (as every table always had);
    from ``LARGE`` on in engineering notation (k, M, G, … or e±N), both rounded to the spread's
    second significant digit and at least three significant digits of the mean:
    ``23.51 G ± 0.37 G``."""
    if abs(mean) < LARGE:
        d = _decimals(mean)
        return f"{mean:.{d}f} ± {spread:.{d}f}"
    exponent = 3 * math.floor(math.log10(abs(mean)) / 3)
    scale = 10.0**exponent
    m, sp = mean / scale, spread / scale
    digits = max(0, 2 - math.floor(math.log10(abs(m))))  # three significant digits of the mean at least
    if sp > 0:
        digits = max(digits, min(6, 1 - math.floor(math.log10(sp))))
    suffix = _SUFFIXES.get(exponent, f"e{exponent}")
    unit = f" {suffix}" if exponent in _SUFFIXES else suffix
    return f"{m:.{digits}f}{unit} ± {sp:.{digits}f}{unit}"


def fmt_mean_std(values: np.ndarray) -> str:
    """'mean ± std' (sample std, ddof=1; 0 for a single trial), digits by :func:`fmt_pair`; '—' when empty."""
    if values.size == 0:
        return "—"
    mean = float(values.mean())
    std = float(values.std(ddof=1)) if values.size > 1 else 0.0
    return fmt_pair(mean, std)


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
            lr: "—" if v is None else fmt_pair(v[0], v[1])
            for lr, v in stats.items()
        }
        _mark_best(cells, stats)
        rows.append([eps_label(eps)] + [cells[lr] for lr in result.learners])
    return _table(["ε"] + [f"`{lr}`" for lr in result.learners], rows)


MEAN_FLOOR = "private_mean_mse"
"""The constant every release affords for free: its private mean (``utility.mean_predictors``)."""


def single_mechanisms(result: RunResult) -> list[str]:
    """The run's mechanisms less the ``default`` column, or that column alone where the run is the product's
    ``auto`` release only (``--mechanisms auto``)."""
    return [m for m in result.mechanisms if m != DEFAULT] or [m for m in result.mechanisms if m == DEFAULT]


def has_mean_floor(result: RunResult) -> bool:
    return any(MEAN_FLOOR in c.mechanism_metrics for c in result.cells)


def mean_floor_misses(result: RunResult, learner: str) -> list[tuple[str, float, float]]:
    """(mechanism, ε, mean gap) of every cell where ``learner`` is worse than its own release's
    private mean by more than one standard error (its std/√trials, the † rule)."""
    misses = []
    for eps in result.epsilons:
        if math.isinf(eps):
            continue
        for m in single_mechanisms(result):
            learned = _stats(result.values(m, eps, "test_mse", learner))
            floor = _stats(result.values(m, eps, MEAN_FLOOR))
            if learned is not None and floor is not None and learned[0] - floor[0] > learned[1]:
                misses.append((m, eps, learned[0] - floor[0]))
    return misses


def mean_floor_block(result: RunResult) -> list[str]:
    """Rows ε, columns mechanisms: each release's private mean (and, last, the true training mean)."""
    rows = []
    mechanisms = single_mechanisms(result)
    for eps in result.epsilons:
        if math.isinf(eps):
            continue
        cells = [fmt_mean_std(result.values(m, eps, MEAN_FLOOR)) for m in mechanisms]
        truth = result.values(mechanisms[0], eps, "training_mean_mse")  # the same true labels in every column
        rows.append([eps_label(eps), *cells, fmt_mean_std(truth)])
    return _table(["ε"] + [f"`{m}`" for m in mechanisms] + ["true training mean (not private)"], rows)


def mean_floor_note(result: RunResult, learner: str) -> list[str]:
    """One line under a learner's table: its cells worse than their release's private mean."""
    misses = mean_floor_misses(result, learner)
    total = sum(1 for e in result.epsilons if not math.isinf(e)) * len(single_mechanisms(result))
    if not misses:
        return [f"Worse than its release's private mean by more than one SE: none of {total} cells.", ""]
    listed = "; ".join(f"`{m}` ε={eps_label(e)} (+{gap:.4g})" for m, e, gap in misses)
    return [f"Worse than its release's private mean by more than one SE: {len(misses)} of {total} cells: {listed}.", ""]


def relative_excess(result: RunResult, mechanism: str, epsilon: float, learner: str) -> np.ndarray:
    """(E − E∞)/E∞ per trial, paired with the same trial's non-private model of the same learner."""
    base = result.values(NON_PRIVATE, math.inf, "test_mse", learner)
    v = result.values(mechanism, epsilon, "test_mse", learner)
    k = min(v.size, base.size)
    return (v[:k] - base[:k]) / base[:k]


def paper_excess(ref: ReferenceTable, epsilon: float, mechanism: str) -> float | None:
    """The paper's relative excess: its value at ε over its own non-private value, minus 1
    (issue 12: the fair comparison, since its non-private model is not ours)."""
    v, base = ref.get(epsilon, mechanism), ref.get(math.inf, mechanism)
    if v is None or base is None or base[0] <= 0:
        return None
    return v[0] / base[0] - 1.0


def paper_best_excess(ref: ReferenceTable, epsilon: float) -> tuple[str, float] | None:
    """The paper's lowest relative excess at ε and whose it is."""
    found = {m: e for m in ref.mechanisms if (e := paper_excess(ref, epsilon, m)) is not None}
    if not found:
        return None
    best = min(found, key=lambda m: found[m])
    return best, found[best]


def _test_reference(refs: list[ReferenceTable]) -> ReferenceTable | None:
    return next((r for r in refs if r.metric == "test MSE"), None)


def excess_block(result: RunResult, learner: str, ref: ReferenceTable | None = None) -> list[str]:
    """(E − E∞)/E∞ per trial, paired with the same trial's non-private model; where ``ref`` reports
    the mechanism, the paper's own relative excess beside it (their value over their ε = ∞ value)."""
    rows = []
    for eps in result.epsilons:
        if math.isinf(eps):
            continue
        row = [eps_label(eps)]
        for m in result.mechanisms:
            v = relative_excess(result, m, eps, learner)
            cell = fmt_percent(v) if v.size else "—"
            theirs = paper_excess(ref, eps, m) if ref is not None else None
            row.append(cell + (f" (paper {theirs:+.1%})" if theirs is not None else ""))
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
            row.append(f"`{m}` {fmt_pair(*stats[m])}")
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
    from labeldp.release.defaults import default_mechanism

    label_type = "categorical" if result.plan.task == "classification" else "real"

    def pick_of(eps: float) -> str:
        return default_mechanism(label_type, eps, result.n_train_fit)

    field = [lr for lr in result.learners if lr in DEPLOYABLE_LEARNERS]
    ref = next((r for r in refs if r.metric == "test MSE" and r.goal), None) if metric == "test_mse" else None
    fair = _test_reference(refs) if metric == "test_mse" else None
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
            f"`{pick_of(eps)}` / `{learner}` {mine[0]:.{d}f} ± {mine[1]:.{d}f}",
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
        if fair:
            excess = _stats(relative_excess(result, DEFAULT, eps, learner))
            best_theirs = paper_best_excess(fair, eps)
            row.append("—" if excess is None else f"{excess[0]:+.1%} ± {excess[1]:.1%}")
            if best_theirs is None or excess is None:
                row += ["—", "—"]
            else:
                behind = excess[0] - best_theirs[1]
                fair_verdict = "yes" if behind <= 0 else "within 1 SE" if behind <= excess[1] else None
                row += [
                    f"{best_theirs[1]:+.1%} (`{best_theirs[0]}`)",
                    fair_verdict or f"no ({behind * 100:+.1f} points)",
                ]
        rows.append(row)
    header = [
        "ε",
        "default (mechanism / learner), mean ± SE",
        "best of every mechanism × learner, mean ± SE",
        "default vs best",
    ]
    if ref:
        header += [f"best in {ref.citation.split(',')[0]}", "default ≤ it?"]
    if fair:
        header += [
            "default's excess over its non-private model, mean ± SE",
            f"best excess in {fair.citation.split(',')[0]}",
            "default's excess ≤ it?",
        ]
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
    if kind == "raw_feature_mlp":
        return (
            "Liu & Huang's learner (`benchmarks/paper_learner.py`): the same 3-layer ReLU network on the features "
            "and privatized labels as they are, unscaled (\"we use the data directly\"), every training row, "
            "last epoch — a yardstick for their absolute numbers, not a features-party learner"
        )
    if not info and name in _LEARNERS_BY_NAME:  # summaries written before learners were recorded
        return _LEARNERS_BY_NAME[name] + " (its settings were not recorded in this summary)"
    return str(info or name)


_LEARNERS_BY_NAME = {
    "plain": "the privatized labels as they are, every training row, last epoch (the papers' protocol)",
    "private": "`fit_private_regressor`: debiasing, shrinkage and epoch chosen on a privatized validation split",
    "oracle": "the `private` training run with epoch and shrinkage chosen on the TRUE validation labels (not private)",
}


FEW_TRIALS = 5
"""Below this many trials the † marks ("within one standard error") and the picks rest on a
standard error from too few values to trust: the report and the command warn."""


def few_trials_warning(result: RunResult) -> str | None:
    if result.trials >= FEW_TRIALS:
        return None
    return (
        f"only {result.trials} trial(s) per cell: standard errors, † marks and the picks below are unreliable "
        f"below {FEW_TRIALS} trials (run with --trials {FEW_TRIALS} or more)"
    )


def _mechanism_name(mechanism: str) -> str:
    return "auto" if mechanism == DEFAULT else mechanism


def recommendations(result: RunResult) -> list[str]:
    """One line per finite ε: the mechanism (the advertiser's choice, at release) and the learner
    (the publisher's, at training) with the lowest mean test MSE among deployable learners, its
    test RMSE in the label's units beside the private mean's, both ± a standard error."""
    metric = "test_accuracy" if result.plan.task == "classification" else "test_mse"
    field = [lr for lr in result.learners if lr in DEPLOYABLE_LEARNERS] or [
        lr for lr in result.learners if lr != "oracle"
    ]
    lines = []
    for eps in result.epsilons:
        if math.isinf(eps):
            continue
        stats = {
            (m, lr): v for m in result.mechanisms for lr in field
            if (v := _stats(result.values(m, eps, metric, lr))) is not None
        }
        if not stats:
            continue
        pick = max if metric == "test_accuracy" else min
        mech, learner = pick(stats, key=lambda k: stats[k][0])
        mean, se = stats[(mech, learner)]
        head = f"at ε = {eps_label(eps)}, use `{_mechanism_name(mech)}` (advertiser) with `{learner}` (publisher)"
        if metric == "test_accuracy":
            lines.append(f"{head}: test accuracy {mean:.1%} ± {se:.1%}")
            continue
        rmse, rmse_se = math.sqrt(max(mean, 0.0)), (se / (2 * math.sqrt(mean)) if mean > 0 else 0.0)
        line = f"{head}: test RMSE {fmt_pair(rmse, rmse_se)} (label units)"
        floor = _stats(result.values(mech, eps, MEAN_FLOOR, None)) if has_mean_floor(result) else None
        if floor is not None and floor[0] > 0:
            root = math.sqrt(floor[0])
            line += f", predicting the private mean {fmt_pair(root, floor[1] / (2 * root))}"
        lines.append(line)
    return lines


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
    warning = few_trials_warning(result)
    if warning:
        lines += [f"> **Warning**: {warning}.", ""]
    command = command or result.command
    if command:
        lines += [f"Command: `{command}`", ""]
    if result.rendered_from:
        lines += [
            f"Re-rendered by `python -m labeldp_research report {result.rendered_from}` from the cells that command"
            " computed"
            + (" (none recomputed; the `default` column is the run's own `auto` releases)."
               if any(c.mechanism == AUTO for c in result.cells)
               else " (none recomputed; the `default` column follows today's `labeldp.release.defaults`)."),
            "",
        ]
    recipe = plan.training
    lines += [
        f"- **Data**: {result.data_description}; {result.n_rows:,} rows"
        + (f", {result.n_features} feature columns." if result.n_features else "."),
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
        f"device **{env['device']}**"
        + (f"; 1-minute load average {env['load_average'][0]:.1f} before, {env['load_average'][1]:.1f} after."
           if env.get("load_average") else "."),
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
        if has_mean_floor(result):
            lines += [f"## {TITLES[MEAN_FLOOR]}, mean ± std over {result.trials} trials", ""]
            lines += [
                "Each release's private mean (its privatized training labels' mean, debiased as a prediction is: "
                "post-processing, no ε) predicted for every test row: the floor no learner should be above. The "
                "last column, the true training labels' mean, is not private (a yardstick).",
                "",
            ]
            lines += mean_floor_block(result) + [""]
        for learner in result.learners:
            lines += [f"## Test MSE — learner `{learner}`, mean ± std over {result.trials} trials", ""]
            lines += ["**bold**: lowest mean in the row; †: within one standard error (std/√trials) of it.", ""]
            lines += metric_block(result, "test_mse", learner) + [""]
            if has_mean_floor(result):
                lines += mean_floor_note(result, learner)
            fair = _test_reference(references_for(plan.reference))
            lines += [f"## Relative excess test MSE over the non-private model — learner `{learner}`", ""]
            lines += [
                "(E − E∞)/E∞ per trial, paired with the same trial's non-private model; mean ± std."
                + (
                    f" Beside it, in parentheses, the paper's own relative excess ({fair.citation}: its value at ε "
                    "over its own ε = ∞ value, a ratio of means): the fair comparison, since its non-private model "
                    "is not ours."
                    if fair
                    else ""
                ),
                "",
            ]
            lines += excess_block(result, learner, fair) + [""]
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
                "can run (`plain`, `private`; not `oracle`). ± is the standard error std/√trials."
                + (
                    " The last three columns are the fair comparison with the paper: the default's mean relative "
                    "excess over the same learner's non-private model against the paper's lowest relative excess "
                    "over its own non-private model."
                    if _test_reference(references_for(plan.reference))
                    else ""
                ),
                "",
            ]
            lines += default_goal_block(result, references_for(plan.reference), "test_mse") + [""]
        picks = recommendations(result)
        if picks:
            lines += [
                "## What to use",
                "",
                "The advertiser picks the mechanism (at release), the publisher the learner (at training); "
                "per ε the pair with the lowest mean test MSE, ± its standard error, in the label's units.",
                "",
                *[f"- {p}" for p in picks],
                "",
            ]
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


YLABELS = {
    "mechanism_mse": "MSE, privatized vs true training label",
    "label_accuracy": "fraction of labels unchanged",
    "test_mse": "test MSE",
    "test_accuracy": "test accuracy",
    "mean_class_accuracy": "mean per-class test accuracy",
    RATIO: "test MSE ÷ same learner's non-private test MSE",
}
CLIP_FACTOR = 8.0
"""A curve peaking more than this many times above every other curve is clipped (its points
above the axis drawn as ▲ at the top edge), so it cannot squeeze the rest into a line."""


@dataclass
class _Curve:
    eps: list[float]
    means: list[float]
    stds: list[float]


def _curves(result: RunResult, metric: str, learner: str | None) -> dict[str, _Curve]:
    """Mean ± std per finite ε of each mechanism; ``RATIO`` is E/E∞ paired per trial."""
    out = {}
    for m in result.mechanisms:
        curve = _Curve([], [], [])
        for e in result.epsilons:
            if math.isinf(e):
                continue
            if metric == RATIO:
                assert learner is not None
                v = 1.0 + relative_excess(result, m, e, learner)
            else:
                v = result.values(m, e, metric, learner)
            if v.size:
                curve.eps.append(e)
                curve.means.append(float(v.mean()))
                curve.stds.append(float(v.std(ddof=1)) if v.size > 1 else 0.0)
        if curve.eps:
            out[m] = curve
    return out


def clip_top(peaks: list[float]) -> float | None:
    """The top of a readable log y-range, or None to keep matplotlib's: when the highest curve
    peaks more than ``CLIP_FACTOR`` times above the next highest, 3× that next peak."""
    ordered = sorted((p for p in peaks if p > 0), reverse=True)
    if len(ordered) >= 2 and ordered[0] > CLIP_FACTOR * ordered[1]:
        return 3.0 * ordered[1]
    return None


def _grid(panels: int) -> tuple[int, int, bool]:
    """(rows, columns, legend in a slot of its own): no grid cell is ever left empty."""
    if panels == 1:
        return 1, 2, True
    for ncols in (2, 3, 4):
        if (panels + 1) % ncols == 0 and (panels + 1) // ncols <= ncols:
            return (panels + 1) // ncols, ncols, True
    for ncols in (2, 3, 4):
        if panels % ncols == 0:
            return panels // ncols, ncols, False
    return 1, panels, False


def _reference_for(metric: str, refs: list[ReferenceTable]) -> ReferenceTable | None:
    wanted = "mechanism MSE" if metric == "mechanism_mse" else "test MSE"
    if metric not in ("mechanism_mse", "test_mse", RATIO):
        return None
    return next((r for r in refs if r.metric == wanted), None)


def _paper_point(ref: ReferenceTable, metric: str, epsilon: float, mechanism: str) -> float | None:
    """The paper's value for a panel: its mean, or for the fair-comparison panel its ratio to its ε = ∞ mean."""
    if metric == RATIO:
        excess = paper_excess(ref, epsilon, mechanism)
        return None if excess is None else 1.0 + excess
    value = ref.get(epsilon, mechanism)
    return None if value is None else value[0]


def write_plot(result: RunResult, path: str | Path) -> Path:
    """The run's figure (:func:`figure`) as a PNG."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = figure(result)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def figure(result: RunResult) -> Any:
    """Mechanism block, each learner's test block and — for regression — the fair comparison
    (test MSE over the same learner's non-private one) against ε on log axes: one colour per
    mechanism in every panel, y-axis labels, one shared legend, a curve that would squeeze
    the others clipped, and the paper's values as hollow diamonds of the mechanism's colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    classification = result.plan.task == "classification"
    label_type = "categorical" if classification else "real"
    refs = references_for(result.plan.reference)
    candidates: list[tuple[str, str | None]] = [("label_accuracy" if classification else "mechanism_mse", None)]
    for lr in result.learners:
        candidates += [(m, lr) for m in (CLASSIFICATION_BLOCKS if classification else REGRESSION_BLOCKS)]
    if not classification and result.learners:
        candidates.append((RATIO, default_learner(label_type, 1.0, result.learners)))
    panels = [(metric, lr, found) for metric, lr in candidates if (found := _curves(result, metric, lr))]
    if not panels:
        raise ValueError(f"{result.plan.name}: nothing to plot")
    nrows, ncols, legend_slot = _grid(len(panels))
    fig, grid = plt.subplots(nrows, ncols, figsize=(5.0 * ncols, 3.9 * nrows), squeeze=False)
    axes = list(grid.flat)
    palette = plt.get_cmap("tab10")
    colours = {m: palette(i % 10) for i, m in enumerate(x for x in result.mechanisms if x != DEFAULT)}
    colours[DEFAULT] = (0.0, 0.0, 0.0, 1.0)
    handles: dict[str, Any] = {}
    clipped_any = paper_any = False
    paper_lines: list[tuple[Any, Any]] = []  # the paper's non-private level, kept only where it is on the scale
    tops: dict[tuple[str, int], tuple[float, float]] = {}
    for i, (ax, (metric, learner, curves)) in enumerate(zip(axes, panels)):
        log = not classification
        for m, c in curves.items():
            if m == DEFAULT:  # a copy of the picked mechanism's cells: a broad band under them
                h = ax.plot(c.eps, c.means, color="k", lw=6, alpha=0.18, solid_capstyle="round", zorder=1)[0]
                handles.setdefault("default (what `auto` picks)", h)
                continue
            h = ax.errorbar(c.eps, c.means, yerr=c.stds, marker="o", ms=3, capsize=2, color=colours[m], zorder=2)
            handles.setdefault(m, h)
        if metric == RATIO:
            ax.axhline(1.0, color="k", ls="--", lw=1)
        elif learner is not None:
            base = result.values(NON_PRIVATE, math.inf, metric, learner)
            if base.size:
                handles.setdefault(
                    "non-private model (ε = ∞)", ax.axhline(base.mean(), color="k", ls="--", lw=1)
                )
        ref = _reference_for(metric, refs)
        if ref is not None:
            for m in ref.mechanisms:
                if m not in colours or m == DEFAULT:
                    continue
                pts = [
                    (e, v)
                    for e in result.epsilons
                    if not math.isinf(e) and (v := _paper_point(ref, metric, e, m)) is not None
                ]
                if pts:
                    ax.scatter(*zip(*pts), marker="D", s=24, facecolors="none", edgecolors=[colours[m]], zorder=3)
                    paper_any = True
            if metric == "test_mse":
                theirs = [cell[0] for m in ref.mechanisms if (cell := ref.get(math.inf, m)) is not None]
                if theirs:
                    paper_lines.append((ax, ax.axhline(float(np.mean(theirs)), color="0.45", ls=":", lw=1.2)))
        ax.set_xscale("log")
        finite = sorted({e for c in curves.values() for e in c.eps})
        ax.set_xticks(finite)
        ax.set_xticklabels([f"{e:g}" for e in finite], fontsize=7)
        ax.xaxis.set_minor_formatter(NullFormatter())
        if log:  # the range of our curves alone: the paper's markers never stretch it
            ax.set_yscale("log")
            ax.yaxis.set_minor_formatter(NullFormatter())
            lows = [v for c in curves.values() for v in c.means if v > 0]
            if metric == RATIO:
                lows.append(1.0)
            elif learner is not None and result.values(NON_PRIVATE, math.inf, metric, learner).size:
                lows.append(float(result.values(NON_PRIVATE, math.inf, metric, learner).mean()))
            top = clip_top([max(c.means) for c in curves.values()])
            if top is None:
                top = max(mean + std for c in curves.values() for mean, std in zip(c.means, c.stds)) * 1.15
            if lows:
                ax.set_ylim(min(lows) / 1.3, top)
            low, high = ax.get_ylim()
            subs = (1.0, 2.0, 5.0) if high / low < 10**2.5 else (1.0,)  # a few labelled ticks on a narrow range
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.tick_params(axis="y", labelsize=7)
        ax.set_xlabel("ε")
        ax.set_ylabel(YLABELS[metric], fontsize=8)
        title = TITLES.get(metric, "Test MSE over non-private") if metric != RATIO else "Fair comparison"
        ax.set_title(title + (f" [{learner}]" if learner else ""), fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        tops[(metric, i)] = ax.get_ylim()
    # Every learner's test panel on one scale, so they compare by eye.
    same = [i for i, (metric, learner, _) in enumerate(panels) if learner is not None and metric != RATIO]
    for metric in {panels[i][0] for i in same}:
        group = [i for i in same if panels[i][0] == metric]
        if len(group) > 1:
            low = min(tops[(metric, i)][0] for i in group)
            high = max(tops[(metric, i)][1] for i in group)
            for i in group:
                axes[i].set_ylim(low, high)
    for ax, (_, _, curves) in zip(axes, panels):  # what the clip hid, at the top edge
        if ax.get_yscale() != "log":
            continue
        low, high = ax.get_ylim()
        for m, c in curves.items():
            over = [(e, v) for e, v in zip(c.eps, c.means) if v > high]
            if over and m != DEFAULT:
                clipped_any = True
                edge = high / 1.12
                ax.scatter([e for e, _ in over], [edge] * len(over), marker="^", s=30, color=colours[m], zorder=4)
                e, v = max(over, key=lambda x: x[1])
                ax.annotate(f"{v:.3g}", (e, edge), textcoords="offset points", xytext=(4, -9), fontsize=6,
                            color=colours[m])
    for ax, line in paper_lines:
        low, high = ax.get_ylim()
        if low <= line.get_ydata()[0] <= high:
            handles.setdefault("paper's non-private model", line)
        else:
            line.remove()
    if clipped_any:
        handles["off the scale (highest value printed)"] = Line2D([], [], marker="^", ls="", color="0.3")
    if paper_any:
        short = next(r for r in refs).citation.split(",")[0]
        handles[f"{short}, their own table (their set-up)"] = Line2D(
            [], [], marker="D", ls="", markerfacecolor="none", markeredgecolor="0.3"
        )
    if legend_slot:
        spare = axes[len(panels)]
        spare.axis("off")
        spare.legend(list(handles.values()), list(handles), loc="center", fontsize=8, frameon=False)
        for ax in axes[len(panels) + 1 :]:
            ax.remove()
        rect = (0.0, 0.0, 1.0, 0.96)
    else:
        fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=min(5, len(handles)), fontsize=8,
                   frameon=False)
        rect = (0.0, 0.07 * math.ceil(len(handles) / 5) / nrows, 1.0, 0.96)
    fig.suptitle(f"{result.plan.name}: {result.trials} trials, mean ± std", fontsize=10)
    fig.tight_layout(rect=rect)
    return fig


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
    metrics = (
        ["label_accuracy"]
        if result.plan.task == "classification"
        else ["mechanism_mse", MEAN_FLOOR, "training_mean_mse"]
    )
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
    today's ``labeldp.release.defaults`` rule, so a re-render shows the current default.
    """
    from labeldp_research import utility

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
        raise RuntimeError(f"{name}: a re-rendered run has no data loader; rerun `python -m labeldp_research utility`")

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
    cells = raw + utility.default_cells(raw, label_type, mechanisms, int(doc["n_train_fit"]))
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
