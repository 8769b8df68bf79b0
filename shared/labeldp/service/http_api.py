"""HTTP plumbing both services share: error bodies, bearer auth, body-size limit.

Errors are JSON ``{"code", "message", "details"}`` with a stable ``code``. Error
bodies never echo request input: a rejected label value must not come back in
a response, a log line or a trace (docs/architecture.md, privacy invariant 5).
"""

from __future__ import annotations

import hmac
import logging
import re
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from labeldp.errors import Forbidden, LabelDPError, Unauthorized
from labeldp.service.database import is_transient
from labeldp.service.openapi import BEARER
from labeldp.service.settings import ApiKey, parse_api_keys

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
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    503: "service_unavailable",
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
        return error_response(500, "internal_error", "internal error")

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        # Log the type only: an exception message may carry data values.
        log.error("unhandled error: %s", type(exc).__name__)
        return error_response(500, "internal_error", "internal error")


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


class BodySizeLimit:
    """ASGI middleware: 413 ``payload_too_large`` before a large body is buffered."""

    def __init__(self, app: ASGIApp, max_bytes: int, limits: dict[str, int] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
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
        if limit != self.max_bytes:
            await BodySizeLimit(self.app, limit)(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes or declared < 0:
                    await self._reject(send)
                    return
        received = 0
        too_large = False

        async def limited_receive() -> Message:
            nonlocal received, too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    too_large = True
                    raise _BodyTooLarge()
            return message

        try:
            await self.app(scope, limited_receive, send)
        except _BodyTooLarge:
            await self._reject(send)

    async def _reject(self, send: Send) -> None:
        response = error_response(
            413, "payload_too_large", f"request body exceeds {self.max_bytes} bytes"
        )
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(response.body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": response.body})


class _BodyTooLarge(Exception):
    pass
