"""Deleting a label set (issue 26): only one no release was made from; its objects go, the ledger stays."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from labeldp.errors import Conflict, NotFound
from labels_party.label_sets import delete_label_set, get_label_set
from labels_party.sweep import sweep_orphans

from .test_ledger import labeled_set, make_ctx, new_domain, release, spent_per_id


def test_an_unreleased_set_is_deleted_with_its_objects_and_a_released_one_never(
    database_url: str, tmp_path: Path
) -> None:
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "d", 5)
    spent = labeled_set(ctx, tmp_path, "d", ["a", "b"])
    release(ctx, spent, 1)
    mistaken = labeled_set(ctx, tmp_path, "d", ["a", "c"])  # shares an id with the released set
    before = spent_per_id(ctx, "d")
    assert before == {"a": 1_000_000, "b": 1_000_000, "c": 0}
    assert ctx.store.list(f"label_sets/{mistaken}")  # its ids and labels objects

    delete_label_set(ctx, mistaken)
    assert ctx.store.list(f"label_sets/{mistaken}") == []
    with pytest.raises(NotFound) as gone:
        get_label_set(ctx, mistaken)
    assert gone.value.code == "label_set_not_found"
    assert spent_per_id(ctx, "d") == before  # the ledger keeps what "a" spent through the other set

    with pytest.raises(Conflict) as used:
        delete_label_set(ctx, spent)
    assert used.value.code == "label_set_in_use" and used.value.details == [{"releases": 1}]
    assert get_label_set(ctx, spent).id == spent and ctx.store.list(f"label_sets/{spent}")
    with pytest.raises(NotFound):
        delete_label_set(ctx, mistaken)


def test_objects_a_failed_delete_left_are_swept_once_old(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path)
    new_domain(ctx, "d", 5)
    ls = labeled_set(ctx, tmp_path, "d", ["a", "b"])
    kept = labeled_set(ctx, tmp_path, "d", ["c"])

    def store_down(key: str) -> None:  # the object store fails after the row's delete committed
        raise OSError("store unavailable")

    monkeypatch.setattr(ctx.store, "delete", store_down)
    with pytest.raises(OSError):
        delete_label_set(ctx, ls)
    monkeypatch.undo()
    with pytest.raises(NotFound):  # the set is gone as a whole: no row names half of it
        get_label_set(ctx, ls)
    left = ctx.store.list(f"label_sets/{ls}")
    assert left
    old = time.time() - 7200
    for key in left + ctx.store.list(f"label_sets/{kept}"):
        os.utime(ctx.data_dir / key, (old, old))
    assert sweep_orphans(ctx, min_age_seconds=3600) == len(left)
    assert ctx.store.list(f"label_sets/{ls}") == [] and len(ctx.store.list(f"label_sets/{kept}")) == 2
