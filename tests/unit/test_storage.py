"""labeldp.storage on both backends: a local folder and a real S3-compatible server (moto, loopback)."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
from tests.s3_server import S3Server

from labeldp.errors import NotFound, StorageError
from labeldp.storage import INCOMING, ObjectStore
from labeldp_tools.local_stack import free_port


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    if request.param == "local":
        yield ObjectStore.from_url(str(tmp_path / "objects"))
    else:
        server: S3Server = request.getfixturevalue("s3_server")
        yield server.store()


def raw_paths(store: ObjectStore) -> list[str]:
    """Everything under the store's root as the backend sees it, temporaries included."""
    infos = store._fs.get_file_info(pafs.FileSelector(store._root, recursive=True, allow_not_found=True))
    return sorted(i.path[len(store._root) + 1:] for i in infos if i.type == pafs.FileType.File)


def test_bytes_round_trip(store: ObjectStore) -> None:
    assert store.put_bytes("a/b/one", b"hello") == "a/b/one"
    assert store.get_bytes("a/b/one") == b"hello"
    assert store.exists("a/b/one") and store.size("a/b/one") == 5
    assert store.put_bytes("empty", b"") == "empty"
    assert store.get_bytes("empty") == b"" and store.size("empty") == 0


def test_streamed_write_and_random_access_read(store: ObjectStore, tmp_path: Path) -> None:
    # 12 MiB in 1 MiB writes: more than one S3 multipart part (pyarrow's parts are 5 MiB).
    blocks = [bytes([i]) * (1 << 20) for i in range(12)]
    with store.open_output_stream("big") as out:
        for block in blocks:
            out.write(block)
    assert store.size("big") == 12 << 20
    with store.open_input_file("big") as f:
        assert f.size() == 12 << 20
        assert f.read_at(4, (7 << 20) - 2) == bytes([6, 6, 7, 7])
    with store.open_input_stream("big") as f:
        assert hashlib.sha256(f.read()).digest() == hashlib.sha256(b"".join(blocks)).digest()
    local = tmp_path / "upload.bin"
    local.write_bytes(b"x" * 1000 + b"y")
    store.put_file("files/upload", local)
    assert store.get_bytes("files/upload") == local.read_bytes()


def test_arrow_and_parquet_read_through_open_input_file(store: ObjectStore) -> None:
    table = pa.table({"id": ["a", "b", "c"], "label": [1.0, 2.5, None]})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    store.put_bytes("t.parquet", sink.getvalue())
    with store.open_input_file("t.parquet") as f:
        assert pq.read_table(f).equals(table)
    with store.open_output_stream("t.arrow") as out, ipc.new_file(out, table.schema) as writer:
        writer.write_table(table)
    with store.open_input_file("t.arrow") as f:
        assert ipc.open_file(f).read_all().equals(table)


def test_a_failed_stream_leaves_no_object(store: ObjectStore) -> None:
    with pytest.raises(RuntimeError, match="disk full"), store.open_output_stream("m/release") as out:
        out.write(b"half a message")
        raise RuntimeError("disk full")
    assert not store.exists("m/release")
    assert store.list() == [] and raw_paths(store) == []
    with pytest.raises(NotFound):
        store.get_bytes("m/release")


def test_a_failed_stream_keeps_the_earlier_object(store: ObjectStore) -> None:
    store.put_bytes("k", b"complete")
    with pytest.raises(RuntimeError), store.open_output_stream("k") as out:
        out.write(b"trunc")
        raise RuntimeError("crash")
    assert store.get_bytes("k") == b"complete"
    assert raw_paths(store) == ["k"]


def test_an_unfinished_write_is_not_listed(store: ObjectStore) -> None:
    with store.open_output_stream("x/y") as out:
        out.write(b"abc")
        out.flush()
        assert not store.exists("x/y")
        assert store.list() == []
    assert store.list() == ["x/y"]
    assert not any(p.startswith(INCOMING) for p in raw_paths(store))


def test_listing(store: ObjectStore) -> None:
    for key in ["b/2", "a/1", "a/sub/3", "ab/4", "c"]:
        store.put_bytes(key, key.encode())
    assert store.list() == ["a/1", "a/sub/3", "ab/4", "b/2", "c"]
    assert store.list("a") == ["a/1", "a/sub/3"]
    assert store.list("a/") == ["a/1", "a/sub/3"]
    assert store.list("a/sub") == ["a/sub/3"]
    assert store.list("nothing/here") == []


def test_delete_is_idempotent(store: ObjectStore) -> None:
    store.put_bytes("d/1", b"1")
    store.put_bytes("d/2", b"2")
    store.delete("d/1")
    store.delete("d/1")
    store.delete("never/was")
    assert store.list("d") == ["d/2"]
    assert not store.exists("d/1")


def test_a_missing_key_is_not_found(store: ObjectStore) -> None:
    assert not store.exists("missing")
    for read in (store.get_bytes, store.open_input_file, store.open_input_stream, store.size):
        with pytest.raises(NotFound) as caught:
            read("missing")
        assert caught.value.code == "object_not_found"


def test_content_keys_are_stable_and_name_the_content(store: ObjectStore) -> None:
    data = b"a signed message"
    digest = hashlib.sha256(data).hexdigest()
    key = ObjectStore.content_key("messages", data)
    assert key == f"messages/{digest}"
    assert ObjectStore.content_key("messages/", digest) == key
    assert ObjectStore.content_key("messages", digest.upper()) == key
    assert store.put_bytes(key, data) == key
    assert hashlib.sha256(store.get_bytes(key)).hexdigest() == key.rsplit("/", 1)[1]
    with pytest.raises(ValueError):
        ObjectStore.content_key("messages", "not-a-digest")


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "../up", "a/../b", ".hidden", "a/.incoming/x", "a/"])
def test_bad_keys_are_refused(store: ObjectStore, key: str) -> None:
    with pytest.raises(ValueError):
        store.put_bytes(key, b"x")
    with pytest.raises(ValueError):
        store.exists(key)


def test_local_urls(tmp_path: Path) -> None:
    by_url = ObjectStore.from_url((tmp_path / "o").as_uri())
    by_path = ObjectStore.from_url(str(tmp_path / "o"))
    by_url.put_bytes("k", b"v")
    assert by_path.get_bytes("k") == b"v"
    assert (tmp_path / "o" / "k").read_bytes() == b"v"


def test_an_unreachable_server_is_a_storage_error() -> None:
    store = ObjectStore.from_url(
        "s3://bucket/prefix", endpoint_override=f"http://127.0.0.1:{free_port()}", access_key="a", secret_key="b",
        region="us-east-1", connect_timeout=0.5, request_timeout=0.5,
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1),
    )
    with pytest.raises(StorageError) as caught:
        store.put_bytes("k", b"v")
    assert caught.value.code == "storage_unavailable" and caught.value.status_code == 503
    assert "127.0.0.1" not in caught.value.message  # the backend's text is for the operator's log
    with pytest.raises(StorageError):
        store.get_bytes("k")


def test_unfinished_writes_are_removed_once_old(store: ObjectStore) -> None:
    # What a crash between finishing a temporary and moving it to its key leaves behind.
    store._fs.create_dir(f"{store._root}/{INCOMING}")
    with store._fs.open_output_stream(f"{store._root}/{INCOMING}/crashed") as raw:
        raw.write(b"partial")
    store.put_bytes("done", b"ok")
    assert store.list() == ["done"]
    assert store.remove_unfinished(older_than_seconds=3600) == 0
    assert raw_paths(store) == [f"{INCOMING}/crashed", "done"]
    assert store.remove_unfinished(older_than_seconds=-60) == 1
    assert raw_paths(store) == ["done"]
