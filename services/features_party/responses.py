"""Typed bodies of the features party's successful answers: the one definition of each.

As on the labels party (labels_party/responses.py): every JSON route (features_party.routes)
declares its model as ``response_model``, so FastAPI validates and serializes every answer
through it. The domain modules build and return these models (an answer stored for an
Idempotency-Key replay is kept as its model's dump); the models forbid unknown fields, so a
body that drifts from its contract fails the request and every test that makes it (README
"REST API", naming).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from labeldp.service.openapi import ErrorBody, MechanismName, Timestamp


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Health(_Body):
    status: Literal["ok"]
    service: Literal["features"]
    version: str = Field(description="the labeldp package version (also the contract's info.version)")


class Column(_Body):
    name: str
    kind: Literal["numeric", "categorical"]


class FeatureTable(_Body):
    id: str = Field(description="`ft_…`")
    name: str = Field(description="the table's key in URLs and in trainings")
    n_rows: int
    id_column: str
    columns: list[Column] = Field(description="the features (the id column excluded)")
    created_at: Timestamp | None


class Deleted(_Body):
    id: str = Field(description="the deleted resource's id")
    deleted: Literal[True]


class InboxReceipt(_Body):
    """The inbox's answer to a manifest, and to ``complete``."""

    id: str = Field(description="the release id (`rel_…`), the same as on the labels party")
    status: Literal["receiving", "complete"] = Field(
        description="complete: every shard is held (a duplicate manifest is answered so, before any shard); "
        "receiving: send the shards listed in `missing`, then `complete`"
    )
    missing: list[int] = Field(description="indices of the shards the inbox still lacks")
    message_sha256: str = Field(description="sha256 of the manifest's exact bytes")


class ShardReceipt(_Body):
    id: str = Field(description="the release id")
    index: int = Field(description="the shard's index in the manifest")
    status: Literal["stored", "duplicate"]


class ReceivedRelease(_Body):
    id: str
    label_set_id: str
    feature_table: str | None = Field(description="the sender's hint; a training binds the table")
    mechanism: MechanismName
    mechanism_spec: dict[str, Any] = Field(description="the mechanism's public parameters as the message carries them")
    prior: dict[str, Any] | None
    accounting: dict[str, Any]
    row_count: int
    created_at: Timestamp | None = Field(description="when the labels party wrote the message")
    received_at: Timestamp | None
    message_sha256: str
    signing_key_id: str | None = Field(
        description="the kid of the advertiser's key that signed the manifest (null: received before 0004); "
        "GET …/manifest answers the signed manifest itself"
    )


class SignedManifest(_Body):
    """What the features party received, as proof: the exact manifest and its signature."""

    release_id: str
    manifest: str = Field(description="the manifest's exact text (UTF-8): the bytes the signature covers")
    signature: str = Field(description="the `X-Labeldp-Signature` header it arrived with: `ed25519;kid=…;sig=…`")
    signing_key_id: str | None = Field(description="the kid of the advertiser key that signed it")


class ReleaseLabels(_Body):
    ids: list[str] = Field(description="every id of the release once, sorted")
    labels: list[float | str] = Field(description="the privatized label of each id")


class TrainingQueued(_Body):
    id: str = Field(description="`trn_…`")
    status: Literal["queued"]


class Progress(_Body):
    epoch: int
    epochs: int
    batch: int | None = Field(description="batch within the epoch, while this process runs it")
    batches: int | None
    fraction: float = Field(description="share of all batches done, 0 to 1")
    elapsed_seconds: float | None = Field(description="wall time since the training started")
    eta_seconds: float | None = Field(description="estimated seconds left, while running; 0 once succeeded")


class Training(_Body):
    id: str = Field(description="`trn_…`")
    status: Literal["queued", "running", "cancelling", "succeeded", "failed", "cancelled"]
    release_id: str
    feature_table: str = Field(description="the feature table's name")
    feature_table_id: str | None = Field(
        description="`ft_…`: the table content it was queued on (null for trainings queued before ids were kept)"
    )
    progress: Progress
    queue_position: int | None = Field(description="1 for the next training to run; null once it left the queue")
    history: list[dict[str, Any]] = Field(description="per epoch: losses (and accuracies for classifiers)")
    model_id: str | None = Field(description="`mdl_…` once succeeded")
    device: str | None
    attempt: int = Field(description="how many times a worker has claimed it (a worker that died leaves it to "
                         "the next attempt, which resumes from its last checkpoint)")
    error: ErrorBody | None = Field(description="why it failed: the error envelope (`worker_lost`, `unknown_ids`, …)")
    created_at: Timestamp | None
    started_at: Timestamp | None
    finished_at: Timestamp | None


class Runtime(_Body):
    device: str | None
    precision: str | None = Field(description="fp32, bf16 or fp16 (autocast)")
    workers: int | None = Field(description="processes that trained it (torchrun workers)")
    rows_per_second: float | None = Field(description="training rows per second")


class ModelCard(_Body):
    task: Literal["regression", "classification"]
    classes: list[str] | None
    id: str = Field(description="`mdl_…`")
    training_id: str
    release_id: str
    label_set_id: str
    feature_table: str = Field(description="the feature table's name")
    feature_table_id: str | None = Field(description="`ft_…`: the table content its training joined (null: "
                                         "trained before ids were kept, or a card from the catalogue alone)")
    mechanism: MechanismName
    mechanism_spec: dict[str, Any]
    epsilon: float
    accounting: dict[str, Any]
    n_train: int
    n_validation: int
    metrics: dict[str, Any]
    metrics_note: str
    device: str
    epochs: int
    created_at: Timestamp | None
    architecture: str
    training: dict[str, Any] | None
    learning: dict[str, Any] | None
    runtime: Runtime | None = Field(description="where and how fast it trained (from the model file; null in lists)")


class FeatureTablePage(_Body):
    items: list[FeatureTable]
    next_cursor: str | None = Field(description="pass back as `cursor` for the next page; null on the last")


class ReceivedReleasePage(_Body):
    items: list[ReceivedRelease]
    next_cursor: str | None


class TrainingPage(_Body):
    items: list[Training]
    next_cursor: str | None


class HistoryPage(_Body):
    items: list[dict[str, Any]] = Field(description="epochs in order: losses (and accuracies for classifiers)")
    next_cursor: str | None


class ModelPage(_Body):
    items: list[ModelCard]
    next_cursor: str | None


class WebhookDelivery(_Body):
    """One event's delivery to the inbox webhook (labeldp.service.webhooks)."""

    id: str = Field(description="`whd_…`")
    event_id: str = Field(description="the event's id (`evt_…`): the `X-Labeldp-Webhook-Id` a receiver deduplicates on")
    event_type: str = Field(description="`release.received` or `release.completed`")
    target: str = Field(description="the URL it is POSTed to")
    state: Literal["pending", "delivered", "failed"] = Field(
        description="pending: due at `next_attempt_at`; delivered: a 2xx answered; failed: every attempt failed "
        "(retry it with POST …/retry)"
    )
    attempts: int
    last_outcome: str | None = Field(
        description="the last attempt's outcome: `status 2xx`…`status 5xx` or the client error's type "
        "(`ConnectError`, `ReadTimeout`…), never the receiver's text"
    )
    next_attempt_at: Timestamp | None = Field(description="pending: when it is attempted next")
    created_at: Timestamp | None
    finished_at: Timestamp | None


class WebhookDeliveryPage(_Body):
    items: list[WebhookDelivery]
    next_cursor: str | None


class Predictions(_Body):
    predictions: list[float | str] = Field(description="one per requested id or row, in order")
    probabilities: list[list[float]] | None = Field(None, description="classifiers: per class, in `classes` order")
    classes: list[str] | None = Field(None, description="classifiers")


# --------------------------------------------------------------------------- examples

TS = "2026-11-24T13:55:39.123456+00:00"
REL = "rel_9f8e7d6c5b4a49382716a5b4c3d2e1f0"
TRN = "trn_7c6b5a4f3e2d41c0b9a8f7e6d5c4b3a2"
MDL = "mdl_1a2b3c4d5e6f47089a1b2c3d4e5f6a7b"
SHA = "3b1f5e0c9a7d4e2f8b6a1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f"
SPEC = {"name": "laplace", "epsilon": 1.0, "domain": {"low": 0.0, "high": 10.0}, "step": 0.001, "scale": 10.0}
ACCOUNTING = {"adjacency": "replace-one-label", "composition": "basic",
              "parts": [{"name": "randomizer", "epsilon_micro": 1_000_000}], "total_epsilon_micro": 1_000_000,
              "delta": 0.0}

EXAMPLE_TABLE = {
    "id": "ft_84a29ff790ea4943b002d959b8f2d3b6", "name": "clicks", "n_rows": 3, "id_column": "id",
    "columns": [{"name": "age", "kind": "numeric"}, {"name": "city", "kind": "categorical"}], "created_at": TS,
}
EXAMPLE_RECEIPT = {"id": REL, "status": "receiving", "missing": [0, 1, 2], "message_sha256": SHA}
EXAMPLE_COMPLETE = {"id": REL, "status": "complete", "missing": [], "message_sha256": SHA}
EXAMPLE_SHARD = {"id": REL, "index": 0, "status": "stored"}
EXAMPLE_RELEASE = {
    "id": REL, "label_set_id": "ls_0a1b2c3d4e5f40718293a4b5c6d7e8f9", "feature_table": "clicks",
    "mechanism": "laplace", "mechanism_spec": SPEC, "prior": None, "accounting": ACCOUNTING, "row_count": 3,
    "created_at": TS, "received_at": TS, "message_sha256": SHA, "signing_key_id": "3f2a9c41d07e5b68",
}
EXAMPLE_SIGNED_MANIFEST = {
    "release_id": REL, "manifest": '{"release_id": "' + REL + '", "shards": [...]}',
    "signature": "ed25519;kid=3f2a9c41d07e5b68;sig=...", "signing_key_id": "3f2a9c41d07e5b68",
}
EXAMPLE_LABELS = {"ids": ["u001", "u002", "u003"], "labels": [3.412, 0.0, 9.87]}
EXAMPLE_QUEUED = {"id": TRN, "status": "queued"}
EXAMPLE_TRAINING = {
    "id": TRN, "status": "succeeded", "release_id": REL, "feature_table": "clicks",
    "feature_table_id": "ft_84a29ff790ea4943b002d959b8f2d3b6",
    "progress": {"epoch": 2, "epochs": 2, "batch": None, "batches": None, "fraction": 1.0,
                 "elapsed_seconds": 3.2, "eta_seconds": 0.0},
    "queue_position": None,
    "history": [{"epoch": 1, "train_loss": 4.1, "val_loss": 4.3}, {"epoch": 2, "train_loss": 3.9, "val_loss": 4.2}],
    "model_id": MDL, "device": "cpu", "attempt": 1, "error": None, "created_at": TS, "started_at": TS,
    "finished_at": TS,
}
EXAMPLE_MODEL = {
    "task": "regression", "classes": None, "id": MDL, "training_id": TRN, "release_id": REL,
    "label_set_id": "ls_0a1b2c3d4e5f40718293a4b5c6d7e8f9", "feature_table": "clicks",
    "feature_table_id": "ft_84a29ff790ea4943b002d959b8f2d3b6", "mechanism": "laplace",
    "mechanism_spec": SPEC, "epsilon": 1.0, "accounting": ACCOUNTING, "n_train": 900, "n_validation": 100,
    "metrics": {"train_loss": 3.9, "val_loss": 4.2, "true_label": {
        "test_mse": 0.61, "test_mse_se": 0.09, "test_r2": 0.72, "test_r2_se": 0.05, "baseline_mse": 2.18,
        "baseline_mse_se": 0.11, "noise_variance": 3.1, "n_test": 100, "private_mean": 2.4}},
    "metrics_note": "MSE against privatized labels; true_label: on the true-label scale",
    "device": "cpu", "epochs": 2, "created_at": TS, "architecture": "MLP(2 → 64 → 1)",
    "training": {"epochs": 2, "batch_size": 256}, "learning": None,
    "runtime": {"device": "cpu", "precision": "fp32", "workers": 1, "rows_per_second": 152000.0},
}
EXAMPLE_PREDICTIONS = {"predictions": [3.1, 0.4]}
EXAMPLE_DELETED = {"id": EXAMPLE_TABLE["id"], "deleted": True}
EXAMPLE_TABLE_PAGE = {"items": [EXAMPLE_TABLE], "next_cursor": None}
EXAMPLE_RELEASE_PAGE = {"items": [EXAMPLE_RELEASE], "next_cursor": None}
EXAMPLE_HISTORY_PAGE = {"items": [{"epoch": 1, "train_loss": 4.1, "val_loss": 4.3}], "next_cursor": None}
EXAMPLE_TRAINING_PAGE = {"items": [EXAMPLE_TRAINING], "next_cursor": None}
EXAMPLE_WEBHOOK_DELIVERY = {
    "id": "whd_0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f", "event_id": "evt_5a4b3c2d1e0f9a8b7c6d5e4f",
    "event_type": "release.completed", "target": "https://hooks.publisher.example/labeldp", "state": "failed",
    "attempts": 24, "last_outcome": "ConnectError", "next_attempt_at": None, "created_at": TS, "finished_at": TS,
}
EXAMPLE_WEBHOOK_PAGE = {"items": [EXAMPLE_WEBHOOK_DELIVERY], "next_cursor": None}
EXAMPLE_MODEL_PAGE = {"items": [EXAMPLE_MODEL], "next_cursor": None}
EXAMPLE_CANCELLING = {
    **EXAMPLE_TRAINING, "status": "cancelling", "model_id": None, "finished_at": None,
    "progress": {"epoch": 1, "epochs": 2, "batch": 7, "batches": 40, "fraction": 0.59,
                 "elapsed_seconds": 1.9, "eta_seconds": 1.3},
}
EXAMPLE_INBOX_EVENTS = (
    'event: release.received\nid: 1\ndata: {"created_at":"2026-11-24T13:55:39.123456+00:00","data":{"label_set_id":'
    '"ls_…","mechanism":"laplace","release_id":"rel_…","row_count":1000000,"shard_count":1,"status":"receiving",…},'
    '"id":"evt_…","type":"release.received"}\n\n'
    'event: release.completed\nid: 2\ndata: {"created_at":"…","data":{"release_id":"rel_…","status":"complete",…},'
    '"id":"evt_…","type":"release.completed"}\n\n'
)
EXAMPLE_TRAINING_EVENTS = (
    'event: training\nid: 1\ndata: {"id":"trn_…","progress":{"epoch":1,"fraction":0.25,…},"status":"running",…}\n\n'
    'event: end\nid: 2\ndata: {"id":"trn_…","model_id":"mdl_…","status":"succeeded",…}\n\n'
)
