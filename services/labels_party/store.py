"""The labels party's SQL catalogue. Raw labels live in this service's objects and nowhere else.

Rows here are small: ids, labels, message bytes and the ledger's buckets are immutable
objects in the object store (``LABELDP_STORAGE_URL``), and the rows reference them
(services/labels_party/columnar.py, ledger.py; docs/architecture.md, "Storage").
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


LEDGER_BUCKETS = 1024
"""Hash buckets of a new domain's ledger: 10⁹ ids at about 2²⁰ ids per bucket. Fixed per domain
at creation (``PrivacyDomainRow.n_buckets``), so an id's bucket never changes."""


class PrivacyDomainRow(Base):
    """A unit-of-privacy scope: every id in it has the same per-id budget (ε in µε, δ in 1e-15 units).

    Its ids and what they spent live in ``n_buckets`` hash buckets (:class:`LedgerBucketRow`);
    ``spent_version`` counts the ledger's commits. ``id_segments`` > 0 marks a domain still in
    the layout before buckets (append-only id files, one spent column), bucketed on first use.
    The row is the lock every ledger commit takes, for its compare-and-swap only.

    ``id_source`` is the id namespace the domain owns (docs/privacy.md, "Privacy domains"):
    unique, so no two domains can hold budgets over the same ids.
    """

    __tablename__ = "privacy_domains"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    id_source: Mapped[str] = mapped_column(
        String(200), unique=True, comment="the id namespace the domain owns, lower case; one domain per source"
    )
    epsilon_budget_micro: Mapped[int] = mapped_column(BigInteger)
    delta_budget_units: Mapped[int] = mapped_column(BigInteger)
    n_ids: Mapped[int] = mapped_column(BigInteger, default=0)
    id_segments: Mapped[int] = mapped_column(Integer, default=0)
    spent_version: Mapped[int] = mapped_column(BigInteger, default=0)
    n_buckets: Mapped[int] = mapped_column(Integer, default=LEDGER_BUCKETS, server_default=str(LEDGER_BUCKETS))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class LedgerBucketRow(Base):
    """The current version of one hash bucket of a domain's ledger (services/labels_party/ledger.py).

    Record batch ``object_batch`` of the immutable object ``object_key`` is the bucket's
    base: its ``n_ids`` ids sorted, with their spent µε and δ units. ``chain_json``
    names the charge objects made since (each holds the in-bucket positions one release
    charged and what it paid). A commit replaces the row only while
    ``version`` is still the one its computation read (compare-and-swap).
    """

    __tablename__ = "ledger_buckets"

    domain_id: Mapped[str] = mapped_column(String(40), ForeignKey("privacy_domains.id"), primary_key=True)
    bucket: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    version: Mapped[int] = mapped_column(BigInteger)
    object_key: Mapped[str] = mapped_column(String(300))
    object_batch: Mapped[int] = mapped_column(Integer, comment="the bucket's record batch in the object")
    chain_json: Mapped[str] = mapped_column(Text, comment="charges since the base: [name of a charge object, …]")
    chain_ids: Mapped[int] = mapped_column(BigInteger, comment="positions the chain holds, summed")
    n_ids: Mapped[int] = mapped_column(BigInteger)
    max_epsilon_micro: Mapped[int] = mapped_column(BigInteger, comment="the most one id of the bucket spent")
    ids_exhausted: Mapped[int] = mapped_column(BigInteger, comment="ids with no ε left")


class LedgerGarbageRow(Base):
    """A ledger object a bucket's compare-and-swap stopped naming (services/labels_party/ledger.py).

    Written in the swap's transaction; the sweep deletes the object once ``superseded_at`` is
    older than ``LABELDP_LEDGER_GRACE_SECONDS`` (a reader that loaded the old version still
    reads it until then) and no bucket row names it any more (objects hold several buckets).
    """

    __tablename__ = "ledger_garbage"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    domain_id: Mapped[str] = mapped_column(String(40), index=True)
    object_key: Mapped[str] = mapped_column(String(300), index=True)
    superseded_at: Mapped[float] = mapped_column(Float, index=True, comment="POSIX seconds of the swap")


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
    ids_object: Mapped[str | None] = mapped_column(
        String(200),
        nullable=True,
        comment="key of the sorted ids object (label_sets/<id>/ids-<uuid>.arrow); null: ids.arrow",
    )
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


RELEASE_JOB_STATES = ("queued", "running", "failed")
"""A release before it is charged (services/labels_party/release_worker.py): waiting for a release
worker, held by one (``job_owner`` under ``job_lease_until``), or ended without a charge
(``error_code``). The final transaction turns a ``running`` row ``pending``: charged, for the outbox."""


class ReleaseRow(Base):
    """A release: first a job (queued, running, failed), then a charged message for the outbox
    (pending, delivered, rejected). Its message is the manifest object ``messages/<message_file>``
    (``<release id>/manifest.json``; ``message_sha256`` is of its exact bytes) and the shards next to
    it that the manifest lists by digest (``message_bytes`` counts them all), named only once charged;
    removed after the retention period once delivered."""

    __tablename__ = "releases"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    label_set_id: Mapped[str] = mapped_column(String(40), ForeignKey("label_sets.id"))
    mechanism: Mapped[str] = mapped_column(String(40))
    epsilon_micro: Mapped[int] = mapped_column(BigInteger)
    delta_units: Mapped[int] = mapped_column(BigInteger, default=0)
    accounting_json: Mapped[str | None] = mapped_column(Text, nullable=True)
    prior_source: Mapped[str | None] = mapped_column(String(200), nullable=True)
    feature_table: Mapped[str | None] = mapped_column(String(64), nullable=True)
    row_count: Mapped[int] = mapped_column(BigInteger)
    message_file: Mapped[str | None] = mapped_column(String(200), nullable=True)
    message_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    message_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[float] = mapped_column(Float, default=0.0)
    lease_until: Mapped[float] = mapped_column(Float, default=0.0)
    last_error: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # A fresh request id made when the release was accepted (never the client's X-Request-ID, which
    # stays in the labels party's logs); the outbox sends it with every attempt.
    request_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    # The job (services/labels_party/release_worker.py); the outbox's lease above is another one.
    request_json: Mapped[str | None] = mapped_column(
        Text, nullable=True, comment="the release request a worker runs (mechanism, ε, params, a public prior)"
    )
    job_owner: Mapped[str | None] = mapped_column(String(128), nullable=True, comment="the release worker holding it")
    job_lease_until: Mapped[float] = mapped_column(
        Float, default=0.0, server_default="0", comment="unix time after which the job may be taken over"
    )
    job_attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0", comment="claims by workers")
    error_code: Mapped[str | None] = mapped_column(String(64), nullable=True, comment="why the job failed")
    error_message: Mapped[str | None] = mapped_column(String(300), nullable=True)
    message_removed_at: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True, comment="when the retention sweep removed the message object"
    )


class AuditEventRow(Base):
    """One entry of the append-only audit log (services/labels_party/audit.py): a trust-relevant
    change, who made it (a key's id, never the key), with which scope and about what. Rows are only
    ever inserted: the session refuses to update or delete one."""

    __tablename__ = "audit_events"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    action: Mapped[str] = mapped_column(String(64))
    privacy_domain_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    privacy_domain: Mapped[str | None] = mapped_column(String(200), nullable=True)
    key_id: Mapped[str | None] = mapped_column(String(40), nullable=True, comment="null: the service itself")
    scope: Mapped[str | None] = mapped_column(String(32), nullable=True, comment="the scope the action needed")
    subject_id: Mapped[str | None] = mapped_column(
        String(40), nullable=True, index=True,
        comment="what the event is about: a label set, a release, a signing key id",
    )
    details_json: Mapped[str] = mapped_column(Text, comment="what changed: public facts only (names, budgets)")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
