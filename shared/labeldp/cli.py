"""The ``labeldp`` command: run either party, the sender, or the local demo."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from labeldp.events import shutdown_flag
    from labeldp.settings import Settings

    settings = Settings()
    if args.party == "labels":
        from labels_party.app import create_app
    else:
        from features_party.app import create_app
    app = create_app(settings)
    # uvicorn's own lines go through the app's JSON log handler; its access line is replaced by
    # the app's (labeldp.logs.RequestContext), which carries the request id.
    server = uvicorn.Server(uvicorn.Config(
        app, host=args.host, port=args.port, log_level=settings.log_level.lower(), log_config=None, access_log=False,
    ))
    exit_server = server.handle_exit

    def handle_exit(sig: int, frame: object) -> None:
        # Event streams end first: uvicorn waits for open responses before it stops the app.
        shutdown_flag(app).set()
        exit_server(sig, frame)  # type: ignore[arg-type]

    server.handle_exit = handle_exit  # type: ignore[method-assign]
    server.run()
    return 0


def _outbox(args: argparse.Namespace) -> int:
    from labeldp.logs import configure_logging
    from labeldp.settings import Settings
    from labels_party.outbox import run_outbox

    settings = Settings()
    configure_logging(settings.log_level, "outbox")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    run_outbox(settings, stop, once=args.once)
    return 0


def _db_upgrade(args: argparse.Namespace) -> int:
    from labeldp.database import open_database
    from labeldp.logs import configure_logging
    from labeldp.migrations import SERVICES
    from labeldp.settings import Settings

    settings = Settings()
    configure_logging(settings.log_level, f"{args.party}-migrations")
    url = settings.labels_database_url if args.party == "labels" else settings.features_database_url
    open_database(url, SERVICES[args.party], settings).dispose()
    print(f"{args.party} database: schema at head")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from labeldp.demo import run_demo

    return run_demo(
        n_rows=args.rows,
        epsilons=[float(e) for e in args.epsilons.split(",")],
        epochs=args.epochs,
        keep=args.keep,
    )


def _watch(args: argparse.Namespace) -> int:
    import httpx

    from labeldp.settings import Settings
    from labeldp.signing import secrets_of
    from labeldp.watch import follow_release, follow_training

    training = args.kind == "training"
    settings = Settings()
    url = args.url or ("http://127.0.0.1:8002" if training else "http://127.0.0.1:8001")
    keys = secrets_of(args.key or (settings.features_api_key if training else settings.labels_api_key))
    headers = {"authorization": f"Bearer {keys[0]}"} if keys else {}
    with httpx.Client(base_url=url, headers=headers, timeout=30.0) as client:
        try:
            final = (follow_training if training else follow_release)(client, args.id)
        except (httpx.HTTPError, RuntimeError) as exc:
            print(f"labeldp watch: {exc}", file=sys.stderr)
            return 1
    if final.get("error"):
        print(f"error: {final['error']['code']}: {final['error']['message']}", file=sys.stderr)
    return 0 if final["status"] in ("succeeded", "delivered") else 1


def _domain(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    try:
        low, high = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("--domain must be LOW,HIGH") from None
    return low, high


def _params(text: str | None) -> dict | None:
    import json

    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError("--params must be a JSON object") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--params must be a JSON object")
    return value


def _offline(run: Callable[[], object]) -> int:
    """Run an offline command; print its JSON result, or a one-line error (exit 2)."""
    import json

    from labeldp.epsilon import InvalidEpsilon
    from labels_party.offline import OfflineError
    from labels_party.randomizer import RandomizerError

    try:
        result = run()
    except InvalidEpsilon as exc:
        print(f"labeldp: error: invalid_epsilon: {exc}", file=sys.stderr)
        return 2
    except (OfflineError, RandomizerError) as exc:
        code = getattr(exc, "code", "invalid_input")
        print(f"labeldp: error: {code}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0


def _optimize(args: argparse.Namespace) -> int:
    from labels_party.offline import optimize

    return _offline(
        lambda: optimize(
            args.mechanism,
            args.epsilon,
            args.prior,
            loss=args.loss,
            domain=args.domain,
            categorical=args.categorical,
            params=args.params,
        )
    )


def _privatize(args: argparse.Namespace) -> int:
    from labels_party.offline import privatize_csv

    def run() -> dict[str, Any]:
        # ``auto`` is resolved by privatize_csv as the labels party resolves a release's: from the label
        # type, the exact ε and the number of rows (README, "Default configuration").
        return privatize_csv(
            args.mechanism,
            args.epsilon,
            args.input,
            args.output,
            epsilon_prior=args.epsilon_prior,
            domain=args.domain,
            label_type=args.label_type,
            classes=args.classes.split(",") if args.classes else None,
            params=args.params,
        )

    return _offline(run)


def _model_tool(run: Callable[[], dict[str, Any]]) -> int:
    """Run ``labeldp export`` or ``predict``: print the JSON of what was written, or one line
    ``labeldp: error: <code>: <message>`` and exit 2 (the message gives counts, never ids or values)."""
    import json

    from features_party.batch_predict import PredictionError
    from features_party.export import ExportError

    try:
        result = run()
    except (ExportError, PredictionError) as exc:
        print(f"labeldp: error: {exc.code}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0


def _export(args: argparse.Namespace) -> int:
    from features_party.export import SUFFIXES, export_files

    formats = tuple(SUFFIXES) if args.format == "both" else (args.format,)
    return _model_tool(lambda: export_files(args.model, args.prefix, formats))


def _predict(args: argparse.Namespace) -> int:
    from features_party.batch_predict import predict_file

    return _model_tool(lambda: predict_file(
        args.model, args.input, args.output, id_column=args.id_column or None, feature_table=args.feature_table,
    ))


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
    from labeldp.benchmarks import data_file

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
    from labeldp.benchmarks import utility
    from labeldp.benchmarks.paper_learner import PAPER, RawFeatureMLP

    if task != "regression" or not names or PAPER not in names:
        return list(utility.learners_for(task, names))
    rest = [n for n in names if n != PAPER]
    return (list(utility.learners_for(task, rest)) if rest else []) + [RawFeatureMLP()]


def _bench_utility(args: argparse.Namespace) -> int:
    """The privacy–utility protocol (docs/architecture.md, "Benchmark protocol") over the requested data sets."""
    import shlex
    import time

    from labeldp.benchmarks import report, utility

    housing = args.housing
    if housing is None and args.data_dir is not None:
        candidate = Path(args.data_dir) / "california_housing.csv"
        housing = candidate if candidate.is_file() else None
    quick = args.quick
    criteo_rows = args.criteo_rows or 1_000_000
    from features_party.device import resolve_device

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
        default_sets = list(plans) + (
            [] if housing else ["california_housing", "california_housing_paper", "california_housing_small"]
        )
        wanted = [_DATASET_ALIASES.get(d, d) for d in (args.datasets or default_sets)]
    unknown = [d for d in wanted if d not in plans and not d.startswith("california_housing")]
    if unknown:
        print(f"labeldp: error: unknown data set(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    trials = args.trials if args.trials is not None else (2 if quick else 10)
    learner_names = args.learners
    command = "labeldp " + " ".join(shlex.quote(a) for a in (args.argv or []))
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
        )
        paths = report.write_all(result, args.out, command=command, quick=quick)
        print(f"[{name}] {result.computed} cells computed, {result.cached} cached, {result.wall_seconds:.0f} s; "
              f"wrote {', '.join(str(p) for p in paths)}", flush=True)
    print(f"bench utility: done in {time.perf_counter() - started:.0f} s", flush=True)
    return 0


def _bench_report(args: argparse.Namespace) -> int:
    """Re-render utility tables and plots from their JSON summaries, recomputing nothing."""
    import json

    from labeldp.benchmarks import report

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
    parser = argparse.ArgumentParser(
        prog="labeldp",
        description="Feature-oblivious label differential privacy: two parties, one ε-DP message.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser(
        "serve",
        help="run one party's HTTP API",
        description="Run the labels party (advertiser) or the features party (publisher) API. "
        "Configured by LABELDP_* environment variables (see README).",
    )
    serve.add_argument("party", choices=["labels", "features"], help="which party to serve")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (default 8001 labels, 8002 features)")
    serve.set_defaults(func=_serve)

    outbox = sub.add_parser(
        "outbox",
        help="run the labels party's sender",
        description="Push charged releases to the features party (LABELDP_FEATURES_URL), retrying "
        "with backoff. It only sends; it opens no listening port.",
    )
    outbox.add_argument("--once", action="store_true", help="one pass over due releases, then exit")
    outbox.set_defaults(func=_outbox)

    db = sub.add_parser(
        "db",
        help="manage a party's database schema",
        description="Schema migrations (Alembic, shipped inside each service). The services upgrade "
        "their database at start; this does it by hand, e.g. before a rolling deployment.",
    )
    db_sub = db.add_subparsers(dest="db_command", required=True)
    upgrade = db_sub.add_parser(
        "upgrade",
        help="upgrade a party's database to the newest schema",
        description="Upgrade LABELDP_LABELS_DATABASE_URL or LABELDP_FEATURES_DATABASE_URL to the newest "
        "revision (waits up to LABELDP_DATABASE_START_TIMEOUT_SECONDS for the database).",
    )
    upgrade.add_argument("party", choices=["labels", "features"], help="whose database")
    upgrade.set_defaults(func=_db_upgrade)

    demo = sub.add_parser(
        "demo",
        help="run the whole two-party flow locally",
        description="Generate a Criteo-like synthetic data set, start both parties and the sender on "
        "loopback with SQLite in a temporary folder, run releases and trainings over HTTP, print a table.",
    )
    demo.add_argument("--rows", type=int, default=100_000, help="synthetic clicks (default 100000)")
    demo.add_argument("--epsilons", default="0.5,2,8", help="comma-separated ε values (default 0.5,2,8)")
    demo.add_argument("--epochs", type=int, default=5, help="training epochs per model (default 5)")
    demo.add_argument("--keep", action="store_true", help="keep the temporary folder (logs, databases)")
    demo.set_defaults(func=_demo)

    watch = sub.add_parser(
        "watch",
        help="follow a training or a release with a progress bar",
        description="Read the job's event stream (GET /v1/trainings/ID/events on the features party, "
        "GET /v1/releases/ID/events on the labels party) and draw a progress bar on stderr until it is over. "
        "Exit status 0 when it succeeded or was delivered, 1 otherwise.",
    )
    watch.add_argument("kind", choices=["training", "release"], help="what to follow")
    watch.add_argument("id", help="the training's or the release's id")
    watch.add_argument("--url", help="the service (default http://127.0.0.1:8002 trainings, :8001 releases)")
    watch.add_argument(
        "--key", help="bearer key (default LABELDP_FEATURES_API_KEY or LABELDP_LABELS_API_KEY, the first one)"
    )
    watch.set_defaults(func=_watch)

    optimize = sub.add_parser(
        "optimize",
        help="fit a mechanism to a public prior; print its parameters and exact expected loss",
        description="Fit MECHANISM for ε to the prior in PRIOR.json ({\"values\": [...], \"probs\": [...]}) "
        "and print, as JSON, the fitted parameters (bins and cut points, interval, transition matrix) "
        "and the exact expected loss under that prior.",
    )
    optimize.add_argument("--mechanism", required=True, help="e.g. rr_on_bins, rp_with_prior, unbiased, block_rr")
    optimize.add_argument("--epsilon", type=float, required=True, help="ε of the randomizer")
    optimize.add_argument("--loss", choices=["squared", "absolute", "poisson"], help="RR-on-Bins loss")
    optimize.add_argument("--prior", type=Path, required=True, help="PRIOR.json")
    optimize.add_argument("--domain", type=_domain, help="LOW,HIGH (default: the prior's range)")
    optimize.add_argument("--categorical", action="store_true", help="prior values are classes")
    optimize.add_argument("--params", type=_params, help="mechanism parameters as a JSON object")
    optimize.set_defaults(func=_optimize)

    privatize = sub.add_parser(
        "privatize",
        help="run the labels-party randomizer offline over a CSV",
        description="Read id,label rows from IN.csv, run the whole randomizer (private prior, fit, "
        "privatize) and write id,label (privatized, ids sorted) to OUT.csv; prints the ε spent per part.",
    )
    privatize.add_argument(
        "--mechanism", required=True,
        help="a catalogue mechanism, or auto: what a release with no mechanism gets from the labels party's "
        "default rule for this label type and ε (the output's resolved_from says so)",
    )
    privatize.add_argument("--epsilon", required=True, help="total ε of the release")
    privatize.add_argument("--epsilon-prior", help="ε₁ for the private prior (default √(k/n), at most ε/2)")
    privatize.add_argument("--input", type=Path, required=True, help="IN.csv with columns id,label")
    privatize.add_argument("--output", type=Path, required=True, help="OUT.csv to write")
    privatize.add_argument("--domain", type=_domain, help="public label range LOW,HIGH (real/integer labels)")
    privatize.add_argument("--label-type", choices=["real", "integer", "categorical"], default="real")
    privatize.add_argument("--classes", help="comma-separated class names (categorical labels)")
    privatize.add_argument("--params", type=_params, help="mechanism parameters as a JSON object")
    privatize.set_defaults(func=_privatize)

    export = sub.add_parser(
        "export",
        help="export a trained model to ONNX and/or TorchScript",
        description="Write PREFIX.onnx (opset 17, dynamic batch) and/or PREFIX.torchscript.pt from a features-party "
        "model file, and PREFIX.json: the preprocessor and the post-processing the graph's inputs and output need "
        "(also embedded in each file). Exit status 2 with one error line for a missing or foreign model file.",
    )
    export.add_argument("model", type=Path, help="MODEL.pt, a model file the features party wrote")
    export.add_argument("prefix", type=Path, help="PREFIX of the files to write")
    export.add_argument("--format", choices=["onnx", "torchscript", "both"], default="both",
                        help="which graph to write (default both)")
    export.set_defaults(func=_export)

    predict = sub.add_parser(
        "predict",
        help="predict a Parquet file of ids or feature rows into Parquet",
        description="Read IN.parquet a batch at a time and write OUT.parquet: the id column (when the input has "
        "one), `prediction` and, for classifiers, `p_<class>` per class. With --feature-table the input holds ids "
        "looked up in that Parquet table; without it, the model's feature columns. Exit status 2 with one error "
        "line (a code and counts, never ids or values) for a missing file, a file that is not Parquet, unknown "
        "ids or missing feature columns; no output is left then.",
    )
    predict.add_argument("model", type=Path, help="MODEL.pt, a model file the features party wrote")
    predict.add_argument("input", type=Path, help="IN.parquet: ids, or feature rows")
    predict.add_argument("output", type=Path, help="OUT.parquet to write")
    predict.add_argument("--id-column", default="id",
                         help="the input's (and the feature table's) id column, kept in the output (default id; "
                         "'' for none)")
    predict.add_argument("--feature-table", type=Path, metavar="TABLE.parquet",
                         help="look the input's ids up in this Parquet feature table")
    predict.set_defaults(func=_predict)

    bench = sub.add_parser("bench", help="run a benchmark", description="Benchmarks that reproduce the papers' tables.")
    bench_sub = bench.add_subparsers(dest="benchmark", required=True)
    util = bench_sub.add_parser(
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
                      "cifar10_1, cifar10_2 "
                      "(default: all available)")
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
    util.add_argument("--out", type=Path, default=Path("bench/results"), help="results folder (default bench/results)")
    util.add_argument("--cache", type=Path, default=Path("bench/cache"), help="cell cache folder (default bench/cache)")
    util.add_argument("--quick", action="store_true",
                      help="2 trials, ε ∈ {0.1, 1, 8, ∞} (classification {0.6, 2, 8, ∞}), 10 epochs")
    util.add_argument(
        "--device", default="auto", choices=["auto", "cpu", "cuda"], help="training device (default auto)"
    )
    util.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    util.add_argument("--seed", type=int, default=0, help="base seed of splits, noise and training (default 0)")
    util.add_argument("--sim-n", type=int, default=20_000, help="rows of the simulated sets (default 20000)")
    util.add_argument("--sim-d", type=int, default=10, help="features of the simulated sets (default 10)")
    util.add_argument("--criteo-rows", type=int, help="rows of the Criteo-like set (default 1000000)")
    util.add_argument("--train-rows", type=int,
                      help="Criteo-like training subsample (default 25000 on CPU, every training row on CUDA)")
    util.set_defaults(func=_bench_utility)

    rerender = bench_sub.add_parser(
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
    if getattr(args, "port", "unset") is None:
        args.port = 8001 if args.party == "labels" else 8002
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
