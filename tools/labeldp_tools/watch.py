"""Follow a training or a release from its event stream and draw a plain-text progress bar.

Used by ``labeldp watch`` and ``labeldp demo``. The bar goes to stderr: redrawn in place
on a terminal, one line per epoch or stage otherwise (logs stay short). Everything drawn
comes from the events (docs/architecture.md, "Progress and events").
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TextIO

import httpx

from labeldp.service.events import CLOSING, END, EVENT_STREAM, HEARTBEAT_SECONDS, parse_events

BAR_WIDTH = 28


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    filled = int(round(max(0.0, min(1.0, fraction)) * width))
    return "[" + "#" * filled + "." * (width - filled) + "]"


def clock(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return (f"{hours}:" if hours else "") + f"{rest // 60:02d}:{rest % 60:02d}"


def training_line(data: dict[str, Any]) -> str:
    """``running   [#####......]  18%  epoch 2/10  batch 37/120  elapsed 00:12  eta 00:51``."""
    status, p = data["status"], data["progress"]
    if status == "queued":
        return f"queued    position {data.get('queue_position')}"
    parts = [f"{status:<9} {bar(p['fraction'])} {p['fraction'] * 100:3.0f}%", f"epoch {p['epoch']}/{p['epochs']}"]
    if p.get("batches"):
        parts.append(f"batch {p['batch']}/{p['batches']}")
    parts.append(f"elapsed {clock(p.get('elapsed_seconds'))}")
    if status in ("running", "cancelling"):
        parts.append(f"eta {clock(p.get('eta_seconds'))}")
    last = data.get("last_epoch")
    if last and last.get("val_loss") is not None:
        parts.append(f"val {last['val_loss']:.4g}")
    return "  ".join(parts)


def release_line(data: dict[str, Any]) -> str:
    """``accepted`` … ``privatizing`` … ``sending   attempt 1`` … ``delivered`` (or ``failed (code)``)."""
    line = f"{data.get('stage', data['status']):<9}"
    if data.get("error"):
        line += f" ({data['error']['code']})"
    if data.get("attempts"):
        line += f" attempt {data['attempts']}"
    if data.get("last_error"):
        line += f" (last: {data['last_error']})"
    return line.rstrip()


class Bar:
    """One progress line: redrawn in place on a terminal, else printed when its ``step`` changes."""

    def __init__(self, label: str, out: TextIO | None = None) -> None:
        self.label, self.out = label, out or sys.stderr
        self.tty = bool(getattr(self.out, "isatty", lambda: False)())
        self._last_step: Any = None
        self._width = 0

    def show(self, text: str, step: Any, final: bool = False) -> None:
        line = f"{self.label} {text}"
        if self.tty:
            self.out.write("\r" + line.ljust(self._width))
            self._width = max(self._width, len(line))
            if final:
                self.out.write("\n")
        elif final or step != self._last_step:
            self.out.write(line + "\n")
        self._last_step = step
        self.out.flush()


def follow(
    client: httpx.Client,
    path: str,
    render: Callable[[dict[str, Any]], str],
    step: Callable[[dict[str, Any]], Any],
    label: str,
    out: TextIO | None = None,
) -> dict[str, Any]:
    """Read the event stream at ``path`` to its ``end`` event, drawing each event; return the final state."""
    progress = Bar(label, out)
    # The server sends a comment at least every HEARTBEAT_SECONDS: a longer silence is a dead server.
    timeout = httpx.Timeout(30.0, read=4 * HEARTBEAT_SECONDS)
    with client.stream("GET", path, headers={"accept": EVENT_STREAM}, timeout=timeout) as response:
        if response.status_code != 200:
            response.read()
            raise RuntimeError(f"GET {path} -> {response.status_code}: {response.text[:300]}")
        for event in parse_events(response.iter_lines()):
            if event.event == CLOSING:
                raise RuntimeError(f"{path}: the server is shutting down; watch again once it is back")
            final = event.event == END
            progress.show(render(event.data), step(event.data), final=final)
            if final:
                return event.data
    raise RuntimeError(f"the event stream {path} ended before its job did")


def follow_training(client: httpx.Client, training_id: str, label: str = "", out: TextIO | None = None) -> dict:
    """Draw a training's progress until it succeeds, fails or is cancelled; its final state."""
    return follow(
        client,
        f"/v1/trainings/{training_id}/events",
        training_line,
        lambda d: (d["status"], d["progress"]["epoch"], d.get("queue_position")),
        label or f"training {training_id}",
        out,
    )


def follow_release(client: httpx.Client, release_id: str, label: str = "", out: TextIO | None = None) -> dict:
    """Draw a release's delivery stage until it is delivered or rejected; its final state."""
    return follow(
        client,
        f"/v1/releases/{release_id}/events",
        release_line,
        lambda d: (d.get("stage"), d.get("attempts")),
        label or f"release {release_id}",
        out,
    )
