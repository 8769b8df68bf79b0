"""Cursor pagination for list endpoints: stable under inserts, opaque to clients.

A page is ordered by ``(created_at, id)``, oldest first (``order=asc``, the default) or newest
first (``order=desc``); the cursor is the last item's pair (and its order), encoded so that
clients pass it back unchanged and never build one. Keyset pagination (rather than an offset)
never skips or repeats an item when new ones are created meanwhile, in either order. A cursor
belongs to its order: passed with the other one it is refused (422 ``invalid_cursor``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Query
from sqlalchemy import ColumnElement, Select, and_, or_
from sqlalchemy.orm import Session

from labeldp.errors import InvalidInput

DEFAULT_LIMIT = 50
MAX_LIMIT = 500

Order = Literal["asc", "desc"]
ASC: Order = "asc"
DESC: Order = "desc"
OrderQuery = Annotated[
    Order,
    Query(description="`asc`: oldest first (the default); `desc`: newest first. A cursor keeps its order."),
]
"""The ``order`` query parameter of every list route (an enum in the contract)."""


def encode_cursor(created_at: datetime, item_id: str, order: Order = ASC) -> str:
    """The cursor after the item (``created_at``, ``item_id``) in ``order`` (an asc cursor is the pair alone)."""
    pair: list[str] = [created_at.isoformat(), item_id]
    raw = json.dumps(pair if order == ASC else [*pair, DESC], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _refused() -> InvalidInput:
    return InvalidInput("invalid_cursor", "cursor is not one this API returned")


def decode_cursor(cursor: str, order: Order = ASC) -> tuple[datetime, str]:
    try:
        if len(cursor) > 400:
            raise ValueError
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, item_id, *rest = json.loads(raw)
        cursor_order = rest[0] if rest else ASC
        if len(rest) > 1 or cursor_order not in (ASC, DESC):
            raise ValueError
        parsed = datetime.fromisoformat(created), str(item_id)
    except (ValueError, TypeError):
        raise _refused() from None
    if cursor_order != order:
        raise InvalidInput("invalid_cursor", f"this cursor pages order={cursor_order}: pass it with that order")
    return parsed


def check_order(order: str) -> Order:
    """``order`` as given (routes validate it as an enum first: anything else is a caller's bug)."""
    if order == DESC:
        return DESC
    if order == ASC:
        return ASC
    raise ValueError("order must be asc or desc")


def after(created_col: Any, id_col: Any, cursor: str | None, order: Order = ASC) -> ColumnElement[bool] | None:
    """The WHERE clause for the items after ``cursor`` in ``order`` (None for the first page)."""
    if cursor is None:
        return None
    created, item_id = decode_cursor(cursor, check_order(order))
    if order == DESC:
        return or_(created_col < created, and_(created_col == created, id_col < item_id))
    return or_(created_col > created, and_(created_col == created, id_col > item_id))


def ordered(created_col: Any, id_col: Any, order: Order = ASC) -> tuple[Any, Any]:
    """The ORDER BY of a keyset page in ``order``."""
    if check_order(order) == DESC:
        return created_col.desc(), id_col.desc()
    return created_col, id_col


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
    order: Order = ASC,
) -> dict[str, Any]:
    """One page of ``stmt``'s rows in (created, id) ``order``, as ``{"items", "next_cursor"}``, each
    item as ``describe`` shows its row (a dict, or the route's response model).

    The one keyset walk of every list endpoint: nothing is skipped or repeated while new
    items arrive, since a cursor names the last item's (created, id) and not an offset.
    """
    limit = check_limit(limit)
    where = after(created_col, id_col, cursor, order)
    if where is not None:
        stmt = stmt.where(where)
    rows = session.scalars(stmt.order_by(*ordered(created_col, id_col, order)).limit(limit + 1)).all()
    last = rows[limit - 1] if len(rows) > limit else None
    return {
        "items": [describe(row) for row in rows[:limit]],
        "next_cursor": next_cursor(last, created_col, id_col, order),
    }


def next_cursor(last: Any, created_col: Any, id_col: Any, order: Order = ASC) -> str | None:
    """The cursor after row ``last`` (None: the page was the last)."""
    if last is None:
        return None
    return encode_cursor(getattr(last, created_col.key), getattr(last, id_col.key), order)


def list_page(items: list[Any], limit: int, cursor: str | None, order: Order = ASC) -> dict[str, Any]:
    """One page of an append-only list (a training's epoch history), as ``{"items", "next_cursor"}``;
    ``desc``: the last item first.

    Such a list only grows at its end, so a position is a stable cursor: nothing is skipped or
    repeated while items are appended (a desc walk names the position before which it goes on,
    so items appended meanwhile are not in it). The cursor is opaque like the keyset ones.
    """
    limit = check_limit(limit)
    if check_order(order) == DESC:
        stop = len(items) if cursor is None else min(_decode_position(cursor, "before"), len(items))
        start = max(0, stop - limit)
        page = items[start:stop][::-1]
        return {"items": page, "next_cursor": _position("before", start) if start > 0 else None}
    start = 0 if cursor is None else _decode_position(cursor, "pos")
    page = items[start:start + limit]
    end = start + len(page)
    return {"items": page, "next_cursor": _position("pos", end) if end < len(items) else None}


def _position(kind: str, position: int) -> str:
    raw = json.dumps([kind, position], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_position(cursor: str, expected: str) -> int:
    try:
        if len(cursor) > 400:
            raise ValueError
        kind, position = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if kind not in ("pos", "before") or not isinstance(position, int) or isinstance(position, bool) or position < 0:
            raise ValueError
    except (ValueError, TypeError):
        raise _refused() from None
    if kind != expected:
        order = DESC if kind == "before" else ASC
        raise InvalidInput("invalid_cursor", f"this cursor pages order={order}: pass it with that order")
    return position
