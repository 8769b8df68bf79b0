"""Creating label sets and reading their state (counts, budget, releases)."""

from __future__ import annotations

import json
import math
import re
import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session, sessionmaker

from labeldp.epsilon import InvalidEpsilon, from_micro, positive_micro
from labeldp.http_api import ApiError

from .store import LabelRow, LabelSetRow, ReleaseRow

MAX_ID_LENGTH = 128
_ID_PATTERN = re.compile(r"^[^\x00-\x1f]{1,128}$")


MAX_CLASSES = 1000


class DomainIn(BaseModel):
    low: float
    high: float


class LabelSetCreate(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    label_type: Literal["real", "integer", "categorical"] = "real"
    domain: DomainIn | None = Field(None, description="label range; real and integer label sets")
    classes: list[str] | None = Field(None, description="class names; categorical label sets")
    total_epsilon: float | str
    ids: list[str | int] = Field(min_length=1)


def _validate_domain(body: LabelSetCreate) -> tuple[float, float, list[str] | None]:
    """(low, high, classes): categorical sets have low = 0, high = K − 1 over class indices."""
    if body.label_type == "categorical":
        classes = body.classes or []
        if not (2 <= len(classes) <= MAX_CLASSES):
            raise ApiError(422, "invalid_classes", f"a categorical label set needs 2 to {MAX_CLASSES} classes")
        if len(set(classes)) != len(classes) or any(not c or len(c) > 200 for c in classes):
            raise ApiError(422, "invalid_classes", "class names must be unique, non-empty, at most 200 characters")
        return 0.0, float(len(classes) - 1), list(classes)
    if body.domain is None:
        raise ApiError(422, "invalid_domain", "real and integer label sets need a domain {low, high}")
    if body.classes is not None:
        raise ApiError(422, "invalid_classes", "classes are only for categorical label sets")
    low, high = body.domain.low, body.domain.high
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ApiError(422, "invalid_domain", "domain needs finite low < high")
    if body.label_type == "integer" and not (float(low).is_integer() and float(high).is_integer()):
        raise ApiError(422, "invalid_domain", "an integer domain needs integer ends")
    return float(low), float(high), None


def create_label_set(sessions: sessionmaker[Session], body: LabelSetCreate) -> dict[str, Any]:
    """Validate and store a label set with its public ids; no labels yet."""
    low, high, classes = _validate_domain(body)
    try:
        budget = positive_micro(body.total_epsilon)
    except InvalidEpsilon as exc:
        raise ApiError(422, "invalid_epsilon", str(exc)) from exc
    ids = [str(i) for i in body.ids]
    bad = [n for n, i in enumerate(ids) if not _ID_PATTERN.match(i)]
    if bad:
        raise ApiError(
            422,
            "invalid_ids",
            f"{len(bad)} ids are empty, longer than {MAX_ID_LENGTH} characters or hold control characters",
            [{"index": n} for n in bad[:100]],
        )
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        dups = []
        for i in ids:
            if i in seen:
                dups.append(i)
            seen.add(i)
        raise ApiError(
            422, "duplicate_ids", f"{len(dups)} duplicate ids", [{"id": d} for d in dups[:100]]
        )
    label_set_id = "ls_" + uuid.uuid4().hex
    with sessions.begin() as s:
        s.add(
            LabelSetRow(
                id=label_set_id,
                name=body.name,
                label_type=body.label_type,
                classes_json=None if classes is None else json.dumps(classes),
                domain_low=low,
                domain_high=high,
                budget_micro=budget,
                spent_micro=0,
                n_ids=len(ids),
            )
        )
        s.flush()
        s.execute(
            insert(LabelRow),
            [{"label_set_id": label_set_id, "example_id": i, "value": None} for i in ids],
        )
    return get_label_set(sessions, label_set_id)


def class_names(row: LabelSetRow) -> list[str] | None:
    return None if row.classes_json is None else list(json.loads(row.classes_json))


def load_label_set(s: Session, label_set_id: str) -> LabelSetRow:
    row = s.get(LabelSetRow, label_set_id)
    if row is None:
        raise ApiError(404, "label_set_not_found", "no such label set")
    return row


def get_label_set(sessions: sessionmaker[Session], label_set_id: str) -> dict[str, Any]:
    """Counts, budget total/spent/remaining and the releases of a label set."""
    with sessions() as s:
        row = load_label_set(s, label_set_id)
        labeled = s.scalar(
            select(func.count())
            .select_from(LabelRow)
            .where(LabelRow.label_set_id == label_set_id, LabelRow.value.is_not(None))
        )
        releases = s.scalars(
            select(ReleaseRow)
            .where(ReleaseRow.label_set_id == label_set_id)
            .order_by(ReleaseRow.created_at)
        ).all()
        return {
            "id": row.id,
            "name": row.name,
            "label_type": row.label_type,
            "domain": None if row.label_type == "categorical" else {"low": row.domain_low, "high": row.domain_high},
            "classes": class_names(row),
            "counts": {"ids": row.n_ids, "labeled": labeled, "missing": row.n_ids - labeled},
            "budget": {
                "total_epsilon": from_micro(row.budget_micro),
                "spent_epsilon": from_micro(row.spent_micro),
                "remaining_epsilon": from_micro(row.budget_micro - row.spent_micro),
                "total_micro": row.budget_micro,
                "spent_micro": row.spent_micro,
                "remaining_micro": row.budget_micro - row.spent_micro,
            },
            "releases": [
                {
                    "id": r.id,
                    "status": r.status,
                    "mechanism": r.mechanism,
                    "epsilon": from_micro(r.epsilon_micro),
                }
                for r in releases
            ],
            "created_at": row.created_at.isoformat(),
        }
