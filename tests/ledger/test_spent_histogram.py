"""The spent-ε histogram a console draws (GET /v1/privacy-domains/{id}/spent-histogram): its
bins count every id by what it spent, the last bin holds the exhausted ids, and a large
domain is read only up to a bound (whole buckets: a uniform sample)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from tests.ledger.test_ledger import labeled_set, make_ctx, new_domain, release, spent_per_id

from labels_party import ledger
from labels_party.privacy_domains import spent_histogram
from labels_party.store import PrivacyDomainRow


def test_bins_count_ids_by_spent_epsilon(database_url: str, tmp_path: Path) -> None:
    ctx = make_ctx(database_url, tmp_path)
    h = new_domain(ctx, "h", epsilon=4)
    ids = [f"u{i}" for i in range(60)]
    release(ctx, labeled_set(ctx, tmp_path, "h", ids[:40]), 1)  # u0..u39: 1 ε
    release(ctx, labeled_set(ctx, tmp_path, "h", ids[:10]), 3)  # u0..u9: 4 ε, exhausted
    labeled_set(ctx, tmp_path, "h", ids)  # u40..u59 registered, nothing spent
    hist = spent_histogram(ctx, h, 4)
    assert [(b.low, b.high, b.ids) for b in hist.bins] == [
        (0.0, 1.0, 20), (1.0, 2.0, 30), (2.0, 3.0, 0), (3.0, 4.0, 10)
    ]
    assert (hist.ids, hist.ids_read, hist.sampled, hist.ids_exhausted) == (60, 60, False, 10)
    assert sum(spent_per_id(ctx, "h").values()) == 40 * 1_000_000 + 10 * 3_000_000

    # Bounded: at most max_ids ids from whole buckets (at least one), a sample of the domain.
    with ctx.sessions() as s:
        row = s.scalar(select(PrivacyDomainRow).where(PrivacyDomainRow.name == "h"))
        assert row is not None
        small = ledger.spent_histogram(ctx, s, row, 4, max_ids=5)
        whole = ledger.spent_histogram(ctx, s, row, 4)
    assert 1 <= small.buckets_read < small.buckets_with_ids == whole.buckets_read
    assert small.ids_read == int(small.counts.sum()) <= 5
    assert whole.counts.tolist() == [20, 30, 0, 10]
