"""Replacing and deleting a feature table (issue 26) as plain functions: the table is the old one or the
new one, never a mix; a table a training still needs is never changed; its objects leave the store."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from sqlalchemy.orm import Session, sessionmaker

from features_party import feature_tables, store, trainings
from features_party.feature_tables import local_source
from labeldp.errors import Conflict, InvalidInput, NotFound
from labeldp.service.database import make_session_factory
from labeldp.service.migrations import open_database
from labeldp.service.settings import Settings
from labeldp.storage import ObjectStore


@pytest.fixture
def tables(tmp_path: Path, database_url: str) -> tuple[sessionmaker[Session], ObjectStore]:
    """SQLite and PostgreSQL: the row locks of replace, delete and a training's insert are real on the latter."""
    settings = Settings(features_database_url=database_url)
    engine = open_database(settings.features_database_url, "features_party.migrations", settings)
    sessions = make_session_factory(engine)
    return sessions, ObjectStore.from_url(str(tmp_path / "objects"))


def _csv(tmp_path: Path, name: str, table: pa.Table) -> feature_tables.TableSource:
    sink = io.BytesIO()
    pacsv.write_csv(table, sink)
    (tmp_path / name).write_bytes(sink.getvalue())
    return local_source(tmp_path / name, "csv")


def _training(sessions: sessionmaker[Session], table: str, status: str) -> None:
    with sessions.begin() as s:
        s.add(store.Training(training_id=f"trn_{status}", release_id="rel_x", feature_table=table, config={},
                             status=status, epoch=0, epochs=1, history=[]))


def test_a_replacement_swaps_rows_and_id_and_removes_the_old_object(
    tmp_path: Path, tables: tuple[sessionmaker[Session], ObjectStore]
) -> None:
    sessions, objects = tables
    first = feature_tables.create_feature_table(
        sessions, objects, tmp_path / "scratch", "visits", _csv(tmp_path, "a.csv", pa.table({"id": ["u1"], "x": [1.0]}))
    ).body
    _training(sessions, "visits", store.SUCCEEDED)  # a finished training does not hold the table
    own = pa.table({"user": ["u1", "u2"], "x": [2.0, 3.0], "city": ["p", "q"]})
    replaced = feature_tables.replace_feature_table(
        sessions, objects, tmp_path / "scratch", "visits", _csv(tmp_path, "b.csv", own), id_column="user"
    )
    body = replaced.body
    assert replaced.status_code == 200 and body["id"] != first["id"] and body["n_rows"] == 2
    assert body["id_column"] == "user" and [c["name"] for c in body["columns"]] == ["x", "city"]
    assert body["created_at"] == first["created_at"]  # the table keeps its place in the list
    assert objects.list("tables") == [f"tables/{body['id'].removeprefix('ft_')}.parquet"]
    with sessions() as s:
        row = feature_tables.get_feature_table(s, "visits")
        assert feature_tables.read_table(objects, row).column("user").to_pylist() == ["u1", "u2"]
        with pytest.raises(NotFound):
            feature_tables.get_feature_table_by_id(s, first["id"])


def test_a_bad_replacement_or_one_in_use_leaves_the_table_and_store_as_they_were(
    tmp_path: Path, tables: tuple[sessionmaker[Session], ObjectStore]
) -> None:
    sessions, objects = tables
    source = _csv(tmp_path, "a.csv", pa.table({"id": ["u1", "u2"], "x": [1.0, 2.0]}))
    first = feature_tables.create_feature_table(sessions, objects, tmp_path / "scratch", "visits", source).body
    before = objects.list("tables")
    with pytest.raises(InvalidInput) as dupes:
        feature_tables.replace_feature_table(
            sessions, objects, tmp_path / "scratch", "visits", _csv(tmp_path, "d.csv", pa.table({"id": ["a", "a"]}))
        )
    assert dupes.value.code == "duplicate_ids"
    with pytest.raises(InvalidInput) as missing:
        feature_tables.replace_feature_table(sessions, objects, tmp_path / "scratch", "visits", source,
                                             id_column="user")
    assert missing.value.code == "missing_id_column"
    for status in (store.QUEUED, store.RUNNING, store.CANCELLING):
        _training(sessions, "visits", status)
        with pytest.raises(Conflict) as busy:
            feature_tables.replace_feature_table(sessions, objects, tmp_path / "scratch", "visits", source)
        assert busy.value.code == "feature_table_in_use"
        with pytest.raises(Conflict):
            feature_tables.delete_feature_table(sessions, objects, "visits")
        with sessions.begin() as s:
            s.get(store.Training, f"trn_{status}").status = store.CANCELLED  # type: ignore[union-attr]
    assert objects.list("tables") == before  # the refused replacements' objects were removed
    with sessions() as s:
        assert feature_tables.describe(feature_tables.get_feature_table(s, "visits")).model_dump() == first
    with pytest.raises(NotFound) as unknown:
        feature_tables.replace_feature_table(sessions, objects, tmp_path / "scratch", "nope", source)
    assert unknown.value.code == "feature_table_not_found" and objects.list("tables") == before


def test_a_delete_removes_row_and_object_and_a_training_checked_meanwhile_is_refused(
    tmp_path: Path, tables: tuple[sessionmaker[Session], ObjectStore]
) -> None:
    sessions, objects = tables
    source = _csv(tmp_path, "a.csv", pa.table({"id": ["u1"], "x": [1.0]}))
    first = feature_tables.create_feature_table(sessions, objects, tmp_path / "scratch", "visits", source).body
    with sessions() as s:
        checked = feature_tables.get_feature_table(s, "visits")  # a training checked its join against this
    deleted = feature_tables.delete_feature_table(sessions, objects, "visits")
    assert deleted.model_dump() == {"id": first["id"], "deleted": True}
    assert objects.list("tables") == []
    with sessions() as s, pytest.raises(InvalidInput) as gone:
        trainings._check_table_unchanged(s, checked)
    assert gone.value.code == "unknown_feature_table"
    feature_tables.create_feature_table(sessions, objects, tmp_path / "scratch", "visits", source)
    with sessions() as s, pytest.raises(Conflict) as other:
        trainings._check_table_unchanged(s, checked)
    assert other.value.code == "feature_table_replaced"
    with pytest.raises(NotFound):
        feature_tables.delete_feature_table(sessions, objects, "nope")


def test_an_old_object_whose_delete_failed_is_swept_once_past_its_grace(
    tmp_path: Path, tables: tuple[sessionmaker[Session], ObjectStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store refuses the old object's delete after a replacement (and a deleted table's): the
    catalogue is right, the objects stay; the sweep leaves them while young, removes them once past
    the grace, and never touches the object a row names."""
    import os
    import time

    from features_party import sweep
    from labeldp.errors import Unavailable

    sessions, objects = tables
    scratch = tmp_path / "scratch"
    feature_tables.create_feature_table(sessions, objects, scratch, "visits",
                                        _csv(tmp_path, "a.csv", pa.table({"id": ["u1"], "x": [1.0]})))
    feature_tables.create_feature_table(sessions, objects, scratch, "gone",
                                        _csv(tmp_path, "g.csv", pa.table({"id": ["u9"], "x": [9.0]})))
    before = set(objects.list("tables"))

    def refuse(key: str) -> None:  # a store that is away when the old object is deleted
        raise Unavailable("storage_unavailable", "the store is away")

    with monkeypatch.context() as patch:
        patch.setattr(objects, "delete", refuse)
        feature_tables.replace_feature_table(sessions, objects, scratch, "visits",
                                             _csv(tmp_path, "b.csv", pa.table({"id": ["u2"], "x": [2.0]})))
        feature_tables.delete_feature_table(sessions, objects, "gone")
    with sessions() as s:
        current = feature_tables.get_feature_table(s, "visits").path
    orphans = before
    assert set(objects.list("tables")) == orphans | {current}  # left behind, only logged
    assert sweep.sweep_orphans(sessions, objects, 3600) == 0  # young: may be another replica's upload
    old = time.time() - sweep.TABLE_MIN_AGE_SECONDS - 60
    for key in objects.list("tables"):
        os.utime(tmp_path / "objects" / key, (old, old))
    assert sweep.sweep_orphans(sessions, objects, 3600) == 2
    assert objects.list("tables") == [current]
    with sessions() as s:
        assert feature_tables.read_table(objects, feature_tables.get_feature_table(s, "visits")).num_rows == 1
