"""Engines for both parties' stores: SQLite by default, PostgreSQL where it scales.

SQLite gets WAL, a busy timeout and ``BEGIN IMMEDIATE`` on every transaction, so a
check-and-charge transaction holds the write lock from its first statement: two
concurrent releases can never both read the same remaining budget. On PostgreSQL
the conditional ``UPDATE … WHERE spent + charge <= budget`` is atomic by itself.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker


def make_engine(url: str) -> Engine:
    """An Engine for ``url``; creates the folder of a SQLite file if needed."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 60})
        _make_sqlite_transactions_immediate(engine)
        return engine
    return create_engine(url, pool_pre_ping=True)


def _make_sqlite_transactions_immediate(engine: Engine) -> None:
    # SQLAlchemy's documented recipe: let SQLAlchemy, not pysqlite, emit BEGIN.
    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn) -> None:  # type: ignore[no-untyped-def]
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)
