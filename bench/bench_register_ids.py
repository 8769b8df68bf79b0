"""Registering a label set's new ids in a domain that already holds 1 or 30 earlier sets (segments).

    .venv/bin/python bench/bench_register_ids.py --segment 100000 --new 1000000 --segments 1,30

One SQLite catalogue and one local folder in a temporary directory. A domain receives
``--segments`` label sets of ``--segment`` random 16-character ids each (what the layout before
buckets kept as one id segment per set), then one more set of ``--new`` new ids; the time of that
last ``set_ids`` (sort, register in the ledger, store) is reported, and the time spent inside
committed transactions (where the domain row's lock is held). Runs against whichever
``labels_party`` is on ``PYTHONPATH``, so the same script measures the code before and after.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from sqlalchemy import event

from labeldp.service.database import make_engine, make_session_factory
from labeldp.service.settings import Settings
from labels_party import label_sets
from labels_party.context import LabelsContext
from labels_party.privacy_domains import PrivacyDomainCreate, create_privacy_domain
from labels_party.store import Base


def _ids(rng: np.random.Generator, n: int, tag: str) -> pa.Array:
    raw = rng.integers(0, 2**62, n, dtype=np.int64)
    return pa.array([f"{tag}{v:015x}"[:16] for v in raw], pa.string())


def run(segments: int, segment: int, new: int, seed: int = 5) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{tmp}/labels.db")
        Base.metadata.create_all(engine)
        ctx = LabelsContext(make_session_factory(engine), Path(tmp) / "data", Settings())
        create_privacy_domain(ctx, PrivacyDomainCreate(name="d", id_source="bench", epsilon=10), None)
        held = [0.0]

        def _new_set(k: int) -> str:
            body = label_sets.LabelSetCreate(name=f"s{k}", domain={"low": 0, "high": 1}, privacy_domain="d")
            return str(label_sets.create_label_set(ctx, body, None).body["id"])

        for k in range(segments):
            label_sets.set_ids(ctx, _new_set(k), _ids(rng, segment, chr(ord("a") + k % 26)), None)
        last = _new_set(segments)
        fresh = _ids(rng, new, "Z")
        @event.listens_for(engine, "commit")
        def _commit(conn):
            t0 = conn.info.pop("t0", None)
            if t0 is not None:
                held[0] += time.perf_counter() - t0

        @event.listens_for(engine, "begin")
        def _begin(conn):
            conn.info["t0"] = time.perf_counter()

        t = time.perf_counter()
        label_sets.set_ids(ctx, last, fresh, None)
        total = time.perf_counter() - t
        return total, held[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segment", type=int, default=100_000)
    parser.add_argument("--new", type=int, default=1_000_000)
    parser.add_argument("--segments", default="1,30")
    args = parser.parse_args()
    print(f"new ids {args.new}, earlier sets of {args.segment} ids; python {sys.version.split()[0]}")
    print("| earlier sets | set_ids total (s) | transactions' time (s) |")
    print("|---|---|---|")
    for k in map(int, args.segments.split(",")):
        total, held = run(k, args.segment, args.new)
        print(f"| {k} | {total:.2f} | {held:.2f} |", flush=True)


if __name__ == "__main__":
    main()
