"""A label set's releases and a privacy domain's releases as cursor pages (issue 26)."""

from __future__ import annotations

from pathlib import Path

import pytest

from labeldp.errors import NotFound
from labels_party.releases import list_releases

from .test_ledger import labeled_set, make_ctx, new_domain, release


def _walk(ctx, **filters) -> list[str]:  # type: ignore[no-untyped-def]
    ids, cursor = [], None
    while True:
        page = list_releases(ctx, filters.get("label_set_id"), 2, cursor, filters.get("privacy_domain"),
                             known_set=filters.get("known_set", False))
        ids += [r.id for r in page.items]
        cursor = page.next_cursor
        if cursor is None:
            return ids


def test_releases_page_by_set_and_by_domain(tmp_path: Path) -> None:
    ctx = make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path)
    d, e = new_domain(ctx, "d", 10), new_domain(ctx, "e", 10)
    first, second = labeled_set(ctx, tmp_path, "d", ["a", "b"]), labeled_set(ctx, tmp_path, "d", ["c"])
    other = labeled_set(ctx, tmp_path, "e", ["x"])
    made = {ls: [release(ctx, ls, 0.5)["id"] for _ in range(3)] for ls in (first, second, other)}
    assert _walk(ctx, label_set_id=first, known_set=True) == made[first]
    assert _walk(ctx, privacy_domain=d) == made[first] + made[second]
    assert _walk(ctx, privacy_domain=e) == made[other]
    for named in ("d", "pd_" + "0" * 32):  # a name, or an id no domain has: 404 saying how to find the id
        with pytest.raises(NotFound) as refused:
            _walk(ctx, privacy_domain=named)
        assert refused.value.code == "privacy_domain_not_found" and "?name=" in refused.value.message
    with pytest.raises(NotFound) as unknown:
        _walk(ctx, label_set_id="ls_nope", known_set=True)
    assert unknown.value.code == "label_set_not_found"
