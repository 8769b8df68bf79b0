"""Cursor pages of an append-only list (a training's history): every item once, in order, while it grows."""

from __future__ import annotations

import pytest

from labeldp.errors import InvalidInput
from labeldp.service.pagination import encode_cursor, list_page


def test_pages_walk_every_item_once_even_while_items_are_appended() -> None:
    items = [{"epoch": e} for e in range(1, 8)]
    seen, cursor = [], None
    while True:
        page = list_page(items, 3, cursor)
        seen += page["items"]
        cursor = page["next_cursor"]
        if len(items) < 9:
            items.append({"epoch": len(items) + 1})  # an epoch finished between two pages
        if cursor is None:
            break
    assert [i["epoch"] for i in seen] == list(range(1, len(seen) + 1)) and len(seen) >= 7
    assert list_page([], 5, None) == {"items": [], "next_cursor": None}
    assert list_page(items, len(items), None)["next_cursor"] is None  # an exact last page says so


@pytest.mark.parametrize("cursor", ["not-a-cursor", encode_cursor.__name__, "W10", "WyJwb3MiLC0xXQ"])
def test_a_cursor_this_list_did_not_issue_is_invalid_cursor(cursor: str) -> None:
    from datetime import UTC, datetime

    for bad in (cursor, encode_cursor(datetime.now(UTC), "trn_x")):  # a keyset cursor is not a position
        with pytest.raises(InvalidInput) as refused:
            list_page([1, 2], 1, bad)
        assert refused.value.code == "invalid_cursor"
    with pytest.raises(InvalidInput) as limit:
        list_page([1], 0, None)
    assert limit.value.code == "invalid_limit"
