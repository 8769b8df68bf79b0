"""What a training needs from the process that runs it: :class:`JobContext`, built from the
settings by :func:`job_context` (one definition for the API's in-process worker and
``labeldp worker features``), passed in rather than read from globals.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from features_party import leases
from features_party.progress import ProgressBoard
from labeldp.learning.distributed import Hosts
from labeldp.service.settings import Settings, open_object_store
from labeldp.storage import ObjectStore


@dataclass(frozen=True)
class JobContext:
    """What a job needs from the process that runs it (an API's in-process worker or
    ``labeldp worker features``), passed in rather than read from globals."""

    session_factory: sessionmaker[Session]
    data_dir: Path
    """This process's own folder: scratch only (a streaming training's work folder)."""
    device: str = "auto"
    threads: int = 0
    on_trained: Callable[[int], None] | None = None  # rows × epochs of a training about to succeed (metrics)
    workers: int = 1
    streaming: bool = False
    stream_above_rows: int = 1_000_000  # a release or feature table of more rows streams (record 0036)
    row_group_rows: int = 65_536
    buffer_row_groups: int = 4
    join_partition_rows: int = 1 << 18
    hosts: Hosts | None = None  # a torchrun job across hosts (LABELDP_TORCHRUN_RDZV_ENDPOINT)
    on_status: Callable[[str], None] | None = None
    board: ProgressBoard = field(default_factory=ProgressBoard)
    owner: str = field(default_factory=leases.new_owner)  # this worker, as the rows it claims name it
    lease_seconds: float = 30.0
    progress_seconds: float = 1.0  # how often batch progress is written and a cross-process cancel read
    objects: ObjectStore | None = None
    """The store every API and worker shares (feature tables, checkpoints, models); None: ``data_dir`` as one."""

    def __post_init__(self) -> None:
        if self.objects is None:
            object.__setattr__(self, "objects", ObjectStore.from_url(str(self.data_dir)))

    @property
    def store(self) -> ObjectStore:
        assert self.objects is not None  # set by __post_init__
        return self.objects

    def status_changed(self, status: str) -> None:
        if self.on_status is not None:
            self.on_status(status)


def job_context(
    settings: Settings,
    session_factory: sessionmaker[Session],
    on_status: Callable[[str], None] | None = None,
    on_trained: Callable[[int], None] | None = None,
    hosts: Hosts | None = None,
) -> JobContext:
    """The job context the settings describe (one definition for the API and the worker process);
    ``hosts``: :func:`features_party.context.torchrun_hosts` of the settings."""
    data_dir = Path(settings.features_data_dir)
    return JobContext(
        session_factory=session_factory,
        data_dir=data_dir,
        objects=open_object_store(settings, data_dir),
        device=settings.device,
        threads=settings.training_threads,
        workers=settings.training_workers,
        streaming=settings.training_streaming,
        stream_above_rows=settings.training_stream_above_rows,
        row_group_rows=settings.training_row_group_rows,
        buffer_row_groups=settings.training_buffer_row_groups,
        join_partition_rows=settings.training_join_partition_rows,
        on_status=on_status,
        on_trained=on_trained,
        hosts=hosts,
        lease_seconds=settings.training_lease_seconds,
        progress_seconds=settings.training_progress_seconds,
    )
