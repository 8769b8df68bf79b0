"""20 000 half-open connections against a labels API served by uvicorn on loopback (issue 24, item 6).

Usage:
    python bench/bench_edge.py [--connections 20000] [--hold 12] [--out bench/results/edge.md]

The labels API runs as `labeldp serve labels` with the default edge settings (a request head
within 10 s, at most 1 000 connections). Client processes (as many as the file descriptor hard
limit needs: each raises its soft limit to the hard one) open the connections as fast as they
can and hold them: half send nothing, half a request line and never the rest (slowloris).
Meanwhile this process asks `/healthz` and an authenticated `GET /v1/label-sets` on a fresh
connection every 0.25 s (deadline 1 s) and samples the server's RSS, open descriptors and log size.
The test `tests/integration/test_edge.py::test_half_open_connections_are_capped_and_closed` is
the small version (1 000 against a cap of 300).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import multiprocessing as mp
import os
import platform
import resource
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from labeldp_tools.local_stack import LocalStack

DEADLINE = 1.0
PARTIAL_HEAD = b"GET /healthz HTTP/1.1\r\nHost: bench\r\n"


def raise_fd_limit() -> tuple[int, int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def flood(port: int, count: int, hold: float, start: Any, out: Any) -> None:
    """One client process: open ``count`` connections, hold them ``hold`` s more, report what happened."""
    raise_fd_limit()
    start.wait()
    socks: list[socket.socket] = []
    failed = 0
    began = time.monotonic()
    for i in range(count):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            if i % 2:
                s.sendall(PARTIAL_HEAD)
            socks.append(s)
        except OSError:
            failed += 1
    opened_in = time.monotonic() - began
    time.sleep(hold)
    closed = 0
    for s in socks:
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                closed += 1
        except BlockingIOError:
            pass
        except OSError:  # reset by the server
            closed += 1
        s.close()
    out.put({"opened": len(socks), "failed": failed, "opened_in": opened_in, "closed_by_server": closed})


def process_stats(pid: int) -> tuple[int, int]:
    """RSS in bytes and open descriptors of ``pid``."""
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def listen_overflows() -> int:
    """The kernel's count of connections dropped because a listening socket's accept queue was full."""
    with open("/proc/net/netstat") as f:
        lines = [line.split() for line in f if line.startswith("TcpExt:")]
    return int(dict(zip(lines[0][1:], lines[1][1:], strict=True)).get("ListenOverflows", 0))


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def probe(client: httpx.Client, path: str, headers: dict[str, str], began: float = 0.0) -> tuple[int, float, float]:
    """(status or 0, seconds taken, when it started relative to ``began``)."""
    started = time.monotonic()
    try:
        status = client.get(path, headers=headers).status_code
    except httpx.HTTPError:
        status = 0
    return status, time.monotonic() - started, started - began


def run(connections: int, hold: float) -> dict[str, Any]:
    soft, hard = raise_fd_limit()
    load = os.getloadavg()[0]
    per_process = min(connections, max(1000, hard - 500))
    processes = math.ceil(connections / per_process)
    with tempfile.TemporaryDirectory() as folder:
        stack = LocalStack(Path(folder))
        stack.start("labels", timeout=120)
        try:
            pid = stack.processes["labels"].pid
            log = stack.log_path("labels")
            auth = {"Authorization": f"Bearer {stack.labels_key}"}
            no_reuse = httpx.Limits(max_keepalive_connections=0)
            with httpx.Client(base_url=stack.labels_url, timeout=10, limits=no_reuse) as client:
                for _ in range(5):  # warm: the routes and the database have answered once
                    probe(client, "/healthz", {})
                    probe(client, "/v1/label-sets?limit=1", auth)
                time.sleep(1.0)
                idle_rss, idle_fds = process_stats(pid)
                idle_log = log.stat().st_size
                idle_cpu = cpu_seconds(pid)
                overflows = listen_overflows()
                start = mp.Event()
                out: mp.Queue[dict[str, Any]] = mp.Queue()
                shares = [connections // processes + (k < connections % processes) for k in range(processes)]
                children = [mp.Process(target=flood, args=(stack.labels_port, n, hold, start, out)) for n in shares]
                for child in children:
                    child.start()
                time.sleep(0.5)
                start.set()
                began = time.monotonic()
                probes: dict[str, list[tuple[int, float, float]]] = {"/healthz": [], "/v1/label-sets?limit=1": []}
                peak_rss, peak_fds = idle_rss, idle_fds
                while any(child.is_alive() for child in children) and out.qsize() < len(children):
                    for path in probes:
                        probes[path].append(probe(client, path, auth if path.startswith("/v1") else {}, began))
                    rss, fds = process_stats(pid)
                    peak_rss, peak_fds = max(peak_rss, rss), max(peak_fds, fds)
                    time.sleep(0.25)
                reports = [out.get(timeout=120) for _ in children]
                for child in children:
                    child.join(30)
                time.sleep(1.0)
                end_rss, end_fds = process_stats(pid)
                flood_cpu = cpu_seconds(pid) - idle_cpu
                overflows = listen_overflows() - overflows
                after = [probe(client, "/healthz", {}) for _ in range(3)]
        finally:
            log_growth = stack.log_path("labels").stat().st_size - idle_log
            stack.stop()
    return {
        "load": load, "flood_cpu": flood_cpu, "overflows": overflows, "soft": soft, "hard": hard,
        "processes": processes, "connections": connections, "hold": hold,
        "reports": reports, "probes": probes, "idle_rss": idle_rss, "peak_rss": peak_rss, "end_rss": end_rss,
        "idle_fds": idle_fds, "peak_fds": peak_fds, "end_fds": end_fds, "log_growth": log_growth, "after": after,
    }


def render(r: dict[str, Any]) -> str:
    mib = 1 << 20
    opened = sum(x["opened"] for x in r["reports"])
    lines = [
        "# Half-open connections against the labels API (bench/bench_edge.py)",
        "",
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, load average {r['load']:.1f} at the start; file descriptors: soft "
        f"{r['soft']}, hard {r['hard']} "
        f"(so {r['processes']} client processes); server: `labeldp serve labels`, default edge settings "
        "(head within 10 s, at most 1 000 connections).",
        "",
        f"Command: `python bench/bench_edge.py --connections {r['connections']} --hold {r['hold']:g}`",
        "",
        "| | value |",
        "|---|---|",
        f"| connections opened (half none, half a request line only) | {opened} of {r['connections']} "
        f"({sum(x['failed'] for x in r['reports'])} connects failed) |",
        f"| time to open them | {max(x['opened_in'] for x in r['reports']):.1f} s |",
        f"| closed by the server {r['hold']:g} s after the last opened | "
        f"{sum(x['closed_by_server'] for x in r['reports'])} |",
        f"| server RSS: idle / peak / after | {r['idle_rss'] / mib:.0f} / {r['peak_rss'] / mib:.0f} / "
        f"{r['end_rss'] / mib:.0f} MiB (peak − idle {(r['peak_rss'] - r['idle_rss']) / mib:.1f} MiB) |",
        f"| server CPU time during the flood | {r['flood_cpu']:.1f} s "
        f"({r['flood_cpu'] / r['connections'] * 1e6:.0f} µs a connection) |",
        f"| SYNs the kernel dropped, accept queue full (ListenOverflows, whole machine) | {r['overflows']} |",
        f"| server descriptors: idle / peak / after | {r['idle_fds']} / {r['peak_fds']} / {r['end_fds']} |",
        f"| server log written during the flood (the probes' own access lines) | {r['log_growth']} bytes |",
    ]
    opening = max(x["opened_in"] for x in r["reports"])
    for path, results in r["probes"].items():
        for phase, chosen in (("while the flood connects", [p for p in results if p[2] < opening]),
                              ("while its sockets are held", [p for p in results if p[2] >= opening])):
            if not chosen:
                continue
            times = [t for _, t, _ in chosen]
            ok = sum(1 for s, t, _ in chosen if s == 200 and t < DEADLINE)
            lines.append(
                f"| `GET {path}`, {phase}: 200 within {DEADLINE:g} s | {ok} of {len(chosen)} "
                f"(median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms) |"
            )
    lines.append(f"| `/healthz` after the flood | {', '.join(f'{s} in {t * 1000:.0f} ms' for s, t, _ in r['after'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=20_000)
    parser.add_argument("--hold", type=float, default=12.0,
                        help="seconds each client holds its connections once all are open (past the head timeout)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    text = render(run(args.connections, args.hold))
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
