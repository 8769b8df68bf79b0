"""The publisher's systems learn of inbox arrivals: an event stream and a signed webhook (issue 26).

The features API runs in this process on loopback (uvicorn, as `labeldp serve` runs it); a release
is delivered as the outbox delivers it. ``GET /v1/inbox/events`` streams ``release.received`` then
``release.completed``; a tiny receiver on loopback gets the same two events, each signed with
HMAC-SHA256 over ``<timestamp>.<body>``, after answering the first attempt slowly and the second with
a 503: the inbox never waited for it, and each event's retry came. No event carries a row.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import numpy as np
import pytest
from tests.inbox_messages import deliver
from tests.unit.test_features_app import API_KEY, PUBLIC_KEY, SECRET, release_body

from features_party.app import create_app
from labeldp.service.events import parse_events, shutdown_flag
from labeldp.service.server import edge_server
from labeldp.service.settings import InsecureSettings, Settings, require_webhook_secret
from labeldp.service.webhooks import (
    ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    verify_webhook,
    webhook_signature,
)
from labeldp_tools.local_stack import free_port

WEBHOOK_SECRET = "webhook-secret-Vb7nQ2xK9mT4pW1z"
HANG_SECONDS = 4.0
WEBHOOK_TIMEOUT = 3.0  # the first attempt waits this long: a blocking sender would hold the inbox as long
LABELS = np.array([11.0 + 0.123457 * i for i in range(30)])


class Receiver(BaseHTTPRequestHandler):
    """The publisher's own system: the first request hangs past the sender's timeout, the second gets
    503; then every delivery is taken (204)."""

    calls: ClassVar[list[tuple[dict[str, str], bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        type(self).calls.append((dict(self.headers.items()), body))
        n = len(type(self).calls)
        if n == 1:
            time.sleep(HANG_SECONDS)
        self.send_response(503 if n <= 2 else 204)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    Receiver.calls = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hooks/labeldp"
    server.shutdown()
    server.server_close()


def _settings(tmp_path: Path, **extra: Any) -> Settings:
    return Settings(**{
        "features_database_url": f"sqlite:///{tmp_path / 'features.db'}",
        "features_data_dir": tmp_path / "features-data",
        "features_api_key": API_KEY,
        "signing_public_keys": PUBLIC_KEY,
        "inbox_transport_key": "webhook-test-transport-key-Hq3",
        "allow_dev_secrets": True,
        "training_in_process_worker": False,
        **extra,
    })


@pytest.fixture
def features(tmp_path: Path, receiver: str) -> Iterator[tuple[str, Any]]:
    settings = _settings(
        tmp_path, inbox_webhook_url=receiver, inbox_webhook_secret=WEBHOOK_SECRET,
        inbox_webhook_timeout_seconds=WEBHOOK_TIMEOUT, inbox_webhook_initial_backoff_seconds=0.1,
    )
    app = create_app(settings)
    port = free_port()
    server = edge_server(app, "127.0.0.1", port, settings)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the features API did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", app
    shutdown_flag(app).set()
    server.should_exit = True
    thread.join(15)


def test_arrivals_are_streamed_and_sent_signed_to_the_webhook_without_holding_the_inbox(
    features: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = features
    monkeypatch.setattr("tests.inbox_messages.TRANSPORT_AUTH",
                        {"Authorization": "Bearer webhook-test-transport-key-Hq3"})
    auth = {"Authorization": f"Bearer {API_KEY}"}
    seen: list[Any] = []

    def follow() -> None:
        with httpx.Client(base_url=url, headers=auth, timeout=30) as client, \
                client.stream("GET", "/v1/inbox/events") as stream:
            assert stream.status_code == 200
            for event in parse_events(stream.iter_lines()):
                seen.append(event)
                if event.event in ("release.completed", "closing"):
                    return

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    time.sleep(0.5)  # the stream starts "now"
    message = release_body([f"u{i:03d}" for i in range(30)], LABELS, release_id="rel-hook", shard_rows=10)
    with httpx.Client(base_url=url, timeout=30) as client:
        started = time.monotonic()
        delivered = deliver(client, message, SECRET)
        took = time.monotonic() - started
    assert getattr(delivered, "answer", {}).get("status") == "complete", delivered
    print(f"delivered in {took:.2f} s")
    assert took < WEBHOOK_TIMEOUT - 0.5, f"the inbox waited for the webhook ({took:.1f} s)"

    follower.join(20)
    assert [e.event for e in seen] == ["release.received", "release.completed"]
    streamed = [e.data for e in seen]
    assert [d["data"]["status"] for d in streamed] == ["receiving", "complete"]
    assert streamed[1]["data"]["row_count"] == 30 and streamed[1]["data"]["shard_count"] == 3

    deadline = time.monotonic() + 30
    while len(Receiver.calls) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    calls = Receiver.calls
    assert len(calls) == 4, [json.loads(b).get("type") for _, b in calls]  # hang, 503, then each event once
    bodies = [json.loads(body) for _, body in calls]
    by_id: dict[str, list[dict[str, Any]]] = {}
    for b in bodies:
        by_id.setdefault(b["id"], []).append(b)
    assert sorted(len(v) for v in by_id.values()) == [2, 2]  # each event: one failed attempt, then its retry
    assert all(v[0] == v[1] for v in by_id.values())  # a retry sends the same event
    # The webhook's events are the stream's (delivered in no guaranteed order: each is retried on its own).
    assert sorted(bodies[2:], key=lambda b: b["type"]) == sorted(streamed, key=lambda b: b["type"])
    for headers, body in calls:
        assert verify_webhook(WEBHOOK_SECRET, body, headers)
        assert not verify_webhook("another-secret-0123456789", body, headers)
        assert not verify_webhook(WEBHOOK_SECRET, body.replace(b"rel-hook", b"rel-evil"), headers)
        assert headers[ID_HEADER] == json.loads(body)["id"]
    text = json.dumps(bodies)
    for value in LABELS:
        assert repr(float(value)) not in text and f"{value:.4f}" not in text
    assert "u001" not in text  # no id of a row either

    # A client may bound the stream's life (behind a proxy): it ends with `closing` and a reason.
    with httpx.Client(base_url=url, headers=auth, timeout=30) as client:
        r = client.get("/v1/inbox/events", params={"max_seconds": 0.3})
    assert [(e.event, e.data) for e in parse_events(r.text.splitlines())] == [("closing", {"reason": "max_seconds"})]


def test_a_signature_is_bound_to_its_timestamp() -> None:
    body = b'{"id":"evt_1"}'
    stamp = str(int(time.time()))
    headers = {TIMESTAMP_HEADER: stamp, SIGNATURE_HEADER: webhook_signature(WEBHOOK_SECRET, stamp, body)}
    assert verify_webhook(WEBHOOK_SECRET, body, headers)
    old = str(int(time.time()) - 3600)
    replayed = {TIMESTAMP_HEADER: old, SIGNATURE_HEADER: webhook_signature(WEBHOOK_SECRET, old, body)}
    assert not verify_webhook(WEBHOOK_SECRET, body, replayed)  # a replay an hour later
    moved = {**headers, TIMESTAMP_HEADER: str(int(stamp) + 1)}
    assert not verify_webhook(WEBHOOK_SECRET, body, moved)


@pytest.mark.parametrize("secret", ["", " ", API_KEY, "short"])
def test_a_webhook_without_a_good_secret_refuses_to_start(tmp_path: Path, secret: str) -> None:
    settings = _settings(tmp_path, inbox_webhook_url="http://127.0.0.1:9/x", inbox_webhook_secret=secret)
    if secret == "short":  # a laptop (dev secrets allowed) takes it; anything else refuses it
        create_app(settings)
        settings = settings.model_copy(update={"allow_dev_secrets": False})
        with pytest.raises(InsecureSettings, match="LABELDP_INBOX_WEBHOOK_SECRET"):
            require_webhook_secret(settings)
        return
    with pytest.raises(InsecureSettings, match="LABELDP_INBOX_WEBHOOK_SECRET"):
        create_app(settings)
