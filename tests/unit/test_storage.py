"""labeldp.storage on both backends: a local folder and a real S3-compatible server (moto, loopback)."""

from __future__ import annotations

import hashlib
import io
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
from tests.s3_server import S3Server

from labeldp import storage
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
    # 12 MiB in 1 MiB writes: more than one S3 multipart part (pyarrow's parts are 10 MiB).
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


# --- S3: multipart streaming, no copy, nothing cut short under a key -----------------------


def _s3_client(server: S3Server) -> Any:
    """boto3 (moto's own dependency) sees what pyarrow does not: ETags and incomplete uploads."""
    import boto3  # type: ignore[import-untyped]

    options = server.options()
    return boto3.client(
        "s3", endpoint_url=server.endpoint, aws_access_key_id=options["access_key"],
        aws_secret_access_key=options["secret_key"], region_name=options["region"],
    )


def _raw_key(store: ObjectStore, key: str) -> tuple[str, str]:
    bucket, _, prefix = store._root.partition("/")
    return bucket, f"{prefix}/{key}"


def test_s3_streams_a_large_object_as_one_multipart_upload(s3_server: S3Server) -> None:
    # 21 MiB in 1 MiB writes: three parts of pyarrow's 10 MiB, uploaded straight to the key
    # (no temporary, no server-side copy, which S3 caps at 5 GiB).
    store = s3_server.store()
    blocks = [bytes([i]) * (1 << 20) for i in range(21)]
    with store.open_output_stream("labels/big") as out:
        for block in blocks:
            out.write(block)
        assert out.tell() == 21 << 20
    bucket, raw = _raw_key(store, "labels/big")
    head = _s3_client(s3_server).head_object(Bucket=bucket, Key=raw)
    assert head["ETag"].strip('"').endswith("-3")  # a multipart object of 3 parts, not a copy
    assert head["ContentLength"] == 21 << 20
    with store.open_input_stream("labels/big") as f:
        assert hashlib.sha256(f.read()).digest() == hashlib.sha256(b"".join(blocks)).digest()
    assert raw_paths(store) == ["labels/big"]
    one = bytes(range(256)) * (49 << 10)  # 12.25 MiB in one write: straight to pyarrow, never copied here
    store.put_bytes("labels/one", one)
    assert store.get_bytes("labels/one") == one


def test_s3_a_write_cut_short_after_parts_were_sent_leaves_nothing_under_its_key(s3_server: S3Server) -> None:
    store = s3_server.store()
    client = _s3_client(s3_server)
    bucket, raw = _raw_key(store, "labels/cut")
    with pytest.raises(RuntimeError, match="producer failed"), store.open_output_stream("labels/cut") as out:
        for _ in range(23):  # two parts sent, a third held
            out.write(b"z" * (1 << 20))
        raise RuntimeError("producer failed")
    assert not store.exists("labels/cut") and raw_paths(store) == []
    uploads = client.list_multipart_uploads(Bucket=bucket, Prefix=raw).get("Uploads", [])
    assert uploads == []  # completed (pyarrow cannot abort) and deleted at once, not left pending


_KILLED_WRITER = """
import sys, time
from labeldp.storage import ObjectStore
store = ObjectStore.from_url(sys.argv[1], endpoint_override=sys.argv[2], access_key=sys.argv[3],
                             secret_key=sys.argv[4], region=sys.argv[5])
with store.open_output_stream("labels/killed") as out:
    for i in range(12):
        out.write(b"k" * (1 << 20))
    print("sent", flush=True)
    time.sleep(60)
"""


def test_s3_a_writer_killed_mid_upload_leaves_no_object(s3_server: S3Server) -> None:
    import os
    import signal
    import subprocess
    import sys

    url = s3_server.url()
    options = s3_server.options()
    writer = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, url, options["endpoint_override"], options["access_key"],
         options["secret_key"], options["region"]],
        stdout=subprocess.PIPE, env={**os.environ},
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == b"sent"
        store = s3_server.store(url)
        bucket, raw = _raw_key(store, "labels/killed")
        client = _s3_client(s3_server)
        for _ in range(100):  # the first part goes in the background
            if client.list_multipart_uploads(Bucket=bucket, Prefix=raw).get("Uploads"):
                break
            time.sleep(0.05)
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(10)
    finally:
        writer.kill()
        writer.wait(10)
    assert not store.exists("labels/killed") and store.list() == [] and raw_paths(store) == []
    # What is left is an upload S3 never shows as an object (a lifecycle rule reclaims its parts).
    assert [u["Key"] for u in client.list_multipart_uploads(Bucket=bucket, Prefix=raw)["Uploads"]] == [raw]


def test_s3_a_small_write_that_fails_sends_nothing_and_keeps_the_earlier_object(s3_server: S3Server) -> None:
    store = s3_server.store()
    store.put_bytes("checkpoints/t.pt", b"epoch 3")
    with pytest.raises(RuntimeError), store.open_output_stream("checkpoints/t.pt") as out:
        out.write(b"x" * (5 << 20))
        raise RuntimeError("crash while writing epoch 4")
    assert store.get_bytes("checkpoints/t.pt") == b"epoch 3"
    bucket, raw = _raw_key(store, "checkpoints/t.pt")
    assert _s3_client(s3_server).list_multipart_uploads(Bucket=bucket, Prefix=raw).get("Uploads", []) == []


def test_random_access_reads_return_the_stored_bytes(store: ObjectStore) -> None:
    # Offsets and lengths around S3's read-ahead window: inside it, across its end, longer than it, past the end.
    data = bytes(random.Random(7).randbytes((3 << 20) + 12345))
    store.put_bytes("random", data)
    window = storage.S3_READ_AHEAD
    cases = [(0, 1), (5, 100), (window - 3, 10), (window - 3, 3), (window, window), (window + 1, window + 7),
             (len(data) - 5, 5), (len(data) - 5, 100), (len(data), 10), (17, 0)]
    rng = random.Random(8)
    cases += [(rng.randrange(len(data)), rng.choice([1, 300, 70_000, window - 1, 2 * window])) for _ in range(200)]
    with store.open_input_file("random") as f:
        assert f.size() == len(data)
        for offset, n in cases:
            assert f.read_at(n, offset) == data[offset:offset + n], (offset, n)
        f.seek(window - 2)
        assert f.read(4) == data[window - 2:window + 2] and f.tell() == window + 2
        assert f.read() == data[window + 2:]


@pytest.fixture
def s3_read_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bytes of every request an S3 reader makes (each goes through ``_ReadAhead._read``)."""
    sizes: list[int] = []
    read = storage._ReadAhead._read

    def counted(self: Any, at: int, n: int) -> pa.Buffer:
        sizes.append(n)
        return read(self, at, n)

    monkeypatch.setattr(storage._ReadAhead, "_read", counted)
    return sizes


def test_s3_many_small_reads_of_one_object_take_few_requests(s3_server: S3Server, s3_read_sizes: list[int]) -> None:
    # A ledger base: one Arrow file of many small record batches read one by one (1024 of them
    # were 1024 GETs, ≈ 20 s on moto). Each request the reader makes goes through ``_read``.
    requests = s3_read_sizes
    store = s3_server.store()
    batches = [pa.record_batch({"id": pa.array([f"{b:04d}-{i:012d}" for i in range(200)])}) for b in range(1024)]
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, batches[0].schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    store.put_bytes("base", sink.getvalue().to_pybytes())
    size = store.size("base")
    with store.open_input_file("base") as f:
        reader = ipc.open_file(f)
        assert [reader.get_batch(i) for i in range(reader.num_record_batches)] == batches
    assert size > 2 * storage.S3_READ_AHEAD  # several windows, so the count below means something
    assert len(requests) <= size // storage.S3_READ_AHEAD + 4, len(requests)


def test_s3_a_scan_of_reads_across_window_ends_fetches_each_byte_once(
    s3_server: S3Server, s3_read_sizes: list[int]
) -> None:
    # Ledger batches at 10⁷ ids are ≈ 350 KB: every third read crosses the window's end. A new
    # window from that read's offset fetched the part of it already held a second time.
    fetched = s3_read_sizes
    store = s3_server.store()
    data = bytes(random.Random(9).randbytes(6_000_000))
    store.put_bytes("scan", data)
    step = 300_000
    with store.open_input_file("scan") as f:
        assert b"".join(f.read_at(step, at) for at in range(0, len(data), step)) == data
    assert sum(fetched) == len(data), (sum(fetched), len(data))
    assert len(fetched) <= len(data) // storage.S3_READ_AHEAD + 2


def test_copy_makes_an_equal_object(store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> None:
    data = bytes(random.Random(3).randbytes(300_000))
    store.put_bytes("from/here", data)
    assert store.copy("from/here", "to/there") == "to/there"  # on S3 by the server (CopyObject)
    monkeypatch.setattr(storage, "S3_COPY_MAX_BYTES", 1000)  # past the limit: streamed through this process
    assert store.copy("from/here", "to/streamed") == "to/streamed"
    assert store.get_bytes("to/there") == store.get_bytes("to/streamed") == data
    assert store.get_bytes("from/here") == data
    with pytest.raises(NotFound):
        store.copy("from/nowhere", "to/nothing")
    assert not store.exists("to/nothing")


def test_a_scratch_store_is_a_plain_local_folder_whose_objects_upload_to_the_store(
    store: ObjectStore, tmp_path: Path
) -> None:
    # A request's working files: a local folder (no fsync), each object a file another store can take.
    scratch = ObjectStore.scratch(tmp_path / "scratch" / "request-1")
    scratch.put_bytes("runs/run-0", b"sorted ids")
    assert scratch.local_path("runs/run-0").read_bytes() == b"sorted ids"
    assert scratch.local_path("runs/run-0").parent.parent == tmp_path / "scratch" / "request-1"
    assert scratch.list() == ["runs/run-0"]
    store.put_file("label_sets/ls/ids-1.arrow", scratch.local_path("runs/run-0"))
    assert store.get_bytes("label_sets/ls/ids-1.arrow") == b"sorted ids"
    if not store.url.startswith("s3://"):
        assert store.local_path("label_sets/ls/ids-1.arrow").read_bytes() == b"sorted ids"
    else:
        with pytest.raises(ValueError):
            store.local_path("label_sets/ls/ids-1.arrow")
