"""Idempotency keys: one effect per (scope, key), the first answer replayed, claims that expire."""

from __future__ import annotations

import threading
import time

import pytest
from fastapi import Response
from sqlalchemy import Column, Integer, MetaData, Table, func, insert, select
from sqlalchemy.orm import Session, sessionmaker

from labeldp.errors import InvalidInput, LabelDPError
from labeldp.service.database import make_engine, make_session_factory
from labeldp.service.idempotency import (
    Claim,
    IdempotencyKeys,
    StoredResponse,
    idempotency_key,
    idempotency_table,
    request_fingerprint,
)

metadata = MetaData()
KEYS = idempotency_table(metadata)
EFFECTS = Table("effects", metadata, Column("id", Integer, primary_key=True, autoincrement=True))


@pytest.fixture
def sessions(database_url: str) -> sessionmaker[Session]:
    """A fresh database on SQLite and on PostgreSQL (tests/conftest.py)."""
    engine = make_engine(database_url)
    metadata.create_all(engine)
    return make_session_factory(engine)


def effects(sessions: sessionmaker[Session]) -> int:
    with sessions() as s:
        return int(s.scalar(select(func.count()).select_from(EFFECTS)) or 0)


def make_work(sessions: sessionmaker[Session], answer: int = 1):  # type: ignore[no-untyped-def]
    def work(claim: Claim | None) -> StoredResponse:
        response = StoredResponse(201, {"answer": answer}, {"Location": "/x/1"})
        with sessions.begin() as s:
            s.execute(insert(EFFECTS))
            if claim is not None:
                claim.complete(s, response)
        return response

    return work


def test_same_key_and_body_replays_the_first_answer_with_one_effect(sessions: sessionmaker[Session]) -> None:
    keys = IdempotencyKeys(KEYS, sessions)
    fp = request_fingerprint("POST", "/x", b'{"a": 1}')
    first = keys.execute("POST /x", "k1", fp, make_work(sessions, 1))
    second = keys.execute("POST /x", "k1", fp, make_work(sessions, 2))
    assert effects(sessions) == 1
    assert not first.replayed and second.replayed
    assert second.body == {"answer": 1} and second.status_code == 201
    assert second.headers == {"Location": "/x/1"}
    answered = Response()
    assert second.answer(answered) == {"answer": 1} and answered.status_code == 201
    assert answered.headers["Location"] == "/x/1" and answered.headers["Idempotent-Replay"] == "true"
    fresh = Response()
    first.answer(fresh)
    assert "Idempotent-Replay" not in fresh.headers


def test_without_a_key_every_request_has_its_effect(sessions: sessionmaker[Session]) -> None:
    keys = IdempotencyKeys(KEYS, sessions)
    for _ in range(3):
        keys.execute("POST /x", None, "fp", make_work(sessions))
    assert effects(sessions) == 3


def test_a_different_body_under_the_same_key_is_refused(sessions: sessionmaker[Session]) -> None:
    keys = IdempotencyKeys(KEYS, sessions)
    keys.execute("POST /x", "k1", request_fingerprint("a"), make_work(sessions))
    with pytest.raises(LabelDPError) as exc:
        keys.execute("POST /x", "k1", request_fingerprint("b"), make_work(sessions))
    assert exc.value.status_code == 422 and exc.value.code == "idempotency_key_reused"
    assert effects(sessions) == 1


def test_scopes_are_independent(sessions: sessionmaker[Session]) -> None:
    keys = IdempotencyKeys(KEYS, sessions)
    keys.execute("POST /a", "k1", "fp", make_work(sessions))
    keys.execute("POST /b", "k1", "fp", make_work(sessions))
    assert effects(sessions) == 2


def test_a_failed_request_leaves_the_key_free(sessions: sessionmaker[Session]) -> None:
    keys = IdempotencyKeys(KEYS, sessions)

    def failing(claim: Claim | None) -> StoredResponse:
        raise InvalidInput("bad", "bad input")

    with pytest.raises(LabelDPError):
        keys.execute("POST /x", "k1", "fp", failing)
    keys.execute("POST /x", "k1", "fp", make_work(sessions))
    assert effects(sessions) == 1


def test_a_concurrent_duplicate_gets_409_while_the_first_runs(sessions: sessionmaker[Session]) -> None:
    keys = IdempotencyKeys(KEYS, sessions)
    started, finish = threading.Event(), threading.Event()
    work = make_work(sessions)

    def slow(claim: Claim | None) -> StoredResponse:
        started.set()
        finish.wait(10)
        return work(claim)

    t = threading.Thread(target=keys.execute, args=("POST /x", "k1", "fp", slow))
    t.start()
    assert started.wait(10)
    with pytest.raises(LabelDPError) as exc:
        keys.execute("POST /x", "k1", "fp", work)
    assert exc.value.status_code == 409 and exc.value.code == "idempotency_in_progress"
    # it has run for well under a second: ask again in a second or two, not after the 120 s lease
    assert exc.value.headers is not None and int(exc.value.headers["Retry-After"]) <= 2
    finish.set()
    t.join()
    assert keys.execute("POST /x", "k1", "fp", work).replayed
    assert effects(sessions) == 1


def test_an_expired_claim_is_taken_over_and_the_loser_cannot_commit(sessions: sessionmaker[Session]) -> None:
    # A process that claimed the key and stalled past its lease (or died) must not
    # commit its effect once a retry has taken the key over.
    keys = IdempotencyKeys(KEYS, sessions, lease_seconds=0.05)
    stale = keys.claim("POST /x", "k1", "fp")
    assert isinstance(stale, Claim)
    time.sleep(0.1)
    retry = keys.execute("POST /x", "k1", "fp", make_work(sessions, 2))
    assert not retry.replayed and retry.body == {"answer": 2}
    with pytest.raises(LabelDPError) as exc:
        make_work(sessions, 1)(stale)  # the effect and the completion share one transaction
    assert exc.value.status_code == 409
    assert effects(sessions) == 1
    assert keys.execute("POST /x", "k1", "fp", make_work(sessions, 3)).body == {"answer": 2}


@pytest.mark.parametrize("bad", ["", "x" * 201, "schlüssel", "tab\there"])
def test_malformed_keys_are_refused(bad: str) -> None:
    with pytest.raises(LabelDPError) as exc:
        idempotency_key(bad)
    assert exc.value.code == "invalid_idempotency_key"


def test_a_valid_key_passes() -> None:
    assert idempotency_key("order-42:retry") == "order-42:retry"
    assert idempotency_key(None) is None


def test_retry_after_follows_how_long_the_first_request_has_run() -> None:
    from labeldp.service.idempotency import retry_after

    assert retry_after(0.2, 119.8) == 1  # just started: ask again in a second, not in a minute
    assert retry_after(3.4, 116.6) == 4
    assert retry_after(50.0, 5.0) == 6  # the lease ends first: then the key can be taken over
    assert retry_after(500.0, 600.0) == 60
