"""Each service's migrations build exactly its models, on SQLite and on PostgreSQL.

A model changed without `make migrations` turns these red: the upgraded database and
the models differ in Alembic's autogenerate comparison.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import Engine, MetaData, inspect, text

from features_party.store import Base as FeaturesBase
from labeldp.service.database import make_engine
from labeldp.service.migrations import head_revision, schema_differences, upgrade_schema
from labeldp_tools.migrations import SERVICES
from labels_party.store import Base as LabelsBase

MODELS: dict[str, MetaData] = {"labels": LabelsBase.metadata, "features": FeaturesBase.metadata}


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_upgrade_to_head_builds_exactly_the_models(database_url: str, service: str) -> None:
    engine = make_engine(database_url)
    try:
        upgrade_schema(engine, SERVICES[service])
        assert schema_differences(engine, MODELS[service]) == []
        assert set(MODELS[service].tables) <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_upgrade_twice_is_a_no_op(database_url: str, service: str) -> None:
    engine = make_engine(database_url)
    try:
        upgrade_schema(engine, SERVICES[service])
        upgrade_schema(database_url, SERVICES[service])  # a second starter, by URL
        assert schema_differences(engine, MODELS[service]) == []
    finally:
        engine.dispose()


def test_concurrent_starters_upgrade_once(database_url: str) -> None:
    """API replicas and the outbox start together: one upgrades, the others find the schema at head."""
    engines = [make_engine(database_url) for _ in range(4)]
    barrier = threading.Barrier(len(engines))
    errors: list[BaseException] = []

    def start(engine: Engine) -> None:
        barrier.wait()
        try:
            upgrade_schema(engine, SERVICES["labels"])
        except BaseException as exc:  # collected, asserted below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert errors == []
        with engines[0].connect() as connection:
            versions = connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
        assert versions == [head_revision(SERVICES["labels"])]
        assert schema_differences(engines[0], MODELS["labels"]) == []
    finally:
        for engine in engines:
            engine.dispose()


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_the_cli_upgrades_the_configured_database(database_url: str, service: str, tmp_path: Path) -> None:
    env = {**os.environ, f"LABELDP_{service.upper()}_DATABASE_URL": database_url}
    done = subprocess.run([sys.executable, "-m", "labeldp_tools.cli", "db", "upgrade", service], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            version = connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        assert version == head_revision(SERVICES[service])
        assert schema_differences(engine, MODELS[service]) == []
    finally:
        engine.dispose()
