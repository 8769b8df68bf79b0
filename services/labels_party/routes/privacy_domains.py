"""Privacy domains: the per-id budget every label set of the domain charges."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Response

from labeldp.service.http_api import require_scope
from labeldp.service.idempotency import request_fingerprint
from labeldp.service.openapi import errors, json_example, ok
from labeldp.service.pagination import DEFAULT_LIMIT, MAX_LIMIT, OrderQuery
from labeldp.service.settings import ApiKey

from .. import privacy_domains, responses
from .deps import Context, IdempotencyKey

router = APIRouter(prefix="/v1", tags=["privacy domains"])

AdminKey = Annotated[ApiKey, Depends(require_scope("admin"))]
DomainRef = Annotated[
    str, Path(max_length=200, description="the domain's id (`pd_…`): a name is 404 "
                        "`privacy_domain_not_found` (find the id with `GET /v1/privacy-domains?name=…`)")
]


@router.post(
    "/privacy-domains",
    status_code=201,
    response_model=responses.PrivacyDomain,
    summary="Create a privacy domain",
    description="A per-id budget (ε, δ) over the ids of one declared `id_source`: no id of the domain is ever "
    "charged past it, across all its label sets and releases, and no other domain may claim the same id source "
    "(409 `id_source_claimed`). Needs an `admin` key (403 `scope_required`); written to the audit log. "
    "`Idempotency-Key` makes a retry safe.",
    responses={
        **ok(responses.EXAMPLE_DOMAIN, "created", 201, {"Location": "the domain's URL"}),
        **errors(401, 403, 409, 413, 422, 503, e403="scope_required", e409="id_source_claimed"),
    },
    openapi_extra=json_example(
        {"name": "conversions", "id_source": "crm:customer_id", "epsilon": 10, "delta": 1e-6}
    ),
)
def create_privacy_domain(
    body: privacy_domains.PrivacyDomainCreate, ctx: Context, response: Response, key: IdempotencyKey,
    admin: AdminKey,
) -> dict[str, Any]:
    scope = "POST /v1/privacy-domains"
    return ctx.idempotency.execute(
        scope,
        key,
        request_fingerprint(scope, body.model_dump_json()),
        lambda claim: privacy_domains.create_privacy_domain(ctx, body, claim, admin),
    ).answer(response)


@router.get(
    "/privacy-domains",
    response_model=responses.PrivacyDomainPage,
    summary="List privacy domains",
    description="Oldest first (`order=desc`: newest first), a page at a time (pass `next_cursor` back as "
    "`cursor`), each with its per-id "
    "budget, ids, largest spend and ids exhausted. Every key reads domains.",
    responses={
        **ok(responses.EXAMPLE_DOMAIN_PAGE, "a page",
             links={"get_privacy_domain": {"privacy_domain_id": "$response.body#/items/0/id"}}),
        **errors(401, 422, 503, e422="invalid_cursor"),
    },
)
def list_privacy_domains(
    ctx: Context,
    limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
    cursor: str | None = Query(None, max_length=400),
    order: OrderQuery = "asc",
    name: str | None = Query(None, max_length=200, description="only the domain of this name"),
) -> responses.PrivacyDomainPage:
    return privacy_domains.list_privacy_domains(ctx, limit, cursor, order, name)


@router.get(
    "/privacy-domains/{privacy_domain_id}",
    response_model=responses.PrivacyDomain,
    summary="Read a privacy domain",
    description="Its per-id budget, how many ids its ledger holds, the largest spend and the ids exhausted. "
    "By its id (`pd_…`); a name in the id's place is 404 `privacy_domain_not_found` (find the id with "
    "`GET /v1/privacy-domains?name=…`).",
    responses={
        **ok(responses.EXAMPLE_DOMAIN, "the domain"),
        **errors(401, 404, 422, 503, e404="privacy_domain_not_found"),
    },
)
def get_privacy_domain(privacy_domain_id: DomainRef, ctx: Context) -> responses.PrivacyDomain:
    return privacy_domains.get_privacy_domain(ctx, privacy_domain_id)


@router.get(
    "/privacy-domains/{privacy_domain_id}/spent-histogram",
    response_model=responses.SpentHistogram,
    summary="Histogram of spent ε over a domain's ids",
    description="How many ids spent how much of the per-id budget, in `bins` equal bins over [0, ε per id] (the "
    "last bin holds the exhausted ids), and the exact count of exhausted ids. Read-only and bounded: it reads "
    "whole hash buckets of the ledger up to 10⁶ ids (a uniform sample of a larger domain: `sampled`). Every key "
    "reads it, as it reads the domain.",
    responses={
        **ok(responses.EXAMPLE_HISTOGRAM, "the histogram"),
        **errors(401, 404, 422, 503, e404="privacy_domain_not_found"),
    },
)
def get_spent_histogram(
    privacy_domain_id: DomainRef, ctx: Context, bins: int = Query(10, ge=1, le=50, description="how many equal bins")
) -> responses.SpentHistogram:
    return privacy_domains.spent_histogram(ctx, privacy_domain_id, bins)
