"""What the operations middleware costs per request: metrics and the request id + JSON access line.

Usage:
    python bench/bench_observability.py [--requests 20000] [--repeats 5] [--out bench/results/observability.md]

Three builds of the same FastAPI app (one async route, and one that answers a 404 error
envelope), called in-process through ASGI with no network, so only the app's own work is timed:

* bare     — the route and the error handlers, nothing else;
* metrics  — plus ``labeldp.service.metrics.HttpInstrumentation`` (latency histogram per route
  template, error counter with the envelope's code);
* full     — plus ``labeldp.service.logs.RequestContext`` (request id bound, returned in the header,
  one JSON access line per request at INFO, formatted and written to /dev/null).

Time is the thread's CPU time per request (``time.thread_time``: on a shared machine other
processes' time does not count), the median over ``repeats`` interleaved runs after a warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import logging
import os
import platform
import statistics
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from labeldp.errors import NotFound
from labeldp.service.http_api import install_error_handlers
from labeldp.service.logs import JsonFormatter, RequestContext
from labeldp.service.metrics import HttpInstrumentation, http_metrics


def build(variant: str) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/v1/things/{thing_id}")
    async def thing(thing_id: str) -> dict[str, Any]:
        return {"id": thing_id, "status": "ok"}

    @app.get("/v1/missing/{thing_id}")
    async def missing(thing_id: str) -> dict[str, Any]:
        raise NotFound("thing_not_found", "no such thing")

    if variant in ("metrics", "full"):
        app.add_middleware(HttpInstrumentation, metrics=http_metrics(CollectorRegistry()))
    if variant == "full":
        app.add_middleware(RequestContext)
    return app


async def _call(app: FastAPI, path: str) -> int:
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"host", b"bench")], "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
    }
    status = 0

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


async def _run(app: FastAPI, path: str, n: int, expect: int) -> float:
    start = time.thread_time()
    for i in range(n):
        status = await _call(app, f"{path}{i % 100}")
        if status != expect:
            raise RuntimeError(f"{path}: {status}")
    return (time.thread_time() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench/results/observability.md"))
    args = parser.parse_args()

    # The access line is really formatted and written, as in a service (to /dev/null here).
    handler = logging.StreamHandler(open(os.devnull, "w"))  # noqa: SIM115 -- lives as long as the run
    handler.setFormatter(JsonFormatter("bench"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)

    variants = ("bare", "metrics", "full")
    apps = {v: build(v) for v in variants}
    cases = (("200 route", "/v1/things/", 200), ("404 error envelope", "/v1/missing/", 404))
    times: dict[tuple[str, str], list[float]] = {(c, v): [] for c, _, _ in cases for v in variants}
    wall = time.perf_counter()
    for _case, path, expect in cases:  # warm-up
        for v in variants:
            asyncio.run(_run(apps[v], path, 500, expect))
    for _ in range(args.repeats):
        for case, path, expect in cases:
            for v in variants:  # interleaved: drift on a shared machine hits every variant alike
                times[(case, v)].append(asyncio.run(_run(apps[v], path, args.requests, expect)))
    wall = time.perf_counter() - wall

    lines = [
        "# Operations middleware: cost per request",
        "",
        f"`python bench/bench_observability.py --requests {args.requests} --repeats {args.repeats}` — "
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; {wall:.0f} s wall. In-process ASGI (no network, no server): "
        "CPU µs per request, median of the repeats.",
        "",
        "| case | bare µs | + metrics µs | + metrics + request id & JSON access line µs "
        "| metrics / bare | full / bare | full − bare µs |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for case, _, _ in cases:
        med = {v: statistics.median(times[(case, v)]) for v in variants}
        bare, metrics, full = med["bare"], med["metrics"], med["full"]
        lines.append(
            f"| {case} | {bare:.1f} | {metrics:.1f} | {full:.1f} | "
            f"{metrics / bare:.2f}× | {full / bare:.2f}× | {full - bare:.1f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
