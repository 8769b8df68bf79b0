"""Schema migrations of both services with Alembic, driven from code: no alembic.ini at run time.

Each service ships its migration environment inside its package
(``labels_party/migrations``, ``features_party/migrations``: ``env.py`` and
``versions/``), so an installed wheel or container can upgrade its own database.
Both APIs and the outbox call :func:`upgrade_schema` at start instead of
``create_all``; ``labeldp db upgrade {labels,features}`` does the same by hand.

Concurrent starters are safe: on SQLite the upgrade runs in one ``BEGIN IMMEDIATE``
transaction (the engine's begin hook), on PostgreSQL under a transaction-scoped
advisory lock, so the second starter finds the schema at head and does nothing.

``python -m labeldp.migrations regenerate`` (``make migrations``) rewrites each
service's single initial revision from its current models. That is right only while no
database is deployed; after the first deployment, add revisions instead.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import zlib
from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, MetaData, text

SERVICES = {"labels": "labels_party.migrations", "features": "features_party.migrations"}
"""Each service's migrations package, by the name the CLI uses."""

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


def upgrade_schema(engine_or_url: Engine | str, migrations_package: str, revision: str = "head") -> None:
    """Bring the database to ``revision`` (default: head) in one transaction; idempotent."""
    from labeldp.database import make_engine

    engine = make_engine(engine_or_url) if isinstance(engine_or_url, str) else engine_or_url
    try:
        with engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _lock_key(migrations_package)})
            command.upgrade(alembic_config(migrations_package, connection), revision)
    finally:
        if isinstance(engine_or_url, str):
            engine.dispose()


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
        raise RuntimeError("run migrations through labeldp.migrations (upgrade_schema or labeldp db upgrade)")
    context.configure(connection=connection, target_metadata=target_metadata, **_compare_options(connection))
    with context.begin_transaction():
        context.run_migrations()


def regenerate_initial(migrations_package: str) -> Path:
    """Rewrite the package's single initial revision from the current models (make migrations)."""
    versions = package_dir(migrations_package) / "versions"
    versions.mkdir(exist_ok=True)
    for old in versions.glob("*.py"):
        if old.name != "__init__.py":
            old.unlink()
    from labeldp.database import make_engine

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


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labeldp.migrations", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("regenerate", help="rewrite both services' initial revisions from their models")
    parser.parse_args(argv)
    for name, package in SERVICES.items():
        print(f"{name}: {regenerate_initial(package)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
