"""Which database errors are transient, and what the APIs answer for them (real SQLite locks, a
real PostgreSQL server and a closed port; the outage tests with running services are in
tests/integration/test_database_outage.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text
from sqlalchemy import exc as sa_exc
from tests.postgres_server import PostgresServer

from labeldp.service.database import is_transient, make_engine, retry_transient
from labeldp.service.health import mount_readiness
from labeldp.service.http_api import install_error_handlers
from labeldp_tools.local_stack import free_port


@pytest.fixture
def locked_sqlite(tmp_path: Path) -> Iterator[Engine]:
    """An engine with a 0.1 s busy timeout on a file whose write lock another connection holds."""
    path = tmp_path / "locked.db"
    engine = make_engine(f"sqlite:///{path}", busy_timeout_seconds=0.1)
    with engine.begin() as c:
        c.execute(text("CREATE TABLE t (x INTEGER)"))
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    yield engine
    holder.execute("ROLLBACK")
    holder.close()
    engine.dispose()


def _write(engine: Engine) -> None:
    with engine.begin() as c:
        c.execute(text("INSERT INTO t VALUES (1)"))


def _error(work: Callable[[], object]) -> BaseException:
    with pytest.raises(sa_exc.SQLAlchemyError) as info:
        work()
    return info.value


def test_a_lock_held_past_the_busy_timeout_is_transient(locked_sqlite: Engine) -> None:
    assert is_transient(_error(lambda: _write(locked_sqlite)))


def test_sql_and_constraint_errors_are_not_transient(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with engine.begin() as c:
        c.execute(text("CREATE TABLE t (x INTEGER PRIMARY KEY)"))
        c.execute(text("INSERT INTO t VALUES (1)"))

    def duplicate() -> None:
        with engine.begin() as c:
            c.execute(text("INSERT INTO t VALUES (1)"))

    def missing_table() -> None:
        with engine.begin() as c:
            c.execute(text("SELECT * FROM nowhere"))

    assert not is_transient(_error(duplicate))
    assert not is_transient(_error(missing_table))  # sqlite3 calls this an OperationalError too
    engine.dispose()


def test_a_refused_postgresql_connection_is_transient() -> None:
    engine = make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/postgres")
    assert is_transient(_error(lambda: engine.connect().close()))
    engine.dispose()


def test_retry_transient_retries_locks_only(locked_sqlite: Engine) -> None:
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            _write(locked_sqlite)
        return "done"

    assert retry_transient(flaky, attempts=3, initial_seconds=0.01) == "done"
    assert len(calls) == 3

    def wrong() -> None:
        calls.append(1)
        raise sa_exc.IntegrityError("INSERT", {}, Exception("duplicate"))

    calls.clear()
    with pytest.raises(sa_exc.IntegrityError):
        retry_transient(wrong, attempts=3, initial_seconds=0.01)
    assert len(calls) == 1


def _app(engine: Engine) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)
    mount_readiness(app, engine, timeout_seconds=2.0)

    @app.post("/write")
    def write() -> dict[str, str]:
        _write(engine)
        return {"status": "ok"}

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def test_a_locked_database_answers_503_with_retry_after(locked_sqlite: Engine) -> None:
    with TestClient(_app(locked_sqlite), raise_server_exceptions=False) as client:
        r = client.post("/write")
        assert r.status_code == 503
        assert r.json()["code"] == "database_unavailable"
        assert int(r.headers["retry-after"]) > 0
        assert "INSERT" not in r.text  # no statement or parameters leak out


def test_a_permanent_database_error_stays_500(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'empty.db'}")  # no table t
    with TestClient(_app(engine), raise_server_exceptions=False) as client:
        r = client.post("/write")
        assert r.status_code == 500 and r.json()["code"] == "internal_error"
    engine.dispose()


def test_readyz_follows_the_database_while_healthz_stays_up(postgres_server: PostgresServer) -> None:
    name = postgres_server.create_database()
    engine = make_engine(postgres_server.url(name), connect_timeout_seconds=2)
    try:
        with TestClient(_app(engine)) as client:
            assert client.get("/readyz").status_code == 200
            postgres_server.stop()
            try:
                r = client.get("/readyz")
                assert r.status_code == 503 and r.json()["code"] == "database_unavailable"
                assert int(r.headers["retry-after"]) > 0
                assert client.get("/healthz").status_code == 200
            finally:
                postgres_server.start()
            assert client.get("/readyz").status_code == 200  # a stale pooled connection is replaced
    finally:
        engine.dispose()
        postgres_server.drop_database(name)
