"""Releases as jobs: the API checks and queues one; a release worker privatizes, writes the
message, then charges every id and turns the job into a charged release in ONE transaction.

Order matters (docs/architecture.md, invariants 3 and 4, "Release jobs"): every check that can
fail runs before anything is charged (the cheap ones in the request, which records the job and
its idempotency answer together; the rest in the worker, which fails the job with the error's
code and charges nothing); the message (its shards and manifest, :mod:`labeldp.message_shards`)
is written as objects in the store before the final transaction (objects no committed row names
are never sent), and a message the inbox's published size limits could not take fails the job
there, before the charge; the per-id ledger charge, the label set's spend and the row turned
``pending`` commit together or not at all, and only while the worker still owns the job.
Delivery later resends those bytes, never new ones.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from labeldp.epsilon import EpsilonIn, InvalidEpsilon, delta_units_ceil, exact_micro, from_delta_units, from_micro
from labeldp.errors import Conflict, InvalidInput, LabelDPError, NotFound, Unavailable
from labeldp.mechanisms import LabelDomain
from labeldp.mechanisms.registry import NAMES
from labeldp.message_shards import WrittenMessage, write_message_chunks
from labeldp.randomness import secure_generator
from labeldp.release.defaults import AUTO, default_mechanism
from labeldp.release.randomizer import Release, check_request, validate_public_prior
from labeldp.schema import FEATURE_TABLE_NAME, ReleaseMetadata
from labeldp.service.events import Snapshot
from labeldp.service.idempotency import Claim, StoredResponse
from labeldp.service.logs import current_request_id, new_request_id
from labeldp.service.pagination import ASC, Order, keyset_page
from labeldp.service.settings import ApiKey, message_limits
from labeldp.service.timestamps import iso

from . import audit, ledger, responses
from .columnar import release_unused_memory
from .context import LabelsContext, message_file, message_prefix
from .delivery_outcomes import shown
from .label_sets import LABELS_DELETED, class_names, ids_remaining, iter_labelled_chunks, load_label_set
from .privacy_domains import find_domain
from .store import RELEASE_JOB_STATES, LabelSetRow, PrivacyDomainRow, ReleaseRow

log = logging.getLogger("labeldp.labels")

MAX_PRIOR_POINTS = 100_000


class PriorIn(BaseModel):
    """A public prior: it costs no ε, so it must not come from these labels."""

    model_config = ConfigDict(extra="forbid")

    values: list[StrictFloat | StrictInt] = Field(max_length=MAX_PRIOR_POINTS)
    probs: list[StrictFloat | StrictInt] = Field(max_length=MAX_PRIOR_POINTS)
    source: str = Field(
        min_length=1,
        max_length=200,
        description="where the prior comes from (e.g. 'last year's published histogram'); it must not be derived "
        "from the labels of this label set",
    )


class ReleaseCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mechanism: str = Field(
        "auto",
        max_length=40,
        description="a mechanism of the catalogue, or auto (the default rule)",
        json_schema_extra={"enum": ["auto", *NAMES]},
    )
    params: dict[str, Any] | None = Field(None, description="mechanism parameters, e.g. {'loss': 'absolute'}")
    epsilon: EpsilonIn = Field(description="ε charged to every id, a multiple of 0.000001")
    epsilon_prior: EpsilonIn | None = None
    prior: PriorIn | None = Field(None, description="a public prior (costs no ε)")
    feature_table: str | None = Field(
        None,
        pattern=FEATURE_TABLE_NAME,
        description="a hint for the features party (a table name: letters, digits, `_`, `.`, `-`, at most 64); "
        "the table is chosen when it trains. It crosses to the features party, so it holds nothing else",
    )


def _micro(value: object, field: str, allow_zero: bool = False) -> int:
    try:
        return exact_micro(value, allow_zero=allow_zero)
    except InvalidEpsilon as exc:
        raise InvalidInput("invalid_epsilon", f"{field}: {exc}") from exc


def _exhausted(needed: str, left: str) -> LabelDPError:
    return Conflict("budget_exhausted", f"release needs {needed} but {left} remains")


def create_release(
    ctx: LabelsContext, label_set_id: str, body: ReleaseCreate, claim: Claim | None, key: ApiKey | None = None
) -> StoredResponse:
    """Check a release request and queue it as a job (202); a release worker privatizes and charges it.

    Everything that can be refused without the labels' heavy work is refused here, with
    nothing recorded: the ε, the mechanism and its parameters, a public prior, the label set
    (ids, every label present) and its cap — counting what its queued and running jobs will
    charge — and the per-id budget where the catalogue alone cannot vouch for it. The row,
    its request and the idempotency answer commit together: a replay finds this job.
    """
    charge = _micro(body.epsilon, "epsilon")
    if body.epsilon_prior is not None:
        _micro(body.epsilon_prior, "epsilon_prior", True)

    with ctx.sessions() as s:
        domain_id = load_label_set(s, label_set_id).privacy_domain_id
    ledger.ensure_bucketed(ctx, domain_id)  # a domain from before buckets, once
    with ctx.sessions() as s:
        ls = load_label_set(s, label_set_id)
        domain_row = s.get(PrivacyDomainRow, ls.privacy_domain_id)
        assert domain_row is not None
        most_spent, _ = ledger.summary(s, domain_row)
    classes = class_names(ls)
    domain = _label_domain(ls, classes)
    if not ls.ids_ready:
        raise Conflict("ids_missing", "the label set has no ids yet")
    if ls.labels_version == LABELS_DELETED:
        raise Conflict("labels_deleted", "this label set's raw labels were deleted")
    if ls.labeled < ls.n_ids:
        raise Conflict("labels_incomplete", f"{ls.n_ids - ls.labeled} ids of the label set have no label yet")
    if charge > ls.cap_micro - ls.spent_micro:
        raise _exhausted(
            f"epsilon {from_micro(charge)}", f"{from_micro(ls.cap_micro - ls.spent_micro)} of the label set's cap"
        )
    mechanism = body.mechanism
    if mechanism == AUTO:
        mechanism = default_mechanism(ls.label_type, from_micro(charge), int(ls.n_ids))
    # A RandomizerError is an InvalidInput: the edge answers 422 with its code.
    if body.prior is not None:
        validate_public_prior(list(map(float, body.prior.values)), list(map(float, body.prior.probs)), domain)
    check_request(mechanism, charge, None if classes is not None else domain, classes=classes, params=body.params)
    if charge > domain_row.epsilon_budget_micro - most_spent:
        # Some id of the domain may lack it: read this set's ids' buckets, a bucket group at a time
        # (the worker checks again, exactly).
        id_eps, _ = ids_remaining(ctx, None, domain_row, ls)
        if charge > id_eps:
            raise _exhausted(
                f"epsilon {from_micro(charge)} of every id", f"{from_micro(max(id_eps, 0))} (smallest over its ids)"
            )

    release_id = "rel_" + uuid.uuid4().hex
    outgoing_request_id = new_request_id()
    with ctx.sessions.begin() as s:
        ls = load_label_set(s, label_set_id, for_update=True)
        reserved = s.scalar(
            select(func.coalesce(func.sum(ReleaseRow.epsilon_micro), 0)).where(
                ReleaseRow.label_set_id == label_set_id, ReleaseRow.status.in_(JOB_RESERVES)
            )
        )
        left = ls.cap_micro - ls.spent_micro - int(reserved or 0)
        if charge > left:
            raise _exhausted(
                f"epsilon {from_micro(charge)}",
                f"{from_micro(max(left, 0))} of the label set's cap (after the releases queued on it)",
            )
        row = ReleaseRow(
            id=release_id,
            label_set_id=label_set_id,
            mechanism=mechanism,
            epsilon_micro=charge,
            delta_units=0,
            prior_source=None if body.prior is None else body.prior.source,
            feature_table=body.feature_table,
            row_count=int(ls.n_ids),
            status=QUEUED,
            created_at=datetime.now(UTC),
            request_id=outgoing_request_id,
            request_json=body.model_dump_json(),
            job_lease_until=0.0,
            job_attempts=0,
            attempts=0,
            next_attempt_at=0.0,
            lease_until=0.0,
        )
        s.add(row)
        s.flush()
        audit_domain_id, audit_domain = audit.domain_of_label_set(s, label_set_id)
        audit.record(
            s, audit.RELEASE_QUEUED, key=key, scope="release", domain_id=audit_domain_id, domain=audit_domain,
            subject_id=release_id,
            details={"label_set_id": label_set_id, "mechanism": mechanism, "epsilon_micro": charge},
        )
        response = StoredResponse(202, describe(row).model_dump(), {"Location": f"/v1/releases/{release_id}"})
        if claim is not None:
            claim.complete(s, response)
    ctx.jobs_queued.set()  # this process's release worker, if it runs one, looks now
    # The client's request id stays here: the features party sees only the fresh outgoing one,
    # and this line (logged under the client's id) is the one place that links the two.
    log.info("release %s: client request %s is sent to the features party as %s", release_id,
             current_request_id(), outgoing_request_id)
    return response


def _label_domain(ls: LabelSetRow, classes: list[str] | None) -> LabelDomain:
    return (
        LabelDomain("integer", 0, len(classes) - 1)
        if classes is not None
        else LabelDomain(ls.label_type, ls.domain_low, ls.domain_high)  # type: ignore[arg-type]
    )


class LeaseLost(Exception):
    """The job is no longer this worker's (its lease ran out and another worker took it): stop, touch nothing."""


def run_job(ctx: LabelsContext, release_id: str, owner: str, lost: Callable[[], bool] = lambda: False) -> None:
    """Privatize a claimed release job, write its message and charge it in one transaction (the worker's part).

    ``owner`` must hold the job (status running); the final transaction is a compare-and-swap
    on that, so a worker whose lease was taken over commits nothing. Raises LabelDPError for a
    release that cannot be made (the worker fails the job with its code, nothing charged),
    :class:`LeaseLost` when ``lost()`` or the swap says the job moved on.
    """
    with ctx.sessions() as s:
        job = _load(s, release_id)
        if job.status != RUNNING or job.job_owner != owner:
            raise LeaseLost(release_id)
        label_set_id, mechanism, charge = job.label_set_id, job.mechanism, int(job.epsilon_micro)
        attempt = int(job.job_attempts or 1)
        body = ReleaseCreate.model_validate_json(job.request_json or "{}")
    prior_micro = None if body.epsilon_prior is None else _micro(body.epsilon_prior, "epsilon_prior", True)

    with ctx.sessions() as s:
        domain_id = load_label_set(s, label_set_id).privacy_domain_id
    ledger.ensure_bucketed(ctx, domain_id)
    with ctx.sessions() as s:
        ls = load_label_set(s, label_set_id)
        domain_row = s.get(PrivacyDomainRow, ls.privacy_domain_id)
        assert domain_row is not None
    classes = class_names(ls)
    domain = _label_domain(ls, classes)
    if charge > ls.cap_micro - ls.spent_micro:
        raise _exhausted(
            f"epsilon {from_micro(charge)}", f"{from_micro(ls.cap_micro - ls.spent_micro)} of the label set's cap"
        )
    public_prior = (
        None
        if body.prior is None
        else validate_public_prior(list(map(float, body.prior.values)), list(map(float, body.prior.probs)), domain)
    )
    # The release is made a stored chunk at a time (memory bounded whatever the set's size):
    # pass one reads every (id, label) once — the ids split by ledger bucket group into work
    # objects, the labels into what the prior needs — then the prior is obtained once; pass two
    # privatizes each chunk and streams it into the message; the charge is planned a group at a time.
    release = Release(
        int(ls.n_ids), None if classes is not None else domain, mechanism, charge,
        epsilon_prior_micro=prior_micro, public_prior=public_prior, classes=classes, params=body.params,
        auto=body.mechanism == AUTO,  # auto's rp_with_prior may become rr_on_bins from its own prior
    )
    rng = secure_generator()
    missing = 0

    def pass_one() -> Iterator[pa.Array]:
        nonlocal missing
        for ids, labels in iter_labelled_chunks(ctx, ls):
            gaps = int(np.count_nonzero(np.isnan(labels)))
            missing += gaps
            if not missing:
                release.add(labels, rng)
            del labels
            yield ids

    written: WrittenMessage | None = None
    with ctx.scratch() as scratch:  # the id groups: this job's own working files, removed at its end
        spilled = ledger.spill_ids(scratch, "groups", pass_one(), domain_row.n_buckets, domain_row.n_ids)
        try:
            if spilled.n != ls.n_ids:
                raise RuntimeError("the label set's stored ids are not its row count")
            # Every id's spend is read only when the buckets' rows cannot show that all can pay (their
            # most-spent id's µε); δ only when the fitted release spends some (no id is ever past its budget).
            id_delta: int | None = None
            if not ledger.affordable_by_rows(ctx, domain_row, spilled.buckets, charge):
                id_eps, id_delta = ledger.remaining_for_spilled(ctx, None, domain_row, spilled)
                if charge > id_eps:
                    raise _exhausted(
                        f"epsilon {from_micro(charge)} of every id",
                        f"{from_micro(max(id_eps, 0))} (smallest over its ids)",
                    )
            if missing:
                raise Conflict("labels_incomplete", f"{missing} ids of the label set have no label yet")
            fitted = release.fit(rng)
            if fitted.accounting.total_epsilon_micro != charge:
                raise RuntimeError("the randomizer's accounting does not add up to the charge")
            delta_units = delta_units_ceil(fitted.accounting.delta)
            if delta_units and id_delta is None:
                _, id_delta = ledger.remaining_for_spilled(ctx, None, domain_row, spilled)
            if delta_units and id_delta is not None and delta_units > id_delta:
                raise _exhausted(
                    f"delta {fitted.accounting.delta:g} of every id", f"{from_delta_units(max(id_delta, 0)):g}"
                )
            if lost():
                raise LeaseLost(release_id)

            message = ReleaseMetadata(
                release_id=release_id,
                label_set_id=label_set_id,
                feature_table=body.feature_table,
                created_at=datetime.now(UTC),
                mechanism=fitted.mechanism,
                prior=fitted.prior,
                accounting=fitted.accounting,
                row_count=int(ls.n_ids),
            )

            def pass_two() -> Iterator[tuple[pa.Array, np.ndarray]]:
                for ids, labels in iter_labelled_chunks(ctx, ls):
                    out = fitted.privatize(labels, rng)
                    del labels  # raw labels go no further than this function
                    yield ids, out

            # The message: its shards and manifest as objects, one shard in memory at a time, under one
            # prefix per attempt (a worker that lost its lease may still be writing its own); a message the
            # inbox's published limits could not take fails the job here, before anything is charged.
            limits = message_limits(ctx.settings)
            prefix = message_prefix(release_id if attempt <= 1 else f"{release_id}.{attempt}")
            written = write_message_chunks(ctx.store, prefix, message, pass_two(), limits)
            release_unused_memory()
            # The ledger's next bucket versions are computed outside any lock, a bucket group at a
            # time; the transaction swaps them in only if no other commit moved them (else: recompute
            # those, retry).
            with _refused_if_exhausted():
                plan = ledger.plan_charge(ctx, domain_id, spilled, charge, delta_units)
            for _ in range(ledger.MAX_ATTEMPTS):
                if lost():
                    raise LeaseLost(release_id)
                try:
                    _commit(ctx, label_set_id, plan, message, release_id, owner, written)
                    break
                except ledger.StaleBuckets as stale:
                    with _refused_if_exhausted():
                        plan = ledger.replan(ctx, plan, stale.buckets)
            else:
                raise Unavailable("ledger_contention", "the privacy domain's ledger is too busy; retry")
        except BaseException:
            for key in () if written is None else written.keys:
                with contextlib.suppress(LabelDPError):  # the sweep removes it if the store is away now
                    ctx.store.delete(key)
            raise
        finally:
            spilled.__exit__()
    release_unused_memory()


@contextlib.contextmanager
def _refused_if_exhausted() -> Iterator[None]:
    try:
        yield
    except ledger.BudgetExhausted as exc:
        raise Conflict(
            "budget_exhausted", f"{exc.ids_over} ids of the label set lack the {exc.resource} budget"
        ) from None


def _commit(
    ctx: LabelsContext, label_set_id: str, plan: ledger.ChargePlan, message: ReleaseMetadata, release_id: str,
    owner: str, written: WrittenMessage,
) -> None:
    """The one short transaction: the job still this worker's, the label set's cap, the ledger's swap,
    and the release row turned ``pending`` (the outbox's) with its message — all or nothing."""
    charge, delta_units = plan.eps, plan.delta
    with ctx.sessions.begin() as s:
        domain_row = ledger.lock_domain(s, plan.domain_id)
        ls = load_label_set(s, label_set_id, for_update=True)
        row = s.get(ReleaseRow, release_id, with_for_update=True)
        if row is None or row.status != RUNNING or row.job_owner != owner:
            raise LeaseLost(release_id)
        if ls.spent_micro + charge > ls.cap_micro:
            raise _exhausted(f"epsilon {from_micro(charge)}", "less of the label set's cap")
        ledger.commit_charge(s, domain_row, plan)
        ls.spent_micro = ls.spent_micro + charge
        row.mechanism = message.mechanism.name  # auto's pick after its prior (defaults.tail_pick)
        row.delta_units = delta_units
        row.accounting_json = message.accounting.model_dump_json()
        row.row_count = message.row_count
        row.message_file = message_file(written.manifest_key)
        row.message_bytes = written.total_bytes
        row.message_sha256 = written.manifest_sha256
        row.status = "pending"
        row.job_owner = None
        row.job_lease_until = 0.0
        audit.record_release(s, audit.RELEASE_CHARGED, release_id, label_set_id, {
            "epsilon_micro": charge, "delta_units": delta_units, "rows": message.row_count,
            "message_sha256": written.manifest_sha256,
        })
    log.info("release %s charged %s and queued for delivery", release_id, from_micro(charge))


QUEUED, RUNNING, FAILED = RELEASE_JOB_STATES
JOB_RESERVES = (QUEUED, RUNNING)
"""A job in these states holds its ε against the label set's cap until it is charged or fails."""

JOB_STAGES = ("accepted", "privatizing", "failed")
"""A release before its charge: waiting for a release worker (status ``queued``), being privatized
and charged by one (``running``), or ended with nothing charged (``failed``, with its ``error``)."""

DELIVERY_STAGES = ("queued", "sending", "retrying", "delivered", "rejected")
"""Where a charged release is on its way: waiting for the outbox, being sent (the outbox holds
its lease), waiting to retry after a failed attempt, then delivered or rejected."""

STAGES = JOB_STAGES + DELIVERY_STAGES
FINAL_STATES = ("delivered", "rejected", FAILED)


def stage(r: ReleaseRow, now: float | None = None) -> str:
    """The release's stage (:data:`STAGES`): its job's, then once charged its delivery's."""
    if r.status in JOB_STAGE_OF:
        return JOB_STAGE_OF[r.status]
    if r.status in ("delivered", "rejected"):
        return r.status
    if (r.lease_until or 0.0) > (time.time() if now is None else now):
        return "sending"
    return "retrying" if (r.attempts or 0) > 0 else "queued"


JOB_STAGE_OF = dict(zip(RELEASE_JOB_STATES, JOB_STAGES, strict=True))


def describe(r: ReleaseRow) -> responses.Release:
    return responses.Release(
        id=r.id,
        label_set_id=r.label_set_id,
        status=r.status,
        stage=stage(r),
        mechanism=r.mechanism,
        epsilon=from_micro(r.epsilon_micro),
        epsilon_micro=r.epsilon_micro,
        delta=from_delta_units(r.delta_units or 0),
        accounting=None if r.accounting_json is None else json.loads(r.accounting_json),
        prior_source=r.prior_source,
        feature_table=r.feature_table,
        row_count=r.row_count,
        message_sha256=r.message_sha256,
        message_bytes=r.message_bytes,
        attempts=r.attempts or 0,
        last_error=shown(r.last_error),
        job_attempts=r.job_attempts or 0,
        error=None if r.error_code is None else responses.ReleaseError(
            code=r.error_code, message=r.error_message or ""
        ),
        created_at=iso(r.created_at),
        delivered_at=iso(r.delivered_at),
        message_removed_at=iso(r.message_removed_at),
    )


def _load(s: Session, release_id: str) -> ReleaseRow:
    r = s.get(ReleaseRow, release_id)
    if r is None:
        raise NotFound("release_not_found", "no such release")
    return r


def get_release(ctx: LabelsContext, release_id: str) -> responses.Release:
    """A release's status and accounting; never reads the message bytes."""
    with ctx.sessions() as s:
        return describe(_load(s, release_id))


def redeliver(ctx: LabelsContext, release_id: str) -> responses.Release:
    """Queue a rejected release again: same bytes, so no new charge."""
    with ctx.sessions.begin() as s:
        r = _load(s, release_id)
        if r.status == "delivered":
            raise Conflict("already_delivered", "release was already delivered")
        if r.status in RELEASE_JOB_STATES:
            raise Conflict("release_not_charged", f"the release is {r.status}: it has no message to deliver")
        r.status = "pending"
        r.next_attempt_at = 0.0
        s.flush()
        return describe(r)


def release_snapshot(ctx: LabelsContext, release_id: str) -> Snapshot:
    """One poll of ``GET /v1/releases/{id}/events``: the release as ``GET`` shows it (catalogue
    facts, never the message or a label); over once delivered, rejected or failed."""
    with ctx.sessions() as s:
        body = describe(_load(s, release_id))
    return Snapshot(body.model_dump(), body.status in FINAL_STATES, (body.stage, body.attempts, body.job_attempts))


def list_releases(
    ctx: LabelsContext, label_set_id: str | None, limit: int, cursor: str | None,
    privacy_domain: str | None = None, *, known_set: bool = False, order: Order = ASC,
) -> responses.ReleasePage:
    """A page of releases in creation ``order``, optionally of one label set or of one privacy domain (its id:
    404 ``privacy_domain_not_found`` for anything else, a name included);
    never reads message bytes. ``known_set``: the set must exist (404 ``label_set_not_found``, the
    sub-collection ``/label-sets/{id}/releases``); a filter that matches nothing is an empty page."""
    stmt = select(ReleaseRow)
    if label_set_id is not None:
        stmt = stmt.where(ReleaseRow.label_set_id == label_set_id)
    if privacy_domain is not None:
        stmt = stmt.join(LabelSetRow, LabelSetRow.id == ReleaseRow.label_set_id).where(
            LabelSetRow.privacy_domain_id == privacy_domain
        )
    with ctx.sessions() as s:
        if privacy_domain is not None:
            find_domain(s, privacy_domain)
        if known_set and label_set_id is not None:
            load_label_set(s, label_set_id)
        return responses.ReleasePage(
            **keyset_page(s, stmt, ReleaseRow.created_at, ReleaseRow.id, limit, cursor, describe, order)
        )
