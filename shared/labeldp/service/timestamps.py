"""UTC timestamps as the API shows them: ISO-8601 with an offset, never naive.

SQLite drops ``tzinfo`` on the way back; every timestamp either service stores is UTC,
so a naive value read back is UTC by construction (README "REST API", naming).
"""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime | None) -> datetime | None:
    """The stored instant with its UTC offset restored (SQLite returns it naive)."""
    if value is None:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def iso(value: datetime | None) -> str | None:
    """``2026-11-24T13:55:39.123456+00:00``, or None."""
    value = as_utc(value)
    return value.isoformat() if value is not None else None
