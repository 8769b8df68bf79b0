"""The SSE wire format both services stream and the progress bars drawn from it."""

from __future__ import annotations

import asyncio
import io

from labeldp.service.events import Snapshot, encode_event, event_stream, parse_events
from labeldp_tools.watch import Bar, bar, clock, release_line, training_line


def test_frames_round_trip_through_the_parser() -> None:
    frames = encode_event("training", {"status": "running", "n": 1}, 1) + b": keep-alive\n\n"
    frames += encode_event("end", {"status": "succeeded"}, 2)
    events = list(parse_events(frames.decode().split("\n")))
    assert [(e.event, e.data) for e in events] == [
        ("training", {"n": 1, "status": "running"}),
        ("end", {"status": "succeeded"}),
    ]
    # the spec's multi-line data and the default event name
    assert [(e.event, e.data) for e in parse_events(["data: [1,", "data: 2]", ""])] == [("message", [1, 2])]


def _collect(snapshots: list[Snapshot], heartbeat: float = 100.0) -> list[bytes]:
    it = iter(snapshots)

    async def poll() -> Snapshot:
        return next(it)

    async def run() -> list[bytes]:
        return [frame async for frame in event_stream(poll, "job", interval=0.0, heartbeat=heartbeat)]

    return asyncio.run(run())


def test_a_stream_sends_changes_only_and_ends_with_the_terminal_state() -> None:
    polls = [
        Snapshot({"s": "queued", "t": 1}, False, ("queued",)),
        Snapshot({"s": "queued", "t": 2}, False, ("queued",)),  # elapsed time alone is no news
        Snapshot({"s": "running"}, False, ("running",)),
        Snapshot({"s": "done"}, True, ("done",)),
        Snapshot({"s": "never polled"}, True, ("x",)),
    ]
    events = list(parse_events(b"".join(_collect(polls)).decode().split("\n")))
    assert [(e.event, e.data) for e in events] == [
        ("job", {"s": "queued", "t": 1}),
        ("job", {"s": "running"}),
        ("end", {"s": "done"}),
    ]


def test_an_idle_stream_sends_keep_alive_comments() -> None:
    same = [Snapshot({"s": "queued"}, False, 1)] * 3 + [Snapshot({"s": "done"}, True, 2)]
    frames = _collect(same, heartbeat=0.0)
    assert frames.count(b": keep-alive\n\n") == 2 and frames[-1].startswith(b"event: end")


TRAINING = {
    "status": "running",
    "queue_position": None,
    "progress": {"epoch": 1, "epochs": 4, "batch": 3, "batches": 10, "fraction": 0.325,
                 "elapsed_seconds": 75.2, "eta_seconds": 3725.0},
    "last_epoch": {"epoch": 1, "train_loss": 2.0, "val_loss": 1.5},
}


def test_lines_show_the_bar_batches_elapsed_and_eta() -> None:
    assert bar(0.5, 10) == "[#####.....]" and bar(2.0, 4) == "[####]" and clock(3725) == "1:02:05"
    line = training_line(TRAINING)
    for part in ("running", "[#########...................]", "32%", "epoch 1/4", "batch 3/10",
                 "elapsed 01:15", "eta 1:02:05", "val 1.5"):
        assert part in line, (part, line)
    assert training_line({"status": "queued", "queue_position": 3, "progress": {}}) == "queued    position 3"
    assert release_line({"status": "pending", "stage": "retrying", "attempts": 2, "last_error": "503 busy"}) == (
        "retrying  attempt 2 (last: 503 busy)"
    )
    assert release_line({"status": "failed", "stage": "failed", "attempts": 0,
                         "error": {"code": "budget_exhausted", "message": "…"}}) == "failed    (budget_exhausted)"


def test_off_a_terminal_the_bar_prints_one_line_per_step() -> None:
    out = io.StringIO()
    progress = Bar("training t", out)
    for step in (1, 1, 1, 2, 2):
        progress.show(f"step {step}", step)
    progress.show("done", 2, final=True)
    assert out.getvalue().splitlines() == ["training t step 1", "training t step 2", "training t done"]


def test_a_stopping_server_ends_the_stream_with_closing() -> None:
    polled: list[int] = []

    async def poll() -> Snapshot:
        polled.append(1)
        return Snapshot({"s": "running"}, False, len(polled))

    async def run() -> list[bytes]:
        return [f async for f in event_stream(poll, "job", interval=0.0, stopping=lambda: len(polled) >= 2)]

    events = list(parse_events(b"".join(asyncio.run(run())).decode().split("\n")))
    assert [e.event for e in events] == ["job", "job", "closing"] and len(polled) == 2
