"""Mutual TLS between the labels party's outbox and the features party's inbox (issue 24).

Certificates are made here (``labeldp_tools.tls``): a CA, a server certificate for 127.0.0.1 and
the outbox's client certificate, plus a client certificate of another CA. The features API serves
HTTPS only and asks for client certificates; the outbox presents its own and delivers. The inbox
refuses a connection without a client certificate (403 before the body) and one whose certificate
another CA signed (the handshake fails), while the publisher's own routes need only their key.
"""

from __future__ import annotations

import ssl

import httpx
import pytest

from labeldp.synthetic import make_conversions
from labeldp_tools.local_stack import LocalStack
from labeldp_tools.tls import issue, make_ca, write_exchange_certificates

from .conftest import create_label_set, upload_csv, wait_for_status

pytestmark = pytest.mark.integration


def test_outbox_delivers_over_mutual_tls_and_the_inbox_refuses_other_clients(tmp_path):
    certs = write_exchange_certificates(tmp_path / "tls", ("127.0.0.1",))
    stranger_ca = make_ca("another CA")
    stranger_cert, stranger_key = issue(stranger_ca, "not the outbox", server=False).write(tmp_path / "tls", "stranger")
    trusting = ssl.create_default_context(cafile=str(certs["ca.crt"]))
    env = {
        "LABELDP_SERVER_TLS_CERTFILE": str(certs["inbox.crt"]),
        "LABELDP_SERVER_TLS_KEYFILE": str(certs["inbox.key"]),
        "LABELDP_SERVER_TLS_CLIENT_CA_FILE": str(certs["ca.crt"]),
        "LABELDP_OUTBOX_TLS_CA_FILE": str(certs["ca.crt"]),
        "LABELDP_OUTBOX_TLS_CERTFILE": str(certs["outbox.crt"]),
        "LABELDP_OUTBOX_TLS_KEYFILE": str(certs["outbox.key"]),
    }
    data = make_conversions(60, seed=3)
    with LocalStack(tmp_path / "stack", extra_env=env, features_tls=trusting) as stack:
        stack.start()
        assert stack.features_url.startswith("https://")
        with stack.labels_client() as labels:
            ls = create_label_set(labels, data.ids, budget=2.0, high=data.clip)
            assert upload_csv(labels, ls["id"], list(zip(data.ids, map(float, data.labels)))).status_code == 200
            r = labels.post(f"/v1/label-sets/{ls['id']}/releases", json={"mechanism": "laplace", "epsilon": 1.0})
            assert r.status_code == 202, r.text
            release_id = r.json()["id"]
            assert wait_for_status(labels, release_id, "delivered", timeout=60)["status"] == "delivered"
        with stack.features_client() as features:  # the publisher's own route: its key, no client certificate
            got = features.get(f"/v1/releases/{release_id}")
            assert got.status_code == 200 and got.json()["row_count"] == len(data.ids)

        inbox = f"{stack.features_url}/v1/releases"
        sender = {"authorization": f"Bearer {stack.transport_key}", "content-type": "application/json"}
        # The transport key alone is not enough: no client certificate, 403 before the body.
        r = httpx.post(inbox, content=b"{}", headers=sender, verify=trusting)
        assert (r.status_code, r.json()["code"]) == (403, "client_certificate_required")
        # The outbox's certificate gets past TLS (the empty manifest is then refused for its signature).
        outbox_ctx = ssl.create_default_context(cafile=str(certs["ca.crt"]))
        outbox_ctx.load_cert_chain(str(certs["outbox.crt"]), str(certs["outbox.key"]))
        r = httpx.post(inbox, content=b"{}", headers=sender, verify=outbox_ctx)
        assert r.status_code != 403 and r.json()["code"] != "client_certificate_required"
        # A certificate another CA signed never reaches the app: the handshake fails.
        stranger = ssl.create_default_context(cafile=str(certs["ca.crt"]))
        stranger.load_cert_chain(str(stranger_cert), str(stranger_key))
        with pytest.raises(httpx.TransportError):
            httpx.post(inbox, content=b"{}", headers=sender, verify=stranger).raise_for_status()
        # Plain HTTP to the TLS port gets no answer from the app.
        with pytest.raises(httpx.TransportError):
            httpx.post(inbox.replace("https://", "http://"), content=b"{}", headers=sender)
