"""Fixtures for the whole suite: markers, and the databases the ledger tests run on.

``database_url`` gives each test a fresh, empty database on SQLite *and* on a real
PostgreSQL server that this session starts by itself (tests/postgres_server.py);
``s3_server`` a real S3-compatible server (moto's) on loopback (tests/s3_server.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.postgres_server import PostgresServer
from tests.s3_server import S3Server, create_bucket


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A marker set in a conftest's module namespace does not reach the tests; set it here
    # from the folder, so `-m "not integration"` really leaves the service processes out.
    for item in items:
        if "tests/integration/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.integration)
        callspec = getattr(item, "callspec", None)
        on_postgres = callspec is not None and callspec.params.get("database_url") == "postgresql"
        if on_postgres or "postgres_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.remove()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server on a free loopback port with one bucket; tests take fresh prefixes in it."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        create_bucket(host, port, "labeldp-test")
        yield S3Server(host, port, "labeldp-test")
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The SQLAlchemy URL of a fresh, empty database (SQLite file, or a new PostgreSQL database)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'test.db'}"
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    name = server.create_database()
    try:
        yield server.url(name)
    finally:
        server.drop_database(name)
