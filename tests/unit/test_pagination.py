"""Cursor pages in both orders (issue 26): an append-only list (a training's history) and a keyset over a real
table, every item once, oldest or newest first, while items are added."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from labeldp.errors import InvalidInput
from labeldp.service.database import make_engine, make_session_factory
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
    for bad in (cursor, encode_cursor(datetime.now(UTC), "trn_x")):  # a keyset cursor is not a position
        with pytest.raises(InvalidInput) as refused:
            list_page([1, 2], 1, bad)
        assert refused.value.code == "invalid_cursor"
    with pytest.raises(InvalidInput) as limit:
        list_page([1], 0, None)
    assert limit.value.code == "invalid_limit"


def test_a_desc_walk_gives_the_last_item_first_and_never_what_was_appended_after_it_began() -> None:
    items = [{"epoch": e} for e in range(1, 8)]
    seen, cursor = [], None
    while True:
        page = list_page(items, 3, cursor, "desc")
        seen += page["items"]
        cursor = page["next_cursor"]
        items.append({"epoch": len(items) + 1})  # an epoch finished between two pages: newer than the walk
        if cursor is None:
            break
    assert [i["epoch"] for i in seen] == list(range(7, 0, -1))
    assert list_page([], 5, None, "desc") == {"items": [], "next_cursor": None}
    assert list_page([1, 2, 3], 3, None, "desc") == {"items": [3, 2, 1], "next_cursor": None}
    asc_cursor = list_page([1, 2, 3], 1, None)["next_cursor"]
    desc_cursor = list_page([1, 2, 3], 1, None, "desc")["next_cursor"]
    for cursor, order in ((asc_cursor, "desc"), (desc_cursor, "asc")):  # a cursor keeps its order
        with pytest.raises(InvalidInput) as refused:
            list_page([1, 2, 3], 1, cursor, order)  # type: ignore[arg-type]
        assert refused.value.code == "invalid_cursor" and "order=" in refused.value.message


def _walk(sessions: Any, order: str, limit: int, between: Any = None) -> list[str]:
    """Every page in its own session (as every request has), ``between`` run between two pages."""
    names: list[str] = []
    cursor = None
    while True:
        with sessions() as s:
            page = _page(s, order, cursor, limit)
        names += [item["name"] for item in page["items"]]
        cursor = page["next_cursor"]
        if between is not None:
            between()
        if cursor is None:
            return names


def test_keyset_pages_walk_both_orders_across_pages_ties_and_inserts(tmp_path: Path) -> None:
    """Over a real table (the feature tables' keyset: created_at, then name), with three items sharing a
    timestamp: asc and desc give one order and its reverse at every page size; an item created during
    a walk comes last in an asc walk and never in a desc one (it is newer than where that walk began);
    an asc cursor is refused with desc and the other way round (planted once: the desc WHERE compared
    tied ids with ``>``, and the desc walks went red)."""
    from features_party import store

    engine = make_engine(f"sqlite:///{tmp_path / 'f.db'}")
    store.create_all(engine)
    sessions = make_session_factory(engine)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    stamps = {"c": t0, "a": t0, "b": t0, "e": t0 + timedelta(seconds=1), "d": t0 + timedelta(seconds=1),
              "f": t0 + timedelta(seconds=2), "g": t0 + timedelta(seconds=3)}

    def table(name: str, created: datetime) -> store.FeatureTable:
        return store.FeatureTable(name=name, id_column="id", n_rows=1, columns=[], path=f"tables/{name}.parquet",
                                  created_at=created)

    with sessions.begin() as s:
        s.add_all([table(name, created) for name, created in stamps.items()])
    expected = ["a", "b", "c", "d", "e", "f", "g"]
    for limit in (1, 2, 3, 7, 8):
        assert _walk(sessions, "asc", limit) == expected, limit
        assert _walk(sessions, "desc", limit) == expected[::-1], limit
    with sessions() as s:
        first = _page(s, "asc")
        with pytest.raises(InvalidInput) as refused:
            _page(s, "desc", first["next_cursor"])
        assert refused.value.code == "invalid_cursor"
        with pytest.raises(InvalidInput):
            _page(s, "asc", _page(s, "desc")["next_cursor"])
    added = iter(["h", "i"])

    def create() -> None:
        name = next(added, None)
        if name is not None:
            with sessions.begin() as w:
                w.add(table(name, t0 + timedelta(seconds=10 + ord(name))))

    assert _walk(sessions, "desc", 2, create) == expected[::-1]  # "h" (and "i") newer than the walk: not in it
    added = iter(["j"])
    assert _walk(sessions, "asc", 3, create) == [*expected, "h", "i", "j"]
    engine.dispose()


def _page(session: Any, order: str, cursor: str | None = None, limit: int = 2) -> dict[str, Any]:
    from features_party.feature_tables import list_feature_tables

    return list_feature_tables(session, limit, cursor, order).model_dump()  # type: ignore[arg-type]
