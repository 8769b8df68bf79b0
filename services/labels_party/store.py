"""The labels party's tables. Raw labels live here and nowhere else."""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import (
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


class LabelSetRow(Base):
    """A label set and its ledger: budget and spent are integer micro-ε."""

    __tablename__ = "label_sets"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    label_type: Mapped[str] = mapped_column(String(16))
    classes_json: Mapped[str | None] = mapped_column(Text, nullable=True)  # categorical sets only
    domain_low: Mapped[float] = mapped_column(Float)
    domain_high: Mapped[float] = mapped_column(Float)
    budget_micro: Mapped[int] = mapped_column(BigInteger)
    spent_micro: Mapped[int] = mapped_column(BigInteger, default=0)
    n_ids: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class LabelRow(Base):
    """One declared example id; ``value`` stays NULL until a label is uploaded.

    Categorical labels are stored as the class index (0..K−1).
    """

    __tablename__ = "labels"

    label_set_id: Mapped[str] = mapped_column(
        String(40), ForeignKey("label_sets.id", ondelete="CASCADE"), primary_key=True
    )
    example_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    value: Mapped[float | None] = mapped_column(Float, nullable=True)


class UploadRow(Base):
    """An accepted upload, kept so an idempotency key replays the same answer."""

    __tablename__ = "uploads"
    __table_args__ = (UniqueConstraint("label_set_id", "idempotency_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    label_set_id: Mapped[str] = mapped_column(String(40), ForeignKey("label_sets.id"))
    idempotency_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    request_sha256: Mapped[str] = mapped_column(String(64))
    response_json: Mapped[str] = mapped_column(Text)
    rows: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ReleaseRow(Base):
    """A charged release: the exact message bytes, stored with the charge."""

    __tablename__ = "releases"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    label_set_id: Mapped[str] = mapped_column(String(40), ForeignKey("label_sets.id"))
    mechanism: Mapped[str] = mapped_column(String(40))
    epsilon_micro: Mapped[int] = mapped_column(BigInteger)
    accounting_json: Mapped[str] = mapped_column(Text)
    feature_table: Mapped[str | None] = mapped_column(String(64), nullable=True)
    row_count: Mapped[int] = mapped_column(Integer)
    message: Mapped[bytes] = mapped_column(LargeBinary)
    message_sha256: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[float] = mapped_column(Float, default=0.0)
    lease_until: Mapped[float] = mapped_column(Float, default=0.0)
    last_error: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
