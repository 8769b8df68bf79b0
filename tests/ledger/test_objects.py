"""The labels party's ids, labels and messages as objects: on S3 (moto) nothing lands in the local folder."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import numpy as np
import pytest
from tests.s3_server import S3Server

from labeldp.errors import LabelDPError, StorageError
from labeldp.message_shards import shard_key
from labeldp.storage import ObjectStore
from labels_party import uploads
from labels_party.columnar import get_array, put_array
from labels_party.context import message_key
from labels_party.label_sets import (
    LabelSetCreate,
    create_label_set,
    current_labels_key,
    delete_labels,
    get_label_set,
    ids_key,
    load_label_set,
    read_labels,
)
from labels_party.outbox import _chunks
from labels_party.uploads import upload_labels

from .test_ledger import labeled_set, make_ctx, new_domain, release


def test_label_sets_and_messages_live_in_the_s3_store(tmp_path: Path, s3_server: S3Server) -> None:
    url = s3_server.url()
    options = s3_server.env(url)
    ctx = make_ctx(
        f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path,
        storage_url=url, storage_s3_endpoint=options["LABELDP_STORAGE_S3_ENDPOINT"],
        storage_s3_region=options["LABELDP_STORAGE_S3_REGION"],
        storage_s3_access_key=options["LABELDP_STORAGE_S3_ACCESS_KEY"],
        storage_s3_secret_key=options["LABELDP_STORAGE_S3_SECRET_KEY"],
    )
    new_domain(ctx, "d", 5)
    ls = labeled_set(ctx, tmp_path, "d", [f"u{i}" for i in range(50)])
    rel = release(ctx, ls, 1)
    remote = s3_server.store(url)
    with ctx.sessions() as s:
        labels = current_labels_key(load_label_set(s, ls))
    assert labels.startswith(f"label_sets/{ls}/labels/")
    ledger_keys = {k for k in remote.list() if k.startswith("ledger/")}
    assert ledger_keys  # the domain's bucket bases and the release's charge (test_ledger_buckets.py)
    manifest_key = message_key(f"{rel['id']}/manifest.json")
    shard = shard_key(manifest_key, 0)
    assert set(remote.list()) - ledger_keys == {ids_key(ls), labels, manifest_key, shard}
    manifest = remote.get_bytes(manifest_key)
    assert hashlib.sha256(manifest).hexdigest() == rel["message_sha256"]
    assert len(manifest) + remote.size(shard) == rel["message_bytes"]
    assert b"".join(_chunks(ctx.store, shard, size=1000)) == remote.get_bytes(shard)
    for sub in ("label_sets", "messages", "domains"):
        assert not (ctx.data_dir / sub).exists()
    delete_labels(ctx, ls)
    assert labels not in remote.list()


def test_a_missing_object_a_row_names_is_a_server_fault_not_a_404(tmp_path: Path) -> None:
    ctx = make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path)
    new_domain(ctx, "d", 5)
    ls = labeled_set(ctx, tmp_path, "d", ["a", "b"])
    ctx.store.delete(ids_key(ls))  # as on a replica whose LABELDP_STORAGE_URL is not the shared one
    with pytest.raises(StorageError) as caught:
        get_label_set(ctx, ls)
    assert caught.value.code == "stored_object_missing" and caught.value.status_code == 503


def test_an_upload_that_loses_the_swap_never_replaces_the_winners_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two uploads to one label set both compute the next version. A writes its labels, then B
    # writes its own, then A wins the compare-and-swap and B loses it: the committed labels must
    # be A's. (Named by version, B's object replaced A's under the name A's row then held.)
    ctx = make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path)
    d = new_domain(ctx, "d", 5)
    ids = [f"u{i}" for i in range(10)]
    ls = create_label_set(ctx, LabelSetCreate.model_validate(
        {"name": "s", "domain": {"low": 0, "high": 10}, "privacy_domain": d, "ids": ids}), None).body["id"]
    a_written, b_written, a_done = threading.Event(), threading.Event(), threading.Event()
    real_put = uploads.put_labels

    def interleaved(store: ObjectStore, key: str, staged: str) -> None:
        if threading.current_thread().name == "A":
            real_put(store, key, staged)
            a_written.set()
            assert b_written.wait(30)
        else:
            assert a_written.wait(30)
            real_put(store, key, staged)
            b_written.set()
            assert a_done.wait(30)  # B's swap comes after A's commit

    monkeypatch.setattr(uploads, "put_labels", interleaved)
    outcome: dict[str, object] = {}

    def upload(name: str, part: list[str], value: float) -> None:
        csv = tmp_path / f"{name}.csv"
        csv.write_text("id,label\n" + "".join(f"{i},{value}\n" for i in part))
        try:
            outcome[name] = upload_labels(ctx, ls, csv, "text/csv", validate_only=False, claim=None).status_code
        except LabelDPError as exc:
            outcome[name] = exc.code
        finally:
            if name == "A":
                a_done.set()

    threads = [
        threading.Thread(target=upload, args=("A", ids[:5], 1.0), name="A"),
        threading.Thread(target=upload, args=("B", ids[5:], 9.0), name="B"),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert outcome == {"A": 200, "B": "concurrent_upload"}
    with ctx.sessions() as s:
        row = load_label_set(s, ls)
    labels = read_labels(ctx, row)
    assert row.labeled == 5
    assert labels[:5].tolist() == [1.0] * 5 and np.isnan(labels[5:]).all()


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_arrays_round_trip_through_either_store(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    store = (
        ObjectStore.from_url(str(tmp_path / "o")) if backend == "local"
        else request.getfixturevalue("s3_server").store()
    )
    cases = [
        np.random.default_rng(0).uniform(size=300_000),  # 2.4 MB: more than np.load's 256 KiB blocks
        np.array([np.nan, 1.5]), np.zeros(0), np.arange(12, dtype=np.int64).reshape(3, 4),
        np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    ]
    for n, values in enumerate(cases):
        put_array(store, f"a/{n}.npy", values)
        back = get_array(store, f"a/{n}.npy")
        assert back.dtype == values.dtype and back.shape == values.shape
        assert np.array_equal(back, values, equal_nan=True)
        back[...] = 0  # a private, writable copy
    store.put_bytes("a/short.npy", store.get_bytes("a/0.npy")[:-8])
    with pytest.raises(ValueError, match="shorter"):
        get_array(store, "a/short.npy")


def test_labelled_chunks_follow_the_sorted_ids_a_stored_chunk_at_a_time(tmp_path: Path) -> None:
    """The release path's one reader of a set's labels: every id once, in sorted order, with its label."""
    from labels_party.label_sets import iter_labelled_chunks, set_ids

    ctx = make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path)
    d = new_domain(ctx, "d", 5)
    ids = [f"u{i:05d}" for i in range(3000)]
    ls = create_label_set(ctx, LabelSetCreate.model_validate({"name": "s", "domain": {"low": 0, "high": 10},
                                                              "privacy_domain": d}), None).body["id"]
    import pyarrow as pa

    set_ids(ctx, ls, [pa.array(ids[::-1][k : k + 700]) for k in range(0, 3000, 700)], None, run_rows=500)
    values = {i: float(k % 11) for k, i in enumerate(ids)}
    csv = tmp_path / "labels.csv"
    csv.write_text("id,label\n" + "".join(f"{i},{values[i]!r}\n" for i in ids[:2000]))
    upload_labels(ctx, ls, csv, "text/csv", validate_only=False, claim=None)
    with ctx.sessions() as s:
        row = load_label_set(s, ls)
    seen_ids, seen_labels = [], []
    for chunk_ids, chunk_labels in iter_labelled_chunks(ctx, row):
        assert len(chunk_ids) == len(chunk_labels)
        seen_ids += chunk_ids.to_pylist()
        seen_labels += chunk_labels.tolist()
    assert seen_ids == sorted(ids)
    assert [values[i] for i in seen_ids if i in values and i in ids[:2000]] == [
        v for i, v in zip(seen_ids, seen_labels) if i in ids[:2000]
    ]
    assert all(np.isnan(v) for i, v in zip(seen_ids, seen_labels) if i not in ids[:2000])
    delete_labels(ctx, ls)
    with ctx.sessions() as s:
        row = load_label_set(s, ls)
    with pytest.raises(LabelDPError) as refused:
        next(iter_labelled_chunks(ctx, row))
    assert refused.value.code == "labels_deleted"


def test_uploaded_ids_are_named_under_the_lock_never_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lock's work does not grow with the ids: the sorted object is the set's ids object, named
    by its row; a second upload's object goes, the winner's stays; the sweep keeps what a row names."""
    import os
    import time

    import pyarrow as pa

    from labels_party.label_sets import current_ids_key, iter_id_chunks, set_ids
    from labels_party.sweep import sweep_orphans

    ctx = make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path)
    d = new_domain(ctx, "d", 5)

    def no_copy(*args: object) -> None:
        raise AssertionError("an object copy under the domain's lock")

    monkeypatch.setattr(ctx.store, "copy", no_copy)
    body = LabelSetCreate.model_validate({"name": "s", "domain": {"low": 0, "high": 10}, "privacy_domain": d})
    ls = create_label_set(ctx, body, None).body["id"]
    set_ids(ctx, ls, pa.array([f"u{i}" for i in range(50)]), None)
    with ctx.sessions() as s:
        key = current_ids_key(load_label_set(s, ls))
    assert key != ids_key(ls) and key.startswith(f"label_sets/{ls}/ids-")
    with pytest.raises(LabelDPError) as again:
        set_ids(ctx, ls, pa.array(["x", "y"]), None)
    assert again.value.code == "ids_already_set"
    assert ctx.store.list(f"label_sets/{ls}") == [key]  # the loser's object is gone
    stray = f"label_sets/{ls}/ids-0123.arrow"  # what a crashed upload left
    ctx.store.put_bytes(stray, b"x")
    for k in (key, stray):
        os.utime(ctx.data_dir / k, (time.time() - 90000, time.time() - 90000))
    assert sweep_orphans(ctx, min_age_seconds=3600) == 1
    assert ctx.store.list(f"label_sets/{ls}") == [key]
    assert get_label_set(ctx, ls)
    assert sum(len(ids) for ids in iter_id_chunks(ctx, load_label_set(ctx.sessions(), ls))) == 50
