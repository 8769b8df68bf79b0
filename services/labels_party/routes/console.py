"""The console at ``/console`` (labeldp.service.console): this service's page (``labels_party/console/``,
package data) and the common files. Static and public like ``/docs``; its data comes from this
API with the caller's key."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI

from labeldp.service.console import mount_console

PAGES = Path(__file__).resolve().parent.parent / "console"


def mount(app: FastAPI) -> None:
    mount_console(app, PAGES)
