"""Cursor pagination for list endpoints: stable under inserts, opaque to clients.

A page is ordered by ``(created_at, id)``; the cursor is the last item's pair, encoded
so that clients pass it back unchanged and never build one. Keyset pagination (rather
than an offset) never skips or repeats an item when new ones are created meanwhile.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, or_
from sqlalchemy.orm import Session

from labeldp.errors import InvalidInput

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


def encode_cursor(created_at: datetime, item_id: str) -> str:
    raw = json.dumps([created_at.isoformat(), item_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        if len(cursor) > 400:
            raise ValueError
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, item_id = json.loads(raw)
        return datetime.fromisoformat(created), str(item_id)
    except (ValueError, TypeError):
        raise InvalidInput("invalid_cursor", "cursor is not one this API returned") from None


def after(created_col: Any, id_col: Any, cursor: str | None) -> ColumnElement[bool] | None:
    """The WHERE clause for the items after ``cursor`` (None for the first page)."""
    if cursor is None:
        return None
    created, item_id = decode_cursor(cursor)
    return or_(created_col > created, and_(created_col == created, id_col > item_id))


def check_limit(limit: int) -> int:
    if not (1 <= limit <= MAX_LIMIT):
        raise InvalidInput("invalid_limit", f"limit must be between 1 and {MAX_LIMIT}")
    return limit


def keyset_page(
    session: Session,
    stmt: Select[Any],
    created_col: Any,
    id_col: Any,
    limit: int,
    cursor: str | None,
    describe: Callable[[Any], Any],
) -> dict[str, Any]:
    """One page of ``stmt``'s rows in (created, id) order, as ``{"items", "next_cursor"}``, each item as
    ``describe`` shows its row (a dict, or the route's response model).

    The one keyset walk of every list endpoint: nothing is skipped or repeated while new
    items arrive, since a cursor names the last item's (created, id) and not an offset.
    """
    limit = check_limit(limit)
    where = after(created_col, id_col, cursor)
    if where is not None:
        stmt = stmt.where(where)
    rows = session.scalars(stmt.order_by(created_col, id_col).limit(limit + 1)).all()
    last = rows[limit - 1] if len(rows) > limit else None
    return {
        "items": [describe(row) for row in rows[:limit]],
        "next_cursor": encode_cursor(getattr(last, created_col.key), getattr(last, id_col.key)) if last else None,
    }


def list_page(items: list[Any], limit: int, cursor: str | None) -> dict[str, Any]:
    """One page of an append-only list (a training's epoch history), as ``{"items", "next_cursor"}``.

    Such a list only grows at its end, so a position is a stable cursor: nothing is skipped or
    repeated while items are appended. The cursor is opaque like the keyset ones.
    """
    limit = check_limit(limit)
    start = 0 if cursor is None else _decode_position(cursor)
    page = items[start:start + limit]
    end = start + len(page)
    more = end < len(items)
    raw = json.dumps(["pos", end], separators=(",", ":")).encode()
    return {"items": page, "next_cursor": base64.urlsafe_b64encode(raw).decode().rstrip("=") if more else None}


def _decode_position(cursor: str) -> int:
    try:
        if len(cursor) > 400:
            raise ValueError
        kind, position = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if kind != "pos" or not isinstance(position, int) or isinstance(position, bool) or position < 0:
            raise ValueError
        return position
    except (ValueError, TypeError):
        raise InvalidInput("invalid_cursor", "cursor is not one this API returned") from None
