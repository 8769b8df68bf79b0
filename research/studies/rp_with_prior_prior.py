"""Which ε₁ prior should ``rp_with_prior`` buy? The Laplace histogram against Liu & Huang's Alg. 3, side by side.

Usage:
    python research/studies/rp_with_prior_prior.py [--housing PATH] [--datasets a,b] [--trials 2]
        [--epsilons 0.1,0.5,1,2,4,8] [--threads 1] [--out research/results/rp_with_prior_prior.md]

Both priors cost the same ε₁ (the release's split rule); only what ε₁ buys differs:

* ``histogram`` (the catalogue default): noisy counts on the release's public grid;
* ``noised_labels`` (Alg. 3): every label with discrete Laplace noise of scale (high − low)/ε₁,
  then a histogram of the noised values.

For every benchmark regression set (the protocol's splits and training recipes,
``labeldp_research.utility``) and ε, each trial privatizes the training labels with both
(the same randomness seed), and prints the mechanism MSE against the true training labels
and the test MSE of the features party's default learning (``private``), with their ratio
histogram / Alg. 3 (below 1: the histogram is better).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import time
from pathlib import Path

import numpy as np

from labeldp.epsilon import to_micro_floor
from labeldp.release.randomizer import randomize
from labeldp.specs.rp_with_prior import RPWithPriorSpec
from labeldp_research import utility

SOURCES = ("histogram", "noised_labels")
SETS = ("california_housing", "simulated_linear", "simulated_nonlinear", "bounded_wide", "counts", "criteo_like")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--housing", type=Path, help="california_housing.csv (Housing is skipped without it)")
    parser.add_argument("--datasets", default=",".join(SETS))
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--epsilons", default="0.1,0.5,1,2,4,8")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("research/results/rp_with_prior_prior.md"))
    args = parser.parse_args(argv)
    epsilons = [float(e) for e in args.epsilons.split(",")]
    started = time.perf_counter()
    plans = utility.default_plans(housing=args.housing)
    names = [s for s in args.datasets.split(",") if s in plans]
    learner = utility.PrivateRegressor()
    rows: list[str] = []
    wins = {"mechanism": [0, 0], "private": [0, 0]}  # [histogram better, cells]
    for name in names:
        plan = plans[name]
        data = plan.load()
        cells: dict[tuple[float, str], dict[str, list[float]]] = {}
        for trial in utility.protocol_trials(plan, data, args.trials, threads=args.threads):
            t, y_train, fit_pos = trial.index, trial.y_train, trial.fit_pos
            for eps in epsilons:
                for source in SOURCES:
                    rng = np.random.default_rng(utility._seed(0, name, t, "rp_with_prior", to_micro_floor(eps)))
                    out = randomize(y_train, data.domain, "rp_with_prior", to_micro_floor(eps), rng,
                                    params={"private_prior": source})
                    job = utility.FitJob(trial.fit_table, out.labels[fit_pos], out.mechanism, trial.config,
                                         trial.test_table)
                    cell = cells.setdefault((eps, source), {"mechanism": [], "private": [], "width": []})
                    cell["mechanism"].append(float(np.mean((out.labels - y_train) ** 2)))
                    cell["private"].append(float(np.mean((learner.fit_predict(job)["private"] - trial.y_test) ** 2)))
                    spec, domain = out.mechanism, data.domain
                    assert isinstance(spec, RPWithPriorSpec) and domain is not None
                    cell["width"].append((spec.a2 - spec.a1) / domain.width)
                    print(f"{name} trial {t + 1} ε={eps:g} {source}: mechanism {cell['mechanism'][-1]:.4g}, "
                          f"private {cell['private'][-1]:.4g}", flush=True)
        for eps in epsilons:
            h, a = cells[(eps, "histogram")], cells[(eps, "noised_labels")]
            ratios = {k: float(np.mean(h[k]) / np.mean(a[k])) for k in ("mechanism", "private")}
            for k, r in ratios.items():
                wins[k][0] += r < 1
                wins[k][1] += 1
            rows.append(
                f"| {name} | {eps:g} | {np.mean(h['width']):.2f} | {np.mean(a['width']):.2f} | "
                f"{np.mean(h['mechanism']):.4g} | {np.mean(a['mechanism']):.4g} | {ratios['mechanism']:.2f} | "
                f"{_ms(h['private'])} | {_ms(a['private'])} | {ratios['private']:.2f} |"
            )
    lines = [
        "# RPWithPrior: the ε₁ Laplace histogram prior against Alg. 3's noised-label prior",
        "",
        f"Command: `python research/studies/rp_with_prior_prior.py --housing PATH --trials {args.trials} "
        f"--epsilons {args.epsilons}`",
        "",
        f"- Data: {', '.join(f'`{n}`' for n in names)}; the benchmark's 80/20 splits and training recipes, "
        f"{args.trials} trials; both priors at the same ε₁ (the release's split rule) and the same seeds.",
        "- Interval: (A₂ − A₁)/(high − low). Mechanism MSE: against the true training labels. Test MSE: the "
        "features party's default learning (`private`), mean ± standard error. Ratio: histogram / Alg. 3.",
        f"- Histogram better in {wins['mechanism'][0]} of {wins['mechanism'][1]} cells on mechanism MSE, "
        f"{wins['private'][0]} of {wins['private'][1]} on test MSE.",
        f"- Machine: {utility.environment('cpu')['cpu']}; {time.perf_counter() - started:.0f} s; written "
        f"{dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}.",
        "",
        "| data set | ε | interval, histogram | interval, Alg. 3 | mechanism MSE, histogram | mechanism MSE, Alg. 3 "
        "| ratio | test MSE, histogram | test MSE, Alg. 3 | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def _ms(values: list[float]) -> str:
    v = np.asarray(values)
    se = v.std(ddof=1) / math.sqrt(v.size) if v.size > 1 else 0.0
    return f"{v.mean():.4g} ± {se:.2g}"


if __name__ == "__main__":
    raise SystemExit(main())
