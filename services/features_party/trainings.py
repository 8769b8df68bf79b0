"""The trainings catalogue: queue a training, read it, list them, cancel one.

The queue is the trainings table: any API process queues a row here, after every check
(the release, the feature table holding every one of its ids, for a release of at most
``LABELDP_TRAINING_JOIN_CHECK_ROWS`` rows: a larger one's stage checks it, the learning
options) and before anything is written; a worker runs it (:mod:`features_party.training_run`). The
queue is bounded (``LABELDP_TRAINING_QUEUE_MAX`` queued rows; more get 429
``training_queue_full`` and create nothing). The reads show the row with its live progress
(:mod:`features_party.progress`) and its place in the queue, on any API process. A queued
training is cancelled at once; a running one at its next batch boundary, once its worker
sees the cancel (docs/architecture.md, "Training jobs", "Progress and events").
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any, cast

import pyarrow as pa
from sqlalchemy import CursorResult, and_, func, or_, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from features_party import feature_tables, inbox, responses, store
from features_party.progress import ProgressBoard, describe_progress, stored_progress
from features_party.store import CANCELLED, CANCELLING, FAILED, QUEUED, RUNNING, SUCCEEDED, TRAINING_STATUSES
from features_party.training_errors import error_body
from features_party.training_fit import check_forward_correction
from features_party.training_request import TrainingOrder, TrainingRequest
from labeldp.errors import Busy, Conflict, InvalidInput, NotFound
from labeldp.learning import streamed
from labeldp.learning.config import LearningConfig
from labeldp.learning.tasks import CLASSIFICATION, LabelTask
from labeldp.service.events import Snapshot
from labeldp.service.idempotency import Claim, StoredResponse
from labeldp.service.pagination import ASC, Order, keyset_page, list_page
from labeldp.service.timestamps import iso, utcnow
from labeldp.storage import ObjectStore

log = logging.getLogger("labeldp.features")

STATUSES = TRAINING_STATUSES
TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED})
QUEUE_LOCK = 0x6C616264  # PostgreSQL advisory lock serializing the queue bound's count-then-insert


def create_training(
    session_factory: sessionmaker[Session],
    objects: ObjectStore,
    request: TrainingRequest,
    claim: Claim | None = None,
    *,
    queue_max: int | None = None,
    retry_after: Callable[[], int] | None = None,
    join_check_rows: int | None = None,
    processes: int = 1,
) -> StoredResponse:
    """Bind the release to a feature table that holds every one of its ids, then queue a training row.

    Every check runs before anything is written. ``join_check_rows``: a release of more rows is queued
    without being read (its stage checks the join: the training fails with ``unknown_ids``); None: every
    release's join is checked here. The training row and, with an
    ``Idempotency-Key``, the stored answer (``claim``) commit in one transaction, so a
    retry either finds both or neither. With ``queue_max``, a full queue is a 429
    ``training_queue_full`` (checked first, and again in that transaction). ``processes``: how many
    train it (workers × hosts), for the options' default batch and learning rate (record 0038).
    """
    with session_factory() as session:
        _check_queue(session, queue_max, retry_after)
        release = inbox.get_release(session, request.release_id)
        table_row = _table_to_join(session, request.feature_table_id, release.feature_table)
        task = LabelTask.of(release.mechanism)
        if request.forward_correction:
            check_forward_correction(task)
        learning = resolve_learning(request, task, release.mechanism)
        release_id = release.release_id
        order = TrainingOrder.of_request(request, learning, processes, release.row_count)
        # A small release's join is checked here (422, nothing queued); a larger one's by its stage,
        # which fails the training with the same code (docs/architecture.md, "Training jobs").
        small = join_check_rows is None or release.row_count <= join_check_rows
        chunks = inbox.release_chunks(release)[1] if small else None
    if chunks is not None:  # the ids alone, shard by shard (each shard's labels dropped as it is read)
        ids = pa.chunked_array([ids.cast(pa.string()) for ids, _labels in chunks], pa.string())
        check_join(objects, table_row, ids)
        del ids

    training_id = "trn_" + uuid.uuid4().hex
    response = StoredResponse(
        202,
        {"id": training_id, "status": QUEUED},
        {"Location": f"/v1/trainings/{training_id}"},
    )
    with session_factory.begin() as session:
        _check_queue(session, queue_max, retry_after, lock=True)
        _check_table_unchanged(session, table_row)
        session.add(
            store.Training(
                training_id=training_id,
                release_id=release_id,
                feature_table=table_row.name,
                feature_table_id=feature_tables.table_id(table_row),
                config=order.stored(),
                status=QUEUED,
                epoch=0,
                epochs=request.epochs,
                history=[],
            )
        )
        if claim is not None:
            claim.complete(session, response)
    log.info("training %s queued for release %s on table %s", training_id, release_id, table_row.name)
    return response


def _table_to_join(session: Session, feature_table_id: str | None, hint: str | None) -> store.FeatureTable:
    """The table a training joins: ``feature_table_id`` (an id only: anything else, a name included, is 422
    ``unknown_feature_table`` saying how to find the id), else the table the release's ``feature_table``
    hint names (422 ``feature_table_required`` when it names none, ``unknown_feature_table`` when none is held)."""
    if feature_table_id is not None:
        try:
            return feature_tables.get_feature_table_by_id(session, feature_table_id)
        except NotFound:
            raise InvalidInput("unknown_feature_table", feature_tables.TABLE_NOT_FOUND) from None
    if not hint:
        raise InvalidInput("feature_table_required", "the release names no feature table; send feature_table_id")
    row = feature_tables.find_hinted_table(session, hint)
    if row is None:
        raise InvalidInput(
            "unknown_feature_table", f"no feature table {hint!r} (the release's hint) is held: send feature_table_id"
        )
    return row


def _check_table_unchanged(session: Session, checked: store.FeatureTable) -> None:
    """The table the join was checked against is still the table of that name, locked until the training's
    row commits: a delete or replace (``feature_tables._lock_unused``) then sees the training and refuses."""
    row = session.execute(
        select(store.FeatureTable).where(store.FeatureTable.name == checked.name).with_for_update()
    ).scalar_one_or_none()
    if row is None:
        raise InvalidInput("unknown_feature_table", f"no feature table {checked.name!r} is held here")
    if row.path != checked.path:
        raise Conflict("feature_table_replaced", "the feature table was replaced while the training was checked; "
                       "retry")


def _check_queue(
    session: Session, queue_max: int | None, retry_after: Callable[[], int] | None, lock: bool = False
) -> None:
    """429 ``training_queue_full`` with ``Retry-After`` when ``queue_max`` trainings wait already.

    ``lock``: hold the queue while counting, so two requests cannot both take the last
    slot (SQLite's transactions already begin IMMEDIATE; PostgreSQL takes an advisory lock).
    """
    if queue_max is None:
        return
    bind = session.get_bind()
    if lock and bind.dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": QUEUE_LOCK})
    queued = session.scalar(select(func.count()).select_from(store.Training).where(store.Training.status == QUEUED))
    if (queued or 0) >= queue_max:
        seconds = retry_after() if retry_after is not None else 30
        raise Busy(
            "training_queue_full",
            f"{queued} trainings are queued (at most {queue_max}); retry later or cancel one",
            details=[{"queued": queued, "queue_max": queue_max}],
            headers={"Retry-After": str(seconds)},
        )


def check_join(objects: ObjectStore, table_row: store.FeatureTable, ids: pa.Array | pa.ChunkedArray) -> None:
    """422 ``unknown_ids`` (a count and a few ids, which are public; never labels) unless the
    table holds every id of the release. The table's ids are read a row group at a time, never whole."""
    missing, examples = feature_tables.missing_from_table(objects, table_row, ids)
    if missing:
        raise feature_tables.unknown_ids_error(missing, examples)


def resolve_learning(request: TrainingRequest, task: LabelTask, spec: Any) -> LearningConfig | None:
    """The learning configuration a training will run with (None: classification), or 422.

    Fields the request leaves out fall back to what can run: without a validation
    split nothing is selected (and debiasing stays off unless asked for, at λ = 1).
    Every mechanism of the registry states its label law; a spec whose law cannot be
    rebuilt is refused (422), never trained plainly in its place. Fields the request
    sets explicitly are honoured or refused, never silently changed.
    """
    explicit = request.model_fields_set & set(LearningConfig.model_fields)
    if task.task == CLASSIFICATION:
        if explicit:
            message = "debias, shrinkage and select_epoch apply to regression releases"
            raise InvalidInput("learning_unavailable", message)
        return None
    learning = request.learning()
    streamed.law_for(spec)
    if request.validation_fraction == 0 and learning.needs_validation:
        debias = learning.debias if "debias" in explicit else "none"
        learning = LearningConfig(
            debias=debias,
            shrinkage=learning.shrinkage if "shrinkage" in explicit else (0.0 if debias == "none" else 1.0),
            select_epoch=learning.select_epoch if "select_epoch" in explicit else False,
        )
        if learning.needs_validation:
            raise InvalidInput(
                "validation_required", "select_epoch and shrinkage='auto' need validation_fraction > 0"
            )
    return learning


def get_training(session: Session, training_id: str) -> store.Training:
    row = session.get(store.Training, training_id)
    if row is None:
        raise NotFound("training_not_found", "no such training")
    return row


def training_status(session: Session, row: store.Training, board: ProgressBoard | None) -> responses.Training:
    """``GET /v1/trainings/{id}``: the stored training with batch-level progress, elapsed time and
    ETA while this process runs it, and its place in the queue while it waits."""
    live = None
    if row.status in (RUNNING, CANCELLING):  # this process's own board, else what the worker wrote
        live = (board.get(row.training_id) if board is not None else None) or stored_progress(row.live)
    return responses.Training(
        id=row.training_id,
        status=row.status,
        release_id=row.release_id,
        feature_table=row.feature_table,
        feature_table_id=row.feature_table_id,
        progress=describe_progress(row, live, utcnow(), succeeded=row.status == SUCCEEDED),
        queue_position=queue_position(session, row),
        history=row.history or [],
        model_id=row.model_id,
        device=row.device,
        attempt=row.attempt or 0,
        error=error_body(row.error),
        created_at=iso(row.created_at),
        started_at=iso(row.started_at),
        finished_at=iso(row.finished_at),
    )


def queue_position(session: Session, row: store.Training) -> int | None:
    """1 for the next training to run; None once it left the queue. Workers claim trainings in
    creation order (:func:`features_party.leases.claim`)."""
    if row.status != QUEUED:
        return None
    earlier = session.scalar(
        select(func.count())
        .select_from(store.Training)
        .where(store.Training.status == QUEUED)
        .where(
            or_(
                store.Training.created_at < row.created_at,
                and_(store.Training.created_at == row.created_at, store.Training.training_id < row.training_id),
            )
        )
    )
    return int(earlier or 0) + 1


def training_snapshot(session_factory: sessionmaker[Session], board: ProgressBoard, training_id: str) -> Snapshot:
    """One poll of a training's event stream: its status without the epoch history (the last
    entry is ``last_epoch``); it changes with the status, the batch and the queue position."""
    with session_factory() as session:
        # As set: the event carries the error envelope without the HTTP-only ``request_id``.
        body = training_status(session, get_training(session, training_id), board).model_dump(exclude_unset=True)
    history = body.pop("history")
    body["last_epoch"] = history[-1] if history else None
    progress = body["progress"]
    key = (body["status"], progress["epoch"], progress["batch"], body["queue_position"])
    return Snapshot(body, body["status"] in TERMINAL, key)


def training_history(
    session: Session, training_id: str, limit: int, cursor: str | None, order: Order = ASC
) -> responses.HistoryPage:
    """A page of a training's per-epoch history, first epoch first or (``desc``) last first (the
    history only grows at its end)."""
    history = list(get_training(session, training_id).history or [])
    return responses.HistoryPage(**list_page(history, limit, cursor, order))


def list_trainings(
    session: Session,
    limit: int,
    cursor: str | None,
    status: str | None = None,
    release_id: str | None = None,
    board: ProgressBoard | None = None,
    order: Order = ASC,
) -> responses.TrainingPage:
    """A page of trainings in creation ``order`` (``status``/``release_id`` filter), each as
    ``GET /v1/trainings/{id}`` shows it (the contract's ``Training``)."""
    if status is not None and status not in STATUSES:
        raise InvalidInput("invalid_status", f"status must be one of {', '.join(STATUSES)}")
    stmt = select(store.Training)
    if status is not None:
        stmt = stmt.where(store.Training.status == status)
    if release_id is not None:
        stmt = stmt.where(store.Training.release_id == release_id)
    return responses.TrainingPage(**keyset_page(
        session, stmt, store.Training.created_at, store.Training.training_id, limit, cursor,
        lambda row: training_status(session, row, board), order,
    ))


def cancel_training(
    session_factory: sessionmaker[Session], board: ProgressBoard, training_id: str
) -> tuple[int, responses.Training]:
    """Cancel a training: a queued one at once (200, ``cancelled``), a running one at its next
    batch boundary (202, ``cancelling``); one already over is a 409 ``training_finished``.

    Each transition is a compare-and-set on the status, so a cancel racing the worker's start
    or finish either wins or sees the state it lost to, never both.
    """
    with session_factory.begin() as session:
        get_training(session, training_id)
        if _move(session, training_id, QUEUED, status=CANCELLED, finished_at=utcnow()):
            code = 200
        elif _move(session, training_id, RUNNING, status=CANCELLING):
            code = 202
        else:
            row = get_training(session, training_id)
            session.refresh(row)
            if row.status != CANCELLING:
                raise Conflict(
                    "training_finished", f"the training is {row.status}", details=[{"status": row.status}]
                )
            code = 202  # asked already: the same answer
        # The answer is the state this request committed: read before the worker is told, which
        # may finish the cancel at its next batch, milliseconds later (202 is always `cancelling`).
        row = get_training(session, training_id)
        session.refresh(row)
        body = training_status(session, row, board)
    if code == 202:
        board.request_cancel(training_id)
    log.info("training %s: cancel requested (%s)", training_id, "cancelled" if code == 200 else "at next batch")
    return code, body


def _move(session: Session, training_id: str, current: str, **values: Any) -> bool:
    """Compare-and-set on a training's status: apply ``values`` only if it is ``current``."""
    result = session.execute(
        update(store.Training)
        .where(store.Training.training_id == training_id, store.Training.status == current)
        .values(**values)
    )
    return cast(CursorResult[Any], result).rowcount == 1
