"""Should ``auto`` choose the mechanism from the release's own DP prior (least bias + c·noise/n)?

Usage: python research/studies/prior_choice.py --results research/results/current --housing PATH \
    --parts research/results/current/prior_choice.json --runs research/results/current/prior_choice_runs

``default_rule.py``'s last section picks, per cell, the mechanism with the least B + c·V/n on the TRUE
labels (an upper bound). Here the same criterion reads what a release can know: the ε₁ Laplace histogram
over the public grid that ``rp_with_prior`` buys (``labeldp.release.priors.obtain_prior``: the product's
grid, ε₁ and noise), drawn per trial with a fixed seed. Every candidate is built at ε₂ = ε − ε₁ and fitted to
that prior; B and V are read on labels drawn from the prior (a distribution over the grid points). ε₁ is
charged: ``rr_on_bins`` and ``rp_with_prior`` buy that very prior inside their ε (scored at ε from the
tables); ``laplace``, ``staircase`` and ``unbiased`` run at ε − ε₁, scored by interpolating each trial's
log test MSE linearly in log ε between the table's ε points (below the table's smallest ε: its value
there, counted in the report), against the best cell at the full ε. Constants (c, and whether the rule
replaces the ε-band everywhere or only its ``rp_with_prior`` band, …) are fitted leave one data set out,
as in default_rule.py, whose loaders and scoring this reuses. ``--runs``: the picks off the tables' ε run
for real, rescored with them. Not adopted: docs/decisions/0039-auto-from-dp-prior.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from default_rule import NOISE_WEIGHTS, AdoptedRule, Data, best_of_field, label_noise_parts, load

from labeldp_research.utility import DEFAULT

MECHANISMS = ("rr_on_bins", "rp_with_prior", "laplace", "staircase", "unbiased")
PRIOR_BOUGHT = frozenset({"rr_on_bins", "rp_with_prior"})  # their release buys the prior within its ε
MODES = ("everywhere", "middle")  # the rule replaces the whole band, or only its rp_with_prior band
MARGINS = (1.0, 1.5, 2.0, 4.0)  # leave the band's pick only for a criterion this many times lower
BELOW = (0.2, 0.4, 0.7, 1.5, 3.0, 6.0, math.inf)  # the rule only below this ε (public), the band above
PSEUDO_ROWS = 20_000  # labels drawn from the DP prior to read B and V
PRIOR_SEED = 27

Parts = dict[str, tuple[float, float]]  # mechanism -> (B, V)


@dataclass(frozen=True)
class PriorCell:
    """One (data set, ε, trial): ε₂ left after the prior, and each candidate's (B, V) under that prior."""

    name: str
    eps: float
    trial: int
    eps2: float
    parts: Parts


def prior_parts(
    name: str, bench: object, train: np.ndarray, grid_eps: tuple[float, ...], trial: int
) -> list[PriorCell]:
    """The product's DP prior of one trial's release at each ε, and each candidate's B and V under it."""
    from labeldp.epsilon import exact_micro, from_micro
    from labeldp.learning.debiasing import label_law
    from labeldp.mechanisms.contract import Prior
    from labeldp.mechanisms.registry import REGISTRY
    from labeldp.release.priors import PriorRequest, obtain_prior

    domain, y = bench.domain, bench.labels[train]  # type: ignore[attr-defined]
    out = []
    for eps in grid_eps:
        rp = REGISTRY["rp_with_prior"]
        ask = PriorRequest("rp_with_prior", int(y.size), domain, None, rp.parse_params(None), exact_micro(eps))
        rng = np.random.default_rng((PRIOR_SEED, trial, exact_micro(eps), sum(map(ord, name))))
        obtained = obtain_prior("histogram", ask, y, rng)
        assert isinstance(obtained.prior, Prior)
        grid, probs = np.asarray(obtained.prior.values, float), np.asarray(obtained.prior.probs, float)
        pseudo = np.repeat(grid, np.round(probs / probs.sum() * PSEUDO_ROWS).astype(np.int64))
        eps2 = from_micro(obtained.epsilon_micro)
        parts: Parts = {}
        for mech in MECHANISMS:
            entry = REGISTRY[mech]
            fitted = entry.build(eps2, entry.parse_params(None), domain=domain).fit_to(obtained.prior)
            law = label_law(fitted.to_spec())
            target = law.target(pseudo)
            noisy = fitted.privatize(pseudo, np.random.default_rng((PRIOR_SEED, trial, exact_micro(eps), 1)))
            parts[mech] = (float(np.mean((target - pseudo) ** 2)),
                           float(np.mean((law.debias_labels(noisy) - target) ** 2)))
        out.append(PriorCell(name, eps, trial, eps2, parts))
    return out


def compute(data: dict[str, Data], housing: Path | None) -> list[PriorCell]:
    from labeldp_research import utility

    plans = utility.default_plans(housing=housing)
    cells = []
    for name, d in data.items():
        bench = plans[name].load()
        n_test = round(bench.n * 0.2)
        for t in range(d.result.trials):
            train, _, _ = utility.trial_split(bench.n, n_test, bench.n - n_test, 0, name, t)
            cells += prior_parts(name, bench, train, d.grid, t)
    return cells


_LOGS: dict[tuple[int, str], np.ndarray] = {}
REAL: dict[tuple[int, str, float], np.ndarray] = {}
"""Real runs at ε − ε₁ (``--runs``): (id of the set's table, mechanism, ε) -> per-trial test MSE; read first."""


def trial_value(d: Data, mech: str, eps: float, trial: int) -> tuple[float, bool]:
    """Trial ``trial``'s test MSE of ``mech`` (learning ``private``) at ``eps``: from the table, its log
    interpolated linearly in log ε between the table's points; below the smallest, the smallest (flagged)."""
    real = REAL.get((id(d.result), mech, round(eps, 6)))
    if real is not None:
        return float(real[trial]), False
    grid = sorted(d.grid)
    key = (id(d.result), mech)
    if key not in _LOGS:  # (ε points × trials) log test MSE, memoized (every rule rereads them)
        _LOGS[key] = np.log([d.result.values(mech, e, "test_mse", "private") for e in grid])
    below = eps < grid[0] - 1e-12
    return math.exp(float(np.interp(math.log(eps), np.log(grid), _LOGS[key][:, trial]))), below


@dataclass
class CellScore:
    name: str
    eps: float
    picks: list[tuple[str, float]]  # per trial: (mechanism, ε it runs at)
    mean: float
    se: float
    best: float
    best_cell: str
    extrapolated: int

    @property
    def log_regret(self) -> float:
        return math.log(self.mean / self.best)

    @property
    def met(self) -> bool:
        return self.mean - self.best <= self.se


Fitted = dict[str, tuple[tuple, list[CellScore]]]  # held-out set -> (constants fitted without it, its cells)
Chooser = Callable[[str, float, int], tuple[str, float]]  # (set, ε, trial) -> (mechanism, ε it runs at)


def score_cells(choose: Chooser, data: dict[str, Data], names: set[str]) -> list[CellScore]:
    out = []
    for name, d in data.items():
        if name not in names:
            continue
        for eps in d.grid:
            best = best_of_field(d.result, eps)
            if best is None:
                continue
            picks = [choose(name, eps, t) for t in range(d.result.trials)]
            vals = [trial_value(d, m, e, t) for t, (m, e) in enumerate(picks)]
            v = np.array([x for x, _ in vals])
            out.append(CellScore(name, eps, picks, float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)),
                                 best[0], best[1], sum(b for _, b in vals)))
    return out


def summary(cells: list[CellScore]) -> tuple[float, int, int]:
    return float(np.mean([c.log_regret for c in cells])), sum(c.met for c in cells), len(cells)


def band_chooser(data: dict[str, Data]) -> Chooser:
    adopted = AdoptedRule()
    return lambda name, eps, t: (adopted.mechanism(eps, data[name].n), eps)


def prior_chooser(
    data: dict[str, Data], cells: list[PriorCell], c: float, mode: str, margin: float = 1.0, below: float = math.inf
) -> Chooser:
    """The least B + c·V/n under the trial's DP prior; the band's pick kept unless that is ``margin`` times lower
    (``middle``: only where the band picks ``rp_with_prior``; only at ε < ``below``). A pick off the prior's ε runs
    at ε − ε₁."""
    by = {(p.name, p.eps, p.trial): p for p in cells}
    band = band_chooser(data)

    def choose(name: str, eps: float, t: int) -> tuple[str, float]:
        kept = band(name, eps, t)[0]
        if (mode == "middle" and kept != "rp_with_prior") or eps >= below:
            return kept, eps
        p = by[(name, eps, t)]
        n = data[name].result.n_train  # the release's rows: all auto knows (the learner may use fewer)
        crit = {m: p.parts[m][0] + c * p.parts[m][1] / n for m in p.parts}
        mech = min(crit, key=crit.__getitem__)
        if crit[mech] * margin >= crit[kept]:
            mech = kept
        return mech, eps if mech in PRIOR_BOUGHT else p.eps2  # the prior was bought: ε₁ is spent

    return choose


def upper_chooser(data: dict[str, Data], parts: list[tuple[str, float, Parts]], c: float) -> Chooser:
    """default_rule.py's true-label rule (trial 0's labels, full ε, no ε₁): the same pick for every trial."""
    by = {(name, eps): p for name, eps, p in parts}

    def choose(name: str, eps: float, t: int) -> tuple[str, float]:
        p = {m: v for m, v in by[(name, eps)].items() if m in MECHANISMS}
        return min(p, key=lambda m: p[m][0] + c * p[m][1] / data[name].n), eps

    return choose


def lodo(data: dict[str, Data], make: Callable[..., Chooser], grid: list[tuple]) -> Fitted:
    """Per held-out set: the constants with the least mean log regret on the others (ties: more met), its cells."""
    names = set(data)
    scored = {k: score_cells(make(*k), data, names) for k in grid}

    def rest(k: tuple, held: str) -> tuple[float, int]:
        cs = [c for c in scored[k] if c.name != held]
        return float(np.mean([c.log_regret for c in cs])), -sum(c.met for c in cs)

    out = {}
    for held in data:
        k = min(grid, key=lambda k: rest(k, held))
        out[held] = (k, [c for c in scored[k] if c.name == held])
    return out


def _pick(c: CellScore) -> str:
    mechs = [m for m, _ in c.picks]
    top = max(set(mechs), key=mechs.count)
    eps_run = next(e for m, e in c.picks if m == top)
    at = f"@{eps_run:.3g}" if eps_run != c.eps else ""
    return f"`{top}`{at}" + (f" ({mechs.count(top)}/{len(mechs)})" if len(set(mechs)) > 1 else "")


FAMILIES = {  # the constants fitted leave one data set out, from the brief's rule (c alone) up
    "c": [(c, "everywhere", 1.0, math.inf) for c in NOISE_WEIGHTS],
    "c, mode": [(c, mode, 1.0, math.inf) for mode in MODES for c in NOISE_WEIGHTS],
    "c, mode, margin": [(c, mode, g, math.inf) for g in MARGINS for mode in MODES for c in NOISE_WEIGHTS],
    "c, ε below (post hoc)": [(c, "everywhere", 1.0, t) for t in BELOW for c in NOISE_WEIGHTS],
}


def _se(x: list[float]) -> float:
    return float(np.std(x, ddof=1) / math.sqrt(len(x)))


def families(
    data: dict[str, Data], cells: list[PriorCell], parts: list[tuple[str, float, Parts]]
) -> tuple[list[str], dict[str, Fitted], dict[str, list[CellScore]], Fitted]:
    """Each family fitted leave one data set out, the band and the true-label bound: the summary table."""
    names = set(data)
    band = {n: [c for c in score_cells(band_chooser(data), data, names) if c.name == n] for n in data}
    fams = {f: lodo(data, lambda *k: prior_chooser(data, cells, *k), grid) for f, grid in FAMILIES.items()}
    upper = lodo(data, lambda c: upper_chooser(data, parts, c), [(c,) for c in NOISE_WEIGHTS])
    lines = [
        "| constants fitted | log regret, met | Δ vs band ± SE (better/worse sets) | Δ vs true-label bound ± SE |",
        "|---|---|---|---|",
    ]
    for f, fitted in fams.items():
        r = summary([c for n in data for c in fitted[n][1]])
        db = [summary(fitted[n][1])[0] - summary(band[n])[0] for n in data]
        du = [summary(fitted[n][1])[0] - summary(upper[n][1])[0] for n in data]
        lines.append(f"| {f} | {r[0]:.4f}, {r[1]}/{r[2]} | {np.mean(db):+.4f} ± {_se(db):.4f} "
                     f"({sum(x < 0 for x in db)}/{sum(x > 0 for x in db)}) | {np.mean(du):+.4f} ± {_se(du):.4f} |")
    b_all = summary([c for n in data for c in band[n]])
    u_all = summary([c for n in data for c in upper[n][1]])
    lines += [f"| adopted ε-band | {b_all[0]:.4f}, {b_all[1]}/{b_all[2]} | | |",
              f"| true-label bound (c) | {u_all[0]:.4f}, {u_all[1]}/{u_all[2]} | | |"]
    return lines, fams, band, upper


def cell_table(fitted: Fitted, band: dict[str, list[CellScore]], data: dict[str, Data]) -> list[str]:
    """Per (ε, set): the out-of-set rule's pick against the band's."""
    by_rule = {(c.name, c.eps): c for n in data for c in fitted[n][1]}
    by_band = {(c.name, c.eps): c for n in data for c in band[n]}
    lines = ["| ε | " + " | ".join(f"`{n}`" for n in data) + " |", "|---|" + "---|" * len(data)]
    for eps in sorted({e for _, e in by_rule}):
        row = []
        for n in data:
            c, bc = by_rule[(n, eps)], by_band[(n, eps)]
            diff = " ◆" if any(m != bc.picks[0][0] for m, _ in c.picks) else ""
            ok = " ✓" if c.met else f" (best `{c.best_cell}`)"
            row.append(f"{_pick(c)} {c.mean / c.best - 1:+.1%}{ok}{diff}")
        lines.append(f"| {eps:g} | " + " | ".join(row) + " |")
    return lines


def report(data: dict[str, Data], cells: list[PriorCell], parts: list[tuple[str, float, Parts]],
           args: argparse.Namespace) -> list[str]:
    names = set(data)
    table, fams, band, upper = families(data, cells, parts)
    rule = fams["c"]
    eps1 = {(p.name, p.eps): p.eps - p.eps2 for p in cells}
    lines = [
        "# `auto` from the release's own DP prior: the least bias + c·noise/n, ε₁ charged",
        "",
        f"Command: `python research/studies/prior_choice.py --results {args.results} --housing PATH "
        f"--parts {args.parts} --runs {args.runs}`",
        "",
        f"- Data sets: {', '.join(f'`{n}` (n={d.n:,}, {d.result.trials} trials)' for n, d in data.items())}; "
        "learning `private` (the tables of `--results`).",
        "- Per trial t, the DP prior `rp_with_prior` buys (the product's grid, ε₁ and Laplace histogram, "
        f"`labeldp.release.priors.obtain_prior`, seed ({PRIOR_SEED}, t, ε, set)); each candidate built at "
        f"ε₂ = ε − ε₁, fitted to it; B and V read on {PSEUDO_ROWS:,} labels drawn from it. Rule: the least "
        "B + c·V/n, n the release's rows (what `auto` knows; `criteo_like` releases 800 000 rows and trains on "
        "25 000; the true-label bound, as in default_rule.py, divides by the rows trained on).",
        "- ε₁ charged: `rr_on_bins`, `rp_with_prior` buy this prior inside their ε (scored at ε); `laplace`, "
        "`staircase`, `unbiased` run at ε − ε₁, scored by interpolating each trial's log test MSE linearly in "
        "log ε between the table's ε points (below the smallest: the smallest ε's value, optimistic; counted "
        "below). Met: the rule's mean within its SE of the best cell at the full ε.",
        "- Constants fitted leave one data set out: c ∈ {0, 1, 10^0.5, …, 10⁶}; with `mode`, whether the rule "
        "replaces the ε-band `everywhere` or only where it picks `rp_with_prior` (`middle`); with `margin` "
        f"∈ {{{', '.join(f'{g:g}' for g in MARGINS)}}}, the band's pick is kept unless another's criterion "
        "is that many times lower; with `ε below` (added after seeing the per-ε table: a lead, not evidence), "
        f"the rule only at ε < t, t ∈ {{{', '.join(f'{t:g}' for t in BELOW)}}}, the band above. The true-label "
        "bound: default_rule.py's rule (trial 0's true labels, no ε₁) scored by the same code.",
        f"- Written {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}; nothing trained here (1-minute "
        f"load average {os.getloadavg()[0]:.1f}; the real runs' tables have their own).",
        "",
        "## Out of set, per family of constants (interpolated)",
        "",
        "Δ: mean over the held-out sets of (rule − band) and (rule − bound) mean log regret, ± SE over sets.",
        "",
        *table,
        "",
        "## Out of set, the rule with c alone: per held-out set", "",
        "| held out | c fitted | rule: log regret, met | band: log regret, met | Δ rule − band | "
        "true-label bound (c): log regret, met | Δ rule − bound |",
        "|---|---|---|---|---|---|---|",
    ]
    tot: dict[str, list[CellScore]] = {"rule": [], "band": [], "upper": []}
    for name in data:
        (c, _, _, _), rc = rule[name]
        (cu,), uc = upper[name]
        r, b, u = summary(rc), summary(band[name]), summary(uc)
        tot["rule"] += rc
        tot["band"] += band[name]
        tot["upper"] += uc
        lines.append(f"| `{name}` | {c:g} | {r[0]:.4f}, {r[1]}/{r[2]} | {b[0]:.4f}, {b[1]}/{b[2]} | "
                     f"{r[0] - b[0]:+.4f} | {u[0]:.4f}, {u[1]}/{u[2]} ({cu:g}) | {r[0] - u[0]:+.4f} |")
    r, b, u = (summary(tot[k]) for k in ("rule", "band", "upper"))
    lines += [
        f"| **all** | | **{r[0]:.4f}, {r[1]}/{r[2]}** | **{b[0]:.4f}, {b[1]}/{b[2]}** | **{r[0] - b[0]:+.4f}** | "
        f"**{u[0]:.4f}, {u[1]}/{u[2]}** | **{r[0] - u[0]:+.4f}** |",
        "",
        f"Cells scored below the table's smallest ε (value there, optimistic): "
        f"{sum(c.extrapolated > 0 for c in tot['rule'])} of {r[2]}.",
        "",
        "## Per ε, out of set",
        "",
        "| ε | rule, c alone: log regret, met | rule, c and ε below: log regret, met | band: log regret, met | "
        "true-label bound: log regret, met |",
        "|---|---|---|---|---|",
    ]
    below = [c for n in data for c in fams["c, ε below (post hoc)"][n][1]]
    for eps in sorted({c.eps for c in tot["rule"]}):
        row = [summary([c for c in cs if c.eps == eps]) for cs in (tot["rule"], below, tot["band"], tot["upper"])]
        lines.append(f"| {eps:g} | " + " | ".join(f"{s[0]:.4f}, {s[1]}/{s[2]}" for s in row) + " |")
    for f in ("c", "c, ε below (post hoc)"):
        lines += ["", f"## Per cell, out of set ({f}): the rule's pick against the band's", "",
                  "Each cell: the pick of most trials (@ its ε where it runs at ε − ε₁; (k/5) where the trials "
                  "differ), regret against the best cell at the full ε, ✓ when met; ◆ where some trial's pick is not "
                  "the band's.", "", *cell_table(fams[f], band, data)]
    lines += ["", "ε₁ at ε = 0.5, 1: " + ", ".join(
        f"`{n}` {eps1[(n, 0.5)]:.3g}, {eps1[(n, 1.0)]:.3g}" for n in data) + "."]
    for f, fitted in fams.items():
        fits = sorted({k for k, _ in fitted.values()})
        lines.append(f"Fitted over the folds ({f}): " + ", ".join(
            f"c={c:g} {m} ×{g:g} ε<{t:g} (in set: "
            f"{summary(score_cells(prior_chooser(data, cells, c, m, g, t), data, names))[0]:.4f})"
            for c, m, g, t in fits) + ".")
    return lines


def runs_section(data: dict[str, Data], cells: list[PriorCell], parts: list[tuple[str, float, Parts]],
                 runs: Path) -> list[str]:
    """The picks off the table's ε run for real (``--runs``): interpolated against measured, and every family
    rescored with the measured values in place of the interpolated ones."""
    from labeldp_research import report as tables

    interp: dict[tuple[str, str, float], np.ndarray] = {}
    found = []
    for path in sorted(runs.glob("*/utility_*.json")):
        doc = json.loads(path.read_text())
        name = str(doc.get("dataset", path.stem.removeprefix("utility_")))
        if name not in data:
            continue
        result = tables.result_from_summary(doc)
        for mech in result.mechanisms:
            if mech == DEFAULT:  # the runner's own recommendation column, not a mechanism
                continue
            for eps in result.epsilons:
                v = result.values(mech, eps, "test_mse", "private")
                if math.isinf(eps) or v.size != data[name].result.trials:
                    continue
                d = data[name]
                interp[(name, mech, round(eps, 6))] = np.array(
                    [trial_value(d, mech, eps, t)[0] for t in range(v.size)])
                REAL[(id(d.result), mech, round(eps, 6))] = v
                found.append((name, mech, round(eps, 6), v, str(path.relative_to(runs.parent))))
    lines = ["", "## Real runs at ε − ε₁", "",
             f"Each pick off the table's ε run with the research runner (`research/tables.toml`, entry "
             f"`prior_choice_runs`: one process, `--threads 1`; tables and their load averages in `{runs}`), "
             "5 trials, the same splits and seeds as the tables' trials. Per cell: the "
             "interpolated and the measured mean test MSE, and the paired log ratio (measured / interpolated, mean "
             "± SE over trials).", "",
             "| data set | mechanism | ε₂ | interpolated | measured ± SE | log ratio ± SE | table |",
             "|---|---|---|---|---|---|---|"]
    for name, mech, eps, v, where in found:
        i = interp[(name, mech, eps)]
        lr = np.log(v / i)
        lines.append(f"| `{name}` | `{mech}` | {eps:g} | {i.mean():.4g} | {v.mean():.4g} ± "
                     f"{v.std(ddof=1) / math.sqrt(v.size):.2g} | {lr.mean():+.3f} ± {_se(list(lr)):.3f} | {where} |")
    table, fams, band, upper = families(data, cells, parts)
    missing = {(n, m, round(e, 6)) for f in fams.values() for n in data for c in f[n][1] for m, e in c.picks
               if e not in data[n].grid and (id(data[n].result), m, round(e, 6)) not in REAL}
    lines += ["", "Every family rescored with the measured values where run (interpolated elsewhere: "
              f"{len(missing)} (set, mechanism, ε) picks not run: "
              + (", ".join(f"`{n}` `{m}`@{e:g}" for n, m, e in sorted(missing)) or "none") + "):", "", *table, "",
              "### Per held-out set, measured", "",
              "| held out | " + " | ".join(f"{f}: fitted, log regret, met" for f in ("c", "c, ε below (post hoc)"))
              + " | band: log regret, met | true-label bound: log regret, met |", "|---|---|---|---|---|"]
    for n in data:
        row = []
        for f in ("c", "c, ε below (post hoc)"):
            (c, _, _, t), cs = fams[f][n]
            r = summary(cs)
            row.append(f"c={c:g}" + (f", ε<{t:g}" if not math.isinf(t) else "") + f": {r[0]:.4f}, {r[1]}/{r[2]}")
        b, u = summary(band[n]), summary(upper[n][1])
        lines.append(f"| `{n}` | " + " | ".join(row) + f" | {b[0]:.4f}, {b[1]}/{b[2]} | {u[0]:.4f}, {u[1]}/{u[2]} |")
    lines += ["", "### Per ε, out of set, measured", "",
              "| ε | " + " | ".join(f"{f}: log regret, met" for f in fams) + " | band: log regret, met |",
              "|---|" + "---|" * (len(fams) + 1)]
    for eps in sorted({e for d in data.values() for e in d.grid}):
        per = [summary([c for n in data for c in f[n][1] if c.eps == eps]) for f in fams.values()]
        per.append(summary([c for n in data for c in band[n] if c.eps == eps]))
        lines.append(f"| {eps:g} | " + " | ".join(f"{s[0]:.4f}, {s[1]}/{s[2]}" for s in per) + " |")
    lines += ["", "### Per cell, out of set (c alone), measured", "", *cell_table(fams["c"], band, data), "",
              "### Per cell, out of set (c, ε below), measured", "",
              *cell_table(fams["c, ε below (post hoc)"], band, data)]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=Path("research/results/current"))
    parser.add_argument("--housing", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path("research/results/current/prior_choice.md"))
    parser.add_argument("--parts", type=Path, help="JSON of the computed priors' B and V (reused if present)")
    parser.add_argument("--runs", type=Path, help="folder of real runs at ε − ε₁ (<mechanism>/utility_<set>.json)")
    args = parser.parse_args(argv)
    data = load(args.results)
    if args.parts is not None and args.parts.is_file():
        doc = json.loads(args.parts.read_text())
        cells = [PriorCell(c["name"], c["eps"], c["trial"], c["eps2"], {m: tuple(v) for m, v in c["parts"].items()})
                 for c in doc["prior"]]
        parts = [(n, e, {m: tuple(v) for m, v in p.items()}) for n, e, p in doc["true"]]
    else:
        cells = compute(data, args.housing)
        parts = label_noise_parts(data, args.housing)
        if args.parts is not None:
            args.parts.write_text(json.dumps({
                "prior": [c.__dict__ for c in cells], "true": [[n, e, p] for n, e, p in parts]}))
    lines = report(data, cells, parts, args)
    if args.runs is not None:
        lines += runs_section(data, cells, parts, args.runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
