"""How both APIs are served: uvicorn with the edge's limits (docs/operations.md, "The edge").

uvicorn closes idle keep-alive connections and caps concurrent requests, but it keeps a
connection that never completes a request head for as long as the client likes, and accepts
connections until the file descriptors run out. :class:`GuardedH11Protocol` adds both bounds:
a connection must send a whole request head within ``server_header_timeout_seconds`` of opening
(or of its last answer), and past ``server_max_connections`` the oldest connection still waiting
for a head is closed to make room (a flood of half-open sockets evicts itself, so a real client's
connection, whose head follows at once, is served); with none waiting the new one is closed.
:class:`EdgeServer` sets the kernel's accept queue apart from how many connections one loop turn
accepts (uvicorn ties both to its ``backlog``). Slow bodies are bounded in the app (408).
uvicorn's own ``limit_concurrency`` counts open connections, not requests, so a cap full of
half-open sockets would answer every real request 503: each app counts requests instead
(``labeldp.service.http_api.RequestLimit``, inside its request-id middleware).

TLS (``LABELDP_SERVER_TLS_*``) is uvicorn's own. With a client CA the handshake asks for a client
certificate (``CERT_OPTIONAL``: one from another CA fails the handshake) and each request's scope
says whether the connection presented one the CA signed (:data:`TLS_CLIENT_VERIFIED` in
``scope["state"]``), so the inbox's routes can require it while the publisher's own routes do not.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
from collections import OrderedDict
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from labeldp.service.http_api import TLS_CLIENT_VERIFIED
from labeldp.service.settings import InsecureSettings, Settings, require_files

log = logging.getLogger("labeldp.server")


class GuardedH11Protocol(H11Protocol):
    header_timeout_seconds = 10.0
    max_connections = 1000

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._head_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        # The handshake is over when the protocol sees the connection: a verified client
        # certificate is there or not, for every request this connection carries.
        self.app_state = {**self.app_state, TLS_CLIENT_VERIFIED: bool(transport.get_extra_info("peercert"))}
        if len(self.connections) > self.max_connections:
            # no answer to the one closed: writing one would cost what the cap saves
            waiting = self._waiting()
            if not waiting:
                transport.abort()
                return
            victim, _ = waiting.popitem(last=False)
            victim._disarm()
            victim.transport.abort()
        self._arm()

    def _waiting(self) -> OrderedDict[GuardedH11Protocol, None]:
        """This server's connections waiting for a request head, oldest first (an OrderedDict: a plain
        dict's first item is found by skipping every slot deleted before it, O(n) in a flood)."""
        waiting: OrderedDict[GuardedH11Protocol, None] | None = getattr(self.server_state, "labeldp_waiting", None)
        if waiting is None:
            waiting = OrderedDict()
            self.server_state.labeldp_waiting = waiting  # type: ignore[attr-defined]
        return waiting

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
            self._waiting()[self] = None

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
            self._waiting().pop(self, None)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        self._waiting().pop(self, None)
        if not self._in_request() and not self.transport.is_closing():
            self.transport.close()


class EdgeServer(uvicorn.Server):
    """uvicorn's server whose listening sockets queue ``listen_backlog`` connections in the kernel.

    asyncio accepts up to ``backlog`` connections in one turn of the loop and uvicorn passes one
    value for both. A flood still connecting keeps the queue full, so each turn accepted a whole
    queue (2 048, 4 096) of connections before any of their heads was read: past the connection cap
    they evicted each other, a real client's among them (reset), and descriptors reached 5–13× the
    cap (bench/bench_edge.py). So the loop accepts ``server_accept_batch`` a turn (uvicorn's
    ``backlog``) and, once listening, the sockets' kernel queue is raised to ``server_backlog``
    (``listen`` again on a listening socket changes its queue's limit on Linux).
    """

    def __init__(self, config: uvicorn.Config, listen_backlog: int) -> None:
        super().__init__(config)
        self.listen_backlog = listen_backlog

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        for server in getattr(self, "servers", []):
            for listening in server.sockets:
                with socket.socket(fileno=os.dup(listening.fileno())) as sock:  # closes the copy only
                    sock.listen(self.listen_backlog)


def edge_server(app: Any, host: str, port: int, settings: Settings) -> EdgeServer:
    """The server both APIs run: :func:`server_config`'s limits and ``server_backlog``'s kernel queue."""
    return EdgeServer(server_config(app, host, port, settings), settings.server_backlog)


def server_config(app: Any, host: str, port: int, settings: Settings) -> uvicorn.Config:
    """uvicorn's configuration with the edge's limits from ``settings`` (its ``backlog`` is the accept batch:
    serve it with :func:`edge_server`, which sets the sockets' kernel queue)."""
    protocol = type(
        "Guarded",
        (GuardedH11Protocol,),
        {
            "header_timeout_seconds": settings.server_header_timeout_seconds,
            "max_connections": settings.server_max_connections,
        },
    )
    tls: dict[str, Any] = {}
    require_files(settings, "server_tls_certfile", "server_tls_keyfile", "server_tls_client_ca_file")
    if settings.server_tls_certfile:
        tls = {"ssl_certfile": settings.server_tls_certfile, "ssl_keyfile": settings.server_tls_keyfile or None}
        if settings.server_tls_client_ca_file:
            tls |= {"ssl_ca_certs": settings.server_tls_client_ca_file, "ssl_cert_reqs": ssl.CERT_OPTIONAL}
    elif settings.server_tls_client_ca_file or settings.server_tls_keyfile:
        raise InsecureSettings(
            "LABELDP_SERVER_TLS_CLIENT_CA_FILE and LABELDP_SERVER_TLS_KEYFILE need LABELDP_SERVER_TLS_CERTFILE"
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
        backlog=settings.server_accept_batch,
        h11_max_incomplete_event_size=settings.server_max_header_bytes,
        **tls,
    )
