"""What the features party's handlers need, built once per app from its settings: the
catalogue, the data directory, the metrics, the training runner, the model cache and the
idempotency keys. Nothing is module-level, so tests can run several apps side by side."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from features_party import inbox, models, store, training_context, worker
from labeldp.learning.device import resolve_device
from labeldp.learning.distributed import Hosts
from labeldp.service.database import make_session_factory
from labeldp.service.idempotency import IdempotencyKeys
from labeldp.service.metrics import StatusCounts, TrainingObserver, features_metrics
from labeldp.service.migrations import open_database
from labeldp.service.settings import Settings, open_object_store
from labeldp.service.webhooks import WebhookSender
from labeldp.storage import ObjectStore


@dataclass
class AppContext:
    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    data_dir: Path
    """This process's own folder (scratch, spools); what replicas and workers share lives in ``store``."""
    store: ObjectStore
    """``LABELDP_STORAGE_URL`` (or ``data_dir`` where that is empty): the one interface for every file."""
    registry: CollectorRegistry
    inbox_messages: Counter
    trainings: Counter
    runner: worker.TrainingRunner
    model_cache: models.ModelCache
    idempotency: IdempotencyKeys
    inbox_slots: asyncio.Semaphore
    """Message shards received at once (each spooled, one in memory while checked); one more is a 503 ``inbox_busy``."""
    webhooks: WebhookSender | None = None
    """The inbox's signed webhook (``LABELDP_INBOX_WEBHOOK_URL``), started with the app; None without one."""

    @property
    def spool_dir(self) -> Path:
        """This process's request scratch: spooled bodies, exports, downloads (swept once abandoned)."""
        return self.data_dir / "spool"

    @property
    def record_event(self) -> inbox.EventHook | None:
        """What the inbox calls inside the transaction of an event: the webhook's delivery row."""
        return self.webhooks.enqueue if self.webhooks is not None else None

    def announce(self, event: dict[str, Any] | None) -> None:
        """An inbox event was committed (its delivery row with it): let this process's sender look now."""
        if event is not None and self.webhooks is not None:
            self.webhooks.wake()


def torchrun_hosts(settings: Settings) -> Hosts | None:
    """The peer hosts of a torchrun job across hosts, when a rendezvous endpoint is set (else one host):
    named hosts reached through the object store (``LABELDP_TORCHRUN_PEER_NAMES``), or peer folders."""
    if not settings.torchrun_rdzv_endpoint:
        return None
    names = _listed(settings.torchrun_peer_names)
    if names:
        objects = open_object_store(settings, Path(settings.features_data_dir))
        return Hosts(settings.torchrun_rdzv_endpoint, names, settings.torchrun_local_addr or None, objects)
    peers = tuple(Path(p) for p in _listed(settings.torchrun_peer_dirs))
    return Hosts(settings.torchrun_rdzv_endpoint, peers, settings.torchrun_local_addr or None)


def _listed(value: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in value.split(",") if p.strip())


def training_processes(settings: Settings) -> int:
    """How many processes train one training: the workers of each host (this one and its peers)."""
    if not settings.torchrun_rdzv_endpoint:
        return settings.training_workers
    peers = _listed(settings.torchrun_peer_names) or _listed(settings.torchrun_peer_dirs)
    return settings.training_workers * (1 + len(peers))


def trainings_by_status(sessions: sessionmaker[Session]) -> dict[str, int]:
    """How many trainings are in each status now (the queue gauge)."""
    with sessions() as s:
        rows = s.execute(select(store.Training.status, func.count()).group_by(store.Training.status))
        return {status: int(n) for status, n in rows}


def webhook_sender(settings: Settings, sessions: sessionmaker[Session]) -> WebhookSender | None:
    """The sender of the inbox webhook's deliveries (``LABELDP_INBOX_WEBHOOK_*``), or None without a URL."""
    if not settings.inbox_webhook_url:
        return None
    return WebhookSender(
        sessions, store.WEBHOOK_DELIVERIES, settings.inbox_webhook_url, settings.inbox_webhook_secret,
        timeout=settings.inbox_webhook_timeout_seconds, max_attempts=settings.inbox_webhook_max_attempts,
        initial_backoff=settings.inbox_webhook_initial_backoff_seconds,
        max_backoff=settings.inbox_webhook_max_backoff_seconds, poll_seconds=settings.inbox_webhook_poll_seconds,
    )


def build_context(settings: Settings) -> AppContext:
    engine = open_database(settings.features_database_url, "features_party.migrations", settings)
    sessions = make_session_factory(engine)
    data_dir = Path(settings.features_data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    object_store = open_object_store(settings, data_dir)
    inbox.bind_store(sessions, object_store)  # a release's rows are read from its shards
    registry = CollectorRegistry()
    registry.register(
        StatusCounts(
            "labeldp_trainings_in_queue",
            "trainings queued, running or cancelling now, fleet-wide (read from the catalogue at each scrape: "
            "aggregate with max, not sum)",
            lambda: trainings_by_status(sessions),
            (store.QUEUED, store.RUNNING, store.CANCELLING),
        )
    )
    measured = features_metrics(registry)
    training_metrics = TrainingObserver(measured)
    runner = worker.TrainingRunner(
        training_context.job_context(
            settings, sessions, training_metrics.status_changed, training_metrics.trained, torchrun_hosts(settings)
        ),
        enabled=settings.training_in_process_worker,
        max_attempts=settings.training_max_attempts,
        poll_seconds=settings.training_poll_seconds,
    )
    return AppContext(
        settings=settings,
        engine=engine,
        sessions=sessions,
        data_dir=data_dir,
        store=object_store,
        registry=registry,
        inbox_messages=measured.inbox_messages,
        trainings=measured.trainings,
        runner=runner,
        model_cache=models.ModelCache(object_store, device=resolve_device(settings.device)),
        idempotency=IdempotencyKeys(store.IDEMPOTENCY_KEYS, sessions, settings.idempotency_lease_seconds),
        inbox_slots=asyncio.Semaphore(settings.inbox_max_concurrent),
        webhooks=webhook_sender(settings, sessions),
    )
