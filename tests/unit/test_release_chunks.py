"""A release given its labels a chunk at a time is the whole-array release (labeldp.release.randomizer.Release).

The release job reads a label set a stored chunk at a time (pass one: the prior's statistics;
pass two: privatize), so :func:`randomize` is :class:`Release` with one chunk. With the same
seeded stream, every registry entry × prior kind of the whole-release pairs gives the same
privatized labels, mechanism, prior and accounting however its rows are chunked: the prior is
obtained once from every label and each label is drawn for once, in row order.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from tests.privacy.release_cases import release_pairs
from tests.privacy.whole_release import ReleasePair

from labeldp.epsilon import exact_micro
from labeldp.mechanisms import rp_with_prior
from labeldp.mechanisms.categorical import prior_split_mask, prior_split_rows
from labeldp.mechanisms.spool import Spool
from labeldp.randomness import seeded_generator
from labeldp.release.randomizer import Release, randomize

PAIRS = release_pairs()
CUTS = (1, 7, 300, 301, 1024)  # uneven chunks, one of a single row


def _kwargs(pair: ReleasePair) -> dict:
    return dict(
        classes=None if pair.classes is None else list(pair.classes),
        params=pair.params or None,
        epsilon_prior_micro=None if pair.epsilon_prior is None else exact_micro(pair.epsilon_prior),
        public_prior=pair.public_prior,
    )


def _chunked(pair: ReleasePair, labels: np.ndarray, seed: int):
    rng = seeded_generator(seed)
    release = Release(labels.size, pair.domain, pair.mechanism, exact_micro(pair.epsilon), **_kwargs(pair))
    chunks = np.split(labels, [c for c in CUTS if c < labels.size])
    for chunk in chunks:
        release.add(chunk, rng)
    fitted = release.fit(rng)
    out = np.concatenate([fitted.privatize(chunk, rng) for chunk in chunks])
    return fitted, out


REJECTION = {"rp_with_prior", "exponential"}
"""Mechanisms whose exact samplers draw a variable number of words per label, in batches: chunked,
they read the stream differently, so their chunked release is compared in law, not word for word."""


@pytest.mark.parametrize("pair", [p for p in PAIRS if p.mechanism not in REJECTION], ids=str)
def test_a_chunked_release_is_the_whole_array_release(pair: ReleasePair) -> None:
    labels = np.tile(pair.labels, max(1, 2000 // pair.labels.size))
    whole = randomize(labels, pair.domain, pair.mechanism, exact_micro(pair.epsilon), seeded_generator(5),
                      **_kwargs(pair))
    fitted, out = _chunked(pair, labels, 5)
    np.testing.assert_array_equal(out, whole.labels)
    assert fitted.mechanism == whole.mechanism and fitted.prior == whole.prior
    assert fitted.accounting == whole.accounting


@pytest.mark.parametrize("pair", [p for p in PAIRS if p.mechanism in REJECTION], ids=str)
def test_a_chunked_release_has_the_whole_array_releases_law(pair: ReleasePair) -> None:
    labels = np.tile(pair.labels, max(1, 6000 // pair.labels.size))
    whole = randomize(labels, pair.domain, pair.mechanism, exact_micro(pair.epsilon), seeded_generator(5),
                      **_kwargs(pair))
    fitted, out = _chunked(pair, labels, 6)
    assert fitted.accounting == whole.accounting and type(fitted.prior) is type(whole.prior)
    assert stats.ks_2samp(out, whole.labels).pvalue > 1e-4
    _, again = _chunked(pair, labels, 5)  # the same stream: the same prior, other words per label
    assert stats.ks_2samp(again, whole.labels).pvalue > 1e-4


def test_a_release_refuses_rows_out_of_step() -> None:
    pair = PAIRS[0]
    release = Release(10, pair.domain, pair.mechanism, exact_micro(pair.epsilon), **_kwargs(pair))
    with pytest.raises(ValueError, match="every label"):
        release.fit(seeded_generator(0))  # the prior from some labels only: never
    with pytest.raises(ValueError, match="more labels"):
        release.add(np.ones(11), seeded_generator(0))


def test_the_split_rows_of_a_range_are_the_masks() -> None:
    for n, fraction, rule in ((1000, 0.1, "evenly_spaced"), (997, 0.33, "evenly_spaced"), (50, 0.2, "prefix"),
                              (7, 1.0, "evenly_spaced"), (3, 0.1, "evenly_spaced")):
        mask = prior_split_mask(n, fraction, rule)
        got = np.concatenate([prior_split_rows(n, fraction, rule, a, a + 13) for a in range(0, n, 13)])
        np.testing.assert_array_equal(got, np.flatnonzero(mask))


def test_the_noised_histogram_sums_by_fixed_blocks_whatever_the_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """σ is summed over blocks of STAT_BLOCK (here 64) values, so chunks of any size give the same nodes,
    and the spool moves to a file past its memory without changing a value."""
    monkeypatch.setattr(rp_with_prior, "STAT_BLOCK", 64)
    noised = np.random.default_rng(1).integers(-5000, 5000, 1000)
    whole = rp_with_prior.histogram_from_noised(noised)
    assert whole[2] == pytest.approx(noised.std(), rel=1e-12)
    hist = rp_with_prior.NoisedHistogram()
    hist._spool = Spool(np.int64, memory_bytes=100)
    for part in np.split(noised, [3, 200, 201, 777]):
        hist.add(part)
    nodes, counts, sigma = hist.finish()
    np.testing.assert_array_equal(nodes, whole[0])
    np.testing.assert_array_equal(counts, whole[1])
    assert sigma == whole[2]


def test_a_spool_gives_back_what_it_took_in_order_from_memory_or_file() -> None:
    for memory in (1 << 20, 16):
        spool = Spool(np.int64, memory_bytes=memory)
        parts = [np.arange(k, k + 10) for k in range(0, 50, 10)]
        for p in parts:
            spool.append(p)
        assert (spool._file is None) == (memory > 400)
        np.testing.assert_array_equal(np.concatenate(list(spool.blocks(7))), np.arange(50))
        np.testing.assert_array_equal(np.concatenate(list(spool.blocks(50))), np.arange(50))
        got = [spool.read(3), spool.read(40), spool.read(7)]
        np.testing.assert_array_equal(np.concatenate(got), np.arange(50))
        with pytest.raises(ValueError):
            spool.read(1)
        spool.close()
