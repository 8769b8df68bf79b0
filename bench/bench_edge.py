"""Anonymous clients against both APIs on loopback while a real release is delivered (issue 24, item 6).

Usage:
    python bench/bench_edge.py [--connections 20000] [--hold 20] [--variants 2048:2048,4096:100] [--out FILE]

For each variant BACKLOG:BATCH (LABELDP_SERVER_BACKLOG, the kernel's accept queue, and
LABELDP_SERVER_ACCEPT_BATCH, the connections accepted per loop turn; 2048:2048 is plain uvicorn's)
a fresh local stack (labels API, outbox, features API, default settings otherwise) first runs release
flows on a quiet stack: a privacy domain, a label
set with its labels, a release, polled until `delivered` and read back from the features party's inbox.
Then, at once: client processes open ``--connections`` connections to each API as fast as they can and
hold them (half send nothing, half a request line only); slow clients trickle a body at 1 byte/s and
big ones send 100 MB bodies, both without a key, to the JSON routes and the inbox, reconnecting when
answered; and the same release flow runs again and again. Meanwhile this process asks each API's
`/healthz` (and an authenticated read) on a fresh connection every 0.25 s, and samples each server's
RSS and descriptors and the listening sockets' accept queues (`ss`). Columns are the variants, run one
after the other in this one run; the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import math
import multiprocessing as mp
import os
import platform
import resource
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from labeldp_tools.local_stack import LocalStack

DEADLINE = 1.0
PARTIAL_HEAD = b"GET /healthz HTTP/1.1\r\nHost: bench\r\n"
MB = 1 << 20
FLOW_IDS = 200
SERVERS = ("labels", "features")
ANONYMOUS_TARGETS = {"labels": "/v1/label-sets", "features": "/v1/releases"}  # a JSON route, the inbox


def raise_fd_limit() -> tuple[int, int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def flood(name: str, port: int, count: int, hold: float, start: Any, out: Any) -> None:
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
    out.put({"server": name, "opened": len(socks), "failed": failed, "opened_in": opened_in,
             "closed_by_server": closed})


def _status_line(sock: socket.socket) -> int:
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            return 0  # closed without an answer
        data += chunk
    return int(data.split(b" ", 2)[1])


def anonymous_post(
    port: int, path: str, total: int, rate: float | None, stop: threading.Event
) -> tuple[int, int, float]:
    """POST ``total`` bytes without a key (at ``rate`` bytes/s, 1 byte a write, or as fast as the socket
    takes 1 MB blocks) while reading the answer: (status or 0, bytes sent, seconds to the answer)."""
    started = time.monotonic()
    sent = 0
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    except OSError:
        return -1, 0, time.monotonic() - started
    head = f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: {total}\r\n\r\n"
    done = threading.Event()

    def send_body() -> None:
        nonlocal sent
        block = b"[" + b"1," * (MB // 2 - 1) + b"1"
        try:
            sock.sendall(head.encode())
            while sent < total and not done.is_set() and not stop.is_set():
                piece = b"1" if rate else block[: total - sent]
                sock.sendall(piece)
                sent += len(piece)
                if rate:
                    time.sleep(1 / rate)
        except OSError:
            pass  # answered and closed: a real client stops here too

    sender = threading.Thread(target=send_body, daemon=True)
    sender.start()
    try:
        status = _status_line(sock)
    except OSError:
        status = 0
    finally:
        answered = time.monotonic() - started
        done.set()
        sock.close()
        sender.join(5)
    return status, sent, answered


def attackers(ports: dict[str, int], slow: int, big: int, pause: float, start: Any, stop: Any, out: Any) -> None:
    """One process of anonymous body senders: per API ``slow`` at 1 byte/s and ``big`` sending 100 MB, each
    starting a new request ``pause`` s after its previous one was answered, until ``stop``."""
    start.wait()
    done = threading.Event()
    results: dict[str, list[tuple[int, int, float]]] = collections.defaultdict(list)

    def client(name: str, kind: str) -> None:
        path = ANONYMOUS_TARGETS[name]
        while not done.is_set():
            slowly = kind == "slow"
            result = anonymous_post(ports[name], path, 10_000 if slowly else 100 * MB, 1.0 if slowly else None, done)
            if not done.is_set():  # one the bench itself cut short at the end is not counted
                results[f"{name} {'slow' if slowly else '100 MB'}"].append(result)
            done.wait(pause)

    threads = [threading.Thread(target=client, args=(name, kind), daemon=True)
               for name in ports for kind, n in (("slow", slow), ("big", big)) for _ in range(n)]
    for t in threads:
        t.start()
    stop.wait()
    done.set()
    for t in threads:
        t.join(30)
    out.put(dict(results))


def process_stats(pid: int) -> tuple[int, int]:
    """RSS in bytes and open descriptors of ``pid``."""
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def accept_queue(port: int) -> tuple[int, int]:
    """(connections waiting in the listening socket's accept queue, its limit), from ``ss``."""
    line = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout.split()
    return (int(line[1]), int(line[2])) if len(line) > 2 else (-1, -1)


def listen_overflows() -> int:
    """The kernel's count of connections dropped because a listening socket's accept queue was full."""
    with open("/proc/net/netstat") as f:
        lines = [line.split() for line in f if line.startswith("TcpExt:")]
    return int(dict(zip(lines[0][1:], lines[1][1:], strict=True)).get("ListenOverflows", 0))


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def probe(client: httpx.Client, path: str, headers: dict[str, str], began: float = 0.0) -> tuple[Any, float, float]:
    """(status, or the error's class name, seconds taken, when it started relative to ``began``)."""
    started = time.monotonic()
    try:
        status: Any = client.get(path, headers=headers).status_code
    except httpx.HTTPError as exc:
        status = type(exc).__name__
    return status, time.monotonic() - started, started - began


def prober(url: str, path: str, headers: dict[str, str], began: float, stop: threading.Event,
           out: list[tuple[Any, float, float]]) -> None:
    """``GET path`` on a fresh connection every 0.25 s (or as soon as the last one ended, if later)."""
    with httpx.Client(base_url=url, timeout=30, limits=httpx.Limits(max_keepalive_connections=0)) as client:
        while not stop.is_set():
            out.append(probe(client, path, headers, began))
            stop.wait(0.25)


class Flow:
    """A real release, end to end: a domain, a labelled set, a release, `delivered`, read at the inbox.

    Like a real client it retries a request that got no answer or a 503 (the same Idempotency-Key, so
    nothing happens twice) and counts those retries."""

    def __init__(self, stack: LocalStack) -> None:
        self.labels, self.features = stack.labels_client(timeout=60), stack.features_client(timeout=60)
        self.retries = 0

    def _call(self, client: httpx.Client, method: str, path: str, expect: int, **kw: Any) -> dict[str, Any]:
        headers = {"Idempotency-Key": secrets.token_hex(8)} if method == "POST" else {}
        headers |= kw.pop("headers", {})
        for _ in range(30):
            try:
                r = client.request(method, path, headers=headers, **kw)
            except httpx.HTTPError:
                self.retries += 1
                continue
            if r.status_code == 503:
                self.retries += 1
                time.sleep(float(r.headers.get("retry-after", "1")))
                continue
            if r.status_code != expect:
                raise RuntimeError(f"{method} {path}: {r.status_code} {r.text[:200]}")
            return dict(r.json())
        raise RuntimeError(f"{method} {path}: no answer in 30 tries")

    def run(self, began: float) -> dict[str, float]:
        tag = secrets.token_hex(4)
        t0 = time.monotonic()
        domain = self._call(self.labels, "POST", "/v1/privacy-domains", 201,
                            json={"name": f"edge-{tag}", "id_source": f"bench:edge-{tag}", "epsilon": 10})
        ids = [f"e{tag}-{i:04d}" for i in range(FLOW_IDS)]
        ls = self._call(self.labels, "POST", "/v1/label-sets", 201, json={
            "name": f"edge-{tag}", "label_type": "real", "domain": {"low": 0.0, "high": 10.0},
            "privacy_domain": domain["id"], "ids": ids,
        })
        csv = "id,label\n" + "".join(f"{i},{k % 10}.5\n" for k, i in enumerate(ids))
        self._call(self.labels, "POST", f"/v1/label-sets/{ls['id']}/labels", 200, content=csv.encode(),
                   headers={"content-type": "text/csv"})
        t1 = time.monotonic()
        rel = self._call(self.labels, "POST", f"/v1/label-sets/{ls['id']}/releases", 202,
                         json={"mechanism": "laplace", "epsilon": 1.0, "feature_table": "clicks"})
        while (state := self._call(self.labels, "GET", f"/v1/releases/{rel['id']}", 200))["status"] != "delivered":
            if state["status"] in ("failed", "rejected"):
                raise RuntimeError(f"release {rel['id']} {state['status']}")
            time.sleep(0.1)
        t2 = time.monotonic()
        received = self._call(self.features, "GET", f"/v1/releases/{rel['id']}", 200)
        if received["id"] != rel["id"] or received["row_count"] != FLOW_IDS:
            raise RuntimeError(f"the inbox holds {received['id']} with {received['row_count']} rows")
        return {"start": t0 - began, "setup": t1 - t0, "release": t2 - t1, "total": t2 - t0, "end": t2 - began}

    def close(self) -> None:
        self.labels.close()
        self.features.close()


def run_variant(backlog: int, batch: int, connections: int, hold: float, quiet_flows: int, slow: int, big: int,
                pause: float) -> dict[str, Any]:
    soft, hard = raise_fd_limit()
    per_process = min(connections, max(1000, hard - 500))
    with tempfile.TemporaryDirectory() as folder:
        stack = LocalStack(Path(folder), extra_env={"LABELDP_SERVER_BACKLOG": str(backlog),
                                                    "LABELDP_SERVER_ACCEPT_BATCH": str(batch)})
        stack.start(timeout=180)
        try:
            pids = {name: stack.processes[name].pid for name in (*SERVERS, "outbox")}
            ports = {"labels": stack.labels_port, "features": stack.features_port}
            urls = {"labels": stack.labels_url, "features": stack.features_url}
            auth = {"labels": {"Authorization": f"Bearer {stack.labels_key}"},
                    "features": {"Authorization": f"Bearer {stack.features_key}"}}
            reads = {"labels": "/v1/label-sets?limit=1", "features": "/v1/feature-tables?limit=1"}
            no_reuse = httpx.Limits(max_keepalive_connections=0)
            clients = {n: httpx.Client(base_url=urls[n], timeout=10, limits=no_reuse) for n in SERVERS}
            flow = Flow(stack)
            flow.run(time.monotonic())  # warm: numba, the routes and the databases have run once
            quiet = [flow.run(time.monotonic()) for _ in range(quiet_flows)]
            quiet_probes = {n: [probe(clients[n], "/healthz", {}) for _ in range(10)] for n in SERVERS}
            time.sleep(1.0)
            idle = {name: process_stats(pid) for name, pid in pids.items()}
            idle_cpu = {name: cpu_seconds(pids[name]) for name in SERVERS}
            queues = {n: accept_queue(ports[n]) for n in SERVERS}
            overflows = listen_overflows()
            start, stop = mp.Event(), mp.Event()
            out: mp.Queue[dict[str, Any]] = mp.Queue()
            loot: mp.Queue[dict[str, Any]] = mp.Queue()
            processes = math.ceil(connections / per_process)
            shares = [connections // processes + (k < connections % processes) for k in range(processes)]
            children = [mp.Process(target=flood, args=(n, ports[n], share, hold, start, out))
                        for n in SERVERS for share in shares]
            attacker = mp.Process(target=attackers, args=(ports, slow, big, pause, start, stop, loot))
            for child in [*children, attacker]:
                child.start()
            time.sleep(0.5)
            start.set()
            began = time.monotonic()
            flows: list[dict[str, float]] = []
            flow_errors: list[str] = []
            retries_before = flow.retries
            attack_over = threading.Event()

            def release_flows() -> None:
                time.sleep(1.0)  # the flood is connecting
                while not attack_over.is_set():
                    try:
                        flows.append(flow.run(began))
                    except Exception as exc:  # reported, not raised: the table says what failed
                        flow_errors.append(f"{type(exc).__name__}: {exc}")
                        time.sleep(1.0)

            releaser = threading.Thread(target=release_flows, daemon=True)
            releaser.start()
            probes: dict[str, list[tuple[Any, float, float]]] = {}
            probers = []
            for n in SERVERS:
                for path, headers in (("/healthz", {}), (reads[n], auth[n])):
                    probes[f"{n} {path}"] = []
                    probers.append(threading.Thread(
                        target=prober, args=(urls[n], path, headers, began, attack_over, probes[f"{n} {path}"]),
                        daemon=True,
                    ))
            for t in probers:
                t.start()
            peak = dict(idle)
            peak_queue = dict.fromkeys(SERVERS, 0)
            while any(child.is_alive() for child in children) and out.qsize() < len(children):
                for n in SERVERS:
                    peak_queue[n] = max(peak_queue[n], accept_queue(ports[n])[0])
                for name, pid in pids.items():
                    rss, fds = process_stats(pid)
                    peak[name] = (max(peak[name][0], rss), max(peak[name][1], fds))
                time.sleep(0.1)
            attack_ended = time.monotonic() - began
            reports = [out.get(timeout=120) for _ in children]
            stop.set()
            attack_over.set()
            for t in probers:
                t.join(60)
            bodies = loot.get(timeout=120)
            for child in [*children, attacker]:
                child.join(30)
            releaser.join(300)
            time.sleep(1.0)
            end = {name: process_stats(pid) for name, pid in pids.items()}
            flood_cpu = {n: cpu_seconds(pids[n]) - idle_cpu[n] for n in SERVERS}
            overflows = listen_overflows() - overflows
            after = {n: [probe(clients[n], "/healthz", {}) for _ in range(3)] for n in SERVERS}
            for c in clients.values():
                c.close()
            flow.close()
        finally:
            stack.stop()
    return {
        "backlog": backlog, "batch": batch, "queues": queues, "peak_queue": peak_queue, "soft": soft, "hard": hard,
        "processes": len(children), "connections": connections, "hold": hold, "reports": reports,
        "probes": dict(probes), "quiet_probes": quiet_probes, "idle": idle, "peak": peak, "end": end,
        "flood_cpu": flood_cpu, "overflows": overflows, "after": after, "quiet": quiet,
        "flows": flows, "flow_errors": flow_errors, "flow_retries": flow.retries - retries_before,
        "attack_ended": attack_ended, "bodies": bodies,
    }


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def _times(results: list[tuple[Any, float, float]]) -> str:
    if not results:
        return "—"
    times = [t for _, t, _ in results]
    ok = sum(1 for s, t, _ in results if s == 200 and t < DEADLINE)
    failed = collections.Counter(str(s) for s, _, _ in results if s != 200)
    errors = "".join(f"; {name} × {count}" for name, count in sorted(failed.items()))
    return f"{ok} of {len(results)} (median {_ms(statistics.median(times))}, max {_ms(max(times))}{errors})"


def rows_of(r: dict[str, Any]) -> list[tuple[str, str]]:
    mib = 1 << 20
    rows: list[tuple[str, str]] = []
    by = {n: [x for x in r["reports"] if x["server"] == n] for n in SERVERS}
    for n in SERVERS:
        q = r["queues"][n]
        rows.append((f"{n}: listen backlog (`ss` Send-Q) / accept queue at its fullest",
                     f"{q[1]} / {r['peak_queue'][n]}"))
        opened = sum(x["opened"] for x in by[n])
        rows.append((f"{n}: connections opened (half none, half a request line only)",
                     f"{opened} of {r['connections']} ({sum(x['failed'] for x in by[n])} failed) in "
                     f"{max(x['opened_in'] for x in by[n]):.1f} s"))
        rows.append((f"{n}: closed by the server {r['hold']:g} s after the last opened",
                     str(sum(x["closed_by_server"] for x in by[n]))))
    rows.append(("SYNs dropped at a full accept queue (ListenOverflows, whole machine)", str(r["overflows"])))
    for kind, results in sorted(r["bodies"].items()):
        statuses = collections.Counter(s for s, _, _ in results)
        answer = ", ".join(f"{'no answer' if s <= 0 else s} × {c}" for s, c in sorted(statuses.items()))
        slowest = max((t for _, _, t in results), default=0.0)
        sent = sum(b for _, b, _ in results)
        rows.append((f"anonymous bodies, {kind}: answers", f"{answer}; slowest {slowest:.2f} s; "
                     f"{sent / mib:.1f} MiB sent in all"))
    flood_end = {n: max(x["opened_in"] for x in by[n]) for n in SERVERS}
    for key, results in r["probes"].items():
        n = key.split()[0]
        connecting = [p for p in results if p[2] < flood_end[n]]
        held = [p for p in results if p[2] >= flood_end[n]]
        rows.append((f"`GET {key.split(' ', 1)[1]}` ({n}), quiet → flood connecting → sockets held: 200 within 1 s",
                     f"{_times(r['quiet_probes'][n]) if 'healthz' in key else '—'} → {_times(connecting)} → "
                     f"{_times(held)}"))
    for name in (*SERVERS, "outbox"):
        idle, peak, end = r["idle"][name], r["peak"][name], r["end"][name]
        rows.append((f"{name}: RSS idle / peak / after (peak − idle)",
                     f"{idle[0] / mib:.0f} / {peak[0] / mib:.0f} / {end[0] / mib:.0f} MiB "
                     f"(+{(peak[0] - idle[0]) / mib:.1f} MiB)"))
        if name in SERVERS:
            rows.append((f"{name}: descriptors idle / peak / after; CPU during the attack",
                         f"{idle[1]} / {peak[1]} / {end[1]}; {r['flood_cpu'][name]:.1f} s"))
    quiet, flows = r["quiet"], [f for f in r["flows"] if f["end"] <= r["attack_ended"]]
    q_rel = statistics.median(f["release"] for f in quiet)
    q_tot = statistics.median(f["total"] for f in quiet)
    rows.append(("release flows: quiet (before) / during the attack (delivered before it ended)",
                 f"{len(quiet)} / {len(flows)} (and {len(r['flows']) - len(flows)} after; "
                 f"{len(r['flow_errors'])} failed; {r['flow_retries']} requests retried)"))
    if flows:
        a_rel = statistics.median(f["release"] for f in flows)
        a_tot = statistics.median(f["total"] for f in flows)
        rows.append(("release → `delivered` (median): quiet / attack (ratio)",
                     f"{q_rel:.2f} s / {a_rel:.2f} s ({a_rel / q_rel:.2f}×); attack max "
                     f"{max(f['release'] for f in flows):.2f} s"))
        rows.append(("domain + set + labels + release → `delivered` (median): quiet / attack (ratio)",
                     f"{q_tot:.2f} s / {a_tot:.2f} s ({a_tot / q_tot:.2f}×)"))
        connecting = [f for f in flows if f["start"] < max(flood_end.values())]
        rows.append(("flows started while the flood connected: start → delivered (s after it began)",
                     ", ".join(f"{f['start']:.1f} → {f['end']:.1f}" for f in connecting[:6]) +
                     f" (flood connected by {max(flood_end.values()):.1f}, attack over at {r['attack_ended']:.1f})"))
    for error in r["flow_errors"][:3]:
        rows.append(("release flow failed", error.replace("|", "/")[:200]))
    for n in SERVERS:
        rows.append((f"`/healthz` ({n}) after the attack",
                     ", ".join(f"{s} in {_ms(t)}" for s, t, _ in r["after"][n])))
    return rows


def render(results: list[dict[str, Any]], command: str, loads: tuple[tuple[float, ...], tuple[float, ...]]) -> str:
    first = results[0]
    load_text = " / ".join(f"{x:.2f}" for x in loads[0]) + " before, " + " / ".join(f"{x:.2f}" for x in loads[1])
    lines = [
        "# Anonymous clients against both APIs while a real release is delivered (bench/bench_edge.py)",
        "",
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}; load average (1 / 5 / 15 min) {load_text} after; "
        f"`net.core.somaxconn` {Path('/proc/sys/net/core/somaxconn').read_text().strip()}; file descriptors "
        f"soft {first['soft']}, hard {first['hard']} (so {first['processes']} flood processes); servers: "
        "`labeldp serve labels|features` with the default edge settings (a head within 10 s, at most 1 000 "
        "connections, 500 requests in progress) but each column's listen backlog and accept batch. Anonymous bodies: "
        f"per API {ARGS_NOTE['slow']} slow clients (1 byte/s) and {ARGS_NOTE['big']} sending 100 MB "
        f"(Content-Length), each starting again {ARGS_NOTE['pause']:g} s after its answer.",
        "",
        f"Command: `{command}`",
        "",
        "| | " + " | ".join(f"backlog {r['backlog']}, batch {r['batch']}" for r in results) + " |",
        "|---|" + "---|" * len(results),
    ]
    columns = [rows_of(r) for r in results]
    labels = list(dict.fromkeys(label for col in columns for label, _ in col))
    for label in labels:
        cells = [next((v for k, v in col if k == label), "—") for col in columns]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


ARGS_NOTE: dict[str, float] = {}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--connections", type=int, default=20_000, help="half-open connections to each API")
    parser.add_argument("--hold", type=float, default=20.0,
                        help="seconds each client holds its connections once all are open (past the head timeout)")
    parser.add_argument("--variants", default="2048:2048,4096:100",
                        help="BACKLOG:BATCH pairs to compare, one stack each (2048:2048 is plain uvicorn's)")
    parser.add_argument("--quiet-flows", type=int, default=3, help="release flows timed before the attack")
    parser.add_argument("--slow", type=int, default=4, help="anonymous 1 byte/s bodies per API")
    parser.add_argument("--big", type=int, default=2, help="anonymous 100 MB bodies per API")
    parser.add_argument("--pause", type=float, default=0.2, help="seconds an anonymous client waits after an answer")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    ARGS_NOTE.update(slow=args.slow, big=args.big, pause=args.pause)
    before = os.getloadavg()
    variants = [tuple(int(x) for x in v.split(":")) for v in args.variants.split(",")]
    results = [run_variant(b, batch, args.connections, args.hold, args.quiet_flows, args.slow, args.big, args.pause)
               for b, batch in variants]
    command = "python bench/bench_edge.py " + " ".join(sys.argv[1:])
    text = render(results, command.strip(), (before, os.getloadavg()))
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
