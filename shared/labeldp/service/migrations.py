"""Schema migrations of both services with Alembic, driven from code: no alembic.ini at run time.

Each service ships its migration environment inside its package
(``labels_party/migrations``, ``features_party/migrations``: ``env.py`` and
``versions/``), so an installed wheel or container can upgrade its own database.
Both APIs and the outbox call :func:`upgrade_schema` at start instead of
``create_all``; ``labeldp db upgrade {labels,features}`` does the same by hand.

Concurrent starters are safe: on SQLite the upgrade runs in one ``BEGIN IMMEDIATE``
transaction (the engine's begin hook), on PostgreSQL under a transaction-scoped
advisory lock, so the second starter finds the schema at head and does nothing.

``python -m labeldp_tools.migrations regenerate`` (``make migrations``) rewrites each
service's single initial revision from its current models. That is right only while no
database is deployed; after the first deployment, add revisions instead (it refuses once a
service has any: the features party's ``0002`` adds the training leases).
"""

from __future__ import annotations

import importlib.util
import logging
import random
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, MetaData, text

from labeldp.service.database import backoff_seconds, engine_for, is_transient, make_engine
from labeldp.service.settings import Settings

log = logging.getLogger(__name__)

INITIAL_REVISION = "0001"


def package_dir(migrations_package: str) -> Path:
    """The folder of a migrations package, found without importing its ``env.py``."""
    spec = importlib.util.find_spec(migrations_package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"no migrations package {migrations_package!r}")
    return Path(next(iter(spec.submodule_search_locations)))


def alembic_config(migrations_package: str, connection: Connection | None = None) -> Config:
    """An Alembic Config for one service; ``connection`` is the one ``env.py`` migrates."""
    config = Config()
    config.set_main_option("script_location", str(package_dir(migrations_package)))
    config.attributes["connection"] = connection
    return config


def head_revision(migrations_package: str) -> str:
    """The newest revision of a service's migrations (what :func:`upgrade_schema` brings a database to)."""
    head = ScriptDirectory.from_config(alembic_config(migrations_package)).get_current_head()
    if head is None:
        raise ValueError(f"{migrations_package} has no revisions")
    return head


def _lock_key(migrations_package: str) -> int:
    return zlib.crc32(migrations_package.encode())


_IN_PROCESS = threading.Lock()
"""Alembic's command API installs its migration context in module globals (``alembic.context``):
two upgrades in threads of one process break each other (seen: ``KeyError: 'script'``, then a
table created twice), so a process runs one upgrade at a time."""


def upgrade_schema(engine_or_url: Engine | str, migrations_package: str, revision: str = "head") -> None:
    """Bring the database to ``revision`` (default: head) in one transaction; idempotent."""
    engine = make_engine(engine_or_url) if isinstance(engine_or_url, str) else engine_or_url
    try:
        with _IN_PROCESS:
            _upgrade(engine, migrations_package, revision)
    finally:
        if isinstance(engine_or_url, str):
            engine.dispose()


def _upgrade(engine: Engine, migrations_package: str, revision: str) -> None:
    """One upgrade in one transaction, under the database's own lock where it has one."""
    with engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:  # batch mode rebuilds a referenced table: foreign keys off, checked after (Alembic's advice)
            _sqlite_pragma(connection, "PRAGMA foreign_keys=OFF")
        try:
            with connection.begin():
                if connection.dialect.name == "postgresql":
                    connection.execute(
                        text("SELECT pg_advisory_xact_lock(:key)"), {"key": _lock_key(migrations_package)}
                    )
                command.upgrade(alembic_config(migrations_package, connection), revision)
                if sqlite and connection.exec_driver_sql("PRAGMA foreign_key_check").first() is not None:
                    raise RuntimeError(f"{migrations_package}: the upgrade left rows with broken foreign keys")
        finally:
            if sqlite:
                _sqlite_pragma(connection, "PRAGMA foreign_keys=ON")


def _sqlite_pragma(connection: Connection, pragma: str) -> None:
    """A PRAGMA outside any transaction (foreign_keys is a no-op inside one): on the raw connection,
    which the engine keeps in autocommit (labeldp.service.database)."""
    raw = connection.connection.driver_connection
    assert raw is not None
    raw.execute(pragma)


def schema_differences(engine: Engine, metadata: MetaData) -> list[Any]:
    """What Alembic's autogenerate finds between the database and the models (empty: in step)."""
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts=_compare_options(connection))
        return list(compare_metadata(context, metadata))


def _compare_options(connection: Connection) -> dict[str, Any]:
    return {"compare_type": True, "render_as_batch": connection.dialect.name == "sqlite"}


def run_migrations(target_metadata: MetaData) -> None:
    """The body of every service's ``env.py``: migrate the connection the Config carries."""
    from alembic import context

    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("run migrations through labeldp.service.migrations (upgrade_schema or labeldp db upgrade)")
    context.configure(connection=connection, target_metadata=target_metadata, **_compare_options(connection))
    with context.begin_transaction():
        context.run_migrations()


def regenerate_initial(migrations_package: str) -> Path:
    """Rewrite the package's single initial revision from the current models (make migrations)."""
    versions = package_dir(migrations_package) / "versions"
    versions.mkdir(exist_ok=True)
    later = sorted(p.name for p in versions.glob("*.py") if p.name != "__init__.py" and not p.name.startswith(
        f"{INITIAL_REVISION}_"))
    if later:
        # Deployed databases stand at those revisions: rewriting the first would strand them.
        raise RuntimeError(f"{migrations_package} has revisions after the initial one ({', '.join(later)}): "
                           "add a revision instead of regenerating")
    for old in versions.glob("*.py"):
        if old.name != "__init__.py":
            old.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{Path(tmp) / 'empty.db'}")
        try:
            with engine.begin() as connection:
                command.revision(
                    alembic_config(migrations_package, connection),
                    message="initial schema",
                    autogenerate=True,
                    rev_id=INITIAL_REVISION,
                )
        finally:
            engine.dispose()
    (created,) = [p for p in versions.glob("*.py") if p.name != "__init__.py"]
    return created


def open_database(
    url: str,
    migrations_package: str,
    settings: Settings,
    wait_seconds: float | None = None,
    stop: threading.Event | None = None,
) -> Engine:
    """An engine on ``url`` with its schema upgraded to head, waiting for a database that is not up yet.

    Transient errors are retried with backoff for ``wait_seconds`` (default: the
    setting ``database_start_timeout_seconds``; ``float('inf')`` waits until ``stop``),
    then re-raised. Other errors are raised at once.
    """
    engine = engine_for(url, settings)
    limit = settings.database_start_timeout_seconds if wait_seconds is None else wait_seconds
    deadline = time.monotonic() + limit
    rng = random.Random()
    attempt = 0
    while True:
        attempt += 1
        try:
            upgrade_schema(engine, migrations_package)
            return engine
        except Exception as exc:
            wait = backoff_seconds(attempt, 0.5, 10.0, rng)
            if not is_transient(exc) or time.monotonic() + wait > deadline or (stop is not None and stop.is_set()):
                engine.dispose()
                raise
            # The type only: a driver's message may quote statement parameters.
            log.warning("database unavailable at start (%s); retrying in %.1f s", type(exc).__name__, wait)
            if stop is not None:
                stop.wait(wait)
            else:
                time.sleep(wait)
