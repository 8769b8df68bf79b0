"""The job workers' shared loop (labeldp.service.job_loop): survives errors, stops, wakes, sweeps."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable

import pytest
from sqlalchemy.exc import OperationalError

from labeldp.service.job_loop import JobRunner, run_jobs

log = logging.getLogger("labeldp.test.job_loop")


def _transient() -> OperationalError:
    return OperationalError("SELECT 1", {}, sqlite3.OperationalError("database is locked"))


def test_a_step_that_raises_is_logged_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    stop = threading.Event()
    raised = [_transient(), ValueError("a bug")]

    def step() -> bool:
        if raised:
            raise raised.pop(0)
        stop.set()
        return False

    with caplog.at_level(logging.INFO, logger=log.name):
        run_jobs(step, stop, poll_seconds=0, log=log, name="test worker", owner="w1")
    levels = [(r.levelno, r.getMessage()) for r in caplog.records if "retrying" in r.getMessage()]
    assert levels == [(logging.WARNING, "test worker: OperationalError; retrying"),
                      (logging.ERROR, "test worker: ValueError; retrying")]
    assert caplog.messages[-1] == "test worker w1 stopped"


def test_housekeeping_runs_when_idle_at_its_interval() -> None:
    stop, now, swept = threading.Event(), [0.0], []
    busy = iter([True, True])  # two jobs, then idle

    def step() -> bool:
        now[0] += 25.0
        if next(busy, False):
            return True
        if now[0] >= 300:
            stop.set()
        return False

    run_jobs(step, stop, poll_seconds=0, log=log, name="w", owner="1", housekeeping=lambda: swept.append(now[0]),
             housekeeping_seconds=60.0, clock=lambda: now[0])
    assert swept == [75.0, 150.0, 225.0, 300.0]  # never after a job; first when idle, then every >= 60 s


def _counting_step(calls: threading.Semaphore) -> Callable[[], bool]:
    def step() -> bool:
        calls.release()
        return False
    return step


def test_stop_ends_the_loop_within_its_wait() -> None:
    stop, calls = threading.Event(), threading.Semaphore(0)
    thread = threading.Thread(target=run_jobs, args=(_counting_step(calls), stop),
                              kwargs={"poll_seconds": 30.0, "log": log, "name": "w", "owner": "1"}, daemon=True)
    thread.start()
    assert calls.acquire(timeout=10)
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_wake_cuts_the_wait_short_and_shutdown_ends_the_runner() -> None:
    calls = threading.Semaphore(0)
    step = _counting_step(calls)
    runner = JobRunner(lambda stop, wake: run_jobs(step, stop, poll_seconds=30.0, log=log, name="w",
                                                   owner="1", wake=wake), enabled=True, thread_name="test-jobs")
    runner.start()
    thread = runner._thread
    assert thread is not None
    assert calls.acquire(timeout=10)
    runner.wake()
    assert calls.acquire(timeout=10)  # long before the 30 s poll
    runner.shutdown()
    assert not thread.is_alive()
    off = JobRunner(lambda stop, wake: None, enabled=False, thread_name="test-off")
    off.start()
    assert off._thread is None
