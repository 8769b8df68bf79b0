"""HTTP plumbing both services share: error bodies, bearer auth, body-size and request limits.

Errors are JSON ``{"code", "message", "details"}`` with a stable ``code``. Error
bodies never echo request input: a rejected label value must not come back in
a response, a log line or a trace (docs/architecture.md, privacy invariant 5).
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import logging
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import FastAPI, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from labeldp.errors import Forbidden, LabelDPError, Unauthorized
from labeldp.service.database import is_transient
from labeldp.service.logs import current_request_id
from labeldp.service.openapi import BEARER
from labeldp.service.settings import ApiKey, parse_api_keys
from labeldp.signing import secrets_of

log = logging.getLogger("labeldp.http")

DATABASE_RETRY_AFTER_SECONDS = 2
"""What a 503 ``database_unavailable`` asks clients to wait before retrying (same Idempotency-Key)."""


def error_response(
    status_code: int,
    code: str,
    message: str,
    details: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {"code": code, "message": message, "details": details or []}
    return JSONResponse(status_code=status_code, content=body, headers=headers)


def database_unavailable_response() -> JSONResponse:
    """503 for a database that is locked, down or restarting: the request changed nothing; retry it."""
    return error_response(
        503,
        "database_unavailable",
        "the database is unavailable; retry later",
        headers={"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)},
    )


def _sanitized_validation_details(exc: RequestValidationError) -> list[dict[str, Any]]:
    """Field locations and messages only: pydantic's ``input`` may hold a raw label."""
    out = []
    for err in exc.errors():
        out.append(
            {
                "loc": [str(p) for p in err.get("loc", ())],
                "type": err.get("type", "invalid"),
                "message": err.get("msg", "invalid value"),
            }
        )
    return out


_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    408: "request_timeout",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    503: "service_unavailable",
    507: "insufficient_storage",
}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(LabelDPError)
    async def _api_error(_: Request, exc: LabelDPError) -> JSONResponse:
        return error_response(exc.status_code, exc.code, exc.message, exc.details, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(
            422, "invalid_request", "request failed validation", _sanitized_validation_details(exc)
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:
            # FastAPI's answer to a body it cannot decode (not UTF-8, not JSON): the same 422 as
            # any other invalid body, so every route documents one status for bad input.
            return error_response(
                422,
                "invalid_request",
                "the body could not be parsed: send UTF-8 JSON",
                [{"loc": ["body"], "type": "body_unparsable", "message": "not UTF-8 JSON"}],
            )
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else code
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = allowed_methods(request, headers.get("Allow"))
        return error_response(exc.status_code, code, message, headers=headers)

    @app.exception_handler(sa_exc.DBAPIError)
    @app.exception_handler(sa_exc.TimeoutError)
    async def _database(_: Request, exc: Exception) -> JSONResponse:
        # The type only: a driver's message may quote statement parameters (ids, labels).
        if is_transient(exc):
            log.warning("database unavailable: %s", type(exc).__name__)
            return database_unavailable_response()
        log.error("database error: %s", type(exc).__name__)
        return internal_error_response()

    @app.exception_handler(OSError)
    async def _os_error(_: Request, exc: OSError) -> JSONResponse:
        if exc.errno in DISK_FULL_ERRNOS:
            # What was being written is removed by its writer (spool, object store: temp, then rename).
            log.error("disk full: %s", errno.errorcode.get(exc.errno or 0, "?"))
            return insufficient_storage_response()
        log.error("unhandled error: %s", type(exc).__name__)
        return internal_error_response()

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        # Only what escapes the middlewares themselves: a route's error is answered by
        # ServerErrors, inside the request id, with the connection kept open.
        log.error("unhandled error: %s", type(exc).__name__)
        return internal_error_response()


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
STORAGE_RETRY_AFTER_SECONDS = 60


def insufficient_storage_response() -> JSONResponse:
    """507 ``insufficient_storage``: the service's disk is full; nothing was stored, retry later."""
    return error_response(
        507,
        "insufficient_storage",
        "the service's storage is full; nothing was stored, retry later",
        headers={"Retry-After": str(STORAGE_RETRY_AFTER_SECONDS)},
    )


def internal_error_response() -> JSONResponse:
    """500 ``internal_error`` carrying the request id (also in ``X-Request-ID``): what to quote
    to an operator, who finds the request's log lines, stack frames included, under it."""
    response = error_response(500, "internal_error", "internal error")
    rid = current_request_id()
    if rid is not None:
        response = JSONResponse(
            status_code=500,
            content={"code": "internal_error", "message": "internal error", "details": [], "request_id": rid},
        )
    return response


class ServerErrors:
    """ASGI middleware, innermost: a route's unexpected exception becomes a 500 right here.

    Starlette answers an unhandled exception in its outermost layer, outside the request-id
    middleware, and then re-raises it, so the server drops the keep-alive connection and the
    answer has no ``X-Request-ID``. Answered here instead, the 500 carries the request id (header
    and body) and the connection serves the next request. Logged by type and stack frames only
    (a message may quote a value). An exception after the answer started is re-raised: nothing
    else can be sent on that response.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            if started:
                raise
            stack = [f"{f.filename}:{f.lineno} in {f.name}" for f in traceback.extract_tb(exc.__traceback__)]
            name = type(exc).__name__
            log.error("unhandled error: %s", name, extra={"error_type": name, "stack": stack})
            await internal_error_response()(scope, receive, send)


def allowed_methods(request: Request, named: str | None) -> str:
    """Every method the request's path has, for a 405's ``Allow``.

    Starlette names only the methods of the first route that matched the path (``named``),
    but a path often has a route per method (``GET`` and ``POST /v1/label-sets``): the
    others come from the app's OpenAPI paths, whose templates match the path.
    """
    methods = {m.strip() for m in (named or "").split(",") if m.strip()}
    path = request.scope.get("path", "")
    for template, item in request.app.openapi().get("paths", {}).items():
        if re.fullmatch(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)), path):
            methods |= {m.upper() for m in item}
    return ", ".join(sorted(methods))


def bearer_matches(header: str, keys: list[bytes]) -> bool:
    """Whether an ``Authorization`` header value is ``Bearer <one of keys>``.

    Keys are compared as bytes in constant time, every one of them (the time taken does not
    tell which one matched), so a header with non-ASCII characters is simply a wrong key.
    """
    scheme, _, token = header.partition(" ")
    offered = token.strip().encode("utf-8", "surrogateescape")
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(offered, key)
    return scheme.lower() == "bearer" and bool(offered) and matched


def bearer_auth(expected_keys: str) -> Callable[[Request], None]:
    """A dependency that admits ``Authorization: Bearer <key>`` for any of the configured keys.

    ``expected_keys`` is an API-key setting (:func:`labeldp.service.settings.parse_api_keys`:
    comma-separated ``[scope[+scope]:]key``). Several keys let a client move to a new key before
    the old one is removed. Keys are compared as bytes in constant time, so a header with
    non-ASCII characters is simply a wrong key (401), never an error. An empty key list admits
    no one. The matched key is left on ``request.state.api_key`` for :func:`require_scope`.
    """
    keys = [(k.key.encode("utf-8"), k) for k in parse_api_keys(expected_keys)]

    def check(request: Request, _documented: Annotated[Any, Security(BEARER)] = None) -> None:
        # ``BEARER`` only puts the scheme in the OpenAPI contract; the header is read here.
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        offered = token.strip().encode("utf-8", "surrogateescape")
        found: ApiKey | None = None
        for raw, key in keys:  # every key is compared: the time taken does not tell which one matched
            if hmac.compare_digest(offered, raw):
                found = key
        if scheme.lower() != "bearer" or not offered or found is None:
            raise Unauthorized(
                "unauthorized", "missing or wrong API key", headers={"WWW-Authenticate": "Bearer"}
            )
        request.state.api_key = found

    return check


def require_scope(scope: str) -> Callable[[Request], ApiKey]:
    """A dependency, after :func:`bearer_auth`: 403 ``scope_required`` unless the caller's key holds ``scope``.

    It answers before the route's use case runs, so a refused request writes nothing.
    """

    def check(request: Request) -> ApiKey:
        key: ApiKey | None = getattr(request.state, "api_key", None)
        if key is None:  # bearer_auth did not run: fail closed
            raise Unauthorized("unauthorized", "missing or wrong API key", headers={"WWW-Authenticate": "Bearer"})
        if scope not in key.scopes:
            raise Forbidden("scope_required", f"this operation needs an API key with the {scope!r} scope")
        return key

    return check


def inbox_transport_keys(transport_key: str) -> list[str]:
    """The bearer keys the outbox may present to the inbox (``LABELDP_INBOX_TRANSPORT_KEY``,
    comma-separated while one is rotated out; the outbox sends the first).

    A secret both parties hold, apart from the signing keys (which only the advertiser holds):
    it lets the inbox tell its sender from anyone else by a header, before a byte is spooled.
    """
    return secrets_of(transport_key)


TLS_CLIENT_VERIFIED = "labeldp.tls_client_verified"
"""The key of a request's ``scope["state"]`` that says its connection presented a client certificate
signed by ``LABELDP_SERVER_TLS_CLIENT_CA_FILE`` (set by ``labeldp.service.server``)."""


PUBLIC_PATHS = frozenset(
    {"/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/console"}
)
PUBLIC_PREFIXES = ("/docs-assets/", "/console/")
"""What anyone may ask without a key: probes, the scrape, the contract and its pages, the console's
static files (its data comes from the API with the caller's key); none reads a body."""


class RequireCaller:
    """ASGI middleware: who is calling is decided from the headers, before any of the body is read.

    Every path but :data:`PUBLIC_PATHS` needs ``Authorization: Bearer <key>``: the API's keys,
    or for a ``(method, path or route template)`` in ``overrides`` that route's own keys (the
    inbox's manifest, shard and complete routes: the outbox's transport key). A wrong or
    missing key gets 401 at once and the body is never received, so
    an anonymous client's upload costs the server neither memory nor disk nor a worker. A public
    path takes a body of at most ``public_max_body_bytes`` (it reads none). With
    ``certificate_for_overrides`` (mutual TLS at the inbox) an override route also needs a
    connection that presented a verified client certificate (:data:`TLS_CLIENT_VERIFIED`), else 403
    ``client_certificate_required``, also before the body.
    """

    def __init__(
        self,
        app: ASGIApp,
        keys: list[str],
        overrides: dict[tuple[str, str], list[str]] | None = None,
        public_max_body_bytes: int = 0,
        openapi: Callable[[], dict[str, Any]] | None = None,
        certificate_for_overrides: bool = False,
    ) -> None:
        self.app = app
        self.certificate_for_overrides = certificate_for_overrides
        self.openapi = openapi  # only to name the route a refused request was for (metrics, access log)
        self._templates: list[tuple[re.Pattern[str], str]] | None = None
        self.keys = [k.encode("utf-8") for k in keys]
        self.overrides = {
            (method.upper(), path): [k.encode("utf-8") for k in route_keys]
            for (method, path), route_keys in (overrides or {}).items()
        }
        self.public = BodySizeLimit(app, public_max_body_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES):
            await self.public(scope, receive, send)
            return
        method = scope.get("method", "")
        keys = self.overrides.get((method, path))
        if keys is None and self.overrides:  # a templated route of its own (the inbox's shards)
            keys = self.overrides.get((method, self._template(path) or path))
        needs_certificate = keys is not None and self.certificate_for_overrides
        if keys is None:
            keys = self.keys
        if needs_certificate and not scope.get("state", {}).get(TLS_CLIENT_VERIFIED):
            template = self._template(path)
            if template is not None:
                scope["route"] = _Template(template)
            await send_error(
                send, 403, "client_certificate_required",
                "this route needs a TLS client certificate from the configured CA", close=True,
            )
            return
        header = ""
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                header = value.decode("latin-1")
        if bearer_matches(header, keys):
            await self.app(scope, receive, send)
            return
        template = self._template(path)
        if template is not None:
            scope["route"] = _Template(template)
        await send_error(
            send, 401, "unauthorized", "missing or wrong API key", {"WWW-Authenticate": "Bearer"}, close=True
        )

    def _template(self, path: str) -> str | None:
        if self._templates is None:
            paths = self.openapi()["paths"] if self.openapi is not None else {}
            self._templates = [
                (re.compile(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(t))), t) for t in paths
            ]
        return next((t for pattern, t in self._templates if pattern.fullmatch(path)), None)


@dataclass(frozen=True)
class _Template:
    """What the metrics and the access log read of a matched route: its template."""

    path: str


async def send_error(
    send: Send, status: int, code: str, message: str, headers: dict[str, str] | None = None, close: bool = False
) -> None:
    """An error answer sent straight from a middleware; ``close`` ends the connection after it
    (the body was not read: the connection cannot carry another request)."""
    response = error_response(status, code, message)
    raw = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(response.body)).encode()),
        *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()),
    ]
    if close:
        raw.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": response.body})


class BodySizeLimit:
    """ASGI middleware: 413 ``payload_too_large`` before a large body is buffered."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        limits: dict[str, int] | None = None,
        body_timeout_seconds: float | None = None,
        min_bytes_per_second: int = 1,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        # A body must arrive by: start + timeout + bytes received / min rate (408 past it).
        self.body_timeout = body_timeout_seconds
        self.min_rate = min_bytes_per_second
        # path -> its own limit (the inbox streams large releases to disk); a path may be a route
        # template whose ``{name}`` segments match any one segment
        self.limits = {path: limit for path, limit in (limits or {}).items() if "{" not in path}
        self.templates = [
            (re.compile(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(path))), limit)
            for path, limit in (limits or {}).items()
            if "{" in path
        ]

    def _limit(self, path: str) -> int:
        if path in self.limits:
            return self.limits[path]
        return next((limit for pattern, limit in self.templates if pattern.fullmatch(path)), self.max_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self._limit(scope.get("path", ""))
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > limit or declared < 0:
                    await self._reject(send, limit)
                    return
        # A body without a length (chunked) is counted as it streams: past the limit the read
        # fails, and whatever the app answers to that failure (FastAPI: "could not parse") is
        # replaced by the 413, so every route says the same thing about a body that is too large.
        received = 0
        refused: int | None = None  # 413 or 408, once the body broke a limit
        started = body_done = False
        loop = asyncio.get_running_loop()
        began = loop.time()

        async def limited_receive() -> Message:
            nonlocal received, refused, body_done
            if body_done or self.body_timeout is None:
                message = await receive()  # after the body: a disconnect, waited for as long as it takes
            else:
                left = began + self.body_timeout + received / self.min_rate - loop.time()
                try:
                    message = await asyncio.wait_for(receive(), timeout=max(left, 0.0))
                except TimeoutError:
                    refused = 408
                    raise _BodyRefused() from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if received > limit:
                    refused = 413
                    raise _BodyRefused()
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused is not None:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if refused is None:
                raise
        if refused is not None and not started:
            if refused == 413:
                await self._reject(send, limit)
            else:
                await send_error(send, 408, "request_timeout", "the request body arrived too slowly", close=True)

    async def _reject(self, send: Send, limit: int) -> None:
        # The rest of the body is never read: the connection closes after the answer.
        await send_error(send, 413, "payload_too_large", f"request body exceeds {limit} bytes", close=True)


class _BodyRefused(Exception):
    pass


class RequestLimit:
    """ASGI middleware: past ``limit`` requests in progress at once, answer 503 ``service_unavailable``
    (Retry-After: 1). Added inside ``logs.RequestContext`` and the metrics, like every other
    refusal: the 503 carries ``X-Request-ID``, is logged and counted (LABELDP_SERVER_LIMIT_CONCURRENCY)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit, self.active = app, limit, 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.active >= self.limit:
            busy = error_response(503, "service_unavailable", "too many requests in progress; retry",
                                  headers={"Retry-After": "1"})
            await busy(scope, receive, send)
            return
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1
