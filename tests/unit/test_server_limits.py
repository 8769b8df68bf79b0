"""The server's request limit counts requests in progress, not open connections (issue 24, item 6):
uvicorn's own ``limit_concurrency`` counted connections, so 500 half-open sockets made every real
request a 503 (bench/bench_edge.py found it)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from labeldp.service.server import RequestLimit


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
