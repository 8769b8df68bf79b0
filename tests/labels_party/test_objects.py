"""The labels party's ids, labels and messages as objects: on S3 (moto) nothing lands in the local folder."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from tests.s3_server import S3Server

from labeldp.errors import StorageError
from labels_party.context import message_key
from labels_party.label_sets import delete_labels, get_label_set, ids_key, labels_key
from labels_party.outbox import _chunks

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
    assert set(remote.list()) == {ids_key(ls), labels_key(ls, 1), message_key(f"{rel['id']}.json")}
    message = remote.get_bytes(message_key(f"{rel['id']}.json"))
    assert hashlib.sha256(message).hexdigest() == rel["message_sha256"]
    assert len(message) == rel["message_bytes"]
    assert b"".join(_chunks(ctx.store, message_key(f"{rel['id']}.json"), size=1000)) == message
    for sub in ("label_sets", "messages"):
        assert not (ctx.data_dir / sub).exists()
    delete_labels(ctx, ls)
    assert labels_key(ls, 1) not in remote.list()


def test_a_missing_object_a_row_names_is_a_server_fault_not_a_404(tmp_path: Path) -> None:
    ctx = make_ctx(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path)
    new_domain(ctx, "d", 5)
    ls = labeled_set(ctx, tmp_path, "d", ["a", "b"])
    ctx.store.delete(ids_key(ls))  # as on a replica whose LABELDP_STORAGE_URL is not the shared one
    with pytest.raises(StorageError) as caught:
        get_label_set(ctx, ls)
    assert caught.value.code == "stored_object_missing" and caught.value.status_code == 503
