"""One object store for every file a service keeps: a local folder or any S3-compatible bucket.

Replicas on several hosts share no POSIX folder, and object storage has no rename, hard link,
append or mmap. So an object is written once, complete, and never changed (content-addressed by
:meth:`ObjectStore.content_key` where writers could race for a name); the SQL catalogue is the
only mutable state and names an object only once it is complete (docs/architecture.md, "Storage").

Chosen by a URL (``LABELDP_STORAGE_URL``) over :mod:`pyarrow.fs`: a path or ``file://`` URL is a
local folder (temporary, fsync, rename); ``s3://bucket/prefix`` is any S3-compatible server, where
a write streams straight to its key as one multipart upload (10 MiB parts, no copy): readers see
it whole or not at all. pyarrow cannot abort an upload, so a failing write is held back while
under one part and past that completed and deleted at once: on S3 a large object's key must be
write-once (its content or a fresh id, named by the catalogue only after the write returned).

Keys are ``/``-separated names whose segments are not empty and do not start with ``.``
(temporaries live under ``.incoming/``). A missing key raises :class:`~labeldp.errors.NotFound`;
a failing backend :class:`~labeldp.errors.StorageError` (503).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.fs as pafs

from labeldp.errors import InvalidInput, NotFound, StorageError

log = logging.getLogger("labeldp.storage")

INCOMING = ".incoming"
"""Where unfinished local writes live: never listed, removable by a sweep."""

S3_PART_BYTES = 10 << 20
"""pyarrow's S3 multipart part size (fixed in its C++ code): a write is held in memory until it has
this much, so one that fails sooner sends nothing."""

S3_READ_AHEAD = 1 << 20
"""A random-access read on S3 shorter than this fetches this much from its offset in one request and
serves the reads that follow from it (one window per open object): a ledger base's 1024 batches of
≈ 35 KB were 2 GETs each. Decided in docs/decisions/0029-s3-read-ahead.md."""

S3_COPY_MAX_BYTES = 5 << 30
"""The largest object S3's CopyObject copies in one request (5 GiB); a larger one is streamed."""

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_COPY_CHUNK = 1 << 20


class ObjectStore:
    """Immutable objects under one root, addressed by key. Create with :meth:`from_url`."""

    def __init__(self, fs: pafs.FileSystem, root: str, url: str, *, local: bool, durable: bool = True) -> None:
        self._fs = fs
        self._root = root.rstrip("/")
        self._local = local
        self._durable = durable
        self.url = url
        self.options: dict[str, Any] = {}
        """What :meth:`from_url` was given besides the URL: another process reopens the store with both."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> ObjectStore:
        """A store for ``url``: a local path, ``file://…`` or ``s3://bucket[/prefix]``.

        S3 options: ``endpoint_override`` (``host:port`` or ``http[s]://host:port``),
        ``access_key``, ``secret_key``, ``session_token``, ``region``, ``scheme``,
        ``connect_timeout``, ``request_timeout``; ``None`` values are dropped, and what
        is left out comes from the AWS environment as pyarrow reads it.
        """
        parsed = urlparse(url)
        if parsed.scheme == "s3":
            if not parsed.netloc:
                raise InvalidInput("storage_url_invalid", "an s3:// storage URL needs a bucket: s3://bucket/prefix")
            s3_options = {k: v for k, v in options.items() if v not in (None, "")}
            endpoint = s3_options.get("endpoint_override")
            if isinstance(endpoint, str) and "://" in endpoint:
                scheme, _, host = endpoint.partition("://")
                s3_options["endpoint_override"] = host.rstrip("/")
                s3_options.setdefault("scheme", scheme)
            try:
                fs: pafs.FileSystem = pafs.S3FileSystem(**s3_options)
            except (OSError, pa.ArrowException) as exc:
                raise _unavailable("open the object store", exc) from exc
            root = f"{parsed.netloc}/{parsed.path.strip('/')}".rstrip("/")
            store = cls(fs, root, url, local=False)
            store.options = {k: v for k, v in options.items() if v not in (None, "")}
            return store
        if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and os.name == "nt"):
            path = unquote(parsed.path) if parsed.scheme == "file" else url
            folder = Path(path).absolute()
            folder.mkdir(parents=True, exist_ok=True)
            return cls(pafs.LocalFileSystem(), folder.as_posix(), url, local=True)
        raise InvalidInput("storage_url_invalid", f"unsupported storage URL scheme {parsed.scheme!r}: use a path or s3://")

    @classmethod
    def scratch(cls, folder: str | os.PathLike[str]) -> ObjectStore:
        """A store over a local folder for one process's working objects (sort runs, bucket groups,
        staged uploads): written without fsync, since nothing in it outlives the request that made
        it — a crash loses them with the request. Never for anything another process reads."""
        path = Path(folder).absolute()
        path.mkdir(parents=True, exist_ok=True)
        return cls(pafs.LocalFileSystem(), path.as_posix(), path.as_posix(), local=True, durable=False)

    # --- naming ---------------------------------------------------------------

    @staticmethod
    def content_key(prefix: str, data_or_digest: bytes | str) -> str:
        """``prefix/<sha256>``: the name of immutable content (bytes, or their hex SHA-256)."""
        if isinstance(data_or_digest, bytes | bytearray | memoryview):
            digest = hashlib.sha256(data_or_digest).hexdigest()
        else:
            digest = data_or_digest.lower()
            if not _SHA256_HEX.fullmatch(digest):
                raise ValueError("content_key takes bytes or a 64-character hex SHA-256 digest")
        key = f"{prefix.strip('/')}/{digest}" if prefix.strip("/") else digest
        _check_key(key)
        return key

    def _path(self, key: str) -> str:
        _check_key(key)
        return f"{self._root}/{key}"

    # --- writing --------------------------------------------------------------

    def put_bytes(self, key: str, data: bytes) -> str:
        """Write ``data`` as the object ``key`` (complete or not at all); returns ``key``."""
        with self.open_output_stream(key) as out:
            out.write(data)
        return key

    def put_file(self, key: str, local_path: str | os.PathLike[str]) -> str:
        """Upload the local file ``local_path`` as the object ``key``; returns ``key``."""
        try:
            source = open(local_path, "rb")  # noqa: SIM115 - closed by the with below
        except FileNotFoundError as exc:
            raise NotFound("file_not_found", f"no local file {os.fspath(local_path)!r} to store") from exc
        with source, self.open_output_stream(key) as out:
            for block in iter(lambda: source.read(_COPY_CHUNK), b""):
                out.write(block)
        return key

    @contextlib.contextmanager
    def open_output_stream(self, key: str) -> Iterator[Any]:
        """A writable binary stream for ``key``; the object appears only if the block ends cleanly.

        Local: the bytes go to a temporary under ``.incoming/`` renamed to ``key`` at the end
        (an exception or a crash leaves no object at ``key`` and the earlier one, if any).
        S3: a multipart upload straight to ``key`` (see the module's docstring): an exception
        leaves no object at ``key`` — the earlier one too is gone if more than one part was sent —
        and a crash an incomplete upload, which nothing shows.
        """
        path = self._path(key)
        if self._local:
            tmp = f"{self._root}/{INCOMING}/{secrets.token_hex(12)}"
            Path(tmp).parent.mkdir(parents=True, exist_ok=True)
            try:
                with open(tmp, "wb") as f:
                    yield f
                    if self._durable:
                        f.flush()
                        os.fsync(f.fileno())
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp, path)
            except OSError as exc:
                raise _unavailable(f"write object {key!r}", exc) from exc
            finally:
                Path(tmp).unlink(missing_ok=True)
            return
        upload = _Upload(self._fs, path, key)
        try:
            yield upload
        except BaseException:
            if upload.abandon():  # a cut-short object now sits under the key: remove it
                with contextlib.suppress(StorageError):
                    self.delete(key)
            raise
        upload.finish()

    def copy(self, source: str, key: str) -> str:
        """Copy the object ``source`` to ``key`` (complete or not at all); returns ``key``.

        On S3 up to :data:`S3_COPY_MAX_BYTES` the server copies it (CopyObject: no byte passes
        through this process); past that, and on a local folder, it is streamed a block at a time.
        """
        if not self._local and self.size(source) <= S3_COPY_MAX_BYTES:
            with _storage_errors(f"copy object {source!r}", source):
                self._fs.copy_file(self._path(source), self._path(key))
            return key
        with self.open_input_stream(source) as f, self.open_output_stream(key) as out:
            for block in iter(lambda: f.read(_COPY_CHUNK), b""):
                out.write(block)
        return key

    def local_path(self, key: str) -> Path:
        """Where the object ``key`` of a local-folder store lies (to upload it elsewhere with
        :meth:`put_file`); ValueError for an S3 store."""
        if not self._local:
            raise ValueError("only a local-folder store has local paths")
        return Path(self._path(key))

    # --- reading --------------------------------------------------------------

    def get_bytes(self, key: str) -> bytes:
        with self.open_input_stream(key) as f, _storage_errors(f"read object {key!r}", key):
            return bytes(f.read())

    def open_input_file(self, key: str) -> pa.NativeFile:
        """Random-access reader (``pyarrow.parquet``, ``pyarrow.ipc``, ``read_at``); close it after use.

        On S3 each read is a request: short reads are served from a window of :data:`S3_READ_AHEAD`
        bytes (:class:`_ReadAhead`), so many small reads of one object cost few requests.
        """
        with _storage_errors(f"open object {key!r}", key):
            native = self._fs.open_input_file(self._path(key))
        if self._local:
            return native
        return pa.PythonFile(_ReadAhead(native, S3_READ_AHEAD), mode="r")

    def open_input_stream(self, key: str) -> pa.NativeFile:
        """Sequential reader, the cheapest way to stream an object once; close it after use."""
        with _storage_errors(f"open object {key!r}", key):
            return self._fs.open_input_stream(self._path(key))

    def exists(self, key: str) -> bool:
        with _storage_errors(f"look up object {key!r}"):
            return self._fs.get_file_info(self._path(key)).type == pafs.FileType.File

    def size(self, key: str) -> int:
        with _storage_errors(f"look up object {key!r}"):
            info = self._fs.get_file_info(self._path(key))
        if info.type != pafs.FileType.File or info.size is None:
            raise NotFound("object_not_found", f"no stored object {key!r}")
        return int(info.size)

    def modified(self, key: str) -> float:
        """When ``key`` was written (POSIX seconds): sweeps leave young objects to their writers."""
        with _storage_errors(f"look up object {key!r}"):
            info = self._fs.get_file_info(self._path(key))
        if info.type != pafs.FileType.File or info.mtime is None:
            raise NotFound("object_not_found", f"no stored object {key!r}")
        return info.mtime.timestamp()

    def delete(self, key: str) -> None:
        """Remove ``key``; removing a key that is not there is not an error."""
        path = self._path(key)
        try:
            self._fs.delete_file(path)
        except FileNotFoundError:
            return
        except (OSError, pa.ArrowException) as exc:
            with contextlib.suppress(OSError, pa.ArrowException):
                if self._fs.get_file_info(path).type == pafs.FileType.NotFound:
                    return
            raise _unavailable(f"delete object {key!r}", exc) from exc

    def list(self, prefix: str = "") -> list[str]:
        """Every key under the folder ``prefix`` (all keys for ``""``), sorted."""
        prefix = prefix.strip("/")
        base = f"{self._root}/{prefix}" if prefix else self._root
        if prefix:
            _check_key(prefix)
        selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        with _storage_errors(f"list {prefix!r}"):
            infos = self._fs.get_file_info(selector)
        root = self._root + "/"
        keys = [
            info.path[len(root):] for info in infos
            if info.type == pafs.FileType.File and info.path.startswith(root)
        ]
        return sorted(k for k in keys if not k.startswith(INCOMING + "/"))

    def remove_unfinished(self, older_than_seconds: float) -> int:
        """Delete the temporaries of writes a crash interrupted (older than the given age); how many."""
        cutoff = time.time() - older_than_seconds
        selector = pafs.FileSelector(f"{self._root}/{INCOMING}", recursive=True, allow_not_found=True)
        with _storage_errors("list unfinished writes"):
            infos = self._fs.get_file_info(selector)
        removed = 0
        for info in infos:
            if info.type == pafs.FileType.File and info.mtime is not None and info.mtime.timestamp() < cutoff:
                with contextlib.suppress(FileNotFoundError):
                    self._fs.delete_file(info.path)
                    removed += 1
        return removed

    def __repr__(self) -> str:
        return f"ObjectStore({self.url!r})"


class _Upload(io.RawIOBase):
    """The stream :meth:`ObjectStore.open_output_stream` yields on S3: one multipart upload, opened lazily.

    The first :data:`S3_PART_BYTES` are kept here; only then is pyarrow's stream opened (which
    uploads a part each 10 MiB, in the background). So a write that ends below one part is one
    short upload at :meth:`finish`, and one abandoned below one part sent nothing at all.
    """

    def __init__(self, fs: pafs.FileSystem, path: str, key: str) -> None:
        super().__init__()
        self._fs, self._path, self._key = fs, path, key
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._stream: pa.NativeFile | None = None
        self._position = 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def write(self, data: Any) -> int:
        view = memoryview(data)
        view = (view if view.c_contiguous else memoryview(view.tobytes())).cast("B")
        n = view.nbytes
        if self._stream is None and self._held_bytes + n < S3_PART_BYTES:
            self._held.append(bytes(view))  # a copy (the caller may reuse its buffer), below one part
            self._held_bytes += n
        else:  # a part's worth: from here on, pyarrow's stream (a large write is never copied here)
            if self._stream is None:
                self._open()
            assert self._stream is not None
            with _storage_errors(f"write object {self._key!r}"):
                self._stream.write(view)
        self._position += n
        return n

    def _open(self) -> None:
        with _storage_errors(f"write object {self._key!r}"):
            self._stream = self._fs.open_output_stream(self._path)
            held, self._held, self._held_bytes = self._held, [], 0
            for block in held:
                self._stream.write(block)

    def finish(self) -> None:
        """Complete the upload: the object appears at its key, whole."""
        if self._stream is None:
            self._open()
        assert self._stream is not None
        with _storage_errors(f"write object {self._key!r}"):
            self._stream.close()
        super().close()

    def abandon(self) -> bool:
        """Give the write up; True if that left a (cut-short) object at the key, which the caller deletes.

        Below one part nothing was sent. Past it pyarrow can only complete the upload on
        close — unless a part failed, when closing fails and S3 keeps no object.
        """
        self._held.clear()
        stream, self._stream = self._stream, None
        super().close()
        if stream is None:
            return False
        try:
            stream.close()
        except (OSError, pa.ArrowException):
            return False
        return True

    def close(self) -> None:
        """Only :meth:`finish` or :meth:`abandon` end the upload (``ipc`` writers close their sink)."""


class _ReadAhead(io.RawIOBase):
    """A random-access object file whose reads shorter than ``window`` fetch ``window`` bytes from
    their offset at once and serve later reads inside them (one window kept: memory ≤ ``window``).
    A read that begins inside the window and runs past it fetches only the bytes after it (a
    scan of many small batches gets each byte once). Longer reads go straight through, uncopied.
    Wrapped in ``pa.PythonFile`` for pyarrow."""

    def __init__(self, native: pa.NativeFile, window: int) -> None:
        super().__init__()
        self._native, self._window = native, window
        self._size = native.size()
        self._position = 0
        self._start, self._buffer = 0, pa.py_buffer(b"")
        self._lock = threading.Lock()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def size(self) -> int:
        return int(self._size)

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._position, 2: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def read(self, size: int | None = -1) -> Any:
        with self._lock:
            at = self._position
            n = self._size - at if size is None or size < 0 else min(size, max(0, self._size - at))
            self._position = at + n
            if n == 0:
                return b""
            if self._start <= at and at + n <= self._start + len(self._buffer):
                return self._buffer.slice(at - self._start, n)
            if n >= self._window:
                return self._read(at, n)
            end, held = at + min(self._window, self._size - at), self._start + len(self._buffer)
            if self._start <= at < held:  # begins inside the window: fetch only what follows it
                kept = self._buffer.slice(at - self._start).to_pybytes()
                window = pa.py_buffer(kept + self._read(held, end - held).to_pybytes())
            else:
                window = self._read(at, end - at)
            self._start, self._buffer = at, window
            return self._buffer.slice(0, n)

    def _read(self, at: int, n: int) -> pa.Buffer:
        self._native.seek(at)
        return self._native.read_buffer(n)

    def readinto(self, buffer: Any) -> int:
        data = memoryview(self.read(len(buffer)))
        buffer[: data.nbytes] = data
        return int(data.nbytes)

    def close(self) -> None:
        if not self.closed:
            self._native.close()
            self._buffer = pa.py_buffer(b"")
        super().close()


def _check_key(key: str) -> None:
    parts = key.split("/")
    if not key or any(not p or p in (".", "..") or p.startswith(".") for p in parts):
        raise ValueError(f"invalid object key {key!r}: '/'-separated names, none empty or starting with '.'")


@contextlib.contextmanager
def _storage_errors(action: str, key: str | None = None) -> Iterator[None]:
    """Map a backend failure to NotFound (a missing key) or StorageError (503, retry later)."""
    try:
        yield
    except FileNotFoundError as exc:
        if key is None:
            raise _unavailable(action, exc) from exc
        raise NotFound("object_not_found", f"no stored object {key!r}") from exc
    except (OSError, pa.ArrowException) as exc:
        raise _unavailable(action, exc) from exc


def _unavailable(action: str, exc: BaseException) -> StorageError:
    """A 503 whose message names the action only: the backend's text (endpoint, bucket, paths) goes to the
    operator's log, not to API clients."""
    log.warning("object store: cannot %s (%s: %s)", action, type(exc).__name__, exc)
    return StorageError("storage_unavailable", f"the object store could not {action}; retry later")
