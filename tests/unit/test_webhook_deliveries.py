"""The inbox webhook's deliveries are rows of the catalogue: a restart loses none, senders never
send one at once, a receiver that stays down ends in ``failed`` (issue 26 item 4, issue 24).

A real HTTP receiver on loopback takes the POSTs; the features app runs in process (TestClient:
its lifespan starts the sender, a client used without ``with`` never starts it, as if the
process died right after the inbox committed).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from fastapi.testclient import TestClient
from tests.inbox_messages import deliver
from tests.local_settings import TRANSPORT_KEY
from tests.unit.test_features_app import API_KEY, PUBLIC_KEY, SECRET, release_body

from features_party import store
from features_party.app import create_app
from labeldp.service.database import make_engine, make_session_factory
from labeldp.service.migrations import upgrade_schema
from labeldp.service.settings import Settings
from labeldp.service.webhooks import ID_HEADER, WebhookSender, enqueue, verify_webhook
from labeldp_tools.local_stack import free_port
from labeldp_tools.migrations import SERVICES

WEBHOOK_SECRET = "webhook-secret-Vb7nQ2xK9mT4pW1z"
AUTH = {"Authorization": f"Bearer {API_KEY}"}


class Receiver(BaseHTTPRequestHandler):
    """The publisher's own system: records every POST, answers 204 after ``delay`` seconds."""

    calls: ClassVar[list[tuple[dict[str, str], bytes]]] = []
    delay: ClassVar[float] = 0.0
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        with type(self).lock:
            type(self).calls.append((dict(self.headers.items()), body))
        time.sleep(type(self).delay)
        self.send_response(204)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def start_receiver(port: int = 0) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", port), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def receiver() -> Iterator[str]:
    Receiver.calls, Receiver.delay = [], 0.0
    server = start_receiver()
    yield f"http://127.0.0.1:{server.server_address[1]}/hooks"
    server.shutdown()
    server.server_close()


def _settings(tmp_path: Path, url: str, **extra: Any) -> Settings:
    return Settings(**{
        "features_database_url": f"sqlite:///{tmp_path / 'features.db'}",
        "features_data_dir": tmp_path / "features-data",
        "features_api_key": API_KEY, "signing_public_keys": PUBLIC_KEY, "inbox_transport_key": TRANSPORT_KEY,
        "training_in_process_worker": False, "inbox_webhook_url": url, "inbox_webhook_secret": WEBHOOK_SECRET,
        "inbox_webhook_timeout_seconds": 2.0, "inbox_webhook_initial_backoff_seconds": 0.05,
        "inbox_webhook_poll_seconds": 0.1, **extra,
    })


def _deliveries(client: TestClient, **params: str) -> list[dict[str, Any]]:
    r = client.get("/v1/inbox/webhook-deliveries", headers=AUTH, params=params)
    assert r.status_code == 200, r.text
    return list(r.json()["items"])


def _wait(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _receive(client: TestClient, release_id: str) -> None:
    message = release_body([f"u{i:02d}" for i in range(12)], [1.5] * 12, release_id=release_id, shard_rows=6)
    assert getattr(deliver(client, message, SECRET), "answer", {}).get("status") == "complete"


def test_a_restart_between_the_event_and_its_delivery_still_delivers_it(tmp_path: Path, receiver: str) -> None:
    settings = _settings(tmp_path, receiver)
    crashed = TestClient(create_app(settings))  # no `with`: its sender never starts, as if killed after commit
    _receive(crashed, "rel-restart")
    pending = _deliveries(crashed, state="pending")
    assert [d["event_type"] for d in pending] == ["release.received", "release.completed"]
    time.sleep(0.3)
    assert Receiver.calls == []

    with TestClient(create_app(settings)) as restarted:  # the next process on the same catalogue
        _wait(lambda: len(_deliveries(restarted, state="delivered")) == 2)
        done = _deliveries(restarted)
    assert {d["state"] for d in done} == {"delivered"} and [d["attempts"] for d in done] == [1, 1]
    assert [d["last_outcome"] for d in done] == ["status 2xx"] * 2
    assert sorted(h[ID_HEADER] for h, _ in Receiver.calls) == sorted(d["event_id"] for d in done)
    for headers, body in Receiver.calls:
        assert verify_webhook(WEBHOOK_SECRET, body, headers)
        assert not verify_webhook("another-secret-0123456789", body, headers)
        assert json.loads(body)["data"]["release_id"] == "rel-restart"


def test_a_receiver_that_stays_down_is_retried_then_failed_and_can_be_retried(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there yet
    url = f"http://127.0.0.1:{port}/hooks"
    Receiver.calls, Receiver.delay = [], 0.0
    settings = _settings(tmp_path, url, inbox_webhook_max_attempts=3)
    with TestClient(create_app(settings)) as client:
        started = time.monotonic()
        _receive(client, "rel-down")
        assert time.monotonic() - started < 5  # the inbox never waited for the webhook
        _wait(lambda: len(_deliveries(client, state="failed")) == 2)
        failed = _deliveries(client, state="failed")
        assert [(d["attempts"], d["last_outcome"], d["next_attempt_at"]) for d in failed] == [
            (3, "ConnectError", None)] * 2
        assert _deliveries(client, state="pending") == []

        r = client.post("/v1/inbox/webhook-deliveries/whd_nope/retry", headers=AUTH)
        assert (r.status_code, r.json()["code"]) == (404, "webhook_delivery_not_found")
        server = start_receiver(port)  # the receiver is back
        try:
            r = client.post(f"/v1/inbox/webhook-deliveries/{failed[0]['id']}/retry", headers=AUTH)
            assert r.status_code == 200 and r.json()["state"] == "pending" and r.json()["attempts"] == 0
            _wait(lambda: len(_deliveries(client, state="delivered")) == 1)
            r = client.post(f"/v1/inbox/webhook-deliveries/{failed[0]['id']}/retry", headers=AUTH)
            assert (r.status_code, r.json()["code"]) == (409, "webhook_delivery_not_failed")
        finally:
            server.shutdown()
            server.server_close()
    [(headers, body)] = Receiver.calls
    assert headers[ID_HEADER] == failed[0]["event_id"] and verify_webhook(WEBHOOK_SECRET, body, headers)


def test_several_senders_never_send_one_delivery_twice(database_url: str, receiver: str) -> None:
    """Four senders (own engines, as four processes) drain 40 deliveries: each is POSTed exactly once."""
    Receiver.delay = 0.02  # widen the window in which two senders could hold one row
    engine = make_engine(database_url)
    upgrade_schema(engine, SERVICES["features"])
    sessions = make_session_factory(engine)
    with sessions.begin() as s:
        for i in range(40):
            enqueue(s, store.WEBHOOK_DELIVERIES, receiver, {"id": f"evt_{i:03d}", "type": "t", "data": {}})
        assert not enqueue(s, store.WEBHOOK_DELIVERIES, receiver, {"id": "evt_000", "type": "t", "data": {}})
    engines = [make_engine(database_url) for _ in range(4)]
    senders = [
        WebhookSender(make_session_factory(e), store.WEBHOOK_DELIVERIES, receiver, WEBHOOK_SECRET, timeout=5,
                      poll_seconds=0.05)
        for e in engines
    ]
    try:
        for sender in senders:
            sender.start()
        _wait(lambda: sum(x.delivered for x in senders) >= 40)
        time.sleep(0.3)
    finally:
        for sender in senders:
            sender.stop()
        for e in [engine, *engines]:
            e.dispose()
    counts = Counter(h[ID_HEADER] for h, _ in Receiver.calls)
    assert len(counts) == 40 and max(counts.values()) == 1, counts.most_common(3)
    assert sum(1 for x in senders if x.delivered) >= 2  # the senders really shared the work
    assert all(verify_webhook(WEBHOOK_SECRET, body, headers) for headers, body in Receiver.calls)


def test_the_default_schedule_spans_half_a_day() -> None:
    """Decision 0026: the waits between 24 attempts sum to 7.2–14.4 h; the first five come within 155 s."""
    import random

    from labeldp.service.webhooks import (
        DEFAULT_INITIAL_BACKOFF_SECONDS,
        DEFAULT_MAX_ATTEMPTS,
        DEFAULT_MAX_BACKOFF_SECONDS,
        backoff_seconds,
    )

    def waits(jitter: float) -> list[float]:
        rng = random.Random()
        rng.random = lambda: jitter  # type: ignore[method-assign]
        return [backoff_seconds(k, DEFAULT_INITIAL_BACKOFF_SECONDS, DEFAULT_MAX_BACKOFF_SECONDS, rng)
                for k in range(1, DEFAULT_MAX_ATTEMPTS)]

    assert sum(waits(1.0)) == pytest.approx(51_915) and sum(waits(0.0)) == pytest.approx(51_915 / 2)
    assert sum(waits(1.0)[:5]) == pytest.approx(155)
    assert max(waits(1.0)) == DEFAULT_MAX_BACKOFF_SECONDS
    fields = Settings.model_fields
    assert (fields["inbox_webhook_max_attempts"].default, fields["inbox_webhook_initial_backoff_seconds"].default,
            fields["inbox_webhook_max_backoff_seconds"].default) == (
        DEFAULT_MAX_ATTEMPTS, DEFAULT_INITIAL_BACKOFF_SECONDS, DEFAULT_MAX_BACKOFF_SECONDS)


def test_a_training_worker_sends_what_an_api_committed(tmp_path: Path, receiver: str) -> None:
    """`labeldp worker features` runs a sender too: the API that received the release never started one."""
    from features_party.worker import run_worker

    settings = _settings(tmp_path, receiver)
    api = TestClient(create_app(settings))  # no `with`: this API sends nothing
    _receive(api, "rel-worker")
    stop = threading.Event()
    worker = threading.Thread(target=run_worker, args=(settings, stop), daemon=True)
    worker.start()
    try:
        _wait(lambda: len(_deliveries(api, state="delivered")) == 2)
    finally:
        stop.set()
        worker.join(30)
    assert sorted(json.loads(body)["type"] for _, body in Receiver.calls) == ["release.completed", "release.received"]
    assert all(verify_webhook(WEBHOOK_SECRET, body, headers) for headers, body in Receiver.calls)


def test_deliveries_are_listed_oldest_or_newest_first_a_page_at_a_time(tmp_path: Path) -> None:
    """``order=desc`` walks the deliveries in the reverse of ``asc``, one item a page; a cursor keeps its order."""
    from labeldp.errors import InvalidInput
    from labeldp.service.webhooks import list_deliveries

    engine = make_engine(f"sqlite:///{tmp_path / 'f.sqlite'}")
    upgrade_schema(engine, SERVICES["features"])
    sessions = make_session_factory(engine)
    with sessions.begin() as s:
        for i in range(5):
            enqueue(s, store.WEBHOOK_DELIVERIES, "http://127.0.0.1:9/", {"id": f"evt_{i}", "type": "t", "data": {}})

    def walk(order: str) -> list[str]:
        seen, cursor = [], None
        with sessions() as s:
            while True:
                page = list_deliveries(s, store.WEBHOOK_DELIVERIES, 1, cursor, None, order)  # type: ignore[arg-type]
                seen += [item["event_id"] for item in page["items"]]
                if page["next_cursor"] is None:
                    return seen
                cursor = page["next_cursor"]

    try:
        asc = walk("asc")
        assert sorted(asc) == [f"evt_{i}" for i in range(5)]
        assert walk("desc") == asc[::-1]
        with sessions() as s:
            cursor = list_deliveries(s, store.WEBHOOK_DELIVERIES, 1, None)["next_cursor"]
            with pytest.raises(InvalidInput):
                list_deliveries(s, store.WEBHOOK_DELIVERIES, 1, cursor, None, "desc")
    finally:
        engine.dispose()
