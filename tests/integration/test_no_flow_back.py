"""Nothing flows back that the receiver chooses, and nothing the client chooses crosses over.

The labels API and its outbox run as real processes; the "features party" is a hostile fake on
loopback that answers every message ``422`` with a code and text of its own choosing. The release
must show only values of the project's fixed outcome list (API, events, logs), the receiver must
see a request id the labels party made, not the client's, and a feature-table hint that is not a
table name is refused before anything is charged.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from labeldp.synthetic import make_conversions
from labeldp_tools.local_stack import LocalStack
from labels_party.delivery_outcomes import DeliveryOutcome

from .conftest import create_label_set, upload_csv, wait_for_status

pytestmark = pytest.mark.integration

CHOSEN_CODE = "features_party_chosen_text_u001_income=42"
CHOSEN_TEXT = "receiver_says_u001_earns_42"


class HostileInbox(BaseHTTPRequestHandler):
    """Reads the message, records the headers it came with, refuses it in words of its own."""

    seen: ClassVar[list[dict[str, str]]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        type(self).seen.append({k.lower(): v for k, v in self.headers.items()})
        body = json.dumps({"code": CHOSEN_CODE, "message": CHOSEN_TEXT, "details": [CHOSEN_TEXT]}).encode()
        self.send_response(422, CHOSEN_TEXT)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.send_header("x-request-id", CHOSEN_TEXT)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hostile_inbox() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), HostileInbox)
    HostileInbox.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_receiver_chooses_nothing_the_labels_party_shows_and_sees_no_client_choice(tmp_path, hostile_inbox):
    data = make_conversions(120, seed=11)
    trace = "client-trace-u001-income-42"
    with LocalStack(tmp_path, extra_env={"LABELDP_FEATURES_URL": hostile_inbox}) as stack:
        stack.start("labels", "outbox")
        with stack.labels_client() as labels:
            ls = create_label_set(labels, data.ids, budget=2.0, high=data.clip)
            assert upload_csv(labels, ls["id"], list(zip(data.ids, map(float, data.labels)))).status_code == 200
            url = f"/v1/label-sets/{ls['id']}/releases"

            # A hint that is not a table name never becomes a release: 422, nothing charged.
            for hint in ("clicks; u001=42", "x" * 65, "tablé", "", "a/b"):
                r = labels.post(url, json={"mechanism": "laplace", "epsilon": 1.0, "feature_table": hint})
                assert (r.status_code, r.json().get("code")) == (422, "invalid_request"), hint
                assert r.json()["details"][0]["loc"] == ["body", "feature_table"]
            unchanged = labels.get(f"/v1/label-sets/{ls['id']}").json()
            assert unchanged["budget"]["spent_micro"] == 0 and unchanged["releases"] == []

            r = labels.post(
                url,
                json={"mechanism": "laplace", "epsilon": 1.0, "feature_table": "clicks.v2"},
                headers={"X-Request-ID": trace},
            )
            assert r.status_code == 202, r.text
            assert r.headers["x-request-id"] == trace
            release_id = r.json()["id"]
            rejected = wait_for_status(labels, release_id, "rejected", timeout=30)
            assert rejected["last_error"] == DeliveryOutcome.REJECTED_4XX
            shown = labels.get(f"/v1/releases/{release_id}").text
            events = labels.get(f"/v1/releases/{release_id}/events").text
            listed = labels.get("/v1/releases").text
            assert "event: end" in events and '"last_error":"rejected_4xx"' in events

    # The API, its event stream and every log line of both labels-party processes.
    logs = {name: stack.log_path(name).read_text() for name in ("labels", "outbox")}
    for where, text in {"GET": shown, "events": events, "list": listed, **logs}.items():
        for chosen in (CHOSEN_CODE, CHOSEN_TEXT, "income=42", "u001_earns"):
            assert chosen not in text, f"receiver-chosen {chosen!r} reached {where}"
    assert "rejected_4xx" in logs["outbox"]  # the outcome was logged, as a value of the list

    # The receiver saw a fresh request id, never the client's; the labels API's own log links them.
    assert HostileInbox.seen, "the outbox never reached the receiver"
    sent = {h["x-request-id"] for h in HostileInbox.seen}
    assert len(sent) == 1 and trace not in sent
    assert not any(trace in v for h in HostileInbox.seen for v in h.values())
    (outgoing,) = sent
    mapping = [json.loads(line) for line in logs["labels"].splitlines() if outgoing in line]
    assert any(d.get("request_id") == trace and release_id in d["message"] for d in mapping)
