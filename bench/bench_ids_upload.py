"""Peak memory of an ids upload (``label_sets.set_ids``: external sort, registration by bucket group)
as n grows, each n in a fresh process, without HTTP.

    python bench/bench_ids_upload.py --sizes 1000000,10000000,30000000 --out bench/results/ids_upload.md

One SQLite catalogue and one local-folder store in a temporary directory; n 16-character ids
in random order (``bench_labels_path.ids_chunk``) arrive in chunks of 2¹⁸, as the Parquet
reader gives them. Reported: wall time and the process's peak RSS (VmHWM) over its size just
before the upload (imports, numba kernels compiled and an empty domain), so what grows with n
shows. Runs against whichever ``labels_party`` is on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def _kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def one(n: int) -> dict[str, float]:
    from bench_labels_path import ids_chunk
    from labeldp.service.database import make_engine, make_session_factory
    from labeldp.service.settings import Settings
    from labels_party import label_sets
    from labels_party.context import LabelsContext
    from labels_party.privacy_domains import PrivacyDomainCreate, create_privacy_domain
    from labels_party.store import Base

    with tempfile.TemporaryDirectory(prefix="labeldp-ids-") as tmp:
        engine = make_engine(f"sqlite:///{tmp}/db.sqlite")
        Base.metadata.create_all(engine)
        ctx = LabelsContext(make_session_factory(engine), Path(tmp) / "data", Settings())
        create_privacy_domain(ctx, PrivacyDomainCreate(name="d", id_source="d", epsilon=1), None)
        body = {"name": "warm", "domain": {"low": 0, "high": 1}, "privacy_domain": "d"}
        warm = label_sets.create_label_set(ctx, label_sets.LabelSetCreate.model_validate(body), None).body["id"]
        label_sets.set_ids(ctx, warm, [ids_chunk(n, n + 1000)], None)  # compiles the kernels
        empty = label_sets.create_label_set(ctx, label_sets.LabelSetCreate.model_validate(body), None).body["id"]
        Path("/proc/self/clear_refs").write_text("5")
        before = _kib("VmRSS")
        t0 = time.perf_counter()
        chunks = (ids_chunk(a, min(n, a + (1 << 18))) for a in range(0, n, 1 << 18))
        label_sets.set_ids(ctx, empty, chunks, None)
        return {"s": time.perf_counter() - t0, "before_mb": before / 1024, "peak_mb": _kib("VmHWM") / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000000,10000000,30000000")
    parser.add_argument("--out", type=Path, default=Path("bench/results/ids_upload.md"))
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return
    lines = [
        "# Ids upload memory as n grows (issue 22)",
        "",
        f"`python bench/bench_ids_upload.py --sizes {args.sizes} --out {args.out}` — "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} cores (shared). "
        "`set_ids` in a fresh process per n, no HTTP; peak RSS over the process's size before the upload.",
        "",
        "| n | seconds | RSS before MB | peak MB | growth over before MB | load avg |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for n in (int(x) for x in args.sizes.split(",")):
        done = subprocess.run([sys.executable, __file__, "--one", str(n)], capture_output=True, text=True, check=True)
        r = json.loads(done.stdout.strip().splitlines()[-1])
        print(n, r, flush=True)
        lines.append(f"| {n:,} | {r['s']:.1f} | {r['before_mb']:.0f} | {r['peak_mb']:.0f} | "
                     f"{r['peak_mb'] - r['before_mb']:.0f} | {os.getloadavg()[0]:.1f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
