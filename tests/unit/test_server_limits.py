"""The server's request limit counts requests in progress, not open connections (issue 24, item 6):
uvicorn's own ``limit_concurrency`` counted connections, so 500 half-open sockets made every real
request a 503 (bench/bench_edge.py found it). Each app counts them inside its request-id middleware,
so the 503 carries ``X-Request-ID`` like every other error answer. The listen backlog
(LABELDP_SERVER_BACKLOG) reaches the server's listening socket."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.local_settings import both_parties, fixed_signing_key

from features_party.app import create_app as features_app
from labeldp.service.http_api import RequestLimit
from labeldp.service.server import edge_server
from labels_party.app import create_app as labels_app

KEYS = ("labels-key-0123456789abcdef", "features-key-0123456789abcdef", fixed_signing_key("request limit"))


def test_past_the_limit_a_request_is_a_503_envelope_and_a_finished_one_frees_its_slot() -> None:
    release = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await release.wait()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    limited = RequestLimit(app, 1)

    async def call() -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        scope = {"type": "http", "method": "GET", "path": "/", "headers": [], "query_string": b""}
        await limited(scope, receive, send)
        return sent

    async def scenario() -> None:
        first = asyncio.create_task(call())
        await asyncio.sleep(0.01)
        busy = await call()  # the first is in progress: no slot
        assert busy[0]["status"] == 503 and (b"retry-after", b"1") in busy[0]["headers"]
        assert json.loads(busy[1]["body"])["code"] == "service_unavailable"
        release.set()
        assert (await first)[0]["status"] == 204
        assert (await call())[0]["status"] == 204  # its slot is free again
        assert limited.active == 0

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("party", "path", "key"),
    [("labels", "/v1/label-sets", KEYS[0]), ("features", "/v1/trainings", KEYS[1])],
)
def test_the_503_past_the_limit_carries_the_request_id(tmp_path: Path, party: str, path: str, key: str) -> None:
    settings = both_parties(tmp_path, *KEYS, server_limit_concurrency=1)
    app = labels_app(settings) if party == "labels" else features_app(settings)
    body_may_end = asyncio.Event()

    async def slow_body() -> AsyncIterator[bytes]:  # holds the one slot while its body is awaited
        yield b"{"
        await body_may_end.wait()
        yield b"}"

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://edge") as client:
            headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
            holder = asyncio.create_task(client.post(path, content=slow_body(), headers=headers))
            await asyncio.sleep(0.2)
            busy = await client.get("/healthz", headers={"X-Request-ID": "limit-503"})
            fresh = await client.get("/healthz")
            body_may_end.set()
            held = await holder
        assert busy.status_code == 503 and busy.headers["retry-after"] == "1", busy.text
        assert busy.json()["code"] == "service_unavailable"
        assert busy.headers["x-request-id"] == "limit-503"
        assert fresh.status_code == 503 and fresh.headers["x-request-id"].startswith("req_")
        assert held.status_code != 503 and "x-request-id" in held.headers

    asyncio.run(scenario())


def _listen_backlog(sock: socket.socket) -> int:
    """The kernel's accept-queue limit of a listening socket (Linux ``tcp_info``: ``tcpi_sacked`` of a
    socket in LISTEN is its ``sk_max_ack_backlog``)."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    assert info[0] == 10  # TCP_LISTEN
    return int(struct.unpack_from("I", info, 28)[0])


def test_the_backlog_setting_reaches_the_listening_socket_apart_from_the_accept_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LABELDP_SERVER_BACKLOG", "777")
    settings = both_parties(tmp_path, *KEYS, server_accept_batch=33)
    assert settings.server_backlog == 777

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})

    server = edge_server(app, "127.0.0.1", 0, settings)
    assert server.config.backlog == 33  # asyncio accepts this many a turn; the kernel queues 777
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
            time.sleep(0.02)
        (listening,) = [s for srv in server.servers for s in srv.sockets]
        somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
        with socket.socket(fileno=socket.dup(listening.fileno())) as sock:
            assert _listen_backlog(sock) == min(777, somaxconn)  # the kernel caps it at somaxconn
    finally:
        server.should_exit = True
        thread.join(15)
