"""Every Prometheus metric of both services and the outbox: the one place metric objects are defined.

Each app (and each outbox process) has its own registry: no process-global state, so tests
can run several side by side. Every name starts with ``labeldp_``. Label values are route
templates, methods, status codes, error codes, mechanism names and outcomes, all from fixed
sets; never an id, a path as sent, or a label value (privacy invariant 5).

``/metrics`` never touches a database: a scrape answers while the database is down. What
needs the catalogue (the delivery queue) is measured by the outbox, which writes its registry
to a file in the labels party's data directory after its passes; the labels API serves those
files with its own metrics (docs/architecture.md, "Operations"). The outbox listens on no
port, so it needs no scrape target of its own.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import write_to_textfile
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from labeldp import __version__

log = logging.getLogger("labeldp.service.metrics")

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Seconds: a status read takes milliseconds, a 10⁷-label upload or release tens of seconds."""
TRAINING_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0)
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
_ERROR_CODE = re.compile(r"[a-z][a-z0-9_]{0,47}")
_ERROR_BODY_LIMIT = 8192  # error envelopes are small; a larger error body is not read for its code

OUTBOX_METRICS_DIR = "metrics"
"""Under the labels data directory: one ``outbox-<host>-<pid>.prom`` file per running sender."""
OUTBOX_STALE_SECONDS = 900.0
"""A sender file not rewritten for this long belongs to a process that is gone: not served, then removed."""


BUILD_INFO_HELP = "the running build"


def build_info(registry: CollectorRegistry, service: str) -> Gauge:
    """``labeldp_build_info{service, version, python} 1``: which code answers."""
    gauge = Gauge("labeldp_build_info", BUILD_INFO_HELP, ["service", "version", "python"], registry=registry)
    gauge.labels(service, __version__, platform.python_version()).set(1)
    return gauge


# --- HTTP (both APIs) ----------------------------------------------------------------------


@dataclass(frozen=True)
class HttpMetrics:
    requests: Histogram  # labeldp_http_request_duration_seconds{method, route, status}
    errors: Counter  # labeldp_http_errors_total{method, route, status, code}


def http_metrics(registry: CollectorRegistry) -> HttpMetrics:
    return HttpMetrics(
        requests=Histogram(
            "labeldp_http_request_duration_seconds",
            "HTTP requests by route template, method and status: time to the end of the response "
            "(an event stream: to its first byte, so a watch of minutes does not read as a slow answer)",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        ),
        errors=Counter(
            "labeldp_http_errors",
            "HTTP answers with status >= 400 by route template, status and the envelope's error code",
            ["method", "route", "status", "code"],
            registry=registry,
        ),
    )


def route_label(scope: Scope) -> str:
    """The matched route's template (``/v1/releases/{release_id}``), or ``unmatched`` (404s):
    raw paths would make one series per id."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


def error_code(status: int, body: bytes) -> str:
    """The ``code`` of an error envelope, if it is one of ours (a short snake_case word)."""
    try:
        code = json.loads(body).get("code") if body else None
    except (ValueError, AttributeError):
        code = None
    if isinstance(code, str) and _ERROR_CODE.fullmatch(code):
        return code
    return "internal_error" if status >= 500 else "other"


def _is_event_stream(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(k.lower() == b"content-type" and v.startswith(b"text/event-stream") for k, v in headers)


class HttpInstrumentation:
    """ASGI middleware: one latency observation per request, one error count per 4xx/5xx."""

    def __init__(self, app: ASGIApp, metrics: HttpMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        error_body = bytearray()
        streamed_at: float | None = None  # an event stream is timed to its first byte, not its end

        async def observe(message: Message) -> None:
            nonlocal status, streamed_at
            if message["type"] == "http.response.start":
                status = message["status"]
                if _is_event_stream(message.get("headers", [])):
                    streamed_at = time.perf_counter()
            elif message["type"] == "http.response.body" and status >= 400 and len(error_body) < _ERROR_BODY_LIMIT:
                error_body.extend(message.get("body", b"")[: _ERROR_BODY_LIMIT - len(error_body)])
            await send(message)

        raised = False
        try:
            await self.app(scope, receive, observe)
        except Exception:
            raised = True  # the outer error handler answers 500
            raise
        finally:
            method = scope.get("method", "")
            method = method if method in METHODS else "other"
            route = route_label(scope)
            ended = streamed_at if streamed_at is not None else time.perf_counter()
            self.metrics.requests.labels(method, route, str(status)).observe(ended - started)
            if status >= 400:
                code = "internal_error" if raised else error_code(status, bytes(error_body))
                self.metrics.errors.labels(method, route, str(status), code).inc()


def instrument(
    app: FastAPI, registry: CollectorRegistry, service: str, senders: Path | None = None
) -> OutboxFiles | None:
    """Build info, HTTP metrics and ``GET /metrics`` for one app; ``senders``: the outbox metrics folder to
    serve (the collector is returned: the app closes it when it stops, handing the serving over)."""
    files = None
    if senders is None:
        build_info(registry, service)
    else:
        files = OutboxFiles(senders, service)
        registry.register(files)
    app.add_middleware(HttpInstrumentation, metrics=http_metrics(registry))
    mount_metrics(app, registry)
    return files


def mount_metrics(app: FastAPI, registry: CollectorRegistry) -> None:
    @app.get(
        "/metrics",
        tags=["health"],
        summary="Prometheus metrics",
        description="The service's metrics in Prometheus' text format (docs/operations.md \"Metrics\"); "
        "unauthenticated like /healthz: keep it on the operators' network.",
        response_class=Response,
        responses={
            200: {
                "description": "the metrics",
                "content": {CONTENT_TYPE_LATEST: {"example": "# HELP labeldp_build_info ...\n"}},
            }
        },
    )
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


# --- labels party --------------------------------------------------------------------------


@dataclass(frozen=True)
class LabelsMetrics:
    uploaded_labels: Counter
    release_requests: Counter


def labels_metrics(registry: CollectorRegistry) -> LabelsMetrics:
    return LabelsMetrics(
        uploaded_labels=Counter("labeldp_uploaded_labels", "labels accepted by uploads", registry=registry),
        release_requests=Counter(
            "labeldp_release_requests",
            "release requests by mechanism and outcome (accepted or the error code)",
            ["mechanism", "outcome"],
            registry=registry,
        ),
    )


# --- features party ------------------------------------------------------------------------


@dataclass(frozen=True)
class FeaturesMetrics:
    inbox_messages: Counter
    trainings: Counter
    training_seconds: Histogram
    training_rows: Counter
    training_rows_per_second: Gauge


def features_metrics(registry: CollectorRegistry) -> FeaturesMetrics:
    return FeaturesMetrics(
        inbox_messages=Counter(
            "labeldp_inbox_messages", "inbox requests (manifests, shards, completes), by result", ["result"],
            registry=registry,
        ),
        trainings=Counter(
            "labeldp_trainings", "training status transitions, by new status", ["status"], registry=registry
        ),
        training_seconds=Histogram(
            "labeldp_training_duration_seconds",
            "wall time of a training from running to its final status (loading, fitting, saving)",
            ["status"],
            buckets=TRAINING_BUCKETS,
            registry=registry,
        ),
        training_rows=Counter(
            "labeldp_training_rows",
            "training rows processed (rows of the training split times epochs) by succeeded trainings",
            registry=registry,
        ),
        training_rows_per_second=Gauge(
            "labeldp_training_rows_per_second",
            "rows × epochs per wall-clock second of the last succeeded training",
            registry=registry,
        ),
    )


class StatusCounts(Collector):
    """A gauge read at scrape time from the catalogue: how many jobs are in each status.

    Every replica reads the same shared rows, so its value is the fleet's, not the replica's:
    aggregate it with ``max``, never ``sum`` (docs/operations.md "Metrics").
    """

    def __init__(self, name: str, documentation: str, count: Callable[[], dict[str, int]], statuses: tuple[str, ...]):
        self.name, self.documentation, self.count, self.statuses = name, documentation, count, statuses

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=["status"])
        try:
            counts = self.count()
        except Exception as exc:  # a scrape during a database outage answers without this gauge
            log.warning("could not count %s (%s)", self.name, type(exc).__name__)
            return
        for status in self.statuses:
            family.add_metric([status], counts.get(status, 0))
        yield family


class TrainingObserver:
    """Turns a training worker's status changes into duration and throughput metrics.

    A worker thread runs one training from ``running`` to a final status, so the start time
    is kept per thread; the rows a training processed arrive (:meth:`trained`) just before
    its ``succeeded``.
    """

    FINAL = frozenset({"succeeded", "failed", "cancelled"})

    def __init__(self, metrics: FeaturesMetrics) -> None:
        self.metrics = metrics
        self._local = threading.local()

    def status_changed(self, status: str) -> None:
        self.metrics.trainings.labels(status=status).inc()
        if status == "running":
            self._local.started, self._local.rows = time.perf_counter(), None
            return
        started = getattr(self._local, "started", None)
        if status not in self.FINAL or started is None:
            return
        seconds = time.perf_counter() - started
        self.metrics.training_seconds.labels(status=status).observe(seconds)
        rows = self._local.rows
        if status == "succeeded" and rows:
            self.metrics.training_rows.inc(rows)
            self.metrics.training_rows_per_second.set(rows / max(seconds, 1e-9))
        self._local.started = self._local.rows = None

    def trained(self, rows: int) -> None:
        """Rows × epochs the succeeding training went through."""
        self._local.rows = rows


# --- outbox --------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutboxMetrics:
    registry: CollectorRegistry
    attempts: Counter
    attempt_seconds: Histogram
    pass_failures: Counter
    queue_depth: Gauge
    oldest_pending_seconds: Gauge
    releases: Gauge
    heartbeat: Gauge


def outbox_metrics() -> OutboxMetrics:
    registry = CollectorRegistry()
    build_info(registry, "outbox")
    return OutboxMetrics(
        registry=registry,
        attempts=Counter(
            "labeldp_outbox_attempts",
            "delivery attempts by outcome: delivered, rejected (4xx), retry (5xx, 408/425/429), network",
            ["outcome"],
            registry=registry,
        ),
        attempt_seconds=Histogram(
            "labeldp_outbox_attempt_duration_seconds",
            "time of one delivery attempt (sending the message and reading the answer), by outcome",
            ["outcome"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        ),
        pass_failures=Counter(
            "labeldp_outbox_pass_failures",
            "sender passes that failed (the database was unavailable), by error type",
            ["error"],
            registry=registry,
        ),
        queue_depth=Gauge(
            "labeldp_outbox_queue_depth", "releases waiting to be delivered (status pending)", registry=registry
        ),
        oldest_pending_seconds=Gauge(
            "labeldp_outbox_oldest_pending_seconds",
            "age of the oldest release waiting to be delivered (0 when none waits)",
            registry=registry,
        ),
        releases=Gauge("labeldp_releases", "releases by delivery status", ["status"], registry=registry),
        heartbeat=Gauge(
            "labeldp_outbox_heartbeat_timestamp_seconds",
            "when this sender last wrote its metrics (alert when it falls behind)",
            registry=registry,
        ),
    )


def sender_name() -> str:
    """This process as a sender: host and pid (a container's host name is its id)."""
    return f"{socket.gethostname()}-{os.getpid()}"


class OutboxMetricsFile:
    """The outbox's registry, written atomically to ``<dir>/outbox-<sender>.prom`` at most every ``interval`` s."""

    def __init__(self, directory: Path, metrics: OutboxMetrics, interval: float = 5.0) -> None:
        self.directory = directory
        self.metrics = metrics
        self.interval = interval
        self.path = directory / f"outbox-{sender_name()}.prom"
        self._written = float("-inf")

    def due(self) -> bool:
        return time.monotonic() - self._written >= self.interval

    def write(self) -> None:
        """Write now; a disk error is logged and never stops the sender."""
        self._written = time.monotonic()
        self.metrics.heartbeat.set(time.time())
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_to_textfile(str(self.path), self.metrics.registry)
        except OSError as exc:
            log.warning("outbox metrics not written (%s)", type(exc).__name__)

    def remove_stale(self) -> None:
        """Remove files of senders gone for :data:`OUTBOX_STALE_SECONDS` (each restart writes a new file)."""
        for path in self.directory.glob("outbox-*.prom"):
            try:
                if time.time() - path.stat().st_mtime > OUTBOX_STALE_SECONDS:
                    path.unlink()
            except OSError:
                continue

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def sender_alive(directory: Path, max_age: float, host: str | None = None) -> bool:
    """Whether a sender on ``host`` (this one by default) wrote its file within ``max_age`` seconds.

    The outbox's health: it listens on no port, so its healthcheck reads its heartbeat.
    """
    host = host or socket.gethostname()
    now = time.time()
    for path in directory.glob(f"outbox-{host}-*.prom"):
        try:
            if now - path.stat().st_mtime <= max_age:
                return True
        except OSError:
            continue
    return False


def _main(argv: list[str] | None = None) -> int:
    """``python -m labeldp.service.metrics heartbeat --max-age S``: exit 0 while this host's outbox writes its file."""
    import argparse

    from labeldp.service.settings import Settings

    parser = argparse.ArgumentParser(prog="python -m labeldp.service.metrics")
    commands = parser.add_subparsers(dest="command", required=True)
    heartbeat = commands.add_parser("heartbeat", help="exit 0 if this host's outbox wrote its metrics recently")
    heartbeat.add_argument("--max-age", type=float, default=300.0, help="seconds (default 300)")
    args = parser.parse_args(argv)
    folder = Settings().labels_data_dir / OUTBOX_METRICS_DIR
    if sender_alive(folder, args.max_age):
        return 0
    print(f"no outbox heartbeat in {folder} within {args.max_age:.0f} s")
    return 1


if __name__ == "__main__":
    raise SystemExit(_main())


QUEUE_FAMILIES = frozenset({"labeldp_outbox_queue_depth", "labeldp_outbox_oldest_pending_seconds", "labeldp_releases"})
"""Gauges of the one delivery queue in the shared catalogue, not of a sender: every sender measures
the same numbers, so they are served once (from the newest file), without a ``sender`` label."""
SERVING_LOCK = ".served.lock"


class OutboxFiles:
    """A collector that serves every live sender's file, merged by metric and labelled ``sender``.

    Registered on the labels API's registry (the API and the outbox share the data
    directory). It also yields the API's own ``labeldp_build_info`` sample: each metric
    family may appear once in a scrape, and the senders report theirs under that name too.

    Counted once: of the API processes that share the folder (replicas, ``--workers``), only
    the one holding its lock (``SERVING_LOCK``, an ``flock`` kept while the process lives; the
    next scrape of another replica takes it over once the holder is gone) serves the senders'
    files, so summing ``/metrics`` over replicas counts each attempt once; and the queue gauges
    (:data:`QUEUE_FAMILIES`) are served once, not once per sender.
    """

    def __init__(self, directory: Path, service: str) -> None:
        self.directory = directory
        self.service = service
        self._lock: int | None = None
        self._guard = threading.Lock()

    def serving(self) -> bool:
        """Whether this process serves the senders' files (it holds, or now takes, the folder's lock)."""
        import fcntl

        with self._guard:
            if self._lock is not None:
                return True
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.directory / SERVING_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                return False
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                return False
            self._lock = fd
            return True

    def close(self) -> None:
        """Give up serving (the app stops): another replica's next scrape takes over."""
        with self._guard:
            if self._lock is not None:
                os.close(self._lock)  # closing the descriptor releases the flock
                self._lock = None

    def __del__(self) -> None:
        self.close()

    def collect(self) -> Iterator[Metric]:
        info = Metric("labeldp_build_info", BUILD_INFO_HELP, "gauge")
        info.add_sample(
            "labeldp_build_info",
            {"service": self.service, "version": __version__, "python": platform.python_version()},
            1.0,
        )
        merged: dict[str, Metric] = {info.name: info}
        queue: dict[str, Metric] = {}
        if not self.serving():
            yield info
            return
        # Oldest written first: the newest file's queue gauges are the ones kept.
        for sender, text, _ in sorted(self._files(), key=lambda f: f[2]):
            try:
                families = list(text_string_to_metric_families(text))
            except ValueError:  # a file cut short by a full disk: skip it this scrape
                continue
            for family in families:
                if family.name in QUEUE_FAMILIES:
                    queue[family.name] = family
                    continue
                out = merged.get(family.name)
                if out is None:
                    out = merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                for sample in family.samples:
                    out.add_sample(sample.name, {**sample.labels, "sender": sender}, sample.value, sample.timestamp)
        yield from merged.values()
        yield from queue.values()

    def _files(self) -> Iterable[tuple[str, str, float]]:
        """(sender, the file's text, when it was written) of every live sender."""
        now = time.time()
        for path in sorted(self.directory.glob("outbox-*.prom")):
            try:
                written = path.stat().st_mtime
                if now - written > OUTBOX_STALE_SECONDS:
                    continue
                yield path.stem.removeprefix("outbox-"), path.read_text(), written
            except OSError:
                continue
