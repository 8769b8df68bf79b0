"""The ``labeldp`` command: run either party, the sender, or the local demo."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path


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


def _offline(run) -> int:  # type: ignore[no-untyped-def]
    """Run an offline command; print its JSON result, or a one-line error (exit 2)."""
    import json

    from labels_party.offline import OfflineError
    from labels_party.randomizer import RandomizerError

    try:
        result = run()
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

    return _offline(
        lambda: privatize_csv(
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
    privatize.add_argument("--mechanism", required=True)
    privatize.add_argument("--epsilon", required=True, help="total ε of the release")
    privatize.add_argument("--epsilon-prior", help="ε₁ for the private prior (default √(k/n), at most ε/2)")
    privatize.add_argument("--input", type=Path, required=True, help="IN.csv with columns id,label")
    privatize.add_argument("--output", type=Path, required=True, help="OUT.csv to write")
    privatize.add_argument("--domain", type=_domain, help="public label range LOW,HIGH (real/integer labels)")
    privatize.add_argument("--label-type", choices=["real", "integer", "categorical"], default="real")
    privatize.add_argument("--classes", help="comma-separated class names (categorical labels)")
    privatize.add_argument("--params", type=_params, help="mechanism parameters as a JSON object")
    privatize.set_defaults(func=_privatize)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "port", "unset") is None:
        args.port = 8001 if args.party == "labels" else 8002
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
