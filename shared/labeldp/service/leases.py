"""Worker leases shared by both parties' job workers: who a worker is, and the heartbeat thread.

A job row (a training, a release) names its ``owner`` and a lease end. The worker that
claimed it renews the lease every third of its length from a :class:`LeaseKeeper` thread;
the renewal is a conditional UPDATE the job's own module writes (its table, its states),
handed in as ``renew``. A worker that dies stops renewing, its lease runs out, and another
worker may take the job over or fail it; no one ever takes over a job whose lease is alive
(docs/architecture.md, "Training jobs", "Release jobs").
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable

log = logging.getLogger("labeldp.service.leases")


def new_owner() -> str:
    """A worker id that no other process, here or on another host, will ever use: host:pid:random."""
    return f"{socket.gethostname()[:80]}:{os.getpid()}:{secrets.token_hex(4)}"


class LeaseKeeper:
    """Calls ``renew`` every ``lease_seconds / 3`` in a thread; ``lost`` is set once ``renew`` says
    the job is no longer this owner's (or renewals failed until the lease ran out): stop the job."""

    def __init__(self, renew: Callable[[], bool], lease_seconds: float, name: str) -> None:
        self.renew, self.lease_seconds, self.name = renew, lease_seconds, name
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{name[-8:]}", daemon=True)

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        held_until = time.monotonic() + self.lease_seconds
        while not self._stop.wait(self.lease_seconds / 3):
            try:
                if not self.renew():
                    log.warning("%s: lease lost", self.name)
                    self.lost.set()
                    return
                held_until = time.monotonic() + self.lease_seconds
            except Exception as exc:  # a database outage: keep trying while the lease may still hold
                log.warning("%s: lease renewal failed (%s)", self.name, type(exc).__name__)
                if time.monotonic() >= held_until:
                    self.lost.set()
                    return
