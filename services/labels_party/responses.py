"""Typed bodies of the labels party's successful answers: the one definition of each.

Every JSON route (labels_party.routes) declares its model as ``response_model``, so FastAPI
documents the body with it and validates and serializes every answer, a replay included,
through it. The domain modules (privacy_domains, audit, label_sets, releases, uploads,
resumable) build and return these models; an answer stored for Idempotency-Key replays is
kept as its model's dump. The models forbid unknown fields: a field added to a body but not to its model
fails the request (a 500) and every test that makes it (README "REST API", naming).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from labeldp.service.openapi import MechanismName, Timestamp

from .delivery_outcomes import DeliveryOutcome


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Health(_Body):
    status: Literal["ok"]
    service: Literal["labels"]
    version: str = Field(description="the labeldp package version (also the contract's info.version)")


class BudgetPerId(_Body):
    epsilon: float
    epsilon_micro: int
    delta: float


class PrivacyDomain(_Body):
    id: str = Field(description="`pd_…`")
    name: str
    id_source: str = Field(description="the id namespace the domain owns (no other domain may claim it)")
    budget_per_id: BudgetPerId
    ids: int = Field(description="ids the domain's ledger holds")
    max_spent_epsilon: float = Field(description="the most any one id has spent")
    ids_exhausted: int = Field(description="ids with no ε left")
    ledger_version: int
    created_at: Timestamp | None


class SpentBin(_Body):
    low: float = Field(description="spent ε from (inclusive)")
    high: float = Field(description="spent ε to (exclusive; the last bin includes the per-id budget)")
    ids: int = Field(description="ids read whose spent ε falls in the bin")


class SpentHistogram(_Body):
    privacy_domain: str = Field(description="the domain's name")
    privacy_domain_id: str = Field(description="`pd_…`")
    epsilon_per_id: float = Field(description="the per-id budget the bins divide")
    bins: list[SpentBin] = Field(description="equal bins over [0, epsilon_per_id]; the last holds the exhausted ids")
    ids: int = Field(description="ids the domain's ledger holds")
    ids_read: int = Field(description="ids the bins count: all of them, or a uniform sample of whole hash buckets "
                                      "of at most 10⁶ ids")
    sampled: bool = Field(description="true when ids_read < ids: the bins are a sample (scale by ids / ids_read)")
    ids_exhausted: int = Field(description="ids of the whole domain with no ε left (exact)")


class AuditEvent(_Body):
    id: str = Field(description="`aud_…`")
    action: Literal[
        "privacy_domain.created", "label_set.created", "label_set.labels_deleted", "release.queued",
        "release.charged", "release.failed", "signing_key.in_use",
    ]
    privacy_domain_id: str | None
    privacy_domain: str | None
    key_id: str | None = Field(description="the key that acted (`key_…`, a hash prefix, never the key); null: the "
                                           "service itself (the `default` domain)")
    scope: str | None = Field(description="the scope the action needed")
    subject_id: str | None = Field(description="what the event is about: a label set (`ls_…`), a release "
                                   "(`rel_…`) or a signing key id; null for a domain's creation before 0008")
    details: dict[str, Any] = Field(description="what changed: public facts only, never a label")
    created_at: Timestamp | None


class PrivacyDomainPage(_Body):
    items: list[PrivacyDomain]
    next_cursor: str | None = Field(description="pass back as `cursor` for the next page; null on the last")


class AuditEventPage(_Body):
    items: list[AuditEvent]
    next_cursor: str | None


class Domain(_Body):
    low: float
    high: float


class Counts(_Body):
    ids: int
    labeled: int
    missing: int


class Budget(_Body):
    total_epsilon: float
    spent_epsilon: float
    remaining_epsilon: float = Field(description="the least any of its ids has left, and its own cap")
    total_micro: int
    spent_micro: int
    remaining_micro: int
    remaining_delta: float
    privacy_domain: str
    per_id_epsilon: float


class ReleaseSummary(_Body):
    id: str = Field(description="`rel_…`")
    status: str
    mechanism: MechanismName
    epsilon: float


class LabelSet(_Body):
    id: str = Field(description="`ls_…`")
    name: str
    label_type: Literal["real", "integer", "categorical"]
    domain: Domain | None = Field(description="label range (real and integer sets)")
    classes: list[str] | None = Field(description="class names (categorical sets)")
    privacy_domain: str = Field(description="name of its privacy domain")
    privacy_domain_id: str
    counts: Counts
    ids_ready: bool = Field(description="false until the ids are uploaded")
    labels_deleted: bool
    budget: Budget
    releases: list[ReleaseSummary]
    created_at: Timestamp | None


class LabelSetItem(_Body):
    id: str
    name: str
    label_type: Literal["real", "integer", "categorical"]
    privacy_domain: str
    privacy_domain_id: str
    counts: Counts
    labels_deleted: bool
    spent_epsilon: float
    created_at: Timestamp | None


class LabelSetPage(_Body):
    items: list[LabelSetItem]
    next_cursor: str | None = Field(description="pass back as `cursor` for the next page; null on the last")


class Deleted(_Body):
    id: str = Field(description="the deleted resource's id")
    deleted: Literal[True]


class LabelsUploaded(_Body):
    label_set_id: str
    validate_only: bool
    accepted_rows: int
    labeled: int
    missing: int


class UploadPartInfo(_Body):
    number: int
    size: int = Field(description="bytes")


class Upload(_Body):
    id: str = Field(description="`up_…`")
    label_set_id: str
    target: Literal["ids", "labels"]
    format: Literal["csv", "parquet", "arrow"]
    validate_only: bool
    state: Literal["open", "completed"]
    parts: list[UploadPartInfo] = Field(description="the parts received so far (none once completed)")
    missing_below_highest: list[int] = Field(description="part numbers below the highest received that are missing")
    part_max_bytes: int
    max_parts: int
    created_at: Timestamp


class UploadPart(_Body):
    upload_id: str
    number: int
    size: int


class UploadCompleted(_Body):
    upload_id: str
    target: Literal["ids", "labels"]
    label_set: LabelSet | None = Field(description="target ids: the label set with its ids")
    labels: LabelsUploaded | None = Field(description="target labels: what was stored (or validated)")


class ReleaseError(_Body):
    code: str = Field(description="stable: budget_exhausted, labels_incomplete, invalid_parameters, worker_lost, …")
    message: str


class Release(_Body):
    id: str = Field(description="`rel_…`: the same id on the features party")
    label_set_id: str
    status: Literal["queued", "running", "failed", "pending", "delivered", "rejected"] = Field(
        description="queued (a job waiting for a release worker), running (a worker privatizes it), failed "
        "(nothing charged, see `error`), pending (charged, the outbox delivers it), delivered, rejected"
    )
    stage: Literal[
        "accepted", "privatizing", "failed", "queued", "sending", "retrying", "delivered", "rejected"
    ] = Field(
        description="accepted and privatizing while a job; once charged where delivery stands: queued, sending "
        "(the outbox holds it), retrying after a failed attempt"
    )
    mechanism: MechanismName = Field(description="the mechanism that runs (what `auto` resolved to)")
    epsilon: float
    epsilon_micro: int
    delta: float = Field(description="δ charged per id; 0 until charged")
    accounting: dict[str, Any] | None = Field(
        description="how ε was spent (parts, total), as in the message; null until charged"
    )
    prior_source: str | None
    feature_table: str | None
    row_count: int
    message_sha256: str | None = Field(description="sha256 of the message bytes; null until charged")
    message_bytes: int | None
    attempts: int = Field(description="delivery attempts")
    last_error: DeliveryOutcome | None = Field(
        description="why the last attempt did not deliver, from a fixed list (never the receiver's text)"
    )
    job_attempts: int = Field(description="claims of the job by release workers (more than one: a worker died)")
    error: ReleaseError | None = Field(description="why the job failed (status failed); nothing was charged")
    created_at: Timestamp | None
    delivered_at: Timestamp | None
    message_removed_at: Timestamp | None = Field(
        description="when the message object was removed, LABELDP_MESSAGE_RETENTION_SECONDS after delivery"
    )


class ReleasePage(_Body):
    items: list[Release]
    next_cursor: str | None


# --------------------------------------------------------------------------- examples

TS = "2026-11-24T13:55:39.123456+00:00"
PD = "pd_5f0c1d2e3a4b4c5d8e9f001122334455"
LS = "ls_0a1b2c3d4e5f40718293a4b5c6d7e8f9"
REL = "rel_9f8e7d6c5b4a49382716a5b4c3d2e1f0"

EXAMPLE_DOMAIN = {
    "id": PD, "name": "conversions", "id_source": "crm:customer_id",
    "budget_per_id": {"epsilon": 10.0, "epsilon_micro": 10_000_000, "delta": 1e-6},
    "ids": 1000, "max_spent_epsilon": 1.0, "ids_exhausted": 0, "ledger_version": 1, "created_at": TS,
}
EXAMPLE_HISTOGRAM = {
    "privacy_domain": "conversions", "privacy_domain_id": PD, "epsilon_per_id": 10.0,
    "bins": [{"low": 0.0, "high": 5.0, "ids": 400}, {"low": 5.0, "high": 10.0, "ids": 600}],
    "ids": 1000, "ids_read": 1000, "sampled": False, "ids_exhausted": 0,
}
EXAMPLE_DOMAIN_PAGE = {"items": [EXAMPLE_DOMAIN], "next_cursor": None}
EXAMPLE_AUDIT_PAGE = {
    "items": [{
        "id": "aud_187b3c2d4e5f6a7b0c1d2e3f4a5b", "action": "privacy_domain.created", "privacy_domain_id": PD,
        "privacy_domain": "conversions", "key_id": "key_3f2a1b0c9d8e7f6a", "scope": "admin", "subject_id": PD,
        "details": {"name": "conversions", "id_source": "crm:customer_id", "epsilon_micro": 10_000_000,
                    "delta": 1e-6},
        "created_at": TS,
    }],
    "next_cursor": None,
}
EXAMPLE_LABEL_SET = {
    "id": LS, "name": "spend", "label_type": "real", "domain": {"low": 0.0, "high": 10.0}, "classes": None,
    "privacy_domain": "conversions", "privacy_domain_id": PD,
    "counts": {"ids": 1000, "labeled": 1000, "missing": 0}, "ids_ready": True, "labels_deleted": False,
    "budget": {
        "total_epsilon": 10.0, "spent_epsilon": 1.0, "remaining_epsilon": 9.0, "total_micro": 10_000_000,
        "spent_micro": 1_000_000, "remaining_micro": 9_000_000, "remaining_delta": 1e-6,
        "privacy_domain": "conversions", "per_id_epsilon": 10.0,
    },
    "releases": [{"id": REL, "status": "delivered", "mechanism": "laplace", "epsilon": 1.0}],
    "created_at": TS,
}
EXAMPLE_LABEL_SET_PAGE = {
    "items": [{
        "id": LS, "name": "spend", "label_type": "real", "privacy_domain": "conversions", "privacy_domain_id": PD,
        "counts": {"ids": 1000, "labeled": 1000, "missing": 0}, "labels_deleted": False, "spent_epsilon": 1.0,
        "created_at": TS,
    }],
    "next_cursor": None,
}
EXAMPLE_DELETED = {"id": LS, "deleted": True}
EXAMPLE_UPLOADED = {"label_set_id": LS, "validate_only": False, "accepted_rows": 1000, "labeled": 1000, "missing": 0}
UP = "up_0f1e2d3c4b5a69788796a5b4c3d2e1f0"
EXAMPLE_UPLOAD = {
    "id": UP, "label_set_id": LS, "target": "labels", "format": "parquet", "validate_only": False, "state": "open",
    "parts": [{"number": 1, "size": 67108864}, {"number": 3, "size": 1048576}], "missing_below_highest": [2],
    "part_max_bytes": 67108864, "max_parts": 10000, "created_at": "2026-11-24T13:55:39.123456+00:00",
}
EXAMPLE_RELEASE = {
    "id": REL, "label_set_id": LS, "status": "pending", "stage": "queued", "mechanism": "laplace", "epsilon": 1.0,
    "epsilon_micro": 1_000_000, "delta": 0.0,
    "accounting": {"adjacency": "replace-one-label", "composition": "basic",
                   "parts": [{"name": "randomizer", "epsilon_micro": 1_000_000}], "total_epsilon_micro": 1_000_000,
                   "delta": 0.0},
    "prior_source": None, "feature_table": "clicks", "row_count": 1000,
    "message_sha256": "3b1f5e0c9a7d4e2f8b6a1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f", "message_bytes": 24576,
    "attempts": 0, "last_error": None, "job_attempts": 1, "error": None, "created_at": TS, "delivered_at": None,
    "message_removed_at": None,
}
EXAMPLE_RELEASE_QUEUED = {
    **EXAMPLE_RELEASE, "status": "queued", "stage": "accepted", "delta": 0.0, "accounting": None,
    "message_sha256": None, "message_bytes": None, "job_attempts": 0,
}
EXAMPLE_RELEASE_PAGE = {"items": [EXAMPLE_RELEASE], "next_cursor": None}
EXAMPLE_RELEASE_EVENTS = (
    'event: release\nid: 1\ndata: {"attempts":0,"id":"rel_…","stage":"accepted","status":"queued",…}\n\n'
    'event: release\nid: 2\ndata: {"attempts":0,"id":"rel_…","stage":"privatizing","status":"running",…}\n\n'
    'event: release\nid: 3\ndata: {"attempts":0,"id":"rel_…","stage":"sending","status":"pending",…}\n\n'
    'event: end\nid: 4\ndata: {"attempts":1,"id":"rel_…","stage":"delivered","status":"delivered",…}\n\n'
)
