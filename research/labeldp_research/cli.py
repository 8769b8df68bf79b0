"""``python -m labeldp_research``: the benchmark runner's command (utility tables, re-rendering).

It lives with the research, not in the product's ``labeldp`` command: no service image installs it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from labeldp_tools.cli import _domain


def _epsilons(text: str | None) -> list[float] | None:
    import math

    if text is None:
        return None
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        try:
            value = math.inf if part in ("inf", "∞", "infinity") else float(part)
        except ValueError:
            raise argparse.ArgumentTypeError("--epsilons must be comma-separated numbers or inf") from None
        if not value > 0:
            raise argparse.ArgumentTypeError("every ε must be > 0")
        out.append(value)
    return out


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [p.strip() for p in text.split(",") if p.strip()]


_DATASET_ALIASES = {
    "housing": "california_housing",
    "housing_paper": "california_housing_paper",
    "linear": "simulated_linear",
    "nonlinear": "simulated_nonlinear",
    "criteo": "criteo_like",
}


def _own_data(args: argparse.Namespace) -> tuple[Any, Any] | int | None:
    """(plan, data) for ``--data FILE``, None without it, or exit status 2 after a one-line error."""
    from labeldp_research import data_file

    if args.data is None:
        stray = [f"--{n.replace('_', '-')}" for n in ("target", "categorical", "id", "drop", "name")
                 if getattr(args, n) is not None]
        if args.domain is not None:
            stray.append("--domain")
        if stray:
            print(f"labeldp: error: {', '.join(stray)} only go with --data FILE", file=sys.stderr)
            return 2
        return None
    if args.target is None or args.domain is None:
        print("labeldp: error: --data needs --target COLUMN and --domain LOW,HIGH (the public label range)",
              file=sys.stderr)
        return 2
    if args.datasets is not None:
        print("labeldp: error: --datasets names built-in sets; with --data the file is the data set",
              file=sys.stderr)
        return 2
    try:
        data = data_file.from_file(
            args.data,
            args.target,
            args.domain,
            categorical=args.categorical or (),
            id_column=args.id,
            drop=args.drop or (),
            name=args.name,
        )
        plan = data_file.file_plan(
            data,
            args.data,
            target=args.target,
            categorical=args.categorical or (),
            id_column=args.id,
            drop=args.drop or (),
            quick=args.quick,
            epochs=args.epochs,
        )
    except data_file.DataFileError as exc:
        print(f"labeldp: error: {exc}", file=sys.stderr)
        return 2
    return plan, data


def _learners(task: str, names: list[str] | None) -> list[Any]:
    """The runner's learners for ``--learners``, plus ``paper`` (Liu & Huang's network on unscaled
    features, ``benchmarks/paper_learner.py``) when named."""
    from labeldp_research import utility
    from labeldp_research.paper_learner import PAPER, RawFeatureMLP

    if task != "regression" or not names or PAPER not in names:
        return list(utility.learners_for(task, names))
    rest = [n for n in names if n != PAPER]
    return (list(utility.learners_for(task, rest)) if rest else []) + [RawFeatureMLP()]


OWN_RUNS = Path("research/runs")
"""Where ``--data`` runs write by default: git-ignored, one folder per run."""

BUILT_IN_RESULTS = Path("research/results")


def run_folder(parent: Path, name: str) -> Path:
    """``parent/<name>-<UTC time>``, a folder no earlier run wrote (``-2``, ``-3``… on a clash)."""
    import datetime as dt

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    folder = parent / f"{name}-{stamp}"
    n = 2
    while folder.exists():
        folder = parent / f"{name}-{stamp}-{n}"
        n += 1
    return folder


def default_sets(plans: dict[str, Any], housing: bool) -> list[str]:
    """The data sets a run without ``--datasets`` takes: every plan but the held-out confirmation sets
    (``utility.HELDOUT_SETS``, run only when named); without the Housing file its sets are still named, so
    the run says it is missing."""
    from labeldp_research import utility

    missing = [] if housing else ["california_housing", "california_housing_paper", "california_housing_small"]
    return [p for p in plans if p not in utility.HELDOUT_SETS] + missing


def _bench_utility(args: argparse.Namespace) -> int:
    """The privacy–utility protocol (docs/architecture.md, "Benchmark protocol") over the requested data sets."""
    import shlex
    import time

    from labeldp_research import report, utility

    housing = args.housing
    if housing is None and args.data_dir is not None:
        candidate = Path(args.data_dir) / "california_housing.csv"
        housing = candidate if candidate.is_file() else None
    quick = args.quick
    criteo_rows = args.criteo_rows or 1_000_000
    from labeldp.learning.device import resolve_device

    device = resolve_device(args.device)
    own = _own_data(args)
    if isinstance(own, int):
        return own
    if own is not None:
        plans = {own[0].name: own[0]}
        wanted = [own[0].name]
    else:
        plans = utility.default_plans(
            housing=housing,
            quick=quick,
            epochs=args.epochs,
            sim_n=args.sim_n,
            sim_d=args.sim_d,
            criteo_rows=criteo_rows,
            criteo_train_rows=args.train_rows,
            cuda=device == "cuda",
        )
        wanted = [_DATASET_ALIASES.get(d, d) for d in (args.datasets or default_sets(plans, housing is not None))]
    unknown = [d for d in wanted if d not in plans and not d.startswith("california_housing")]
    if unknown:
        print(f"labeldp: error: unknown data set(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    trials = args.trials if args.trials is not None else (2 if quick else 10)
    if trials < report.FEW_TRIALS:
        print(f"labeldp: warning: {trials} trial(s) per cell: standard errors and picks are unreliable below "
              f"{report.FEW_TRIALS} trials", file=sys.stderr, flush=True)
    out_dir = args.out
    if own is not None:  # your own data: a folder of its own per run, never over committed results
        out_dir = run_folder(args.out if args.out is not None else OWN_RUNS, own[0].name)
    elif out_dir is None:
        out_dir = BUILT_IN_RESULTS
    learner_names = args.learners
    command = "python -m labeldp_research " + " ".join(shlex.quote(a) for a in (args.argv or []))
    started = time.perf_counter()
    for name in dict.fromkeys(wanted):
        if name not in plans:
            print(
                f"[{name}] skipped: no California Housing CSV (give --housing PATH or --data-dir DIR)",
                file=sys.stderr,
            )
            continue
        plan = plans[name]
        if args.epsilons is not None:
            eps = args.epsilons
        elif quick:
            classification = plan.task == "classification"
            eps = list(utility.QUICK_CLASSIFICATION_EPSILONS if classification else utility.QUICK_REGRESSION_EPSILONS)
        else:
            eps = None
        result = utility.run_utility(
            plan,
            trials=trials,
            epsilons=eps,
            mechanisms=args.mechanisms,
            learners=_learners(plan.task, learner_names),
            cache_dir=args.cache,
            device=device,
            threads=args.threads,
            seed=args.seed,
            progress=lambda line: print(line, flush=True),
            data=own[1] if own is not None else None,
            processes=args.processes,
        )
        paths = report.write_all(result, out_dir, command=command, quick=quick)
        print(f"[{name}] {result.computed} cells computed, {result.cached} cached, {result.wall_seconds:.0f} s; "
              f"wrote {', '.join(str(p) for p in paths)}", flush=True)
        for line in report.recommendations(result):
            print(f"[{name}] {line}", flush=True)
    print(f"bench utility: done in {time.perf_counter() - started:.0f} s", flush=True)
    return 0


def _bench_report(args: argparse.Namespace) -> int:
    """Re-render utility tables and plots from their JSON summaries, recomputing nothing."""
    import json

    from labeldp_research import report

    for path in args.summaries:
        try:
            doc = json.loads(Path(path).read_text())
            result = report.result_from_summary(doc, source=str(path))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"labeldp: error: {path}: not a utility summary ({type(exc).__name__}: {exc})", file=sys.stderr)
            return 2
        out = args.out if args.out is not None else Path(path).parent
        paths = report.write_all(result, out, quick=bool(doc.get("quick", False)))
        written = ", ".join(str(p) for p in paths)
        print(f"[{result.plan.name}] re-rendered {result.cached} cells (none recomputed); wrote {written}")
    return 0

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m labeldp_research",
                                     description="Benchmarks that reproduce the papers' tables.")
    sub = parser.add_subparsers(dest="benchmark", required=True)
    util = sub.add_parser(
        "utility",
        help="privacy–utility tables for every mechanism (docs/architecture.md, \"Benchmark protocol\")",
        description="Every mechanism of the catalogue through the same training, 80/20 splits, several trials, "
        "ε grid with ∞ = non-private; writes utility_<dataset>.md/.png/.json. Cells are cached, so an "
        "interrupted run resumes.",
    )
    source = util.add_mutually_exclusive_group()
    source.add_argument("--data-dir", type=Path, help="folder holding california_housing.csv")
    source.add_argument("--housing", type=Path, help="path of california_housing.csv")
    source.add_argument("--data", type=Path, metavar="FILE",
                        help="your own CSV or Parquet file instead of the built-in sets (with --target, --domain)")
    util.add_argument("--datasets", type=_names,
                      help="comma-separated: california_housing, california_housing_paper (Liu & Huang's "
                      "features), california_housing_small (2 500 of its rows), simulated_linear, "
                      "simulated_nonlinear, bounded_wide, counts, counts_small (2 500 rows), criteo_like, "
                      "cifar10_1, cifar10_2; the held-out confirmation sets heldout_* (utility.HELDOUT_SETS) only "
                      "when named (default: all available)")
    own = util.add_argument_group("your own data (--data FILE)")
    own.add_argument("--target", metavar="COLUMN", help="the label column (a regression target)")
    own.add_argument("--domain", type=_domain, metavar="LOW,HIGH",
                     help="the public label range; labels outside are clipped to it (never read from the labels)")
    own.add_argument("--categorical", type=_names, metavar="COLUMNS",
                     help="comma-separated feature columns to treat as categories (text columns always are)")
    own.add_argument("--id", metavar="COLUMN", help="a column of unique row ids (default: rows are numbered)")
    own.add_argument("--drop", type=_names, metavar="COLUMNS", help="comma-separated columns that are not features")
    own.add_argument("--name", help="data set name in the result files (default: the file's name)")
    util.add_argument(
        "--mechanisms", type=_names, help="comma-separated mechanism names (default: every one that applies)"
    )
    util.add_argument("--epsilons", type=_epsilons, help="comma-separated ε values, 'inf' for the non-private model")
    util.add_argument("--trials", type=int, help="trials per cell (default 10; 2 with --quick)")
    util.add_argument("--epochs", type=int, help="training epochs (default: each data set's paper recipe)")
    util.add_argument("--learners", type=_names,
                      help="comma-separated regression learners: plain, private, oracle (default all three where the "
                      "features party has fit_private_regressor), and paper (Liu & Huang's network on unscaled "
                      "features, a yardstick); classification always uses plain")
    util.add_argument("--out", type=Path,
                      help="results folder (default research/results; with --data a new folder "
                      "<name>-<UTC time> inside this one, by default inside research/runs)")
    util.add_argument("--cache", type=Path, default=Path("bench/cache"), help="cell cache folder (default bench/cache)")
    util.add_argument("--quick", action="store_true",
                      help="2 trials, ε ∈ {0.1, 1, 8, ∞} (classification {0.6, 2, 8, ∞}), 10 epochs")
    util.add_argument(
        "--device", default="auto", choices=["auto", "cpu", "cuda"], help="training device (default auto)"
    )
    util.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    util.add_argument("--seed", type=int, default=0, help="base seed of splits, noise and training (default 0)")
    util.add_argument("--sim-n", type=int, default=20_000,
                      help="rows of the simulated sets and of counts (default 20000)")
    util.add_argument("--processes", type=int, default=1,
                      help="train with the default recipe of a training of this many processes (a larger batch "
                      "on enough rows, docs/decisions/0038-process-recipe.md), in one process")
    util.add_argument("--sim-d", type=int, default=10, help="features of the simulated sets (default 10)")
    util.add_argument("--criteo-rows", type=int, help="rows of the Criteo-like set (default 1000000)")
    util.add_argument("--train-rows", type=int,
                      help="Criteo-like training subsample (default 25000 on CPU, every training row on CUDA)")
    util.set_defaults(func=_bench_utility)

    rerender = sub.add_parser(
        "report",
        help="re-render utility tables and plots from their JSON summaries",
        description="Rebuild utility_<dataset>.md/.png/.json from the JSON a `bench utility` run wrote, without "
        "recomputing a cell: for a new report layout, or to show the current default rule's column.",
    )
    rerender.add_argument("summaries", nargs="+", type=Path, help="utility_<dataset>.json files")
    rerender.add_argument("--out", type=Path, help="results folder (default: each summary's own folder)")
    rerender.set_defaults(func=_bench_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return int(args.func(args) or 0)
