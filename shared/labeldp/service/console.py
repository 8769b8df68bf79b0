"""The console: static pages (HTML, vanilla JS, inline SVG; no build step) each service serves at
``/console`` (docs/architecture.md, "The console").

The pages hold no data and no secret, so they are public like ``/docs``; every number they show
comes from the service's JSON API, called from the browser with the caller's own key
(``Authorization: Bearer``, the same auth as any client). The key is typed into the page or
passed in the URL fragment (``#key=…``, which a browser never sends to a server), kept in
``sessionStorage`` and never put in a URL query. The files common to both services
(``labeldp/service/console_static/``: the key, the API calls, the event-stream reader, the charts)
are served under ``/console/`` beside the service's own page.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

PREFIX = "/console"
COMMON = Path(__file__).resolve().parent / "console_static"

HEADERS = {
    # Only this origin's own scripts and styles, no inline script, no framing: a page that holds
    # an API key in memory runs nothing else.
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


class _Pages(StaticFiles):
    """The service's page folder first, then the common files; every answer with :data:`HEADERS`."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(HEADERS)
        return response


def mount_console(app: FastAPI, pages: Path) -> None:
    """Serve ``pages`` (a folder with ``index.html``) and the common files at ``/console/``;
    ``/console`` redirects there. Public paths (labeldp.service.http_api.PUBLIC_PATHS)."""

    @app.get(PREFIX, include_in_schema=False)
    async def console_root() -> RedirectResponse:
        return RedirectResponse("console/", status_code=308)  # relative: right behind a path prefix too

    files = _Pages(directory=pages, html=True)
    files.all_directories = [*files.all_directories, str(COMMON)]
    app.mount(PREFIX, files, name="console")
