"""Each service's migrations build exactly its models, on SQLite and on PostgreSQL.

A model changed without `make migrations` turns these red: the upgraded database and
the models differ in Alembic's autogenerate comparison.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import Engine, MetaData, inspect, text

from features_party.store import Base as FeaturesBase
from labeldp.service.database import make_engine
from labeldp.service.migrations import (
    head_revision,
    package_dir,
    regenerate_initial,
    schema_differences,
    upgrade_schema,
)
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


def test_features_0002_keeps_trainings_written_at_0001(database_url: str) -> None:
    """A database deployed at the initial schema, with trainings in it, upgrades to the leases
    revision in place: every row survives, unowned and unleased; one an older process had
    started counts as claimed once."""
    engine = make_engine(database_url)
    package = SERVICES["features"]
    try:
        upgrade_schema(engine, package, "0001")
        with engine.begin() as connection:
            for training_id, status, started in (("trn_q", "queued", None), ("trn_r", "running", "2026-01-01")):
                connection.execute(
                    text(
                        "INSERT INTO trainings (training_id, release_id, feature_table, config, status, epoch, "
                        "epochs, history, created_at, started_at) VALUES (:id, 'rel', 'clicks', :config, :status, "
                        "2, 5, '[]', :created, :started)"
                    ),
                    {"id": training_id, "config": '{"epochs": 5}', "status": status,
                     "created": datetime(2026, 1, 1, tzinfo=UTC),
                     "started": datetime(2026, 1, 1, 0, 1, tzinfo=UTC) if started else None},
                )
        upgrade_schema(engine, package)
        assert schema_differences(engine, FeaturesBase.metadata) == []
        with engine.connect() as connection:
            rows = connection.execute(text(
                "SELECT training_id, status, epoch, epochs, config, owner, lease_expires_at, heartbeat_at, attempt, "
                "live FROM trainings ORDER BY training_id"
            )).all()
            version = connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        assert version == head_revision(package)
        by_id = {row.training_id: row for row in rows}
        assert set(by_id) == {"trn_q", "trn_r"}
        for row in rows:
            assert (row.epoch, row.epochs) == (2, 5)
            assert (json.loads(row.config) if isinstance(row.config, str) else row.config) == {"epochs": 5}
            assert (row.owner, row.lease_expires_at, row.heartbeat_at, row.live) == (None, None, None, None)
        assert (by_id["trn_q"].status, by_id["trn_q"].attempt) == ("queued", 0)
        assert (by_id["trn_r"].status, by_id["trn_r"].attempt) == ("running", 1)
    finally:
        engine.dispose()


def test_features_0003_keeps_releases_received_whole(database_url: str) -> None:
    """A release received as one body before shards upgrades to a complete release without shards,
    still read (by release_columns, and release_chunks for a streamed training) from its exact body."""
    from features_party import inbox
    from labeldp.schema import EpsilonPart, LabelRelease, LaplaceSpec, PrivacyAccounting, encode_payload
    from labeldp.schema import payload_digest as digest_of
    from labeldp.service.database import make_session_factory
    from labeldp.specs.base import LabelDomainSpec

    ids, labels = ["a", "b", "c"], [1.0, 2.0, 3.0]
    message = LabelRelease(
        release_id="rel_old", label_set_id="ls", created_at=datetime(2026, 1, 1, tzinfo=UTC),
        mechanism=LaplaceSpec(epsilon=1.0, domain=LabelDomainSpec(low=0, high=5), step=0.001, scale=5.0),
        accounting=PrivacyAccounting(parts=[EpsilonPart(name="r", epsilon_micro=1)], total_epsilon_micro=1),
        row_count=3, payload_digest=digest_of(ids, np.asarray(labels)), payload=encode_payload(ids, np.asarray(labels)),
    )
    engine = make_engine(database_url)
    package = SERVICES["features"]
    try:
        upgrade_schema(engine, package, "0002")
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO releases (release_id, label_set_id, mechanism_name, mechanism, accounting, "
                    "total_epsilon_micro, row_count, created_at, received_at, body, body_sha256) VALUES ('rel_old', "
                    "'ls', 'laplace', '{}', '{}', 1, 3, :at, :at, :body, 'sha')"
                ),
                {"at": datetime(2026, 1, 1, tzinfo=UTC), "body": message.model_dump_json().encode()},
            )
        upgrade_schema(engine, package)
        assert schema_differences(engine, FeaturesBase.metadata) == []
        with make_session_factory(engine)() as session:
            row = inbox.get_release(session, "rel_old")  # complete: readable and trainable
            assert (row.status, row.manifest, row.shard_count) == ("complete", None, 0)
            got_ids, got_labels = inbox.release_columns(row)
            assert got_ids.to_pylist() == ids and got_labels.tolist() == labels
            rows, chunks = inbox.release_chunks(row)  # as a streamed training reads it: one chunk
            assert rows == 3 and [(c.to_pylist(), v.tolist()) for c, v in chunks] == [(ids, labels)]
    finally:
        engine.dispose()


def test_features_0005_lets_a_release_receiving_at_0004_announce_its_completion(database_url: str) -> None:
    """A release whose shards were arriving at 0004 keeps every field; completed after the upgrade, its
    `release.completed` delivery is written in the same transaction, pending for the webhook."""
    from features_party import inbox
    from features_party.store import WEBHOOK_DELIVERIES
    from labeldp.service.database import make_session_factory
    from labeldp.service.webhooks import enqueue

    engine = make_engine(database_url)
    package = SERVICES["features"]
    try:
        upgrade_schema(engine, package, "0004")
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO releases (release_id, label_set_id, mechanism_name, mechanism, accounting, "
                    "total_epsilon_micro, row_count, created_at, received_at, status, manifest, shard_count, "
                    "signature, body_sha256) VALUES ('rel_mid', 'ls', 'laplace', '{}', '{}', 1, 0, :at, :at, "
                    "'receiving', :manifest, 0, 'ed25519;kid=k1;sig=x', 'sha')"
                ),
                {"at": datetime(2026, 1, 1, tzinfo=UTC), "manifest": b"{}"},
            )
        upgrade_schema(engine, package)
        assert schema_differences(engine, FeaturesBase.metadata) == []
        sessions = make_session_factory(engine)
        target = "http://127.0.0.1:9/hooks"
        answer = inbox.complete_release(sessions, "rel_mid", lambda s, e: enqueue(s, WEBHOOK_DELIVERIES, target, e))
        assert answer.status == "complete" and answer.event is not None
        with engine.connect() as connection:
            release = connection.execute(text(
                "SELECT status, signature, body_sha256 FROM releases WHERE release_id = 'rel_mid'"
            )).one()
            deliveries = connection.execute(text(
                "SELECT event_id, event_type, target, state, attempts, body FROM webhook_deliveries"
            )).all()
        assert tuple(release) == ("complete", "ed25519;kid=k1;sig=x", "sha")
        [row] = deliveries
        assert (row.event_id, row.event_type, row.target, row.state, row.attempts) == (
            answer.event["id"], "release.completed", target, "pending", 0)
        assert json.loads(row.body)["data"]["release_id"] == "rel_mid"
    finally:
        engine.dispose()


def test_features_0006_keeps_trainings_written_at_0004_without_a_table_id(database_url: str) -> None:
    """A training queued before trainings kept their table's ``ft_`` id upgrades in place with none
    (null: its table may have been replaced since) and is still described, name and all."""
    from features_party import trainings
    from labeldp.service.database import make_session_factory

    engine = make_engine(database_url)
    package = SERVICES["features"]
    try:
        upgrade_schema(engine, package, "0004")
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO trainings (training_id, release_id, feature_table, config, status, epoch, epochs, "
                    "history, created_at, attempt) VALUES ('trn_old', 'rel', 'clicks', :config, 'succeeded', 2, 2, "
                    "'[]', :created, 1)"
                ),
                {"config": '{"epochs": 2}', "created": datetime(2026, 1, 1, tzinfo=UTC)},
            )
        upgrade_schema(engine, package)
        assert schema_differences(engine, FeaturesBase.metadata) == []
        with make_session_factory(engine)() as session:
            body = trainings.training_status(session, trainings.get_training(session, "trn_old"), None)
        assert (body.feature_table, body.feature_table_id, body.status) == ("clicks", None, "succeeded")
    finally:
        engine.dispose()


def test_regenerating_the_initial_revision_is_refused_once_later_ones_exist() -> None:
    with pytest.raises(RuntimeError, match="revisions after the initial one"):
        regenerate_initial(SERVICES["features"])
    assert (package_dir(SERVICES["features"]) / "versions" / "0002_training_leases.py").is_file()


def test_labels_0005_gives_domains_written_at_0003_their_name_as_id_source(database_url: str) -> None:
    """A labels database with privacy domains from before id sources upgrades in place: each domain
    owns its own name as id source (names were unique), the audit log starts empty, and the
    uniqueness of id sources holds from then on."""
    from sqlalchemy.exc import IntegrityError

    engine = make_engine(database_url)
    package = SERVICES["labels"]
    try:
        upgrade_schema(engine, package, "0003")
        with engine.begin() as connection:
            for domain_id, name in (("pd_a", "conversions"), ("pd_b", "Orders")):
                connection.execute(
                    text(
                        "INSERT INTO privacy_domains (id, name, epsilon_budget_micro, delta_budget_units, n_ids, "
                        "id_segments, spent_version, n_buckets, created_at) VALUES (:id, :name, 2000000, 0, 7, 0, "
                        "3, 1024, :created)"
                    ),
                    {"id": domain_id, "name": name, "created": datetime(2026, 1, 1, tzinfo=UTC)},
                )
        upgrade_schema(engine, package)  # through 0005 to the head
        assert schema_differences(engine, LabelsBase.metadata) == []
        with engine.connect() as connection:
            rows = connection.execute(text(
                "SELECT id, name, id_source, epsilon_budget_micro, n_ids, spent_version FROM privacy_domains "
                "ORDER BY id"
            )).all()
            events = connection.execute(text("SELECT count(*) FROM audit_events")).scalar_one()
        assert [tuple(row) for row in rows] == [
            ("pd_a", "conversions", "conversions", 2_000_000, 7, 3), ("pd_b", "Orders", "Orders", 2_000_000, 7, 3)
        ]
        assert events == 0
        with pytest.raises(IntegrityError), engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO privacy_domains (id, name, id_source, epsilon_budget_micro, delta_budget_units, n_ids, "
                "id_segments, spent_version, n_buckets, created_at) VALUES ('pd_c', 'again', 'conversions', 1, 0, "
                "0, 0, 0, 1024, :created)"
            ), {"created": datetime(2026, 1, 2, tzinfo=UTC)})
    finally:
        engine.dispose()


def test_labels_0004_keeps_charged_releases_written_at_0003(database_url: str) -> None:
    """Releases charged before release jobs upgrade in place: every value survives, with no
    job owner, no lease, zero job attempts, no error and the message still in place."""
    engine = make_engine(database_url)
    package = SERVICES["labels"]
    created = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        upgrade_schema(engine, package, "0003")
        with engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO privacy_domains (id, name, epsilon_budget_micro, delta_budget_units, n_ids, "
                "id_segments, spent_version, created_at) VALUES ('pd_1', 'default', 10000000, 0, 2, 0, 1, :t)"
            ), {"t": created})
            connection.execute(text(
                "INSERT INTO label_sets (id, name, privacy_domain_id, label_type, domain_low, domain_high, cap_micro, "
                "spent_micro, n_ids, ids_ready, labeled, labels_version, created_at) VALUES ('ls_1', 's', 'pd_1', "
                "'real', 0, 10, 10000000, 1000000, 2, 1, 2, 1, :t)"
            ), {"t": created})
            for release_id, status in (("rel_p", "pending"), ("rel_d", "delivered")):
                connection.execute(text(
                    "INSERT INTO releases (id, label_set_id, mechanism, epsilon_micro, delta_units, accounting_json, "
                    "row_count, message_file, message_bytes, message_sha256, status, attempts, next_attempt_at, "
                    "lease_until, created_at) VALUES (:id, 'ls_1', 'laplace', 500000, 0, '{\"parts\": []}', 2, "
                    ":file, 123, :sha, :status, 1, 0, 0, :t)"
                ), {"id": release_id, "file": f"{release_id}.json", "sha": "ab" * 32, "status": status, "t": created})
        upgrade_schema(engine, package)
        assert schema_differences(engine, LabelsBase.metadata) == []
        with engine.connect() as connection:
            rows = connection.execute(text(
                "SELECT id, status, epsilon_micro, accounting_json, message_file, message_bytes, message_sha256, "
                "request_json, job_owner, job_lease_until, job_attempts, error_code, message_removed_at "
                "FROM releases ORDER BY id"
            )).all()
            version = connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        assert version == head_revision(package)
        with engine.connect() as connection:  # ids uploaded before 0009 are where they were: ids.arrow
            ids_object = connection.execute(text("SELECT ids_object FROM label_sets WHERE id = 'ls_1'")).scalar_one()
        assert ids_object is None
        assert [(r.id, r.status) for r in rows] == [("rel_d", "delivered"), ("rel_p", "pending")]
        for row in rows:
            assert (row.epsilon_micro, row.accounting_json, row.message_file, row.message_bytes) == (
                500000, '{"parts": []}', f"{row.id}.json", 123
            )
            assert row.message_sha256 == "ab" * 32
            assert (row.request_json, row.job_owner, row.job_lease_until, row.job_attempts) == (None, None, 0, 0)
            assert (row.error_code, row.message_removed_at) == (None, None)
        with engine.begin() as connection:  # a job: nothing of the charge known yet
            connection.execute(text(
                "INSERT INTO releases (id, label_set_id, mechanism, epsilon_micro, delta_units, row_count, status, "
                "attempts, next_attempt_at, lease_until, created_at) VALUES ('rel_q', 'ls_1', 'laplace', 1, 0, 2, "
                "'queued', 0, 0, 0, :t)"
            ), {"t": created})
    finally:
        engine.dispose()


def test_labels_0008_keeps_audit_events_written_at_0005(database_url: str) -> None:
    """The audit log written before events named a subject upgrades in place: every event and its
    key id kept, with a null subject; new events can be found by theirs."""
    engine = make_engine(database_url)
    package = SERVICES["labels"]
    created = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        upgrade_schema(engine, package, "0005")
        with engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO audit_events (id, action, privacy_domain_id, privacy_domain, key_id, scope, "
                "details_json, created_at) VALUES ('aud_1', 'privacy_domain.created', 'pd_1', 'conversions', "
                "'key_0123456789abcdef', 'admin', :details, :t)"
            ), {"t": created, "details": '{"epsilon_micro":1}'})
        upgrade_schema(engine, package)
        assert schema_differences(engine, LabelsBase.metadata) == []
        with engine.begin() as connection:
            old = connection.execute(text(
                "SELECT id, action, key_id, scope, details_json, subject_id FROM audit_events"
            )).one()
            connection.execute(text(
                "INSERT INTO audit_events (id, action, key_id, details_json, subject_id, created_at) VALUES "
                "('aud_2', 'release.queued', 'key_0123456789abcdef', '{}', 'rel_1', :t)"
            ), {"t": created})
            found = connection.execute(text("SELECT id FROM audit_events WHERE subject_id = 'rel_1'")).scalars().all()
        assert tuple(old) == (
            "aud_1", "privacy_domain.created", "key_0123456789abcdef", "admin", '{"epsilon_micro":1}', None
        )
        assert found == ["aud_2"]
    finally:
        engine.dispose()
