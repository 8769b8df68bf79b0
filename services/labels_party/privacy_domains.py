"""Privacy domains: the scope in which one id's label is one unit of privacy.

Every label set belongs to a domain; every release charges each of its ids in the
domain's per-id ledger, so label sets that share ids share their budget
(docs/architecture.md, "The per-id ledger"). A domain declares the id namespace it owns
(``id_source``); no two domains may claim one, since two ledgers over the same ids would each
grant the full budget (docs/privacy.md, "Privacy domains"). Creating one needs an ``admin`` key
and is written to the audit log (audit.py) in the same transaction.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from labeldp.epsilon import (
    EpsilonIn,
    InvalidEpsilon,
    delta_units_floor,
    exact_micro,
    from_delta_units,
    from_micro,
)
from labeldp.errors import Conflict, InvalidInput, NotFound
from labeldp.service.idempotency import Claim, StoredResponse
from labeldp.service.pagination import ASC, Order, keyset_page
from labeldp.service.settings import ApiKey
from labeldp.service.timestamps import iso

from . import audit, ledger, responses
from .context import LabelsContext
from .store import PrivacyDomainRow

DEFAULT_DOMAIN = "default"
DEFAULT_ID_SOURCE = "default"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$")
_ID_SOURCE = re.compile(r"^[a-z0-9][a-z0-9._:/@-]{0,199}$")


class PrivacyDomainCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, description="letters, digits and . _ : -")
    id_source: str = Field(
        min_length=1, max_length=200,
        description="the id namespace the domain owns, e.g. `crm:customer_id` (letters, digits and . _ : / @ -, "
        "compared without case): no other domain may claim it, so one id's labels live in one domain",
    )
    epsilon: EpsilonIn = Field(description="per-id ε budget, a multiple of 0.000001")
    delta: StrictFloat | StrictInt = Field(0.0, ge=0, le=0.5, description="per-id δ budget (Gaussian releases)")


def budget_of(epsilon: object, delta: object) -> tuple[int, int]:
    try:
        return exact_micro(epsilon), delta_units_floor(delta)  # type: ignore[arg-type]
    except InvalidEpsilon as exc:
        raise InvalidInput("invalid_epsilon", str(exc)) from exc


def id_source_of(value: str) -> str:
    source = value.strip().lower()
    if not _ID_SOURCE.match(source):
        raise InvalidInput(
            "invalid_id_source", "an id source is letters, digits and . _ : / @ - (at most 200, without case)"
        )
    return source


def _id_source_claimed() -> Conflict:
    return Conflict(
        "id_source_claimed",
        "another privacy domain owns this id source: one id's labels live in one domain (docs/privacy.md)",
    )


def create_privacy_domain(
    ctx: LabelsContext, body: PrivacyDomainCreate, claim: Claim | None, key: ApiKey | None = None
) -> StoredResponse:
    if not _NAME.match(body.name):
        raise InvalidInput("invalid_name", "a domain name is letters, digits and . _ : - (at most 200)")
    if DOMAIN_ID.match(body.name):
        raise InvalidInput("invalid_name", "a domain name may not take the shape of a domain id (pd_ + 32 hex)")
    source = id_source_of(body.id_source)
    eps, delta = budget_of(body.epsilon, body.delta)
    row = PrivacyDomainRow(
        id="pd_" + uuid.uuid4().hex, name=body.name, id_source=source, epsilon_budget_micro=eps,
        delta_budget_units=delta, n_ids=0, id_segments=0, spent_version=0,
    )
    try:
        with ctx.sessions.begin() as s:
            if s.scalar(select(PrivacyDomainRow.id).where(PrivacyDomainRow.name == body.name)) is not None:
                raise Conflict("privacy_domain_exists", "a privacy domain with this name exists")
            if s.scalar(select(PrivacyDomainRow.id).where(PrivacyDomainRow.id_source == source)) is not None:
                raise _id_source_claimed()
            s.add(row)
            s.flush()
            audit.record(
                s, audit.DOMAIN_CREATED, key=key, scope="admin", domain_id=row.id, domain=row.name, subject_id=row.id,
                details=_audit_details(row),
            )
            location = {"Location": f"/v1/privacy-domains/{row.id}"}
            out = StoredResponse(201, describe(ctx, s, row).model_dump(), location)
            if claim is not None:
                claim.complete(s, out)
    except IntegrityError as exc:
        # a concurrent create won the race on one of the two unique columns
        with ctx.sessions() as s:
            if s.scalar(select(PrivacyDomainRow.id).where(PrivacyDomainRow.name == body.name)) is None:
                raise _id_source_claimed() from exc
        raise Conflict("privacy_domain_exists", "a privacy domain with this name exists") from exc
    return out


def _audit_details(row: PrivacyDomainRow) -> dict[str, Any]:
    return {
        "name": row.name, "id_source": row.id_source, "epsilon_micro": row.epsilon_budget_micro,
        "delta": from_delta_units(row.delta_budget_units),
    }


def ensure_default_domain(ctx: LabelsContext) -> None:
    """Create the ``default`` domain with the configured per-id budget if it does not exist.

    It owns the id source ``default``; its creation is audited as the service's own (no key).
    """
    with ctx.sessions() as s:
        if s.scalar(select(PrivacyDomainRow.id).where(PrivacyDomainRow.name == DEFAULT_DOMAIN)) is not None:
            return
    eps, delta = budget_of(ctx.settings.default_domain_epsilon, ctx.settings.default_domain_delta)
    try:
        with ctx.sessions.begin() as s:
            row = PrivacyDomainRow(
                id="pd_" + uuid.uuid4().hex, name=DEFAULT_DOMAIN, id_source=DEFAULT_ID_SOURCE, epsilon_budget_micro=eps,
                delta_budget_units=delta, n_ids=0, id_segments=0, spent_version=0,
            )
            s.add(row)
            s.flush()
            audit.record(
                s, audit.DOMAIN_CREATED, key=None, scope=None, domain_id=row.id, domain=row.name, subject_id=row.id,
                details=_audit_details(row),
            )
    except IntegrityError:
        pass  # another process created it first


DOMAIN_ID = re.compile(r"^pd_[0-9a-f]{32}$")
"""A privacy domain's id: what every reference to a domain takes (a name never takes its shape)."""

DOMAIN_NOT_FOUND = (
    "no privacy domain has that id: ids look like pd_…; find one by name with GET /v1/privacy-domains?name=…"
)


def find_domain(s: Session, domain_id: str) -> PrivacyDomainRow:
    """The domain whose id (``pd_…``) is ``domain_id``; anything else, a name included, is 404
    ``privacy_domain_not_found`` saying how to find the id (issue 26: one way to refer to a resource)."""
    row = s.get(PrivacyDomainRow, domain_id) if DOMAIN_ID.match(domain_id) else None
    if row is None:
        raise NotFound("privacy_domain_not_found", DOMAIN_NOT_FOUND)
    return row


def default_domain_id(ctx: LabelsContext) -> str:
    """The default domain's id (created on first use): what a label set that names no domain charges."""
    ensure_default_domain(ctx)
    with ctx.sessions() as s:
        found = s.scalar(select(PrivacyDomainRow.id).where(PrivacyDomainRow.name == DEFAULT_DOMAIN))
    if found is None:  # ensure_default_domain committed it, or another process did
        raise NotFound("privacy_domain_not_found", DOMAIN_NOT_FOUND)
    return found


def describe(ctx: LabelsContext, s: Session, row: PrivacyDomainRow) -> responses.PrivacyDomain:
    most, exhausted = ledger.summary(s, row)  # catalogue facts: no ledger object is read
    return responses.PrivacyDomain(
        id=row.id,
        name=row.name,
        id_source=row.id_source,
        budget_per_id=responses.BudgetPerId(
            epsilon=from_micro(row.epsilon_budget_micro),
            epsilon_micro=row.epsilon_budget_micro,
            delta=from_delta_units(row.delta_budget_units),
        ),
        ids=row.n_ids,
        max_spent_epsilon=from_micro(most),
        ids_exhausted=exhausted,
        ledger_version=row.spent_version,
        created_at=iso(row.created_at),
    )


def get_privacy_domain(ctx: LabelsContext, ref: str) -> responses.PrivacyDomain:
    with ctx.sessions() as s:
        domain_id = find_domain(s, ref).id
    ledger.ensure_bucketed(ctx, domain_id)  # a domain from before buckets, once
    with ctx.sessions() as s:
        return describe(ctx, s, find_domain(s, domain_id))


def list_privacy_domains(
    ctx: LabelsContext, limit: int, cursor: str | None, order: Order = ASC, name: str | None = None
) -> responses.PrivacyDomainPage:
    """A page of privacy domains in creation ``order`` (``name``: only the domain of that name), each as
    :func:`get_privacy_domain` describes it (catalogue facts: no ledger object is read once a domain is bucketed)."""
    stmt = select(PrivacyDomainRow)
    if name is not None:
        stmt = stmt.where(PrivacyDomainRow.name == name)
    with ctx.sessions() as s:
        page = keyset_page(
            s, stmt, PrivacyDomainRow.created_at, PrivacyDomainRow.id, limit, cursor,
            lambda row: row.id, order,
        )
    for domain_id in page["items"]:
        ledger.ensure_bucketed(ctx, domain_id)  # a domain from before buckets, once
    with ctx.sessions() as s:
        rows = {r.id: r for r in s.scalars(select(PrivacyDomainRow).where(PrivacyDomainRow.id.in_(page["items"])))}
        items = [describe(ctx, s, rows[domain_id]) for domain_id in page["items"]]
    return responses.PrivacyDomainPage(items=items, next_cursor=page["next_cursor"])


def spent_histogram(ctx: LabelsContext, ref: str, bins: int) -> responses.SpentHistogram:
    """The domain's ids by spent ε (:func:`ledger.spent_histogram`: bounded, read-only)."""
    with ctx.sessions() as s:
        domain_id = find_domain(s, ref).id
    ledger.ensure_bucketed(ctx, domain_id)  # a domain from before buckets, once
    with ctx.sessions() as s:
        row = find_domain(s, domain_id)
        hist = ledger.spent_histogram(ctx, s, row, bins)
        _, exhausted = ledger.summary(s, row)
    budget = row.epsilon_budget_micro
    return responses.SpentHistogram(
        privacy_domain=row.name,
        privacy_domain_id=row.id,
        epsilon_per_id=from_micro(budget),
        bins=[
            responses.SpentBin(
                low=from_micro(budget * i // bins), high=from_micro(budget * (i + 1) // bins), ids=int(n)
            )
            for i, n in enumerate(hist.counts)
        ],
        ids=row.n_ids,
        ids_read=hist.ids_read,
        sampled=hist.buckets_read < hist.buckets_with_ids,
        ids_exhausted=exhausted,
    )
