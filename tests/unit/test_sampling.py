"""The one exact table sampler, the lattice, and every privatize kernel against its numpy twin and its law.

* ``TableSampler``: every output owns exactly its integer cells (recounted from the
  alias table, and by pushing every value of a narrow word through the kernel);
* kernels vs numpy twins (``labeldp.mechanisms.reference``): identical outputs where
  the words are consumed the same way;
* every mechanism's empirical output law vs its exact law (chi-square, fixed seeds,
  a threshold a wrong law fails by many orders of magnitude).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from labeldp.mechanisms import (
    BlockRR,
    Exponential,
    Gaussian,
    LabelDomain,
    Laplace,
    RandomizedResponse,
    RPWithPrior,
    RROnBins,
    RRWithPrior,
    SplitPriorRandomizer,
    Staircase,
    UnbiasedRandomizer,
    kernels,
    reference,
)
from labeldp.mechanisms.contract import Prior
from labeldp.mechanisms.lattice import Lattice, index_value, snap_index
from labeldp.mechanisms.rr_sampling import rr_probabilities
from labeldp.mechanisms.sampling import TableSampler, cumulative_cells, raw_words

REAL = LabelDomain("real", -1.0, 4.0)
INTEGER = LabelDomain("integer", 0.0, 20.0)
P_MIN = 1e-6  # fixed seeds: a correct law passes deterministically, a wrong one gives p ~ 0


def generator(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64DXSM(seed))


# --------------------------------------------------------------------------- cells and the alias table


def test_cumulative_cells_rounds_small_entries_up_and_ends_at_two_to_the_bits() -> None:
    p = np.array([0.5, 0.0, 1e-30, 0.25, 0.25 - 1e-30])
    cdf = cumulative_cells(p, 20)
    cells = np.diff(cdf, prepend=np.uint64(0))
    assert cdf[-1] == 1 << 20
    assert cells[1] == 0 and cells[2] == 1  # zero stays zero, a tiny probability is never rounded to zero
    assert np.all(cells[[2, 3, 4]] >= np.ldexp(p[[2, 3, 4]], 20))
    with pytest.raises(ValueError):
        cumulative_cells(np.array([0.5, 0.6]))
    with pytest.raises(ValueError):
        cumulative_cells(np.array([1.5, -0.5]))


def random_cells(rng: np.random.Generator, rows: int, size: int, bits: int) -> np.ndarray:
    p = rng.dirichlet(np.full(size, 0.3), size=rows)
    p[rng.random(p.shape) < 0.3] = 0.0
    p[:, rng.integers(size)] += 0.05
    return cumulative_cells(p / p.sum(axis=1, keepdims=True), bits)


@pytest.mark.parametrize("size", [1, 2, 3, 7, 8, 9, 64, 65, 1000])
def test_alias_table_owns_exactly_the_cells(size: int) -> None:
    rng = np.random.default_rng(size)
    for bits in (size.bit_length() + 12, 53, 63):
        cdf = random_cells(rng, 4, size, bits)
        table = TableSampler.from_cumulative(cdf, bits)
        cells = np.diff(cdf, axis=1, prepend=np.zeros((4, 1), dtype=np.uint64))
        np.testing.assert_array_equal(table.cells(), cells)


@pytest.mark.parametrize("size", [1, 2, 5, 16, 17])
def test_every_word_value_through_the_kernel_counts_the_cells(size: int) -> None:
    """Narrow words (10 bits): each of the 2^10 values goes through the kernel once."""
    bits = 10
    rng = np.random.default_rng(100 + size)
    cdf = random_cells(rng, 3, size, bits)
    table = TableSampler.from_cumulative(cdf, bits)
    x = np.arange(1 << bits, dtype=np.uint64)
    words = x << np.uint64(64 - bits)
    for row in range(3):
        rows = np.full(x.size, row)
        out = table.draw(rows, words)
        np.testing.assert_array_equal(out, table.draw_reference(rows, words))
        counts = np.bincount(out, minlength=size)
        np.testing.assert_array_equal(counts, np.diff(cdf[row], prepend=np.uint64(0)).astype(np.int64))


def test_table_rejects_rows_that_do_not_end_at_two_to_the_bits() -> None:
    with pytest.raises(ValueError):
        TableSampler.from_cumulative(np.array([[1, 2, 3]], dtype=np.uint64), 2)
    with pytest.raises(ValueError):
        TableSampler.from_cumulative(np.array([[3, 2, 4]], dtype=np.uint64), 2)


# --------------------------------------------------------------------------- the lattice


@pytest.mark.parametrize("domain,variant", [(REAL, "continuous"), (REAL, "discrete"), (INTEGER, "discrete")])
def test_kernel_lattice_arithmetic_is_the_numpy_arithmetic_bit_for_bit(domain: LabelDomain, variant: str) -> None:
    lattice = Lattice.for_domain(domain, None, variant)  # type: ignore[arg-type]
    rng = np.random.default_rng(7)
    step = lattice.step
    labels = np.concatenate([
        rng.uniform(domain.low - 1, domain.high + 1, 5000),
        domain.low + step * (np.arange(-3, 40) + 0.5),  # exact half-steps: ties to even
        [domain.low, domain.high, np.nextafter(domain.high, 0), -0.0],
    ])
    index = np.array([snap_index(y, lattice.low, step, lattice.n_steps) for y in labels])
    np.testing.assert_array_equal(index, lattice.index(labels))
    t = np.arange(-5, lattice.n_steps + 6)
    values = np.array([index_value(i, lattice.low, lattice.high, step, lattice.n_steps) for i in t])
    np.testing.assert_array_equal(values, lattice.value(t))
    assert lattice.value(np.array([lattice.n_steps]))[0] == domain.high


def test_rp_with_prior_and_the_additive_mechanisms_share_the_lattice() -> None:
    rp = RPWithPrior(1.0, REAL).fit_to()
    laplace = Laplace(1.0, REAL, "discrete").fit_to()
    assert rp._lattice == laplace._lattice == Lattice.for_domain(REAL)


def test_one_rr_law() -> None:
    for eps, m in [(0.1, 2), (1.0, 10), (8.0, 15), (30.0, 3)]:
        p, q = rr_probabilities(eps, m)
        assert p == pytest.approx(math.exp(eps) * q, rel=1e-12)
        assert p + (m - 1) * q == pytest.approx(1.0, abs=1e-15)
        rr = RandomizedResponse(eps, m).fit_to()
        bins = RROnBins(eps).fit_to(Prior(np.linspace(0, 1, 64), np.ones(64)))
        assert (rr.keep_probability_, rr.other_probability_) == (p, q)
        assert (bins.keep_probability_, bins.other_probability_) == rr_probabilities(eps, bins.outputs_.size)


# --------------------------------------------------------------------------- kernels vs numpy twins


def awkward_labels(domain: LabelDomain, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    labels = rng.uniform(domain.low - 0.5 * domain.width, domain.high + 0.5 * domain.width, n)
    labels[: n // 4] = domain.low
    labels[n // 4 : n // 2] = domain.high
    return labels


IDENTICAL = [
    ("laplace continuous", lambda: Laplace(0.7, REAL, "continuous").fit_to(), REAL),
    ("laplace discrete", lambda: Laplace(0.7, INTEGER, "discrete").fit_to(), INTEGER),
    ("staircase continuous", lambda: Staircase(2.0, REAL).fit_to(), REAL),
    ("staircase discrete", lambda: Staircase(2.0, INTEGER).fit_to(), INTEGER),
    ("gaussian", lambda: Gaussian(1.0, REAL, 1e-5, "discrete").fit_to(), REAL),
    ("unbiased", lambda: UnbiasedRandomizer(1.0, REAL).fit_to(), REAL),
    ("rr_on_bins", lambda: RROnBins(4.0, REAL).fit_to(Prior(np.linspace(-1, 4, 40), np.ones(40))), REAL),
]


@pytest.mark.parametrize("name,build,domain", IDENTICAL, ids=[c[0] for c in IDENTICAL])
def test_kernel_equals_its_numpy_twin_word_for_word(name: str, build, domain: LabelDomain) -> None:
    mech = build()
    labels = awkward_labels(domain, 70_001, 1)  # more than two chunks
    grid_of_labels = labels[:70_000].reshape(7, -1)  # a 2-D input keeps its shape
    out = mech.privatize(grid_of_labels, generator(5))
    assert out.shape == grid_of_labels.shape
    np.testing.assert_array_equal(out, reference.privatize_reference(mech, grid_of_labels, generator(5)))
    out = mech.privatize(labels, generator(6))
    np.testing.assert_array_equal(out, reference.privatize_reference(mech, labels, generator(6)))


@pytest.mark.parametrize("cls", [RRWithPrior, BlockRR])
def test_categorical_kernels_equal_their_twins(cls: type) -> None:
    rng = np.random.default_rng(2)
    p = 0.6 ** np.arange(8)
    labels = rng.choice(8, size=50_001, p=p / p.sum())
    rr = RandomizedResponse(1.0, 8).fit_to()
    twin = reference.privatize_reference(rr, labels, generator(3))
    np.testing.assert_array_equal(rr.privatize(labels, generator(3)), twin)
    split = SplitPriorRandomizer(cls, 1.0, 8)
    out = split.privatize(labels, generator(4))
    np.testing.assert_array_equal(out, reference.privatize_reference(split, labels, generator(4)))


def test_kernels_refuse_non_finite_labels_and_keep_the_shape() -> None:
    for mech in (Laplace(1.0, REAL).fit_to(), Exponential(1.0, REAL).fit_to(), RPWithPrior(1.0, REAL).fit_to(),
                 UnbiasedRandomizer(1.0, REAL).fit_to()):
        with pytest.raises(ValueError, match="finite"):
            mech.privatize(np.array([0.5, np.nan]), generator(0))
        with pytest.raises(ValueError, match="finite"):
            mech.privatize(np.array([np.inf]), generator(0))
        assert mech.privatize(np.zeros((3, 4)), generator(0)).shape == (3, 4)
        assert mech.privatize(np.zeros(0), generator(0)).shape == (0,)


def test_kernels_read_the_callers_stream_and_nothing_else() -> None:
    """Same generator state → same outputs; a different state → different outputs."""
    mech = Laplace(1.0, REAL).fit_to()
    labels = np.linspace(-1, 4, 1000)
    np.testing.assert_array_equal(mech.privatize(labels, generator(9)), mech.privatize(labels, generator(9)))
    assert not np.array_equal(mech.privatize(labels, generator(9)), mech.privatize(labels, generator(10)))
    g = generator(11)
    mech.privatize(labels, g)
    expected = generator(11)
    expected.bit_generator.advance(1000)  # clipped additive: exactly one word per label
    assert g.bit_generator.random_raw() == expected.bit_generator.random_raw()


# --------------------------------------------------------------------------- empirical law vs exact law


def chi_square_p(observed: np.ndarray, expected_probs: np.ndarray) -> float:
    """Pearson's test with cells of expected count < 5 pooled; impossible outputs must never occur."""
    n = observed.sum()
    expected = expected_probs * n
    assert np.all(observed[expected_probs == 0] == 0), "an impossible output was drawn"
    order = np.argsort(expected)
    obs, exp = observed[order].astype(float), expected[order]
    small = np.cumsum(exp) < 5 * max(1, int((exp < 5).sum() > 0))
    pooled_obs = np.append(obs[~small], obs[small].sum())
    pooled_exp = np.append(exp[~small], exp[small].sum())
    keep = pooled_exp > 0
    stat = float(np.sum((pooled_obs[keep] - pooled_exp[keep]) ** 2 / pooled_exp[keep]))
    return float(stats.chi2.sf(stat, max(int(keep.sum()) - 1, 1)))


DRAWS = 200_000
SMALL_REAL = LabelDomain("real", -1.0, 4.0)


def lattice_law(mech, label: float) -> tuple[np.ndarray, np.ndarray]:
    return mech.lattice_, mech.output_probabilities(label)


LAWS = [
    ("laplace discrete", lambda: Laplace(0.5, INTEGER, "discrete").fit_to(), lattice_law, [0.0, 7.0, 20.0, -3.0]),
    ("laplace real J=40", lambda: Laplace(1.5, SMALL_REAL, step=0.125).fit_to(), lattice_law, [-1.0, 0.3, 4.0]),
    ("staircase discrete", lambda: Staircase(1.0, INTEGER).fit_to(), lattice_law, [0.0, 9.0, 20.0]),
    ("staircase gamma", lambda: Staircase(3.0, SMALL_REAL, step=0.125, gamma=0.3).fit_to(), lattice_law, [-1.0, 2.0]),
    ("gaussian", lambda: Gaussian(2.0, INTEGER, 1e-4).fit_to(), lattice_law, [0.0, 10.0, 20.0]),
    ("exponential", lambda: Exponential(2.0, INTEGER).fit_to(), lattice_law, [0.0, 3.0, 20.0]),
    ("exponential real", lambda: Exponential(6.0, SMALL_REAL, step=0.125).fit_to(), lattice_law, [-1.0, 1.0]),
]


@pytest.mark.parametrize("name,build,law,labels", LAWS, ids=[c[0] for c in LAWS])
def test_additive_output_law_is_the_exact_law(name: str, build, law, labels: list[float]) -> None:
    mech = build()
    for seed, label in enumerate(labels):
        points, probs = law(mech, label)
        out = mech.privatize(np.full(DRAWS, label), generator(20 + seed))
        index = np.searchsorted(points, out)
        np.testing.assert_array_equal(points[index], out)  # every output is a lattice point
        p = chi_square_p(np.bincount(index, minlength=points.size), probs)
        assert p > P_MIN, (name, label, p)


def test_rp_with_prior_output_law_is_the_exact_law() -> None:
    mech = RPWithPrior(1.0, INTEGER, zeta=2.0).fit_to(Prior(np.arange(21.0), np.exp(-np.arange(21.0) / 5)))
    assert mech.a2_index_ > mech.a1_index_
    for seed, label in enumerate([0.0, 5.0, 20.0, 13.0]):
        out = mech.privatize(np.full(DRAWS, label), generator(40 + seed))
        index = np.searchsorted(mech.outputs_, out)
        np.testing.assert_array_equal(mech.outputs_[index], out)
        p = chi_square_p(np.bincount(index, minlength=mech.outputs_.size), mech.output_probabilities(label))
        assert p > P_MIN, (label, p)


def test_rp_with_prior_far_draws_are_uniform_where_lemire_rejection_matters() -> None:
    """Every label's far draw uses the far count's own Lemire threshold.

    With s = 3·2^30 far points, a 32-bit half x gives u = ⌊3x/4⌋: without rejection (or with a
    threshold other than 2^32 mod s = 2^30) u ≡ 0 (mod 3) gets two x values where the other
    residues get one, probability up to 1/2 instead of 1/3. (The kernel once overwrote the far
    threshold with the previous label's output index: 0.61 / 0.28 / 0.11 here.)
    """
    s = 3 * 2**30
    lattice = Lattice(0.0, float(s), s)  # the kernel alone: RPWithPrior would list its s outputs
    out = kernels.rp_with_prior(np.zeros(300_000), lattice, 0, s, 0, 0, generator(45))  # keep never
    u = out.astype(np.int64) - 1  # c = z = 0: far index = u + 1 (the near block {0} is skipped)
    share = np.bincount(u % 3, minlength=3) / u.size
    assert np.all(np.abs(share - 1 / 3) < 6 * math.sqrt((2 / 9) / u.size)), share


def test_rp_with_prior_decides_each_label_on_its_own_keep_word() -> None:
    """Label i of a chunk is near iff the chunk's keep word i is below T, across halves refills.

    With s = 3·2^30 far points a quarter of the far attempts are rejected, so the kernel
    refills its halves mid-chunk. The fused kernel once indexed the keep words from the
    refill point (``keep_words[i − done]``): after a refill, labels re-used the chunk's first
    keep words, so two labels shared one keep decision and one label's output (near iff
    kept: the far draw skips the near block) told an adversary whether the other was kept.
    """
    s, z, keep, n = 3 * 2**30, 5, 2**52, 20_000  # n < CHUNK: one chunk, its keep words come first
    lattice = Lattice(0.0, float(s), s)
    labels = np.random.default_rng(3).uniform(0.0, float(s), n)
    out = kernels.rp_with_prior(labels, lattice, 0, s, z, keep, generator(46))
    kept = (raw_words(generator(46), n) >> np.uint64(11)) < np.uint64(keep)
    near = np.abs(out.astype(np.int64) - lattice.index(labels)) <= z
    assert 0.4 < kept.mean() < 0.6
    np.testing.assert_array_equal(near, kept)


def test_unbiased_output_law_is_the_exact_law() -> None:
    mech = UnbiasedRandomizer(1.0, SMALL_REAL, grid_size=9).fit_to()
    for seed, label in enumerate([-1.0, 0.3, 1.25, 4.0, 9.0]):
        out = mech.privatize(np.full(DRAWS, label), generator(60 + seed))
        index = np.searchsorted(mech.outputs_, out)
        np.testing.assert_array_equal(mech.outputs_[index], out)
        p = chi_square_p(np.bincount(index, minlength=mech.outputs_.size), mech.output_probabilities(label))
        assert p > P_MIN, (label, p)


def test_categorical_and_rr_on_bins_output_laws_are_the_exact_laws() -> None:
    prior = Prior.over_classes(np.array([0.4, 0.3, 0.15, 0.1, 0.04, 0.01]))
    mechs = [
        RandomizedResponse(1.0, 6).fit_to(), RRWithPrior(1.0, 6).fit_to(prior), BlockRR(1.0, 6, sigma=0.5).fit_to(prior)
    ]
    for m, mech in enumerate(mechs):
        for y in range(6):
            out = mech.privatize(np.full(DRAWS // 4, y), generator(80 + 10 * m + y))
            p = chi_square_p(np.bincount(out, minlength=6), mech.output_probabilities(y))
            assert p > P_MIN, (type(mech).__name__, y, p)
    bins = RROnBins(3.0, SMALL_REAL).fit_to(Prior(np.linspace(-1, 4, 30), np.ones(30)))
    for seed, label in enumerate([-1.0, 1.7, 4.0]):
        out = bins.privatize(np.full(DRAWS, label), generator(120 + seed))
        p = chi_square_p(np.bincount(np.searchsorted(bins.outputs_, out), minlength=bins.outputs_.size),
                         bins.output_probabilities(label))
        assert p > P_MIN, (label, p)


def test_the_chi_square_check_fails_a_wrong_law() -> None:
    """The check used above refutes a law off by a factor in one cell's pair (the doubled-zero bug)."""
    mech = Laplace(0.5, INTEGER, "discrete").fit_to()
    probs = mech.output_probabilities(7.0)
    wrong = probs.copy()
    wrong[7] *= 1.3  # e.g. P(N = 0) counted once per sign
    wrong /= wrong.sum()
    out = mech.privatize(np.full(DRAWS, 7.0), generator(140))
    observed = np.bincount(np.searchsorted(mech.lattice_, out), minlength=probs.size)
    assert chi_square_p(observed, probs) > P_MIN
    assert chi_square_p(observed, wrong) < 1e-12


def test_raw_words_are_the_generators_raw_output() -> None:
    a, b = generator(1), generator(1)
    np.testing.assert_array_equal(raw_words(a, 10), b.bit_generator.random_raw(10))
    assert kernels.finite_labels(np.ones((2, 2))).shape == (4,)
