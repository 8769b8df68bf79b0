"""Structured logs: one JSON object per line, each carrying the request id of the work it is about.

Why a small ``logging.Formatter`` and not a logging library: the services log through the
standard ``logging`` module already, and one object per line with a handful of fields is all
a log shipper needs. The request id lives in a context variable: the HTTP middleware binds it
for one request (taken from ``X-Request-ID`` when the client sent a well-formed one, else a new
``req_…``) and returns it in the response header; the outbox binds the release's outgoing
request id (a fresh one, never the client's) while it delivers and sends it along, so the
features party's inbox logs the same id (docs/architecture.md, "Operations").

Log lines never hold label values (privacy invariant 5): callers pass ids, counts and codes,
and an exception is logged by its type and stack frames, never by its message, which could
quote a value.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
import traceback
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

REQUEST_ID_HEADER = "X-Request-ID"
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
"""What an incoming ``X-Request-ID`` may hold: an opaque token (a UUID, a trace id), nothing longer."""

_current: ContextVar[str | None] = ContextVar("labeldp_request_id", default=None)

access_log = logging.getLogger("labeldp.access")

# Attributes every LogRecord has; anything else on a record came from ``extra=`` and is a field.
# uvicorn's ``color_message`` repeats the message with ANSI colour codes: never a field of ours.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",
}
_QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})  # probes and scrapes: access lines at DEBUG


def new_request_id() -> str:
    return f"req_{uuid.uuid4().hex}"


def accepted_request_id(value: str | None) -> str | None:
    """The client's request id if it is a plain token of at most 128 characters, else None.

    A malformed one is replaced, not refused: it only labels log lines. It never crosses to
    the features party: a release is sent under a fresh id of its own.
    """
    if value is not None and _REQUEST_ID.fullmatch(value):
        return value
    return None


def current_request_id() -> str | None:
    """The request id bound to the work running now (an HTTP request, an outbox delivery)."""
    return _current.get()


@contextmanager
def bound_request_id(request_id: str | None) -> Iterator[str]:
    """Bind ``request_id`` (a new one if None) for the log lines written inside the block."""
    rid = request_id or new_request_id()
    token = _current.set(rid)
    try:
        yield rid
    finally:
        _current.reset(token)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, service, logger, message, request id, extra fields."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None) or _current.get()
        if request_id:
            doc["request_id"] = request_id
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS and key not in doc:
                doc[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            # The type and where it happened; the message stays out (it may quote a value).
            doc["error_type"] = record.exc_info[0].__name__
            doc["stack"] = [
                f"{frame.filename}:{frame.lineno} in {frame.name}" for frame in traceback.extract_tb(record.exc_info[2])
            ]
        return json.dumps(doc, default=str)


def configure_logging(level: str, service: str) -> None:
    """Send every logger (ours, uvicorn's, the libraries') through one JSON handler on stderr.

    Replaces the handler a previous call installed (tests build many apps in one process)
    and leaves other handlers alone (pytest's capture).
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "labeldp", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    handler.labeldp = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True


class RequestContext:
    """ASGI middleware: bind a request id per request, return it, and write one access line.

    The id is the client's ``X-Request-ID`` when well formed (:func:`accepted_request_id`),
    else a new one; every log line written while the request runs carries it, and the
    response (error or not) returns it in ``X-Request-ID``. The access line holds method,
    path, route template, status and duration: no query string, no body.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        offered = None
        for name, value in scope.get("headers", []):
            if name == b"x-request-id":
                offered = value.decode("latin-1")
        status = 500
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message).append(REQUEST_ID_HEADER, rid)
            await send(message)

        with bound_request_id(accepted_request_id(offered)) as rid:
            error: str | None = None
            try:
                await self.app(scope, receive, send_with_id)
            except Exception as exc:
                error = type(exc).__name__
                raise
            finally:
                path = scope.get("path", "")
                route = getattr(scope.get("route"), "path", None)
                quiet = path in _QUIET_PATHS and status < 400 and error is None
                access_log.log(
                    logging.DEBUG if quiet else logging.INFO,
                    "%s %s %d",
                    scope.get("method", ""),
                    path,
                    status,
                    extra={
                        "method": scope.get("method", ""),
                        "path": path,
                        "route": route,
                        "status": status,
                        "duration_ms": round((time.perf_counter() - started) * 1000, 3),
                        **({"error_type": error} if error else {}),
                    },
                )
