"""The ``labeldp`` command: run either party, the sender, or the local demo."""

from __future__ import annotations

import argparse
import signal
import sys
import threading


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from labeldp.settings import Settings

    settings = Settings()
    if args.party == "labels":
        from labels_party.app import create_app
    else:
        from features_party.app import create_app
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level=settings.log_level.lower())
    return 0


def _outbox(args: argparse.Namespace) -> int:
    from labeldp.http_api import configure_logging
    from labeldp.settings import Settings
    from labels_party.outbox import run_outbox

    settings = Settings()
    configure_logging(settings.log_level)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    run_outbox(settings, stop, once=args.once)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from labeldp.demo import run_demo

    return run_demo(
        n_rows=args.rows,
        epsilons=[float(e) for e in args.epsilons.split(",")],
        epochs=args.epochs,
        keep=args.keep,
    )


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
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "port", "unset") is None:
        args.port = 8001 if args.party == "labels" else 8002
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
