"""The job workers' polling loop and the in-process thread that runs it (both parties).

:func:`run_jobs` is the loop of a release worker, a training worker and a webhook sender
(:mod:`labeldp.service.webhooks`, one delivery a step, its hourly prune inside it): one job per ``step``
(False when none was queued), when idle a ``housekeeping`` call every ``housekeeping_seconds``,
then a wait of ``poll_seconds`` on ``wake`` (this process queued a job) or ``stop``. An exception
is logged — WARNING when :func:`labeldp.service.database.is_transient` (the database is away),
ERROR otherwise — and the loop goes on: a worker never exits before ``stop``.
:class:`JobRunner` is an API's in-process worker: that loop in a daemon thread the app's lifespan
starts and shuts down.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from labeldp.service.database import is_transient

HOUSEKEEPING_SECONDS = 60.0  # how often an idle worker sweeps (expired messages, orphaned objects, checkpoints)


def run_jobs(
    step: Callable[[], bool],
    stop: threading.Event,
    *,
    poll_seconds: float,
    log: logging.Logger,
    name: str,
    owner: str,
    wake: threading.Event | None = None,
    housekeeping: Callable[[], object] | None = None,
    housekeeping_seconds: float = HOUSEKEEPING_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Run ``step`` until ``stop``; ``name`` ("release worker") and ``owner`` name it in the log."""
    log.info("%s %s started", name, owner)
    next_housekeeping = 0.0
    while not stop.is_set():
        try:
            if step():
                continue
            if housekeeping is not None and clock() >= next_housekeeping:
                next_housekeeping = clock() + housekeeping_seconds
                housekeeping()
        except Exception as exc:  # a database outage: wait and try again, never exit
            level = logging.WARNING if is_transient(exc) else logging.ERROR
            log.log(level, "%s: %s; retrying", name, type(exc).__name__)
        if wake is not None:
            wake.wait(poll_seconds)
            wake.clear()
        else:
            stop.wait(poll_seconds)
    log.info("%s %s stopped", name, owner)


class JobRunner:
    """An API's in-process worker: ``target(stop, wake)`` in a daemon thread; with ``enabled``
    False it runs nothing and the jobs the API queues wait for worker processes."""

    def __init__(
        self,
        target: Callable[[threading.Event, threading.Event], None],
        *,
        enabled: bool,
        thread_name: str,
        wake: threading.Event | None = None,
    ) -> None:
        self.enabled = enabled
        self._target, self._thread_name = target, thread_name
        self._stop = threading.Event()
        self._wake = wake if wake is not None else threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if not self.enabled or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._target, args=(self._stop, self._wake), name=self._thread_name, daemon=True
        )
        self._thread.start()

    def wake(self) -> None:
        """A job was queued by this process: look now rather than at the next poll."""
        self._wake.set()

    def shutdown(self, wait: bool = True, timeout: float | None = None) -> None:
        """Stop after the running job (``wait``: until the thread has ended, or ``timeout`` s)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        self._wake.set()
        if wait:
            thread.join(timeout)
