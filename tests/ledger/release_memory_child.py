"""The child process of test_release_memory.py: set up a labelled set, or run its release job and print the peak.

``setup DIR N``: a domain, a small set and a set of N labelled ids, a release queued on each, in
DIR (SQLite, local store). ``run DIR``: the small set's job (a warm-up), then the large one's —
reading chunks of CHUNK rows, bucket groups of about CHUNK ids, shards of CHUNK rows — then
``<peak KiB before the job> <peak KiB after>``.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

from labels_party import label_sets, ledger, releases
from labels_party.release_worker import ReleaseWorker
from labels_party.releases import ReleaseCreate, create_release

from .test_ledger import labeled_set, make_ctx, new_domain

CHUNK = 4096


def _recut(whole):  # type: ignore[no-untyped-def]
    def chunks(ctx, row):  # type: ignore[no-untyped-def]
        for ids, labels in whole(ctx, row):
            for a in range(0, len(ids), CHUNK):
                yield ids.slice(a, CHUNK), labels[a : a + CHUNK]

    return chunks


def main() -> None:
    mode, folder = sys.argv[1], Path(sys.argv[2])
    url = f"sqlite:///{folder}/labels.db"
    if mode == "setup":
        ctx = make_ctx(url, folder)
        new_domain(ctx, "mem", epsilon=4)
        body = ReleaseCreate.model_validate({"mechanism": "rr_on_bins", "epsilon": 1})
        warm = labeled_set(ctx, folder, "mem", [f"w{i:09d}" for i in range(2 * CHUNK)])
        create_release(ctx, warm, body, None)  # run first: every kernel compiled, every module loaded
        ls = labeled_set(ctx, folder, "mem", [f"m{i:09d}" for i in range(int(sys.argv[3]))])
        create_release(ctx, ls, body, None)
        return
    ctx = make_ctx(url, folder, message_shard_rows=CHUNK)
    releases.iter_labelled_chunks = _recut(label_sets.iter_labelled_chunks)  # type: ignore[assignment]
    ledger.GROUP_IDS = CHUNK
    ledger.CACHE.max_bytes = 1 << 20  # the decoded-bases cache is bounded (256 MiB) by itself: out of the count
    worker = ReleaseWorker(ctx)
    assert worker.step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert worker.step()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(before, after)


if __name__ == "__main__":
    main()
