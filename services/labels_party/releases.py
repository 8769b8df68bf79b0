"""Releases: validate, privatize, then charge the ledger and store the message in ONE transaction.

Order matters (DESIGN.md invariants 3 and 4): every check that can fail runs
before anything is charged; the message is computed before the transaction
(a message that is never stored is never sent, so computing it costs nothing);
the conditional UPDATE of ``spent`` and the INSERT of the exact message bytes
commit together or not at all. Delivery later resends those bytes, never new ones.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime, timezone
from typing import Any

import numpy as np
from pydantic import BaseModel, Field
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from labeldp.epsilon import InvalidEpsilon, from_micro, positive_micro, to_micro_ceil
from labeldp.http_api import ApiError
from labeldp.mechanisms import LabelDomain
from labeldp.randomness import secure_generator
from labeldp.schema import LabelRelease, encode_payload, payload_digest

from .defaults import AUTO, default_mechanism
from .label_sets import class_names, load_label_set
from .randomizer import RandomizerError, randomize, validate_public_prior
from .store import LabelRow, LabelSetRow, ReleaseRow


class PriorIn(BaseModel):
    values: list[float]
    probs: list[float]


class ReleaseCreate(BaseModel):
    mechanism: str = Field("auto", description="a mechanism of the catalogue, or auto (the default rule)")
    params: dict[str, Any] | None = Field(None, description="mechanism parameters, e.g. {'loss': 'absolute'}")
    epsilon: float | str
    epsilon_prior: float | str | None = None
    prior: PriorIn | None = Field(None, description="a public prior (costs no ε)")
    feature_table: str | None = Field(None, max_length=64)


def _micro(value: float | str, field: str, allow_zero: bool = False) -> int:
    try:
        if allow_zero:
            micro = to_micro_ceil(value)
            if micro < 0:
                raise InvalidEpsilon(f"{field} must be >= 0")
            return micro
        return positive_micro(value)
    except InvalidEpsilon as exc:
        raise ApiError(422, "invalid_epsilon", f"{field}: {exc}") from exc


def create_release(sessions: sessionmaker[Session], label_set_id: str, body: ReleaseCreate) -> dict[str, Any]:
    """Privatize a label set and store the charged message; raises ApiError on any problem."""
    charge = _micro(body.epsilon, "epsilon")
    prior_micro = None if body.epsilon_prior is None else _micro(body.epsilon_prior, "epsilon_prior", True)

    with sessions() as s:
        ls = load_label_set(s, label_set_id)
        label_type = ls.label_type
        classes = class_names(ls)
        domain = (
            LabelDomain("integer", 0, len(classes) - 1)
            if classes is not None
            else LabelDomain(ls.label_type, ls.domain_low, ls.domain_high)  # type: ignore[arg-type]
        )
        remaining = ls.budget_micro - ls.spent_micro
        rows = s.execute(
            select(LabelRow.example_id, LabelRow.value).where(LabelRow.label_set_id == label_set_id)
        ).all()
    if charge > remaining:
        raise ApiError(
            409,
            "budget_exhausted",
            f"release needs epsilon {from_micro(charge)} but {from_micro(remaining)} remains",
        )
    missing = sum(1 for _, v in rows if v is None)
    if missing:
        raise ApiError(409, "labels_incomplete", f"{missing} ids of the label set have no label yet")

    rows = sorted(rows, key=lambda r: r[0])  # canonical order: ids sorted, independent of labels
    ids = [r[0] for r in rows]
    labels = np.fromiter((r[1] for r in rows), dtype=np.float64, count=len(rows))
    mechanism = body.mechanism
    if mechanism == AUTO:
        mechanism = default_mechanism(label_type, from_micro(charge))
    try:
        public_prior = (
            None if body.prior is None else validate_public_prior(body.prior.values, body.prior.probs, domain)
        )
        out = randomize(
            labels,
            None if classes is not None else domain,
            mechanism,
            charge,
            secure_generator(),
            epsilon_prior_micro=prior_micro,
            public_prior=public_prior,
            classes=classes,
            params=body.params,
        )
    except RandomizerError as exc:
        raise ApiError(422, exc.code, str(exc)) from exc
    del labels  # raw labels go no further than this function

    release_id = "rel_" + uuid.uuid4().hex
    message = LabelRelease(
        release_id=release_id,
        label_set_id=label_set_id,
        feature_table=body.feature_table,
        created_at=datetime.now(timezone.utc),
        mechanism=out.mechanism,
        prior=out.prior,
        accounting=out.accounting,
        row_count=len(ids),
        payload_digest=payload_digest(ids, out.labels),
        payload=encode_payload(ids, out.labels),
    )
    message_bytes = message.model_dump_json().encode("utf-8")
    assert out.accounting.total_epsilon_micro == charge

    with sessions.begin() as s:  # BEGIN IMMEDIATE on SQLite
        charged = s.execute(
            update(LabelSetRow)
            .where(
                LabelSetRow.id == label_set_id,
                LabelSetRow.spent_micro + charge <= LabelSetRow.budget_micro,
            )
            .values(spent_micro=LabelSetRow.spent_micro + charge)
        )
        if charged.rowcount != 1:
            raise ApiError(409, "budget_exhausted", "the label set's remaining budget is too small")
        s.add(
            ReleaseRow(
                id=release_id,
                label_set_id=label_set_id,
                mechanism=mechanism,
                epsilon_micro=charge,
                accounting_json=out.accounting.model_dump_json(),
                feature_table=body.feature_table,
                row_count=len(ids),
                message=message_bytes,
                message_sha256=hashlib.sha256(message_bytes).hexdigest(),
                status="pending",
            )
        )
    return get_release(sessions, release_id)


def get_release(sessions: sessionmaker[Session], release_id: str) -> dict[str, Any]:
    with sessions() as s:
        r = s.get(ReleaseRow, release_id)
        if r is None:
            raise ApiError(404, "release_not_found", "no such release")
        return {
            "id": r.id,
            "label_set_id": r.label_set_id,
            "status": r.status,
            "mechanism": r.mechanism,
            "epsilon": from_micro(r.epsilon_micro),
            "epsilon_micro": r.epsilon_micro,
            "accounting": json.loads(r.accounting_json),
            "feature_table": r.feature_table,
            "row_count": r.row_count,
            "message_sha256": r.message_sha256,
            "message_bytes": len(r.message),
            "attempts": r.attempts,
            "last_error": r.last_error,
            "created_at": r.created_at.isoformat(),
            "delivered_at": r.delivered_at.isoformat() if r.delivered_at else None,
        }


def redeliver(sessions: sessionmaker[Session], release_id: str) -> dict[str, Any]:
    """Queue a rejected release again: same bytes, so no new charge."""
    with sessions.begin() as s:
        r = s.get(ReleaseRow, release_id)
        if r is None:
            raise ApiError(404, "release_not_found", "no such release")
        if r.status == "delivered":
            raise ApiError(409, "already_delivered", "release was already delivered")
        r.status = "pending"
        r.next_attempt_at = 0.0
    return get_release(sessions, release_id)


def status_counts(sessions: sessionmaker[Session]) -> dict[str, int]:
    with sessions() as s:
        return dict(s.execute(select(ReleaseRow.status, func.count()).group_by(ReleaseRow.status)).all())
