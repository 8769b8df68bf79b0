"""The features party's database: feature-table metadata, releases, trainings, models.

Its own ``DeclarativeBase`` so the two parties' schemas never share metadata.
Bulky data lives elsewhere: feature tables as Parquet and models as torch files
under ``features_data_dir``, a release's message shards as objects of the store. A release
keeps its exact signed manifest here (at most ``inbox_max_manifest_bytes``, 1 MiB: no value of
this database is larger), because those bytes are what was authenticated and deduplicated,
and one row per shard received, naming its object.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Engine, Float, ForeignKey, Integer, LargeBinary, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from labeldp.service.idempotency import idempotency_table
from labeldp.service.timestamps import utcnow
from labeldp.service.webhooks import webhook_deliveries_table


class Base(DeclarativeBase):
    pass


RELEASE_RECEIVING, RELEASE_COMPLETE = "receiving", "complete"
"""A received release's ``status`` (features_party.inbox): shards arriving, or all held."""

QUEUED, RUNNING, SUCCEEDED, FAILED = "queued", "running", "succeeded", "failed"
CANCELLING, CANCELLED = "cancelling", "cancelled"  # cancelling: running, asked to stop at the next batch
TRAINING_STATUSES = (QUEUED, RUNNING, CANCELLING, SUCCEEDED, FAILED, CANCELLED)
"""A training's ``status`` (features_party.training_run runs it, features_party.leases owns it)."""


IDEMPOTENCY_KEYS = idempotency_table(Base.metadata)
"""Idempotency-Key claims and stored answers of the mutating POSTs (feature tables, trainings)."""

WEBHOOK_DELIVERIES = webhook_deliveries_table(Base.metadata)
"""The inbox webhook's deliveries (labeldp.service.webhooks): written with the inbox event they carry."""


class FeatureTable(Base):
    __tablename__ = "feature_tables"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    id_column: Mapped[str] = mapped_column(String(256))
    n_rows: Mapped[int] = mapped_column(Integer)
    columns: Mapped[list[dict[str, Any]]] = mapped_column(JSON)  # [{"name","kind"}], features only
    path: Mapped[str] = mapped_column(String(512))  # relative to features_data_dir
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Release(Base):
    __tablename__ = "releases"

    release_id: Mapped[str] = mapped_column(String(256), primary_key=True)
    label_set_id: Mapped[str] = mapped_column(String(256))
    # The sender's hint only (any string the message carries); a training binds the table.
    feature_table: Mapped[str | None] = mapped_column(Text, nullable=True)
    mechanism_name: Mapped[str] = mapped_column(String(64))
    mechanism: Mapped[dict[str, Any]] = mapped_column(JSON)
    prior: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    accounting: Mapped[dict[str, Any]] = mapped_column(JSON)
    total_epsilon_micro: Mapped[int] = mapped_column(BigInteger)
    row_count: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # receiving: its manifest is held, shards are arriving (not readable yet); complete: every shard held.
    status: Mapped[str] = mapped_column(String(16), default=RELEASE_COMPLETE, server_default=RELEASE_COMPLETE)
    # The exact signed manifest (labeldp.message_shards), at most 1 MiB; null for a release received
    # whole before revision 0003, whose exact single-body message is ``body``.
    manifest: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True, deferred=True)
    shard_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The manifest's signature header as received (``ed25519;kid=…;sig=…``): with ``manifest``,
    # proof anyone holding the advertiser's public key can check of what was sent (revision 0004).
    signature: Mapped[str | None] = mapped_column(String(300), nullable=True)
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    body: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True, deferred=True)  # before 0003 only
    body_sha256: Mapped[str] = mapped_column(String(64))  # of the manifest (of the body before 0003)


class ReleaseShard(Base):
    """One verified shard of a release's message, stored as the object ``object_key``."""

    __tablename__ = "release_shards"

    release_id: Mapped[str] = mapped_column(String(256), ForeignKey("releases.release_id"), primary_key=True)
    shard_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    object_key: Mapped[str] = mapped_column(String(512))
    sha256: Mapped[str] = mapped_column(String(64))
    rows: Mapped[int] = mapped_column(BigInteger)
    size: Mapped[int] = mapped_column(BigInteger)
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Training(Base):
    __tablename__ = "trainings"

    training_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    release_id: Mapped[str] = mapped_column(String(256), index=True)
    feature_table: Mapped[str] = mapped_column(String(64))
    # the ft_ id of the content it was queued on (null: queued before ids were kept, revision 0006)
    feature_table_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), index=True)  # TRAINING_STATUSES
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    epochs: Mapped[int] = mapped_column(Integer)
    history: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    model_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    device: Mapped[str | None] = mapped_column(String(16), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # The job's owner and lease (features_party.leases): the worker running it ("host:pid:random"),
    # until when its claim holds unless renewed, its last renewal, and how many claims it has had.
    owner: Mapped[str | None] = mapped_column(String(128), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Batch progress the worker writes every few seconds (features_party.progress), so any API
    # process can show it; null while queued and once over.
    live: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class Model(Base):
    __tablename__ = "models"

    model_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    training_id: Mapped[str] = mapped_column(String(64), unique=True)
    release_id: Mapped[str] = mapped_column(String(256))
    label_set_id: Mapped[str] = mapped_column(String(256))
    feature_table: Mapped[str] = mapped_column(String(64))
    mechanism_name: Mapped[str] = mapped_column(String(64))
    mechanism_spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    total_epsilon_micro: Mapped[int] = mapped_column(BigInteger)
    accounting: Mapped[dict[str, Any]] = mapped_column(JSON)
    n_train: Mapped[int] = mapped_column(Integer)
    n_validation: Mapped[int] = mapped_column(Integer)
    train_loss: Mapped[float | None] = mapped_column(Float, nullable=True)
    val_loss: Mapped[float | None] = mapped_column(Float, nullable=True)
    device: Mapped[str] = mapped_column(String(16))
    epochs: Mapped[int] = mapped_column(Integer)
    architecture: Mapped[str] = mapped_column(Text)
    path: Mapped[str] = mapped_column(String(512))  # relative to features_data_dir
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


def create_all(engine: Engine) -> None:
    """Create the features party's tables (idempotent)."""
    Base.metadata.create_all(engine)
