"""The ``labeldp`` command: run either party, the sender, or the local demo."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from labeldp.service.settings import InsecureSettings


def _serve(args: argparse.Namespace) -> int:
    from labeldp.service.events import shutdown_flag
    from labeldp.service.server import edge_server
    from labeldp.service.settings import Settings

    settings = Settings()
    if args.party == "labels":
        from labels_party.app import create_app
    else:
        from features_party.app import create_app
    app = create_app(settings)
    # uvicorn's own lines go through the app's JSON log handler; its access line is replaced by
    # the app's (labeldp.service.logs.RequestContext), which carries the request id.
    server = edge_server(app, args.host, args.port, settings)
    exit_server = server.handle_exit

    def handle_exit(sig: int, frame: object) -> None:
        # Event streams end first: uvicorn waits for open responses before it stops the app.
        shutdown_flag(app).set()
        exit_server(sig, frame)  # type: ignore[arg-type]

    server.handle_exit = handle_exit  # type: ignore[method-assign]
    server.run()
    return 0


def _outbox(args: argparse.Namespace) -> int:
    from labeldp.service.logs import configure_logging
    from labeldp.service.settings import Settings
    from labels_party.outbox import run_outbox

    settings = Settings()
    configure_logging(settings.log_level, "outbox")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    run_outbox(settings, stop, once=args.once)
    return 0


def _worker(args: argparse.Namespace) -> int:
    from labeldp.service.logs import configure_logging
    from labeldp.service.settings import Settings

    if args.party == "labels":
        from labels_party.release_worker import run_worker
    else:
        from features_party.worker import run_worker
    settings = Settings()
    configure_logging(settings.log_level, f"{args.party}-worker")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    run_worker(settings, stop)
    return 0


def _keys_generate(args: argparse.Namespace) -> int:
    from labeldp.signing import generate_keypair, key_id

    private, public = generate_keypair()
    if args.format == "env":
        print(f"# kid {key_id(public)}: the private key stays with the labels party's outbox; publish the public key")
        print(f"LABELDP_SIGNING_KEY={private}")
        print(f"LABELDP_SIGNING_PUBLIC_KEYS={public}")
    else:
        import json

        print(json.dumps({"kid": key_id(public), "private_key": private, "public_key": public}, indent=2))
    return 0


def _keys_tls(args: argparse.Namespace) -> int:
    from labeldp_tools.tls import write_exchange_certificates

    paths = write_exchange_certificates(Path(args.folder), tuple(args.host))
    print("# features party (the inbox's server): keep ca.key offline; it signs nothing else")
    print(f"LABELDP_SERVER_TLS_CERTFILE={paths['inbox.crt']}")
    print(f"LABELDP_SERVER_TLS_KEYFILE={paths['inbox.key']}")
    print(f"LABELDP_SERVER_TLS_CLIENT_CA_FILE={paths['ca.crt']}")
    print("# labels party (the outbox), with LABELDP_FEATURES_URL=https://…")
    print(f"LABELDP_OUTBOX_TLS_CA_FILE={paths['ca.crt']}")
    print(f"LABELDP_OUTBOX_TLS_CERTFILE={paths['outbox.crt']}")
    print(f"LABELDP_OUTBOX_TLS_KEYFILE={paths['outbox.key']}")
    return 0


def _torchrun_host(args: argparse.Namespace) -> int:
    from pathlib import Path

    from labeldp.learning.distributed import host
    from labeldp.service.logs import configure_logging
    from labeldp.service.settings import Settings, open_object_store

    settings = Settings()
    configure_logging(settings.log_level, "features-torchrun-host")
    objects = open_object_store(settings, Path(settings.features_data_dir))
    while True:
        status = host(args.dir, args.local_addr, wait_seconds=float("inf"), objects=objects, name=args.name)
        if args.once:
            return status


def _db_upgrade(args: argparse.Namespace) -> int:
    from labeldp.service.logs import configure_logging
    from labeldp.service.migrations import open_database
    from labeldp.service.settings import Settings
    from labeldp_tools.migrations import SERVICES

    settings = Settings()
    configure_logging(settings.log_level, f"{args.party}-migrations")
    url = settings.labels_database_url if args.party == "labels" else settings.features_database_url
    open_database(url, SERVICES[args.party], settings).dispose()
    print(f"{args.party} database: schema at head")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from labeldp_tools.demo import DEFAULT_ROWS, run_demo

    return run_demo(
        n_rows=args.rows or DEFAULT_ROWS,
        epsilons=[float(e) for e in args.epsilons.split(",")],
        epochs=args.epochs,
        keep=args.keep,
    )


def _watch(args: argparse.Namespace) -> int:
    import httpx

    from labeldp.service.settings import Settings, parse_api_keys
    from labeldp_tools.watch import follow_release, follow_training

    training = args.kind == "training"
    settings = Settings()
    url = args.url or ("http://127.0.0.1:8002" if training else "http://127.0.0.1:8001")
    keys = parse_api_keys(args.key or (settings.features_api_key if training else settings.labels_api_key))
    headers = {"authorization": f"Bearer {keys[0].key}"} if keys else {}
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
    from labeldp.release.randomizer import RandomizerError
    from labels_party.offline import OfflineError

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

    from labeldp.learning.batch_predict import PredictionError
    from labeldp.learning.export import ExportError

    try:
        result = run()
    except (ExportError, PredictionError) as exc:
        print(f"labeldp: error: {exc.code}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0


def _export(args: argparse.Namespace) -> int:
    from labeldp.learning.export import SUFFIXES, export_files

    formats = tuple(SUFFIXES) if args.format == "both" else (args.format,)
    return _model_tool(lambda: export_files(args.model, args.prefix, formats))


def _predict(args: argparse.Namespace) -> int:
    from labeldp.learning.batch_predict import predict_file

    return _model_tool(lambda: predict_file(
        args.model, args.input, args.output, id_column=args.id_column or None, feature_table=args.feature_table,
    ))


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

    worker = sub.add_parser(
        "worker",
        help="run a release worker (labels) or a training worker (features)",
        description="labels: claim queued release jobs from LABELDP_LABELS_DATABASE_URL, privatize and charge "
        "them one at a time under a renewed lease, and remove delivered messages after "
        "LABELDP_MESSAGE_RETENTION_SECONDS; several may run on several hosts sharing LABELDP_STORAGE_URL. Run "
        "the labels API with LABELDP_RELEASE_IN_PROCESS_WORKER=false to leave all releases to workers. "
        "features: claim queued trainings from the features party's database (LABELDP_FEATURES_DATABASE_URL) "
        "and run them, one at a time, renewing a lease; several may run on several hosts sharing "
        "the object store LABELDP_STORAGE_URL. SIGTERM stops after the running epoch and hands the training back "
        "to the queue. Run the API with LABELDP_TRAINING_IN_PROCESS_WORKER=false to leave all training to workers.",
    )
    worker.add_argument("party", choices=["labels", "features"],
                        help="whose jobs: the labels party's releases or the features party's trainings")
    worker.set_defaults(func=_worker)

    peer = sub.add_parser(
        "torchrun-host",
        help="run a peer host of trainings across hosts",
        description="Wait for the job a features worker delivers to this host's mailbox in the object store "
        "(LABELDP_STORAGE_URL), read this host's data shards from the store into DIR, run its torchrun "
        "against the job's rendezvous, clean DIR, and wait for the next. NAME is this host's entry in the "
        "worker's LABELDP_TORCHRUN_PEER_NAMES; no folder is shared with the other hosts.",
    )
    peer.add_argument("name", help="this host's name in LABELDP_TORCHRUN_PEER_NAMES")
    peer.add_argument("dir", help="this host's own working folder")
    peer.add_argument("--local-addr", default=None, help="this host's address as the other hosts reach it")
    peer.add_argument("--once", action="store_true", help="run one job, then exit with its status")
    peer.set_defaults(func=_torchrun_host)

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

    keys = sub.add_parser(
        "keys",
        help="the advertiser's message-signing keys, and certificates for mutual TLS",
        description="Ed25519 keys the labels party signs its messages with (labeldp.signing).",
    )
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    generate = keys_sub.add_parser(
        "generate",
        help="print a new Ed25519 key pair with its key id",
        description="A fresh pair from the OS CSPRNG: LABELDP_SIGNING_KEY (private, for the labels party's outbox "
        "only) and its public key for the features party's LABELDP_SIGNING_PUBLIC_KEYS, with its kid. To rotate, "
        "add the new public key to the features party's list first, then switch the outbox's private key, then "
        "drop the old public key.",
    )
    generate.add_argument("--format", choices=["env", "json"], default="env", help="env lines (default) or JSON")
    generate.set_defaults(func=_keys_generate)
    tls = keys_sub.add_parser(
        "tls",
        help="write a CA and the certificates of mutual TLS between the outbox and the inbox",
        description="A private CA, the features inbox's server certificate for --host and the labels outbox's "
        "client certificate (ECDSA P-256) in FOLDER, and the settings that use them (docs/operations.md, "
        "\"Mutual TLS\"). One CA serves both ends: give each party only its own files and ca.crt.",
    )
    tls.add_argument("folder", help="where the PEM files are written")
    tls.add_argument("--host", action="append", required=True,
                     help="a host name or IP address the outbox reaches the inbox by (repeatable)")
    tls.set_defaults(func=_keys_tls)

    demo = sub.add_parser(
        "demo",
        help="run the whole two-party flow locally",
        description="Generate a Criteo-like synthetic data set, start both parties and the sender on "
        "loopback with SQLite in a temporary folder, run releases and trainings over HTTP, print a table.",
    )
    demo.add_argument("--rows", type=int, default=None, help="synthetic clicks (default: the demo's DEFAULT_ROWS)")
    demo.add_argument("--epsilons", default="0.5,2,8", help="comma-separated ε values (default 0.5,2,8)")
    demo.add_argument(
        "--epochs", type=int, default=None, help="training epochs per model (default: the service's default options)"
    )
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
    privatize.add_argument(
        "--epsilon-prior", help="ε₁ for the private prior (default √(k/n), at most 0.9·ε: the randomizer keeps 10 %%)"
    )
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

    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if getattr(args, "port", "unset") is None:
        args.port = 8001 if args.party == "labels" else 8002
    try:
        return int(args.func(args) or 0)
    except InsecureSettings as exc:  # one line a person acts on, not a traceback around it
        print(f"labeldp: refused to start: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        if exc.title != "Settings":
            raise
        wrong = "; ".join(f"LABELDP_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors())
        print(f"labeldp: refused to start: {wrong}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
