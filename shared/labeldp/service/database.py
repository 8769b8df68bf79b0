"""Engines for both parties' stores: SQLite by default, PostgreSQL where it scales.

SQLite gets WAL, a busy timeout (``LABELDP_SQLITE_BUSY_TIMEOUT_SECONDS``) and ``BEGIN
IMMEDIATE`` on every transaction, so a check-and-charge transaction holds the write lock
from its first statement: two concurrent releases can never both read the same remaining
budget. PostgreSQL connections are pinged before use, so a restarted server costs a
reconnect, not an error.

A database that is locked past the busy timeout, refusing connections or restarting is
*transient* (:func:`is_transient`): the APIs answer 503 ``database_unavailable`` with
``Retry-After``, the outbox backs off and carries on, and a service starting before its
database waits for it (:func:`open_database`).
"""

from __future__ import annotations

import logging
import random
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session, sessionmaker

from labeldp.service.settings import Settings

log = logging.getLogger("labeldp.service.database")
T = TypeVar("T")

_DEFAULTS = Settings.model_fields
DEFAULT_BUSY_TIMEOUT_SECONDS: float = _DEFAULTS["sqlite_busy_timeout_seconds"].default
DEFAULT_CONNECT_TIMEOUT_SECONDS: float = _DEFAULTS["database_connect_timeout_seconds"].default


def make_engine(
    url: str,
    busy_timeout_seconds: float = DEFAULT_BUSY_TIMEOUT_SECONDS,
    connect_timeout_seconds: float = DEFAULT_CONNECT_TIMEOUT_SECONDS,
) -> Engine:
    """An Engine for ``url``; creates the folder of a SQLite file if needed."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": busy_timeout_seconds})
        _make_sqlite_transactions_immediate(engine, busy_timeout_seconds)
        return engine
    connect_args = {"connect_timeout": max(1, round(connect_timeout_seconds))} if url.startswith("postgresql") else {}
    return create_engine(url, pool_pre_ping=True, connect_args=connect_args)


def engine_for(url: str, settings: Settings) -> Engine:
    """:func:`make_engine` with the timeouts from ``settings``."""
    return make_engine(url, settings.sqlite_busy_timeout_seconds, settings.database_connect_timeout_seconds)


def _make_sqlite_transactions_immediate(engine: Engine, busy_timeout_seconds: float) -> None:
    # SQLAlchemy's documented recipe: let SQLAlchemy, not pysqlite, emit BEGIN.
    busy_ms = int(busy_timeout_seconds * 1000)

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
        _set_wal(cursor, busy_timeout_seconds)
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _set_wal(cursor: sqlite3.Cursor, busy_timeout_seconds: float) -> None:
    """Switch a new SQLite file to WAL. Switching takes an exclusive lock and SQLite may answer
    "database is locked" at once, without its busy handler, while another process starting at the
    same moment (a replica, the outbox) holds the file; so wait here as the busy timeout would."""
    deadline = time.monotonic() + busy_timeout_seconds
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


def is_transient(exc: BaseException) -> bool:
    """A database error that waiting can cure: lock timeout, refused or dropped connection, restart."""
    if isinstance(exc, sa_exc.TimeoutError):  # connection pool exhausted
        return True
    if not isinstance(exc, sa_exc.DBAPIError):
        return False
    if exc.connection_invalidated or isinstance(exc, sa_exc.InterfaceError):
        return True
    if not isinstance(exc, sa_exc.OperationalError):
        return False
    if isinstance(exc.orig, sqlite3.Error):
        # SQLite raises OperationalError for schema and SQL mistakes too; only lock waits pass.
        return any(word in str(exc.orig).lower() for word in _SQLITE_TRANSIENT)
    return True  # PostgreSQL: connection failure, shutdown, serialization failure, deadlock, lock timeout


_SQLITE_TRANSIENT = ("locked", "busy", "unable to open database file", "disk i/o error")


def backoff_seconds(attempts: int, initial: float, cap: float, rng: random.Random) -> float:
    """Exponential backoff with 'equal jitter': between half and all of min(cap, initial·2^(n-1))."""
    base = min(cap, initial * (2 ** max(attempts - 1, 0)))
    return base / 2 + rng.random() * base / 2


def retry_transient(
    work: Callable[[], T],
    attempts: int = 3,
    initial_seconds: float = 0.05,
    cap_seconds: float = 1.0,
    rng: random.Random | None = None,
) -> T:
    """Run ``work``; on a transient database error try again (``attempts`` in all) after a jittered backoff.

    Only for work that is cheap and safe to repeat (a read, or one short transaction
    that rolled back as a whole).
    """
    rng = rng or random.Random()
    for attempt in range(1, attempts + 1):
        try:
            return work()
        except Exception as exc:
            if attempt == attempts or not is_transient(exc):
                raise
            time.sleep(backoff_seconds(attempt, initial_seconds, cap_seconds, rng))
    raise AssertionError("unreachable")


def ping(engine: Engine) -> None:
    """``SELECT 1`` through the pool; raises what the database raises."""
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))
