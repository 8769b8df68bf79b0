"""Bytes each stage of the label path moves through the shared object store, by kind of object.

    python bench/store_traffic.py --n 1000000 --out bench/results/store_traffic.md

One process, the labels party's own functions (no HTTP), SQLite, an S3 server started here
(moto's by default, or ``--s3-server seaweedfs --weed PATH``). The store's ``pyarrow``
filesystem is wrapped so every byte written (PUT), read (GET) and copied by the server
(CopyObject) is counted by the kind of key it belongs to (sort runs, bucket groups, the sorted
ids, staged and stored labels, ledger bases and charges, the message). Stages as in
``bench_labels_path.py``: ids upload (``set_ids`` of n shuffled 16-character ids), CSV labels
upload, one release at ε = 1 (run by a release worker here, its ledger cache emptied first: in the
bench the worker is another process). Issue 22: this is what the S3 server
moves in the s3pg bench; working files that never leave one request belong in its local scratch.
"""

from __future__ import annotations

import argparse
import collections
import io
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.fs as pafs

from labeldp.service.database import make_engine, make_session_factory
from labeldp.service.settings import Settings
from labeldp_tools.loopback_servers import MotoProcess, WeedProcess
from labels_party import ledger
from labels_party.context import LabelsContext
from labels_party.label_sets import LabelSetCreate, create_label_set, set_ids
from labels_party.privacy_domains import PrivacyDomainCreate, create_privacy_domain
from labels_party.release_worker import ReleaseWorker
from labels_party.releases import ReleaseCreate, create_release
from labels_party.store import Base, ReleaseRow
from labels_party.uploads import upload_labels

sys.path.insert(0, str(Path(__file__).parent))
from bench_labels_path import ids_chunk

CSV_SCHEMA = pa.schema({"id": pa.string()}).append(pa.field("label", pa.float64()))
KINDS = (
    ("sort runs", re.compile(r"/runs/|/run-\d")),
    ("bucket groups", re.compile(r"/group-\d")),
    ("sorted ids", re.compile(r"/ids-[0-9a-f]+\.arrow$|/ids\.arrow$")),
    ("staged labels", re.compile(r"/staged")),
    ("labels", re.compile(r"/labels/")),
    ("ledger bases", re.compile(r"ledger/.*/base-")),
    ("ledger charges", re.compile(r"ledger/.*/charge-")),
    ("message", re.compile(r"messages/")),
)


def kind_of(path: str) -> str:
    return next((name for name, pattern in KINDS if pattern.search(path)), "other")


class _Counted(io.RawIOBase):
    """A pyarrow file whose reads or writes add to ``counts[(direction, kind)]``."""

    def __init__(self, native: pa.NativeFile, counts: collections.Counter[tuple[str, str]], key: tuple[str, str]):
        super().__init__()
        self._native, self._counts, self._key = native, counts, key

    def readable(self) -> bool:
        return self._key[0] == "read"

    def writable(self) -> bool:
        return self._key[0] == "write"

    def seekable(self) -> bool:
        return self._native.seekable()

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self._native.seek(offset, whence))

    def tell(self) -> int:
        return int(self._native.tell())

    def size(self) -> int:
        return int(self._native.size())

    def read(self, size: int | None = -1) -> bytes:
        data = self._native.read(None if size is None or size < 0 else size)
        self._counts[self._key] += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self._native.write(data)
        self._counts[self._key] += n
        return n

    def close(self) -> None:
        if not self.closed:
            self._native.close()
        super().close()


class CountingHandler(pafs.FileSystemHandler):
    """``fs`` with every byte through it counted by direction and kind of key."""

    def __init__(self, fs: pafs.FileSystem) -> None:
        self.fs = fs
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def get_type_name(self) -> str:
        return "counting"

    def normalize_path(self, path: str) -> str:
        return path

    def get_file_info(self, paths: Any) -> list[pafs.FileInfo]:
        return self.fs.get_file_info(paths)

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return self.fs.get_file_info(selector)

    def create_dir(self, path: str, recursive: bool) -> None:
        self.fs.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.fs.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        self.fs.delete_dir_contents("", accept_root_dir=True)

    def delete_file(self, path: str) -> None:
        self.fs.delete_file(path)

    def move(self, src: str, dest: str) -> None:
        self.fs.move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        self.counts["copy", kind_of(dest)] += int(self.fs.get_file_info(src).size or 0)
        self.fs.copy_file(src, dest)

    def _wrap(self, native: pa.NativeFile, direction: str, path: str) -> pa.NativeFile:
        return pa.PythonFile(_Counted(native, self.counts, (direction, kind_of(path))), mode="r" if direction == "read"
                             else "w")

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self._wrap(self.fs.open_input_stream(path), "read", path)

    def open_input_file(self, path: str) -> pa.NativeFile:
        return self._wrap(self.fs.open_input_file(path), "read", path)

    def open_output_stream(self, path: str, metadata: Any = None) -> pa.NativeFile:
        return self._wrap(self.fs.open_output_stream(path, metadata=metadata), "write", path)

    def open_append_stream(self, path: str, metadata: Any = None) -> pa.NativeFile:
        return self._wrap(self.fs.open_append_stream(path, metadata=metadata), "write", path)


def _chunks(n: int, size: int = 1 << 20) -> Iterator[pa.Array]:
    for start in range(0, n, size):
        yield ids_chunk(start, min(n, start + size))


def run(n: int, s3_server: str, weed: str, workdir: Path) -> dict[str, collections.Counter[tuple[str, str]]]:
    server = MotoProcess() if s3_server == "moto" else WeedProcess(weed)
    try:
        engine = make_engine(f"sqlite:///{workdir / 'labels.db'}")
        Base.metadata.create_all(engine)
        settings = Settings(storage_url=server.server.url("traffic"), **{  # type: ignore[arg-type]
            f"storage_s3_{k}": v for k, v in (("endpoint", server.server.endpoint), ("region", "us-east-1"),
                                              ("access_key", server.server.options()["access_key"]),
                                              ("secret_key", server.server.options()["secret_key"]))})
        ctx = LabelsContext(make_session_factory(engine), workdir / "data", settings)
        handler = CountingHandler(ctx.store._fs)
        ctx.store._fs = pafs.PyFileSystem(handler)
        stages: dict[str, collections.Counter[tuple[str, str]]] = {}

        def stage(name: str, started: float) -> None:
            stages[name] = collections.Counter(handler.counts)
            handler.counts.clear()
            print(f"{name}: {time.perf_counter() - started:.1f} s", flush=True)

        domain = create_privacy_domain(ctx, PrivacyDomainCreate(name="d", id_source="d", epsilon=10), None).body["id"]
        ls = create_label_set(ctx, LabelSetCreate.model_validate(
            {"name": "s", "domain": {"low": 0, "high": 100}, "privacy_domain": domain}), None).body["id"]
        t = time.perf_counter()
        set_ids(ctx, ls, _chunks(n), None)
        stage("ids", t)
        csv = workdir / "labels.csv"
        with pa_csv.CSVWriter(csv, CSV_SCHEMA) as out:
            for k, ids in enumerate(_chunks(n)):
                out.write_table(pa.table({"id": ids, "label": pa.array([float(k % 100)] * len(ids))}))
        t = time.perf_counter()
        upload_labels(ctx, ls, csv, "text/csv", validate_only=False, claim=None)
        stage("csv", t)
        ledger.CACHE = ledger._Cache(ledger.CACHE.max_bytes)  # the bench's release worker is another process
        t = time.perf_counter()
        release_id = create_release(ctx, ls, ReleaseCreate.model_validate({"epsilon": 1}), None).body["id"]
        worker = ReleaseWorker(ctx)
        while True:
            worker.step()
            with ctx.sessions() as s:
                row = s.get(ReleaseRow, release_id)
                assert row is not None
                if row.status not in ("queued", "running"):
                    break
        if row.status == "failed":
            raise SystemExit(f"release failed: {row.error_code}")
        stage("release", t)
        return stages
    finally:
        server.stop()


def render(n: int, stages: dict[str, collections.Counter[tuple[str, str]]], command: str, note: str) -> str:
    kinds = [name for name, _ in KINDS] + ["other"]
    lines = [
        "# Bytes through the object store per stage (issue 22)", "",
        f"`{command}` — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. MB written (PUT) / read (GET) / copied by the "
        f"server (CopyObject), by kind of object, n = {n:,} ids (16 characters, shuffled; ids Parquet ≈ "
        f"{17 * n / 1e6:.0f} MB, their Arrow text {16 * n / 1e6:.0f} MB).", "",
        "| stage | kind | written MB | read MB | copied MB |", "|---|---|---:|---:|---:|",
    ]
    for name, counts in stages.items():
        for kind in kinds:
            w, r, c = (counts.get((d, kind), 0) / 1e6 for d in ("write", "read", "copy"))
            if w or r or c:
                lines.append(f"| {name} | {kind} | {w:.1f} | {r:.1f} | {c:.1f} |")
        w, r, c = (sum(v for (d, _), v in counts.items() if d == x) / 1e6 for x in ("write", "read", "copy"))
        lines.append(f"| {name} | **all** | **{w:.1f}** | **{r:.1f}** | **{c:.1f}** |")
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--s3-server", choices=("moto", "seaweedfs"), default="moto")
    parser.add_argument("--weed", default="weed")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="labeldp-traffic-") as tmp:
        stages = run(args.n, args.s3_server, args.weed, Path(tmp))
    flags = f" --s3-server {args.s3_server}" if args.s3_server != "moto" else ""
    flags += f" --out {args.out}" if args.out else ""
    text = render(args.n, stages, f"python bench/store_traffic.py --n {args.n}{flags}", args.note)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
