"""The label path at advertiser scale, through REST on loopback: create, upload, release, delivered.

    python bench/bench_labels_path.py --sizes 1000000,10000000 --out bench/results/labels_path.md

For each n a fresh stack (labels API, outbox, features API as separate processes, SQLite,
``labeldp_tools.local_stack``) is started; the bench then

1. creates a label set and uploads its n ids as Parquet (``POST /v1/label-sets/{id}/ids``),
2. uploads n labels as CSV to that set, and as Parquet to a second set over the same ids,
3. releases the CSV set at ε = 1 with the default mechanism, and waits until the outbox
   has delivered it to the features party.

Each stage is timed on the client's wall clock; each process's peak resident memory is its
``VmHWM`` from /proc at the end, its idle size ``VmRSS`` right after start. Request bodies
are streamed from files, so the client holds no body in memory. The goal (issue 8) is 10⁷
labels from upload start to delivered in ≤ 60 s and the labels API ≤ 1.5 GB at 10⁷.
"""

from __future__ import annotations

import argparse
import os
import platform
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

PROCESSES = ("labels", "outbox", "features")


def _kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _stream(path: Path, chunk: int = 1 << 20) -> Iterator[bytes]:
    with open(path, "rb") as f:
        yield from iter(lambda: f.read(chunk), b"")


def _post_file(client: httpx.Client, url: str, path: Path, content_type: str) -> httpx.Response:
    return client.post(url, content=_stream(path), headers={"content-type": content_type})


def _expect(r: httpx.Response, status: int) -> dict:
    if r.status_code != status:
        raise SystemExit(f"{r.request.method} {r.request.url.path}: {r.status_code} {r.text[:300]}")
    return r.json()


def write_inputs(n: int, folder: Path) -> dict[str, Path]:
    ids = pa.array([f"c{i:010d}" for i in range(n)], pa.string())
    labels = pa.array(np.random.default_rng(0).gamma(2.0, 10.0, n).clip(0, 100).round(2), pa.float64())
    paths = {"ids": folder / "ids.parquet", "csv": folder / "labels.csv", "parquet": folder / "labels.parquet"}
    pq.write_table(pa.table({"id": ids}), paths["ids"])
    pq.write_table(pa.table({"id": ids, "label": labels}), paths["parquet"])
    pa_csv.write_csv(pa.table({"id": ids, "label": labels}), paths["csv"])
    return paths


def run_size(n: int, workdir: Path) -> dict[str, float]:
    inputs = write_inputs(n, workdir)
    stack = LocalStack(workdir / "stack", extra_env={"LABELDP_MAX_BODY_BYTES": str(8 << 30),
                                                      "LABELDP_LOG_LEVEL": "WARNING"})
    stack.start()
    out: dict[str, float] = {"csv_mb": inputs["csv"].stat().st_size / 1e6}
    try:
        pids = {name: stack.processes[name].pid for name in PROCESSES}
        for name, pid in pids.items():
            out[f"idle_{name}_mb"] = _kib(pid, "VmRSS") / 1024
        with stack.labels_client(timeout=600) as labels:
            meta = {"name": "bench", "domain": {"low": 0, "high": 100}}
            t0 = time.perf_counter()
            a = _expect(labels.post("/v1/label-sets", json=meta), 201)["id"]
            _expect(_post_file(labels, f"/v1/label-sets/{a}/ids", inputs["ids"], "application/vnd.apache.parquet"), 200)
            out["create_s"] = time.perf_counter() - t0
            b = _expect(labels.post("/v1/label-sets", json=meta), 201)["id"]
            _expect(_post_file(labels, f"/v1/label-sets/{b}/ids", inputs["ids"], "application/vnd.apache.parquet"), 200)

            t_upload = time.perf_counter()
            _expect(_post_file(labels, f"/v1/label-sets/{a}/labels", inputs["csv"], "text/csv"), 200)
            out["upload_csv_s"] = time.perf_counter() - t_upload
            t1 = time.perf_counter()
            _expect(_post_file(labels, f"/v1/label-sets/{b}/labels", inputs["parquet"],
                               "application/vnd.apache.parquet"), 200)
            out["upload_parquet_s"] = time.perf_counter() - t1

            t2 = time.perf_counter()
            rel = _expect(labels.post(f"/v1/label-sets/{a}/releases", json={"epsilon": 1}), 202)
            out["accept_s"] = time.perf_counter() - t2  # a job: answered before the work
            t3 = None
            while True:
                status = labels.get(f"/v1/releases/{rel['id']}").json()
                if t3 is None and status["status"] not in ("queued", "running"):
                    out["release_s"] = time.perf_counter() - t2  # accepted, privatized, charged
                    out["message_mb"] = (status["message_bytes"] or 0) / 1e6
                    t3 = time.perf_counter()
                if status["status"] == "delivered":
                    break
                if status["status"] in ("rejected", "failed") or time.perf_counter() - t2 > 1800:
                    raise SystemExit(f"release not delivered: {status}")
                time.sleep(0.2)
            assert t3 is not None
            out["deliver_s"] = time.perf_counter() - t3
            out["upload_to_delivered_s"] = time.perf_counter() - t_upload - out["upload_parquet_s"]
        for name, pid in pids.items():
            out[f"peak_{name}_mb"] = _kib(pid, "VmHWM") / 1024
    finally:
        stack.stop()
    return out


def render(results: dict[int, dict[str, float]], command: str) -> str:
    lines = [
        "# Label path at scale (issue 8)",
        "",
        f"`{command}` — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}. Through REST on loopback: labels API, "
        "outbox and features API as separate processes, SQLite, bodies streamed from files. "
        "*upload → delivered* is the CSV path: CSV upload + release + delivery (the Parquet upload to the "
        "second set is not counted).",
        "",
        "| n | ids (create + Parquet ids upload) s | CSV upload s | Parquet upload s | release s | "
        "delivered s | upload → delivered s | CSV MB | message MB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, r in results.items():
        lines.append(
            f"| {n:,} | {r['create_s']:.1f} | {r['upload_csv_s']:.1f} | {r['upload_parquet_s']:.1f} | "
            f"{r['release_s']:.1f} | {r['deliver_s']:.1f} | **{r['upload_to_delivered_s']:.1f}** | "
            f"{r['csv_mb']:.0f} | {r['message_mb']:.0f} |"
        )
    lines += ["", "Peak resident memory per process (VmHWM, MB; idle VmRSS after start in brackets):", "",
              "| n | labels API | outbox | features API | labels API bytes/label over idle |",
              "|---:|---:|---:|---:|---:|"]
    for n, r in results.items():
        per_label = (r["peak_labels_mb"] - r["idle_labels_mb"]) * 2**20 / n
        lines.append(
            f"| {n:,} | {r['peak_labels_mb']:.0f} ({r['idle_labels_mb']:.0f}) | {r['peak_outbox_mb']:.0f} "
            f"({r['idle_outbox_mb']:.0f}) | {r['peak_features_mb']:.0f} ({r['idle_features_mb']:.0f}) | "
            f"{per_label:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--out", type=Path, default=Path("bench/results/labels_path.md"))
    args = parser.parse_args()
    results = {}
    for n in (int(x) for x in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="labeldp-bench-") as tmp:
            print(f"n = {n:,} …", flush=True)
            results[n] = run_size(n, Path(tmp))
            print({k: round(v, 2) for k, v in results[n].items()}, flush=True)
    text = render(results, f"python bench/bench_labels_path.py --sizes {args.sizes}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
