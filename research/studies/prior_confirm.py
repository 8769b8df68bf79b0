"""Confirm, on data sets no result has seen, prior_choice.py's post-hoc cut: the prior rule below ε = 1.5.

Usage: python research/studies/prior_confirm.py --results research/results/current/heldout \
    --runs research/results/current/heldout/runs --out research/results/current/prior_confirm.md
       python research/studies/prior_confirm.py --results research/results/current/heldout --plan

The rule and its constants were fixed before these sets existed (record 0039): below ε = 1.5 the least
B + c·V/n under the release's own DP prior, c = 100, ε₁ charged; the ε-band (``labeldp.release.defaults``)
from 1.5 on. The sets are ``labeldp_research.utility.HELDOUT_SETS`` (other shapes and seeds of the research
generators, made for this check). The picks (per trial, from the product's prior), the ε they run at, and
the scoring (mean log regret against the best cell at the full ε; met: within the rule's own SE) are
prior_choice.py's, imported. Every pick off the tables' ε (ε − ε₁) is run for real (``--runs``; ``--plan``
prints them), nothing interpolated. Paired: rule against band on the same trials (same split and seed).
Confirmed when the rule has the lower mean log regret, no fewer cells met, and a gain of at least two SE
over the sets (the project's adoption bar). Record
docs/decisions/0040-prior-cut-confirmation.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
from pathlib import Path

import default_rule
import numpy as np
from default_rule import NOISE_SE, Data
from prior_choice import (
    PRIOR_BOUGHT,
    REAL,
    CellScore,
    Fitted,
    _se,
    band_chooser,
    cell_table,
    compute,
    prior_chooser,
    score_cells,
    summary,
    trial_value,
)

from labeldp_research import report as tables
from labeldp_research.utility import AUTO_SWITCHED, DEFAULT, HELDOUT_SETS

C, BELOW = 100.0, 1.5  # fixed in advance: record 0039's fitted c and cut
FIRST, SECOND = HELDOUT_SETS[:4], HELDOUT_SETS[4:]  # the second batch was made after the first was scored


def load(results: Path) -> dict[str, Data]:
    return default_rule.load(results, HELDOUT_SETS)


def load_runs(data: dict[str, Data], runs: Path) -> list[str]:
    """The real runs at ε − ε₁ into prior_choice's ``REAL``; their tables, for the report."""
    found = []
    for path in sorted(runs.glob("*/utility_*.json")):
        doc = json.loads(path.read_text())
        d = data.get(str(doc["dataset"]))
        if d is None:
            continue
        result = tables.result_from_summary(doc)
        for mech in (m for m in result.mechanisms if m != DEFAULT):
            for eps in result.epsilons:
                v = result.values(mech, eps, "test_mse", "private")
                if v.size == d.result.trials:
                    REAL[(id(d.result), mech, round(eps, 6))] = v
        found.append(str(path))
    return found


def off_grid(data: dict[str, Data], rc: list[CellScore]) -> dict[tuple[str, str], list[float]]:
    """(set, mechanism) -> the ε off its table's grid that the rule picks."""
    out: dict[tuple[str, str], set[float]] = {}
    for c in rc:
        for m, e in c.picks:
            if e not in data[c.name].grid:
                out.setdefault((c.name, m), set()).add(round(e, 6))
    return {k: sorted(v) for k, v in out.items()}


def load_auto(data: dict[str, Data], folder: Path) -> dict[tuple[str, float], tuple[np.ndarray, np.ndarray]]:
    """The product's own ``auto`` (band and tail rule), run on the same trials: (set, ε) -> (test MSE, switched)."""
    out = {}
    for name, d in data.items():
        path = folder / f"utility_{name}.json"
        if not path.is_file():
            continue
        result = tables.result_from_summary(json.loads(path.read_text()))
        for eps in d.grid:
            v = result.values("auto", eps, "test_mse", "private")
            if v.size == d.result.trials:
                out[(name, eps)] = (v, result.values("auto", eps, AUTO_SWITCHED))
    return out


def missing(data: dict[str, Data], rc: list[CellScore]) -> int:
    """Trials whose pick is off the table's ε and was not run (it would be interpolated)."""
    return sum(e not in data[c.name].grid and (id(data[c.name].result), m, round(e, 6)) not in REAL
               for c in rc for m, e in c.picks)


def paired(data: dict[str, Data], rule: CellScore, band: CellScore) -> np.ndarray:
    """Per trial: log(rule's test MSE / band's), the same split and seed."""
    d = data[rule.name]
    return np.array([math.log(trial_value(d, m, e, t)[0] / trial_value(d, bm, be, t)[0])
                     for t, ((m, e), (bm, be)) in enumerate(zip(rule.picks, band.picks, strict=True))])


def report(data: dict[str, Data], rc: list[CellScore], bc: list[CellScore], args: argparse.Namespace,
           runs: list[str], eps1: dict[tuple[str, float], float],
           autos: dict[tuple[str, float], tuple[np.ndarray, np.ndarray]]) -> list[str]:
    r, b = summary(rc), summary(bc)
    per_set = {n: (summary([c for c in rc if c.name == n]), summary([c for c in bc if c.name == n])) for n in data}
    deltas = [per_set[n][0][0] - per_set[n][1][0] for n in data]
    bands = {(c.name, c.eps): c for c in bc}
    logs = {(c.name, c.eps): paired(data, c, bands[(c.name, c.eps)]) for c in rc}
    point = r[0] < b[0] and r[1] >= b[1]
    noise = -float(np.mean(deltas)) >= NOISE_SE * _se(deltas)
    unit_keys = [(n, t) for n in data for t in range(data[n].result.trials)]
    units = [float(np.mean([logs[(n, e)][t] for e in data[n].grid])) for n, t in unit_keys]
    lines = [
        "# The prior rule below ε = 1.5, the band above: confirmation on held-out sets",
        "",
        f"Command: `python research/studies/prior_confirm.py --results {args.results} --runs {args.runs} "
        f"--auto {args.auto} --out {args.out}`",
        "",
        "- Held-out sets (made for this check, used by no earlier result): "
        + ", ".join(f"`{n}` (n={d.n:,} trained, {d.result.trials} trials)" for n, d in data.items())
        + "; learning `private`; tables and their load averages in `" + str(args.results) + "`.",
        f"- Fixed in advance (record 0039): c = {C:g}, the prior rule at ε < {BELOW:g}, the ε-band above (so ε ≥ "
        f"{BELOW:g} is the band by construction, not run). Picks, ε₁ charging and scoring: prior_choice.py's code.",
        f"- Every pick off the tables' ε run for real ({len(runs)} tables under `{args.runs}`); picks left "
        f"to interpolation: {missing(data, rc)}.",
        f"- Written {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}; nothing trained here (1-minute "
        f"load average {os.getloadavg()[0]:.1f}).",
        "",
        f"## Result: {'confirmed' if point and noise else 'not confirmed'}",
        "",
        f"- Point criterion (lower mean log regret than the band, no fewer cells met): "
        f"{'met' if point else 'not met'} ({r[0]:.4f} against {b[0]:.4f}, {r[1]} against {b[1]} of {r[2]} met).",
        f"- Noise bar (the project's adoption bar, records 0001 and 0039: Δ below zero by at least {NOISE_SE:g} SE "
        f"over the sets): {'met' if noise else 'not met'} (Δ {np.mean(deltas):+.4f} ± {_se(deltas):.4f}, "
        f"{-np.mean(deltas) / _se(deltas):.1f} SE). Confirmed needs both.",
        "",
        "| data set | rule: log regret, met | band: log regret, met | Δ rule − band | paired log(rule/band) ± SE |",
        "|---|---|---|---|---|",
    ]
    for n in data:
        (rr, bb), pv = per_set[n], [np.mean([logs[(n, e)][t] for e in data[n].grid])
                                    for t in range(data[n].result.trials)]
        lines.append(f"| `{n}` | {rr[0]:.4f}, {rr[1]}/{rr[2]} | {bb[0]:.4f}, {bb[1]}/{bb[2]} | {rr[0] - bb[0]:+.4f} | "
                     f"{np.mean(pv):+.4f} ± {_se(pv):.4f} |")
    for label, batch in (("first batch (the four sets planned first)", FIRST), ("second batch", SECOND)):
        names = [n for n in batch if n in data]
        if 1 < len(names) < len(data):
            fr = summary([c for c in rc if c.name in names])
            fb = summary([c for c in bc if c.name in names])
            fd = [per_set[n][0][0] - per_set[n][1][0] for n in names]
            fu = [u for u, (n, _) in zip(units, unit_keys, strict=True) if n in names]
            lines.append(f"| {label}: Δ over sets {np.mean(fd):+.4f} ± {_se(fd):.4f} | {fr[0]:.4f}, {fr[1]}/{fr[2]} | "
                         f"{fb[0]:.4f}, {fb[1]}/{fb[2]} | {fr[0] - fb[0]:+.4f} | {np.mean(fu):+.4f} ± {_se(fu):.4f} |")
    lines += [
        f"| **all** | **{r[0]:.4f}, {r[1]}/{r[2]}** | **{b[0]:.4f}, {b[1]}/{b[2]}** | **{r[0] - b[0]:+.4f}** | "
        f"**{np.mean(units):+.4f} ± {_se(units):.4f}** |",
        "",
        f"Δ over the {len(deltas)} sets: {np.mean(deltas):+.4f} ± {_se(deltas):.4f} (SE over sets; better on "
        f"{sum(x < 0 for x in deltas)}, worse on {sum(x > 0 for x in deltas)}). Paired: per (set, trial) the mean "
        "over ε of log(rule / band) test MSE, same split and seed; ± SE over the (set, trial) units.",
        "",
        "## Per ε",
        "",
        "| ε | rule: log regret, met | band: log regret, met | cells where a trial's pick differs | "
        "paired log(rule/band) ± SE |",
        "|---|---|---|---|---|",
    ]
    for eps in sorted({c.eps for c in rc}):
        rs, bs = summary([c for c in rc if c.eps == eps]), summary([c for c in bc if c.eps == eps])
        diff = sum(any(m != bands[(c.name, eps)].picks[0][0] for m, _ in c.picks) for c in rc if c.eps == eps)
        pv = [x for n in data for x in logs[(n, eps)]]
        lines.append(f"| {eps:g} | {rs[0]:.4f}, {rs[1]}/{rs[2]} | {bs[0]:.4f}, {bs[1]}/{bs[2]} | {diff}/{len(data)} | "
                     f"{np.mean(pv):+.4f} ± {_se(pv):.4f} |")
    if autos:
        lines += ["", "## Beside the product's `auto` (the band and the tail rule of records 0025/0032, measured)", "",
                  "The band above is the band alone, as prior_choice.py scores it; `auto` also turns its "
                  "`rp_with_prior` into `rr_on_bins` from the same DP prior on releases under 12 000 rows (every "
                  "set here). Run on the same splits and training seeds (`" + str(args.auto) + "`), but its "
                  "release is its own draw (the runner seeds it by the name `auto`): where it runs the band's "
                  "mechanism it still differs from that cell by release noise. Regret against the same best cell.",
                  "", "| ε | `auto`: log regret, met | trials switched by the tail rule | "
                  "paired log(rule/`auto`) ± SE |",
                  "|---|---|---|---|"]
        auto_cells = []
        for eps in sorted({c.eps for c in rc}):
            here, pv, switched = [], [], 0
            for c in (c for c in rc if c.eps == eps and (c.name, eps) in autos):
                v, sw = autos[(c.name, eps)]
                here.append(CellScore(c.name, eps, [("auto", eps)] * v.size, float(v.mean()),
                                      float(v.std(ddof=1) / math.sqrt(v.size)), c.best, c.best_cell, 0))
                d = data[c.name]
                pv += [math.log(trial_value(d, m, e, t)[0] / v[t]) for t, (m, e) in enumerate(c.picks)]
                switched += int(sw.sum())
            auto_cells += here
            a = summary(here)
            lines.append(f"| {eps:g} | {a[0]:.4f}, {a[1]}/{a[2]} | {switched}/{len(pv)} | "
                         f"{np.mean(pv):+.4f} ± {_se(pv):.4f} |")
        a = summary(auto_cells)
        lines += [f"| **all** | **{a[0]:.4f}, {a[1]}/{a[2]}** | | |", "",
                  "Per cell, `auto`: regret against the best cell, ✓ when met, (k) trials switched to `rr_on_bins`.",
                  "", "| ε | " + " | ".join(f"`{n}`" for n in data) + " |", "|---|" + "---|" * len(data)]
        by = {(c.name, c.eps): c for c in auto_cells}
        for eps in sorted({c.eps for c in auto_cells}):
            lines.append(f"| {eps:g} | " + " | ".join(
                f"{by[(n, eps)].mean / by[(n, eps)].best - 1:+.1%}{' ✓' if by[(n, eps)].met else ''}"
                f" ({int(autos[(n, eps)][1].sum())})" if (n, eps) in by else "—" for n in data) + " |")
    fitted: Fitted = {n: ((C, "everywhere", 1.0, BELOW), [c for c in rc if c.name == n]) for n in data}
    lines += ["", "## Per cell: the rule's pick against the band's", "",
              "Each cell: the pick of most trials (@ its ε where it runs at ε − ε₁; (k/5) where the trials differ), "
              "regret against the best cell at the full ε, ✓ when met; ◆ where some trial's pick is not the band's. "
              "The band's picks: " + "; ".join(
                  f"ε = {eps:g}: " + ", ".join(f"`{n}` `{bands[(n, eps)].picks[0][0]}`" for n in data)
                  for eps in sorted({c.eps for c in bc})) + ".", "",
              *cell_table(fitted, {n: [c for c in bc if c.name == n] for n in data}, data), "",
              "ε₁ (the prior's share): " + ", ".join(f"`{n}` {eps1[(n, data[n].grid[0])]:.3g}" for n in data) + "."]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=Path("research/results/current/heldout"))
    parser.add_argument("--runs", type=Path, default=Path("research/results/current/heldout/runs"))
    parser.add_argument("--out", type=Path, default=Path("research/results/current/prior_confirm.md"))
    parser.add_argument("--auto", type=Path, default=Path("research/results/current/heldout/auto"),
                        help="the product's auto run on the same sets and trials (utility_<set>.json)")
    parser.add_argument("--plan", action="store_true", help="print the picks off the tables' ε to run, and stop")
    args = parser.parse_args(argv)
    data = load(args.results)
    cells = compute(data, None)
    rule = prior_chooser(data, cells, C, "everywhere", 1.0, BELOW)
    if args.plan:
        for (name, mech), eps in off_grid(data, score_cells(rule, data, set(data))).items():
            assert mech not in PRIOR_BOUGHT
            print(name, mech, ",".join(f"{e:g}" for e in eps))
        return 0
    runs = load_runs(data, args.runs)
    rc = score_cells(rule, data, set(data))
    bc = score_cells(band_chooser(data), data, set(data))
    lines = report(data, rc, bc, args, runs, {(p.name, p.eps): p.eps - p.eps2 for p in cells},
                   load_auto(data, args.auto))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
