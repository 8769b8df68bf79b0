"""Idempotency keys for mutating POSTs: the same request, sent twice, has one effect.

A client that times out, or dies, after the server committed cannot know whether its
request took effect. It retries with the same ``Idempotency-Key`` header and must get
the first answer back, not a second label set, a second training or — the case that
matters most — a second charge of the privacy budget (docs/architecture.md, "Exactly
once").

How it works, for one ``(scope, key)``:

1. :meth:`IdempotencyKeys.claim`, in its own short transaction, inserts an
   ``in_progress`` row owned by a fresh token with a lease, or finds the existing row:
   same request and ``done`` → :class:`StoredResponse` replayed; same request and still
   in progress under a live lease → 409 ``idempotency_in_progress`` (a concurrent
   duplicate); a different request → 422 ``idempotency_key_reused``. An in-progress
   row whose lease ran out belongs to a process that died before committing (its work
   never committed, see 2.), so the claim takes it over.
2. The caller does its work and, **inside the transaction that commits the effect**,
   calls :meth:`Claim.complete`. That UPDATE only succeeds while the caller still owns
   the row, so the effect and the stored answer commit together or not at all: a
   ``kill -9`` before the commit leaves no effect and an expired lease; after it, the
   retry replays the answer.
3. If the work fails (a 4xx, an exception), :meth:`IdempotencyKeys.execute` deletes the
   in-progress row: nothing happened, so the same key may be used again.

The table lives in each service's own metadata (:func:`idempotency_table`), so both
parties' migrations carry it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fastapi import Header
from fastapi.responses import Response
from sqlalchemy import Column, DateTime, Float, Integer, MetaData, String, Table, Text, delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from labeldp.errors import Conflict, InvalidInput

log = logging.getLogger("labeldp.service.idempotency")

IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAY_HEADER = "Idempotent-Replay"
MAX_KEY_LENGTH = 200
IN_PROGRESS, DONE = "in_progress", "done"


def idempotency_table(metadata: MetaData) -> Table:
    """The ``idempotency_keys`` table, added to a service's metadata."""
    return Table(
        "idempotency_keys",
        metadata,
        Column("scope", String(300), primary_key=True, comment="method and path the key is used with"),
        Column("key", String(MAX_KEY_LENGTH), primary_key=True),
        Column("fingerprint", String(64), nullable=False, comment="sha256 of the request"),
        Column("state", String(16), nullable=False),
        Column("owner", String(32), nullable=False, comment="token of the process holding the claim"),
        Column("lease_until", Float, nullable=False, comment="unix time after which a claim may be taken over"),
        Column("status_code", Integer, nullable=True),
        Column("response_json", Text, nullable=True),
        Column("headers_json", Text, nullable=True),
        Column("created_at", DateTime(timezone=True), nullable=False),
    )


def retry_after(running: float, lease_left: float) -> int:
    """Seconds a duplicate waits: as long again as the first request has run (most answers come
    soon after), at least 1, never past the lease's end (then the key can be taken over), at most 60.

    The whole lease (120 s) was the old answer: a client told 60 s waited for an answer that was
    ready 3.4 s later (issue 26).
    """
    return int(max(1, min(math.ceil(max(running, 0.0)), math.ceil(lease_left) + 1, 60)))


def request_fingerprint(*parts: bytes | str) -> str:
    """sha256 over the parts that make two requests "the same" (method, path, canonical body)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8") if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def idempotency_key(
    key: str | None = Header(
        None,
        alias=IDEMPOTENCY_HEADER,
        description="any unique string (≤ 200 printable ASCII characters); a retry with the same key and body "
        "returns the first response and has no second effect",
    ),
) -> str | None:
    """FastAPI dependency: the validated ``Idempotency-Key`` header, or None."""
    if key is None:
        return None
    if not (0 < len(key) <= MAX_KEY_LENGTH) or not all(" " <= c <= "~" for c in key):
        raise InvalidInput(
            "invalid_idempotency_key",
            f"{IDEMPOTENCY_HEADER} must be 1-{MAX_KEY_LENGTH} printable ASCII characters",
        )
    return key


@dataclass(frozen=True)
class StoredResponse:
    """What a request answered; replayed verbatim for a retry with the same key."""

    status_code: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    replayed: bool = False

    def answer(self, response: Response) -> dict[str, Any]:
        """Put this answer's status and headers on a route's ``response`` and return its body.

        For a route that declares ``response_model``: FastAPI then validates and serializes the
        body with the model, so a first answer and its replay go through the same contract.
        """
        response.status_code = self.status_code
        for name, value in self.headers.items():
            response.headers[name] = value
        if self.replayed:
            response.headers[REPLAY_HEADER] = "true"
        return self.body


@dataclass
class Claim:
    """The right, held by this process until its lease ends, to perform one keyed request."""

    table: Table
    scope: str
    key: str
    owner: str
    completed: bool = False

    def complete(self, session: Session, response: StoredResponse) -> None:
        """Store the answer in the caller's transaction; raises 409 if the claim was lost.

        Call it inside the transaction that commits the request's effect, so both
        commit together. Losing the claim (the lease ran out and a retry took over)
        aborts the caller's transaction before anything is committed.
        """
        t = self.table
        result = session.execute(
            update(t)
            .where(t.c.scope == self.scope, t.c.key == self.key, t.c.owner == self.owner, t.c.state == IN_PROGRESS)
            .values(
                state=DONE,
                status_code=response.status_code,
                response_json=json.dumps(response.body),
                headers_json=json.dumps(response.headers),
            )
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            raise Conflict(
                "idempotency_in_progress",
                "another request with this Idempotency-Key took over; retry to get its answer",
                headers={"Retry-After": "1"},
            )
        self.completed = True


class IdempotencyKeys:
    """Claims, replays and releases idempotency keys in one service's database."""

    def __init__(self, table: Table, sessions: sessionmaker[Session], lease_seconds: float = 120.0) -> None:
        self.table = table
        self.sessions = sessions
        self.lease_seconds = lease_seconds

    def claim(self, scope: str, key: str, fingerprint: str) -> Claim | StoredResponse:
        """A new claim, or the stored answer of the first request with this key (see module doc)."""
        for _ in range(3):  # an INSERT race on PostgreSQL: re-read the winner's row
            try:
                return self._claim_once(scope, key, fingerprint)
            except IntegrityError:
                continue
        raise Conflict(
            "idempotency_in_progress", "a request with this Idempotency-Key is in progress",
                       headers={"Retry-After": "1"})

    def _claim_once(self, scope: str, key: str, fingerprint: str) -> Claim | StoredResponse:
        t = self.table
        owner = secrets.token_hex(16)
        now = time.time()
        with self.sessions.begin() as s:
            row = s.execute(select(t).where(t.c.scope == scope, t.c.key == key)).mappings().first()
            if row is None:
                s.execute(
                    insert(t).values(
                        scope=scope,
                        key=key,
                        fingerprint=fingerprint,
                        state=IN_PROGRESS,
                        owner=owner,
                        lease_until=now + self.lease_seconds,
                        created_at=datetime.now(UTC),
                    )
                )
                return Claim(t, scope, key, owner)
            if row["fingerprint"] != fingerprint:
                raise InvalidInput(
                    "idempotency_key_reused", "this Idempotency-Key was used for a different request"
                )
            if row["state"] == DONE:
                return StoredResponse(
                    int(row["status_code"]),
                    json.loads(row["response_json"]),
                    json.loads(row["headers_json"] or "{}"),
                    replayed=True,
                )
            if row["lease_until"] > now:
                running = now - (row["lease_until"] - self.lease_seconds)
                raise Conflict(
                    "idempotency_in_progress",
                    "a request with this Idempotency-Key is in progress",
                    headers={"Retry-After": str(retry_after(running, row["lease_until"] - now))},
                )
            taken = s.execute(
                update(t)
                .where(t.c.scope == scope, t.c.key == key, t.c.owner == row["owner"], t.c.state == IN_PROGRESS)
                .values(owner=owner, lease_until=now + self.lease_seconds)
            )
            if taken.rowcount != 1:  # type: ignore[attr-defined]
                raise Conflict(
                    "idempotency_in_progress", "a request with this Idempotency-Key is in progress",
                               headers={"Retry-After": "1"})
            return Claim(t, scope, key, owner)

    def release(self, claim: Claim) -> None:
        """Forget an uncompleted claim: the request had no effect, the key may be reused."""
        t = self.table
        with self.sessions.begin() as s:
            s.execute(
                delete(t).where(
                    t.c.scope == claim.scope, t.c.key == claim.key, t.c.owner == claim.owner, t.c.state == IN_PROGRESS
                )
            )

    def execute(
        self,
        scope: str,
        key: str | None,
        fingerprint: str,
        work: Callable[[Claim | None], StoredResponse],
    ) -> StoredResponse:
        """Run ``work`` at most once per (scope, key); replay its answer for a retry.

        ``work`` receives the claim (None without a key) and must call
        :meth:`Claim.complete` inside the transaction that commits its effect. A
        ``work`` that commits nothing of its own (a validation-only request) may
        leave that to this method, which then stores the answer afterwards.
        """
        if key is None:
            return work(None)
        claimed = self.claim(scope, key, fingerprint)
        if isinstance(claimed, StoredResponse):
            return claimed
        try:
            response = work(claimed)
        except BaseException:
            if not claimed.completed:
                try:
                    self.release(claimed)
                except Exception:  # the database is gone too: the claim's lease frees the key later
                    log.warning("could not release an idempotency claim; its lease will expire")
            raise
        if not claimed.completed:
            with self.sessions.begin() as s:
                claimed.complete(s, response)
        return response
