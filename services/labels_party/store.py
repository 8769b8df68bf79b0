"""The labels party's SQL catalogue. Raw labels live in this service's objects and nowhere else.

Rows here are small: ids, labels and message bytes are immutable objects in the object store
(``LABELDP_STORAGE_URL``), the ledger's columns files under ``labels_data_dir``, and the rows
reference them (services/labels_party/columnar.py; docs/architecture.md, "Storage").
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from labeldp.service.idempotency import idempotency_table
from labeldp.service.timestamps import utcnow


class Base(DeclarativeBase):
    pass


IDEMPOTENCY_KEYS = idempotency_table(Base.metadata)


class PrivacyDomainRow(Base):
    """A unit-of-privacy scope: every id in it has the same per-id budget (ε in µε, δ in 1e-15 units).

    ``n_ids`` ids are stored in ``id_segments`` append-only files; the spent columns are
    versioned files, ``spent_version`` names the current one (0: nothing spent yet).
    The row is the lock every charge takes.
    """

    __tablename__ = "privacy_domains"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    epsilon_budget_micro: Mapped[int] = mapped_column(BigInteger)
    delta_budget_units: Mapped[int] = mapped_column(BigInteger)
    n_ids: Mapped[int] = mapped_column(BigInteger, default=0)
    id_segments: Mapped[int] = mapped_column(Integer, default=0)
    spent_version: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class LabelSetRow(Base):
    """A label set: public ids (an object), labels (versioned, content-addressed objects), its own cap and spend.

    ``cap_micro`` bounds the sum of this set's releases (default: the domain's per-id
    budget); the per-id ledger of its privacy domain bounds every id across all sets.
    """

    __tablename__ = "label_sets"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    privacy_domain_id: Mapped[str] = mapped_column(String(40), ForeignKey("privacy_domains.id"))
    label_type: Mapped[str] = mapped_column(String(16))
    classes_json: Mapped[str | None] = mapped_column(Text, nullable=True)  # categorical sets only
    domain_low: Mapped[float] = mapped_column(Float)
    domain_high: Mapped[float] = mapped_column(Float)
    cap_micro: Mapped[int] = mapped_column(BigInteger)
    spent_micro: Mapped[int] = mapped_column(BigInteger, default=0)
    n_ids: Mapped[int] = mapped_column(BigInteger, default=0)
    ids_ready: Mapped[int] = mapped_column(Integer, default=0, comment="1 once the id file is written")
    labeled: Mapped[int] = mapped_column(BigInteger, default=0)
    labels_version: Mapped[int] = mapped_column(BigInteger, default=0, comment="0: no label yet")
    labels_object: Mapped[str | None] = mapped_column(
        String(200),
        nullable=True,
        comment="key of the current labels object (label_sets/<id>/labels/<sha256>); null: labels-<version>.npy",
    )
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ReleaseRow(Base):
    """A charged release; the exact message bytes are the object ``messages/<message_file>`` (sha256 below)."""

    __tablename__ = "releases"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    label_set_id: Mapped[str] = mapped_column(String(40), ForeignKey("label_sets.id"))
    mechanism: Mapped[str] = mapped_column(String(40))
    epsilon_micro: Mapped[int] = mapped_column(BigInteger)
    delta_units: Mapped[int] = mapped_column(BigInteger, default=0)
    accounting_json: Mapped[str] = mapped_column(Text)
    prior_source: Mapped[str | None] = mapped_column(String(200), nullable=True)
    feature_table: Mapped[str | None] = mapped_column(String(64), nullable=True)
    row_count: Mapped[int] = mapped_column(BigInteger)
    message_file: Mapped[str] = mapped_column(String(200))
    message_bytes: Mapped[int] = mapped_column(BigInteger)
    message_sha256: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[float] = mapped_column(Float, default=0.0)
    lease_until: Mapped[float] = mapped_column(Float, default=0.0)
    last_error: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # The X-Request-ID of the request that created the release; the outbox sends it with every attempt.
    request_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
