"""A failed training's error: written here, never copied from an exception.

The message of a failed training is chosen by :func:`safe_error`, so it carries no label
value or feature row (its details, :func:`safe_details`, are those of our own errors only:
e.g. ``unknown_ids``' count and a few public ids); the row keeps them as one JSON text
(:func:`stored_error`) and every read shows them in the same envelope as an HTTP error
(:func:`error_body`).
"""

from __future__ import annotations

import json
from typing import Any

from labeldp.errors import LabelDPError
from labeldp.service.openapi import ErrorBody


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


def safe_details(exc: Exception) -> list[dict[str, Any]]:
    """The details of one of our own errors (counts, public ids, names), as an HTTP answer shows them;
    none of any other exception."""
    return list(exc.details) if isinstance(exc, LabelDPError) else []


def stored_error(code: str, message: str, details: list[dict[str, Any]] | None = None) -> str:
    """How a failed training's error is kept in its row (one text column)."""
    return json.dumps({"code": code, "message": message, **({"details": details} if details else {})})


def error_body(stored: str | None) -> ErrorBody | None:
    """A failed training's ``error``: the same envelope as every HTTP error (README, "REST API"),
    so a client branches on ``code`` whether a request or a training failed."""
    if stored is None:
        return None
    record = json.loads(stored)
    return ErrorBody(code=record["code"], message=record["message"], details=record.get("details", []))
