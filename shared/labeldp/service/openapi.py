"""The parts of both services' OpenAPI contracts that are the same: the error envelope on
every 4xx/503, the security schemes, upload bodies, response examples and the docs pages.

Each route states what it can answer (``ok``, ``errors``); a generated client then knows the
real error body ``{code, message, details}`` (labeldp.service.http_api) instead of FastAPI's default
422 schema. ``tests/contract`` checks every route of both apps for these properties, and
schemathesis checks that the running apps answer only what their contracts say
(docs/architecture.md "Layers": service support, shared by both services).

A route (``services/*/routes/``) states ``tags``, ``summary``, ``description``,
``response_model=Model`` with a ``Model`` in its service's ``responses.py`` (FastAPI documents,
validates and serializes the body with it) and ``responses={**ok(example, ...), **errors(401,
404, ...)}``; a body it reads itself (an upload, a signed message) is documented with
``openapi_extra=request_body(...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from fastapi.security import APIKeyHeader, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, JsonValue, WithJsonSchema

from labeldp import __version__
from labeldp.error_codes import ERROR_CODES
from labeldp.errors import UnsupportedMediaType
from labeldp.mechanisms.registry import NAMES
from labeldp.schema import SIGNATURE_HEADER

BEARER = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="the party's API key: `Authorization: Bearer <key>` (several keys may be valid during a rotation)",
)
"""Documents the bearer key; ``http_api.bearer_auth`` does the checking (constant time, non-ASCII → 401)."""

SIGNATURE = APIKeyHeader(
    name=SIGNATURE_HEADER,
    auto_error=False,
    scheme_name="exchange_signature",
    description="`ed25519;kid=<key id>;sig=<base64url Ed25519 signature of the exact body's SHA-256>`: only the "
    "labels party's outbox holds the private key; the inbox verifies it with the advertiser's public key of that "
    "kid over the spooled body before parsing anything",
)


Timestamp = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
"""ISO-8601 with a UTC offset, e.g. ``2026-11-24T13:55:39.123456+00:00`` (labeldp.service.timestamps)."""


MechanismName = Annotated[str, WithJsonSchema({"type": "string", "enum": list(NAMES)})]
"""A mechanism of the catalogue (labeldp.mechanisms.registry), as a release names the one that ran."""


class ErrorBody(BaseModel):
    """Every error either service answers: a stable ``code`` to branch on, a message for people."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(
        description="stable machine-readable error code, e.g. `budget_exhausted` (docs/api-guide.md \"Error codes\")",
        json_schema_extra={"enum": list[JsonValue](sorted(ERROR_CODES))},
    )
    message: str = Field(description="what went wrong, for a person; never echoes a label value")
    details: list[dict[str, Any]] = Field(
        description="per-field or per-row facts (`loc`, `row` numbered from 1, `id`, `code`); never a label value"
    )
    request_id: str | None = Field(
        None, description="on a 500 `internal_error` only: the request's id (as in `X-Request-ID`), to quote to an "
        "operator"
    )


_ERRORS: dict[int, tuple[str, str, str]] = {
    # status: (description, example code, example message)
    401: ("missing or wrong credentials", "unauthorized", "missing or wrong API key"),
    403: (
        "the key is right but lacks the scope this operation needs (`admin` or `release`); nothing changed",
        "scope_required",
        "this API key lacks the scope this operation needs",
    ),
    404: ("no such resource", "not_found", "no such resource"),
    409: (
        "conflicts with the resource's state, or the same Idempotency-Key is still running (retry after "
        "`Retry-After`)",
        "idempotency_in_progress",
        "a request with this Idempotency-Key is still running",
    ),
    408: (
        "the body arrived slower than the server's minimum rate (LABELDP_REQUEST_BODY_TIMEOUT_SECONDS, "
        "LABELDP_REQUEST_BODY_MIN_BYTES_PER_SECOND); nothing changed, send it again",
        "request_timeout",
        "the request body arrived too slowly",
    ),
    413: ("the body exceeds the service's size limit", "payload_too_large", "request body exceeds 1048576 bytes"),
    415: ("the body's Content-Type is not one this operation reads", "unsupported_media_type", "send text/csv"),
    422: ("the request is well-formed but invalid; nothing changed", "invalid_request", "request failed validation"),
    429: ("too many queued; retry after `Retry-After`", "queue_full", "the training queue is full"),
    503: (
        "the database (or the inbox) is busy or unavailable; nothing was changed, retry after `Retry-After`",
        "database_unavailable",
        "the database is unavailable; retry later",
    ),
    507: (
        "the service's disk is full: nothing of the request was kept; retry after `Retry-After`",
        "insufficient_storage",
        "the service's disk is full; nothing was written",
    ),
}

_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"description": "`Bearer`", "schema": {"type": "string"}}},
    409: {"Retry-After": {"description": "seconds to wait (idempotency_in_progress)", "schema": {"type": "string"}}},
    429: {"Retry-After": {"description": "seconds to wait", "schema": {"type": "string"}}},
    503: {"Retry-After": {"description": "seconds to wait", "schema": {"type": "string"}, "required": True}},
    507: {"Retry-After": {"description": "seconds to wait", "schema": {"type": "string"}, "required": True}},
}

MUTATING = frozenset({"post", "put", "patch", "delete"})


def edge_errors(app: FastAPI) -> None:
    """Add to the contract the two errors the edge answers for routes that never raise them:
    408 ``request_timeout`` on every operation that reads a request body (``BodySizeLimit``
    times a slow one out) and 507 ``insufficient_storage`` on every operation that writes
    (``ServerErrors`` answers a full disk; a read-only route that writes declares ``errors(507)``
    itself). Derived here, once, so no route can forget them."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        fresh = app.openapi_schema is None
        spec = build()
        if fresh:
            for item in spec.get("paths", {}).values():
                for method, op in item.items():
                    if method not in MUTATING and method != "get":
                        continue
                    responses = op.setdefault("responses", {})
                    wanted = [408] if "requestBody" in op else []
                    if method in MUTATING:
                        wanted.append(507)
                    for status, entry in errors(*wanted, by_ref=True).items():
                        responses.setdefault(str(status), entry)
                    op["responses"] = dict(sorted(responses.items()))
            spec.setdefault("components", {}).setdefault("schemas", {}).setdefault(
                "ErrorBody", ErrorBody.model_json_schema()
            )
        return spec

    app.openapi = openapi  # type: ignore[method-assign]


def errors(*statuses: int, by_ref: bool = False, **codes: str) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries for the error statuses a route can answer, each with the envelope.

    ``codes`` overrides the example code of a status (``e404="label_set_not_found"``), so the
    example a client reads is one the route really returns. ``by_ref``: name the envelope's
    schema by reference instead of through FastAPI's ``model``, for a route whose success is not
    JSON (an event stream), where FastAPI would document the envelope under that media type.
    """
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        description, code, message = _ERRORS[status]
        if f"e{status}" in codes:  # the example's message says what its code means
            code = codes[f"e{status}"]
            message = ERROR_CODES[code]
        body: dict[str, Any] = {"example": {"code": code, "message": message, "details": []}}
        entry: dict[str, Any] = {"description": description, "content": {"application/json": body}}
        if by_ref:
            body["schema"] = {"$ref": "#/components/schemas/ErrorBody"}
        else:
            entry["model"] = ErrorBody
        if status in _HEADERS:
            entry["headers"] = _HEADERS[status]
        out[status] = entry
    return out


def ok(
    example: Any,
    description: str,
    status: int = 200,
    headers: dict[str, str] | None = None,
    links: dict[str, dict[str, str]] | None = None,
    *,
    model: type[BaseModel] | None = None,
) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` entry of a success with an example of its body.

    The route's ``response_model`` types the body of its own ``status_code``; ``model`` types
    a second success status (the inbox's 200 for a duplicate, a cancel's 202).

    ``headers`` are always sent with this answer (``Location`` of a created resource).

    ``links`` maps an operation id to its parameters taken from this answer, e.g.
    ``{"get_label_set": {"label_set_id": "$response.body#/id"}}``: what a client can call
    next with the id it got, and the paths schemathesis's stateful phase follows.
    """
    entry: dict[str, Any] = {"description": description, "content": {"application/json": {"example": example}}}
    if model is not None:
        entry["model"] = model
    if headers:
        entry["headers"] = {
            name: {"description": text, "schema": {"type": "string"}, "required": True}
            for name, text in headers.items()
        }
    if links:
        entry["links"] = {op: {"operationId": op, "parameters": params} for op, params in links.items()}
    return {status: entry}


def event_stream_ok(example: str, description: str) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` entry of a Server-Sent Events stream (labeldp.service.events): not JSON, so the
    body is documented as ``text/event-stream`` text with an example of its frames."""
    return {
        200: {
            "description": description,
            "content": {"text/event-stream": {"schema": {"type": "string"}, "example": example}},
        }
    }


def file_ok(media_type: str, example: str, description: str) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` entry of a file download: binary bytes of ``media_type`` (the example a
    placeholder for them), offered under a file name in ``Content-Disposition``."""
    return {
        200: {
            "description": description,
            # Also named as octet-stream: generators read that as bytes (openapi-python-client
            # knows no other file type with its default config); the body is the same.
            "content": {
                kind: {"schema": BINARY, "example": example} for kind in dict.fromkeys((media_type, OCTET_STREAM))
            },
            "headers": {
                "Content-Disposition": {
                    "description": "`attachment; filename=\"…\"`", "schema": {"type": "string"}, "required": True,
                },
            },
        }
    }


def operation_id(route: APIRoute) -> str:
    """The route function's name (``create_label_set``): short, stable client method names.

    Each app's route functions have distinct names; tests/contract checks the ids are unique.
    """
    return route.name


def request_body(content: dict[str, tuple[dict[str, Any], Any]], description: str) -> dict[str, Any]:
    """``openapi_extra`` for a body the route reads itself (uploads streamed to disk, signed messages).

    ``content`` maps each accepted media type to (schema, example or None for binary formats);
    FastAPI cannot infer these because the route reads the raw request stream.
    """
    return {
        "requestBody": {
            "required": True,
            "description": description,
            "content": {
                kind: {"schema": schema} if example is None else {"schema": schema, "example": example}
                for kind, (schema, example) in content.items()
            },
        }
    }


def json_example(example: dict[str, Any]) -> dict[str, Any]:
    """``openapi_extra`` adding an example to a JSON body FastAPI documents from its model."""
    return {"requestBody": {"content": {"application/json": {"example": example}}}}


BINARY = {"type": "string", "format": "binary"}
"""Schema of a binary body (Parquet, Arrow IPC, CSV bytes)."""

OCTET_STREAM = "application/octet-stream"
"""The one file media type a generated client knows with its generator's default config."""

UPLOAD_FORMATS: dict[str, str] = {
    "csv": "text/csv",
    "parquet": "application/vnd.apache.parquet",
    "arrow": "application/vnd.apache.arrow.stream",
}
"""A file upload's ``format`` query value → the media type the route reads it as."""

class UploadFormat(StrEnum):
    """How to read a file upload sent as ``application/octet-stream`` (the ``format`` query value)."""

    csv = "csv"
    parquet = "parquet"
    arrow = "arrow"


def file_body(formats: tuple[str, ...], example_csv: str | None = None) -> dict[str, tuple[dict[str, Any], Any]]:
    """The ``request_body`` content of a file upload: the bytes as ``application/octet-stream``.

    Generators know JSON, form and octet-stream bodies, and give each media type one body type;
    listing ``text/csv``, Parquet and Arrow as three binary schemas left openapi-python-client
    either warning (its default config) or sending every file as the last of them (issue 26).
    So the contract names one file body, typed bytes, and the ``format`` query parameter
    (:data:`UploadFormat`) says how to read it; the service still takes ``text/csv``,
    ``application/vnd.apache.parquet`` and ``application/vnd.apache.arrow.stream`` as
    Content-Type without ``format`` (docs/api-guide.md "Uploads").
    """
    names = ", ".join(f"`{f}`" for f in formats)
    hint = f"; CSV e.g. `{example_csv!r}`" if example_csv else ""
    schema = {**BINARY, "description": f"the file's bytes, read as `format` ({names}){hint}"}
    return {OCTET_STREAM: (schema, None)}


def format_query(formats: tuple[str, ...]) -> str:
    """The ``format`` query parameter's description for a route reading ``formats``."""
    return (
        "how to read an `application/octet-stream` body: " + ", ".join(f"`{f}`" for f in formats)
        + "; not needed when the Content-Type names the format (`text/csv`, `application/vnd.apache.parquet`, "
        "`application/vnd.apache.arrow.stream`)"
    )


def upload_media_type(content_type: str, fmt: UploadFormat | None) -> str:
    """The media type to read an upload as: ``format``'s when the body is octet-stream.

    A ``format`` that contradicts a specific Content-Type is refused (415), as is an
    octet-stream body without ``format``; any other Content-Type passes through unchanged
    for the route to accept or refuse.
    """
    kind = (content_type or "").split(";")[0].strip().lower()
    if fmt is None:
        if kind == OCTET_STREAM:
            raise UnsupportedMediaType(
                "unsupported_media_type", "name the file's format: ?format=csv, parquet or arrow"
            )
        return content_type
    named = UPLOAD_FORMATS[fmt.value]
    if kind not in ("", OCTET_STREAM, named):
        raise UnsupportedMediaType(
            "unsupported_media_type", f"format={fmt.value} contradicts the Content-Type; send {OCTET_STREAM} or {named}"
        )
    return named


def keep_example_nulls(app: FastAPI) -> None:
    """Put back the nulls FastAPI drops from examples when it builds the contract.

    FastAPI encodes the whole OpenAPI document with ``exclude_none``, so an example body's
    ``"classes": null`` vanished and the example no longer matched its own model (a required,
    nullable field). The fields a model requires and allows to be null are restored as null.
    """
    build = app.openapi

    def openapi() -> dict[str, Any]:
        fresh = app.openapi_schema is None
        spec = build()
        if fresh:
            for item in spec.get("paths", {}).values():
                for op in item.values():
                    for response in op.get("responses", {}).values():
                        media = response.get("content", {}).get("application/json", {})
                        if "example" in media:
                            _restore_nulls(spec, media["example"], media.get("schema", {}))
        return spec

    app.openapi = openapi  # type: ignore[method-assign]


def _restore_nulls(spec: dict[str, Any], value: Any, schema: dict[str, Any]) -> None:
    schema = _resolve(spec, schema)
    if isinstance(value, list):
        for element in value:
            _restore_nulls(spec, element, schema.get("items", {}))
        return
    if not isinstance(value, dict):
        return
    if "anyOf" in schema:  # an optional object: the branch that is one
        branches = [_resolve(spec, b) for b in schema["anyOf"]]
        schema = next((b for b in branches if "properties" in b), {})
    properties = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value and _nullable(properties.get(name, {})):
            value[name] = None
    for name, sub in properties.items():
        if name in value:
            _restore_nulls(spec, value[name], sub)


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if not ref:
        return schema
    node: Any = spec
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return dict(node)


def _nullable(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "null" or any(branch.get("type") == "null" for branch in schema.get("anyOf", []))


_ASSETS = "/docs-assets"


def documented_app(
    title: str, description: str, tags: list[dict[str, str]], lifespan: Callable[[FastAPI], Any] | None = None
) -> FastAPI:
    """A service's FastAPI app with its contract's common parts: the package version as
    ``info.version``, route-named operation ids and the docs pages served locally."""
    app = FastAPI(
        title=title,
        version=__version__,
        description=description,
        openapi_tags=tags,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        generate_unique_id_function=operation_id,
    )
    mount_docs(app)
    return app


def mount_docs(app: FastAPI) -> None:
    """Swagger UI at ``/docs`` and ReDoc at ``/redoc`` with their scripts served by the app itself.

    The assets ship in the ``fastapi-offline`` wheel: the docs work on a host with no route
    to a CDN (both services' networks) and load no third-party code into an operator's browser.
    Build the app with ``docs_url=None, redoc_url=None`` so FastAPI's CDN pages are not mounted.
    The contract those pages show keeps its examples' nulls (:func:`keep_example_nulls`).
    """
    edge_errors(app)
    keep_example_nulls(app)
    import fastapi_offline

    static = Path(fastapi_offline.__file__).parent / "static"
    app.mount(_ASSETS, StaticFiles(directory=static), name="docs-assets")
    title = app.title

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{title} - Swagger UI",
            swagger_js_url=f"{root}{_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{_ASSETS}/favicon.png",
            swagger_ui_parameters={"persistAuthorization": True},
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{title} - ReDoc",
            redoc_js_url=f"{root}{_ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{_ASSETS}/favicon.png",
            with_google_fonts=False,
        )
