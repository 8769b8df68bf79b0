"""A set's remaining per-id budget (release acceptance, ``GET /v1/label-sets/{id}``): peak memory as n grows.

    python bench/bench_release_acceptance.py --sizes 4000000,8000000 --out bench/results/release_acceptance.md

For each n a fresh SQLite catalogue and local store hold one domain and one set of n 16-character
ids in random order (registered by ``set_ids``); then, each in a fresh process, the check is run
both ways side by side: **whole** (the code before: every id read at once, ``ledger.remaining_for``
over all) and **groups** (``label_sets.ids_remaining``: the stored chunks split by bucket group,
each group checked alone). Reported: the process's peak RSS over its size just before the check
(``ru_maxrss``), and CPU seconds. The ledger's decoded-bases cache (bounded by itself, 256 MiB)
is capped at 1 MiB so that the check's own memory shows.
"""

from __future__ import annotations

import argparse
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
from sqlalchemy import select

from labeldp.service.database import make_engine, make_session_factory
from labeldp.service.settings import Settings
from labels_party import label_sets, ledger
from labels_party.context import LabelsContext
from labels_party.label_sets import LabelSetCreate, create_label_set, read_ids, set_ids
from labels_party.privacy_domains import PrivacyDomainCreate, create_privacy_domain
from labels_party.store import Base, LabelSetRow, PrivacyDomainRow


def _ctx(folder: Path) -> LabelsContext:
    engine = make_engine(f"sqlite:///{folder}/labels.db")
    Base.metadata.create_all(engine)
    return LabelsContext(make_session_factory(engine), folder / "data", Settings())


def _ids(n: int) -> Iterator[pa.Array]:
    for a in range(0, n, 1 << 20):
        mixed = np.arange(a, min(n, a + (1 << 20)), dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        yield pa.array([f"{int(v):016x}" for v in mixed])


def setup(folder: Path, n: int) -> None:
    ctx = _ctx(folder)
    create_privacy_domain(ctx, PrivacyDomainCreate(name="acc", id_source="acc", epsilon=4, delta=0.0), None)
    body = {"name": "s", "domain": {"low": 0, "high": 1}, "privacy_domain": "acc"}
    ls = create_label_set(ctx, LabelSetCreate.model_validate(body), None).body
    set_ids(ctx, ls["id"], _ids(n), None)


def check(folder: Path, way: str) -> None:
    ctx = _ctx(folder)
    with ctx.sessions() as s:
        row = s.scalar(select(LabelSetRow))
        assert row is not None
        domain = s.get(PrivacyDomainRow, row.privacy_domain_id)
        assert domain is not None
        s.expunge(row)
        s.expunge(domain)
    ledger.CACHE.max_bytes = 1 << 20
    before, cpu = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.process_time()
    if way == "whole":
        got = ledger.remaining_for(ctx, None, domain, read_ids(ctx, row).column("id"))
    else:
        got = label_sets.ids_remaining(ctx, None, domain, row)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(got[0], (after - before) / 1024, time.process_time() - cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4000000,8000000")
    parser.add_argument("--out", default="bench/results/release_acceptance.md")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.child[0] == "setup":
            setup(Path(args.child[1]), int(args.child[2]))
        else:
            check(Path(args.child[1]), args.child[0])
        return
    rows = []
    for n in (int(v) for v in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            me = [sys.executable, __file__, "--child"]
            subprocess.run([*me, "setup", tmp, str(n)], check=True)
            result = {}
            for way in ("whole", "groups"):
                out = subprocess.run([*me, way, tmp], check=True, capture_output=True, text=True).stdout.split()
                result[way] = (int(out[-3]), float(out[-2]), float(out[-1]))
            assert result["whole"][0] == result["groups"][0]  # the same answer
            rows.append((n, result))
            print(n, result, flush=True)
    command = " ".join(["python", "bench/bench_release_acceptance.py", "--sizes", args.sizes, "--out", args.out])
    lines = [
        "# A set's remaining per-id budget: whole-array vs bucket groups (issue 22, item 6)", "",
        f"`{command}` — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, Python "
        f"{platform.python_version()}; each check in a fresh process, side by side in one run; the "
        "bases cache capped at 1 MiB (it is bounded by itself at 256 MiB).", "",
        "| n ids | whole: MB over before | whole: CPU s | groups: MB over before | groups: CPU s |",
        "|---:|---:|---:|---:|---:|",
    ]
    for n, r in rows:
        whole, groups = r["whole"], r["groups"]
        lines.append(f"| {n:,} | {whole[1]:.0f} | {whole[2]:.1f} | {groups[1]:.0f} | {groups[2]:.1f} |")
    Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
