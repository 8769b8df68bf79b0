"""Server-Sent Events for jobs a person watches: a training, a release's delivery.

One definition of the wire format for both services and their clients (the CLI's and
the demo's progress bars, the tests). A stream polls its job's state, sends an event
whenever the state changes, a comment now and then so idle proxies keep the
connection, and ends with an ``end`` event once the job is terminal
(docs/architecture.md, "Progress and events"). A server that is stopping ends its
streams with a ``closing`` event instead: an open stream would otherwise hold the
server's graceful shutdown until the job ended (see :func:`shutdown_flag`).

Events carry the catalogue's view of a job (status, counts, timings, ids) and nothing
else: raw labels are never in what they are built from.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from starlette.responses import StreamingResponse

EVENT_STREAM = "text/event-stream"
END = "end"
CLOSING = "closing"
POLL_SECONDS = 0.25
HEARTBEAT_SECONDS = 15.0
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class EventStreamResponse(StreamingResponse):
    """A stream of :func:`encode_event` frames; as a route's ``response_class`` it documents the
    operation's body as ``text/event-stream``."""

    media_type = EVENT_STREAM


def encode_event(event: str, data: dict[str, Any], event_id: int | None = None) -> bytes:
    """One SSE frame; the JSON is one line, so it needs one ``data:`` field."""
    lines = [f"event: {event}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append("data: " + json.dumps(data, separators=(",", ":"), sort_keys=True))
    return ("\n".join(lines) + "\n\n").encode()


@dataclass(frozen=True)
class Snapshot:
    """What a poll of a job returns: the event's body, whether the job is over, and which
    fields decide that something changed (elapsed time alone is no news)."""

    data: dict[str, Any]
    terminal: bool
    change_key: Any


def shutdown_flag(app: Any) -> threading.Event:
    """The app's "server is stopping" flag: ``labeldp serve`` sets it when the server is told to
    exit, before it waits for open responses to finish; streams poll it."""
    flag = getattr(app.state, "events_shutdown", None)
    if flag is None:
        flag = threading.Event()
        app.state.events_shutdown = flag
    return flag


async def event_stream(
    poll: Callable[[], Awaitable[Snapshot]],
    event: str,
    *,
    interval: float = POLL_SECONDS,
    heartbeat: float = HEARTBEAT_SECONDS,
    stopping: Callable[[], bool] | None = None,
) -> AsyncIterator[bytes]:
    """Frames for one job: an ``event`` on every change, ``end`` with the final state, then stop
    (or ``closing`` once ``stopping()``: the client may follow the job again after a restart)."""
    last_key: Any = object()
    last_sent = time.monotonic()
    seq = 0
    while True:
        if stopping is not None and stopping():
            yield encode_event(CLOSING, {"reason": "the server is shutting down"}, seq + 1)
            return
        snap = await poll()
        now = time.monotonic()
        if snap.terminal:
            seq += 1
            yield encode_event(END, snap.data, seq)
            return
        if snap.change_key != last_key:
            seq += 1
            last_key, last_sent = snap.change_key, now
            yield encode_event(event, snap.data, seq)
        elif now - last_sent >= heartbeat:
            last_sent = now
            yield b": keep-alive\n\n"
        await asyncio.sleep(interval)


async def feed_stream(
    poll: Callable[[], Awaitable[list[tuple[str, dict[str, Any]]]]],
    *,
    interval: float = POLL_SECONDS,
    heartbeat: float = HEARTBEAT_SECONDS,
    stopping: Callable[[], bool] | None = None,
    max_seconds: float | None = None,
) -> AsyncIterator[bytes]:
    """Frames of a stream that does not end by itself (the features party's inbox): every
    ``(event, data)`` each poll returns, in order, a comment now and then, and ``closing`` once
    ``stopping()`` or after ``max_seconds``; the client reconnects and reads what it missed from
    the list endpoint."""
    last_sent = time.monotonic()
    ends = None if max_seconds is None else last_sent + max_seconds
    seq = 0
    while True:
        if stopping is not None and stopping():
            yield encode_event(CLOSING, {"reason": "the server is shutting down"}, seq + 1)
            return
        if ends is not None and time.monotonic() >= ends:
            yield encode_event(CLOSING, {"reason": "max_seconds"}, seq + 1)
            return
        now = time.monotonic()
        events = await poll()
        for name, data in events:
            seq += 1
            last_sent = now
            yield encode_event(name, data, seq)
        if not events and now - last_sent >= heartbeat:
            last_sent = now
            yield b": keep-alive\n\n"
        await asyncio.sleep(interval)


@dataclass(frozen=True)
class Event:
    event: str
    data: dict[str, Any]


def parse_events(lines: Iterable[str]) -> Iterator[Event]:
    """Events from the lines of an SSE stream (what ``httpx.Response.iter_lines`` yields).

    Comments are skipped; ``data`` fields of one event are joined as the spec says.
    """
    name, data = "message", list[str]()
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield Event(name, json.loads("\n".join(data)))
            name, data = "message", list[str]()
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    if data:
        yield Event(name, json.loads("\n".join(data)))
