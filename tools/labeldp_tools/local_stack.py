"""Both parties and the sender as real processes on loopback, for the demo and the tests.

Each process gets its own log file, SQLite database and free port in one work
folder; keys and the advertiser's signing key
pair are fresh random values per stack. Both catalogues are migrated once, here, before the
first process starts (:meth:`LocalStack.migrate`): the labels API, the outbox and the release
workers share one SQLite file, and each upgrading it at start made the others wait on its
``BEGIN IMMEDIATE`` (a loaded machine saw the labels API unhealthy after 60 s).
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx

from labeldp.signing import generate_keypair


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalStack:
    """labels API + outbox + features API (and, by name, ``release-worker…`` processes), started and
    stopped as subprocesses."""

    def __init__(
        self, workdir: Path, extra_env: dict[str, str] | None = None, features_tls: ssl.SSLContext | None = None
    ) -> None:
        """``features_tls``: the features party serves HTTPS (its ``LABELDP_SERVER_TLS_*`` in
        ``extra_env``) and this stack's own clients reach it with that context."""
        self.features_tls = features_tls
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(exist_ok=True)
        self.labels_port = free_port()
        self.features_port = free_port()
        self.labels_key = secrets.token_hex(16)
        self.features_key = secrets.token_hex(16)
        self.transport_key = secrets.token_hex(16)  # the outbox's bearer key at the inbox
        # a fresh advertiser key pair: the outbox signs with the private key, the inbox trusts the public one
        self.signing_key, self.public_key = generate_keypair()
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._log_files: dict[str, object] = {}
        self._migrated: set[str] = set()
        self.env = {
            **os.environ,
            "LABELDP_LABELS_DATABASE_URL": f"sqlite:///{self.workdir / 'labels.db'}",
            "LABELDP_FEATURES_DATABASE_URL": f"sqlite:///{self.workdir / 'features.db'}",
            "LABELDP_FEATURES_DATA_DIR": str(self.workdir / "features-data"),
            "LABELDP_LABELS_DATA_DIR": str(self.workdir / "labels-data"),
            "LABELDP_LABELS_API_KEY": f"admin+release:{self.labels_key}",  # the demo creates a domain
            "LABELDP_FEATURES_API_KEY": self.features_key,
            "LABELDP_INBOX_TRANSPORT_KEY": self.transport_key,
            "LABELDP_SIGNING_KEY": self.signing_key,
            "LABELDP_SIGNING_PUBLIC_KEYS": self.public_key,
            "LABELDP_FEATURES_URL": self.features_url,
            "LABELDP_OUTBOX_POLL_SECONDS": "0.2",
            "LABELDP_OUTBOX_INITIAL_BACKOFF_SECONDS": "0.2",
            "LABELDP_OUTBOX_MAX_BACKOFF_SECONDS": "2",
            "LABELDP_RELEASE_POLL_SECONDS": "0.2",
            **(extra_env or {}),
        }

    @property
    def labels_url(self) -> str:
        return f"http://127.0.0.1:{self.labels_port}"

    @property
    def features_url(self) -> str:
        scheme = "https" if self.features_tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.features_port}"

    def log_path(self, name: str) -> Path:
        return self.workdir / "logs" / f"{name}.log"

    def _command(self, name: str) -> list[str]:
        cli = [sys.executable, "-m", "labeldp_tools.cli"]
        if name == "labels":
            return [*cli, "serve", "labels", "--port", str(self.labels_port)]
        if name == "features":
            return [*cli, "serve", "features", "--port", str(self.features_port)]
        if name == "outbox":
            return [*cli, "outbox"]
        if name.startswith("release-worker"):  # release-worker, release-worker-2, …: several may run
            return [*cli, "worker", "labels"]
        raise ValueError(name)

    def migrate(self, *services: str) -> None:
        """Upgrade the catalogues of ``services`` (default both) to head, once per stack: the processes
        then find their schema at head and start without waiting on each other's upgrade."""
        from labeldp.service.migrations import upgrade_schema
        from labeldp_tools.migrations import SERVICES

        for service in services or ("labels", "features"):
            if service not in self._migrated:
                upgrade_schema(self.env[f"LABELDP_{service.upper()}_DATABASE_URL"], SERVICES[service])
                self._migrated.add(service)

    def start(self, *names: str, timeout: float = 60.0, wait: bool = True) -> None:
        """Start the processes (default: labels, outbox, features), their catalogues migrated first; with
        ``wait``, until the APIs answer ``/healthz`` (without: call :meth:`wait_healthy`, e.g. after
        starting another stack too)."""
        self.migrate(*sorted({"features" if n == "features" else "labels" for n in names or ("labels", "features")}))
        for name in names or ("labels", "outbox", "features"):
            log = open(self.log_path(name), "ab")  # noqa: SIM115 -- open while the process runs; closed on stop
            self._log_files[name] = log
            self.processes[name] = subprocess.Popen(
                self._command(name), env=self._env_of(name), stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir
            )
        for name in names or ("labels", "outbox", "features"):
            if wait and name in ("labels", "features"):
                self.wait_healthy(name, timeout)

    def _env_of(self, name: str) -> dict[str, str]:
        """The stack's environment; the server's TLS settings only for the features API (the
        inbox's mutual TLS), so the labels API stays plain HTTP on loopback."""
        if name == "features":
            return self.env
        return {k: v for k, v in self.env.items() if not k.startswith("LABELDP_SERVER_TLS_")}

    def wait_healthy(self, name: str, timeout: float) -> None:
        url = (self.labels_url if name == "labels" else self.features_url) + "/healthz"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = self.processes[name]
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}; see {self.log_path(name)}")
            try:
                verify = self.features_tls if name == "features" and self.features_tls is not None else True
                if httpx.get(url, timeout=1.0, verify=verify).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{name} did not become healthy in {timeout}s; see {self.log_path(name)}")

    def stop_process(self, name: str, timeout: float = 15.0) -> None:
        proc = self.processes.pop(name, None)
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log = self._log_files.pop(name, None)
        if log is not None:
            log.close()  # type: ignore[attr-defined]

    def kill(self, name: str) -> None:
        """SIGKILL, as a crash would: no shutdown code runs (the exactly-once tests use it)."""
        proc = self.processes.pop(name, None)
        if proc is not None:
            proc.kill()
            proc.wait()
        log = self._log_files.pop(name, None)
        if log is not None:
            log.close()  # type: ignore[attr-defined]

    def stop(self) -> None:
        for name in list(self.processes):
            self.stop_process(name)

    def labels_client(self, timeout: float = 120.0) -> httpx.Client:
        return httpx.Client(
            base_url=self.labels_url, headers={"authorization": f"Bearer {self.labels_key}"}, timeout=timeout
        )

    def features_client(self, timeout: float = 120.0) -> httpx.Client:
        return httpx.Client(
            base_url=self.features_url, headers={"authorization": f"Bearer {self.features_key}"}, timeout=timeout,
            verify=self.features_tls if self.features_tls is not None else True,
        )

    def __enter__(self) -> LocalStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
