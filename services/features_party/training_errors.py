"""A failed training's error: written here, never copied from an exception.

The message of a failed training is chosen by :func:`safe_error`, so it carries no label
value or feature row; the row keeps it as one JSON text (:func:`stored_error`) and every
read shows it in the same envelope as an HTTP error (:func:`error_body`).
"""

from __future__ import annotations

import json
from typing import Any

from labeldp.errors import LabelDPError


def safe_error(exc: Exception) -> tuple[str, str]:
    """(code, message) written here, not an exception's text (which could quote data)."""
    if isinstance(exc, LabelDPError):
        return exc.code, exc.message  # our own messages carry counts, not values
    if isinstance(exc, MemoryError):
        return "out_of_memory", "out of memory"
    name = type(exc).__name__
    if "OutOfMemory" in name:
        return "out_of_accelerator_memory", "out of accelerator memory; try a smaller batch_size"
    if isinstance(exc, FileNotFoundError):
        return "file_missing", "stored feature table or model file is missing"
    return "training_failed", f"training failed ({name})"


def stored_error(code: str, message: str) -> str:
    """How a failed training's error is kept in its row (one text column)."""
    return json.dumps({"code": code, "message": message})


def error_body(stored: str | None) -> dict[str, Any] | None:
    """A failed training's ``error``: the same envelope as every HTTP error (README, "REST API"),
    so a client branches on ``code`` whether a request or a training failed."""
    if stored is None:
        return None
    record = json.loads(stored)
    return {"code": record["code"], "message": record["message"], "details": []}
