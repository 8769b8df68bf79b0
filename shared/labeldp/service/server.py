"""How both APIs are served: uvicorn with the edge's limits (docs/operations.md, "The edge").

uvicorn closes idle keep-alive connections and caps concurrent requests, but it keeps a
connection that never completes a request head for as long as the client likes, and accepts
connections until the file descriptors run out. :class:`GuardedH11Protocol` adds both bounds:
a connection must send a whole request head within ``server_header_timeout_seconds`` of opening
(or of its last answer), and past ``server_max_connections`` a new connection is closed at once.
Slow bodies are bounded in the app (``labeldp.service.http_api.BodySizeLimit``: 408).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from labeldp.service.settings import Settings

log = logging.getLogger("labeldp.server")


class GuardedH11Protocol(H11Protocol):
    header_timeout_seconds = 10.0
    max_connections = 1000

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._head_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            transport.abort()  # no answer: writing one would cost what the cap saves
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._in_request():
            self._disarm()
        else:
            self._arm()  # between requests on a kept-alive connection: the next head has its deadline

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self._in_request():
            self._arm()

    def _in_request(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout_seconds, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._in_request() and not self.transport.is_closing():
            self.transport.close()


def server_config(app: Any, host: str, port: int, settings: Settings) -> uvicorn.Config:
    """uvicorn's configuration with the edge's limits from ``settings``."""
    protocol = type(
        "Guarded",
        (GuardedH11Protocol,),
        {
            "header_timeout_seconds": settings.server_header_timeout_seconds,
            "max_connections": settings.server_max_connections,
        },
    )
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol,
        log_level=settings.log_level.lower(),
        log_config=None,
        access_log=False,
        timeout_keep_alive=settings.server_timeout_keep_alive_seconds,
        limit_concurrency=settings.server_limit_concurrency,
        h11_max_incomplete_event_size=settings.server_max_header_bytes,
    )
