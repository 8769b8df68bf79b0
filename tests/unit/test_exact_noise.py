"""The exact discrete Laplace sampler of the ε₁ priors: exact steps, unbounded support, the right law."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from labeldp.mechanisms.exact_noise import (
    MAX_SHIFT,
    WordSource,
    _discrete_laplace_kernel,
    bernoulli_exp_minus,
    discrete_laplace,
    discrete_laplace_reference,
    rate_from_epsilon,
    rate_from_fraction,
)
from labeldp.mechanisms.lattice import Lattice
from labeldp.mechanisms.prior import LabelDomain, LaplaceHistogramPrior, sample_two_sided_geometric
from labeldp.mechanisms.rp_with_prior import laplace_noised_indices


def scripted(words: list[int]) -> WordSource:
    it = iter(words)
    return WordSource(lambda: next(it))


class NeedBits(Exception):
    def __init__(self, b: int) -> None:
        self.b = b


class PathSource(WordSource):
    """Answers ``bits`` from a fixed list of values; asks for a branch when the list runs out."""

    def __init__(self, values: list[int]) -> None:
        super().__init__(lambda: 0)
        self.values, self.used = values, 0

    def bits(self, b: int) -> int:
        if b == 0:
            return 0
        if self.used == len(self.values):
            raise NeedBits(b)
        self.used += 1
        return self.values[self.used - 1]


def exact_probability_of_one(u: int, m: int, prune: Fraction) -> tuple[Fraction, Fraction]:
    """(P[bernoulli_exp_minus(u, m) = 1] over the paths explored, the mass left unexplored), by
    walking every word value the code can read, each b-bit value with probability 2^-b."""
    one, left = Fraction(0), Fraction(0)
    stack: list[tuple[list[int], Fraction]] = [([], Fraction(1))]
    while stack:
        values, p = stack.pop()
        try:
            one += p if bernoulli_exp_minus(PathSource(values), u, m) else 0
        except NeedBits as need:
            child = p / (1 << need.b)
            if child < prune:
                left += p
                continue
            stack.extend((values + [x], child) for x in range(1 << need.b))
    return one, left


def exp_bounds(x: Fraction, terms: int = 40) -> tuple[Fraction, Fraction]:
    """Σ_{k<n} (−x)^k/k! for n = terms and terms + 1: they bracket e^{−x} for 0 ≤ x ≤ 1."""
    total, term, sums = Fraction(0), Fraction(1), []
    for k in range(terms + 1):
        total += term
        sums.append(total)
        term = -term * x / (k + 1)
    return min(sums[-2:]), max(sums[-2:])


# --------------------------------------------------------------------------- exact steps


def test_uniform_below_gives_each_value_exactly_one_bit_pattern() -> None:
    for n in range(1, 41):
        b = (n - 1).bit_length()
        hits = [0] * n
        for top in range(1 << b):
            words = [top << (64 - b), 0] if b else [0]  # a rejected pattern reads a second word (0)
            x = scripted(words).uniform_below(n)
            if top < n:
                assert x == top
                hits[x] += 1
        assert hits == [1] * n


@pytest.mark.parametrize(("u", "m", "depth"), [(0, 2, 30), (1, 2, 30), (4, 2, 26), (1, 3, 30)])
def test_the_bernoulli_steps_are_exactly_e_to_the_minus_x(u: int, m: int, depth: int) -> None:
    """Every path of word values, weighed exactly (paths below 2^-depth left unexplored): P(1)
    lies within the unexplored mass of e^{−u/2^m} (x = 1 is the Bernoulli(e^{-1}) of the
    geometric part). A one-value slip in any comparison moves P(1) by ~1/2^m: far outside."""
    one, left = exact_probability_of_one(u, m, Fraction(1, 1 << depth))
    low, high = exp_bounds(Fraction(u, 1 << m))
    assert left < Fraction(1, 1000)
    assert one <= high and low <= one + left


def test_the_support_is_unbounded_a_path_to_any_value() -> None:
    """A word sequence, each word possible, yields z = ⌊2^m·V/s⌋ for any V: with γ = 1/2 and
    V = 500 that is 1 000, where numpy's float sampler stops at ≈ 74 (−ln 2⁻⁵³ / γ)."""
    s, m = rate_from_epsilon(1.0, 2)
    for periods in (0, 1, 40, 500):
        words = [0, 0]  # U = 0; Bernoulli(e^0) accepts at once (top bits never below 0)
        words += [0, 1 << 62] * periods  # Bernoulli(e^{-1}) = 1: K→2 (bit 0), K→3 then stop (2 bits = 01)
        words += [1 << 63]  # Bernoulli(e^{-1}) = 0: K = 2, stop (bit 1)
        words += [0]  # sign +
        z = discrete_laplace_reference(scripted(words), s, m)
        assert z == ((1 << m) * periods) // s
        out = np.zeros(1, dtype=np.int64)  # the numba kernel reads the same words the same way
        assert _discrete_laplace_kernel(np.array(words, dtype=np.uint64), s, m, out, 0) == (1, 0)
        assert out[0] == z
    assert z > 900  # numpy's float geometric cannot pass ≈ 74 at this rate


# --------------------------------------------------------------------------- the kernel and the law


@pytest.mark.parametrize(
    "rate",
    [
        rate_from_epsilon(1.0, 2),
        rate_from_epsilon(0.05, 2),
        rate_from_epsilon(1.0, 1 << 16),
        rate_from_fraction(Fraction(1 << 26)),
    ],
    ids=["eps1-sens2", "eps0.05-sens2", "eps1-J2^16", "m=0"],
)
def test_the_kernel_is_the_reference_word_for_word(rate: tuple[int, int]) -> None:
    s, m = rate
    n = 400
    kernel = discrete_laplace(s, m, n, np.random.default_rng(7))
    source = WordSource.from_generator(np.random.default_rng(7), chunk=12 * n + 64)  # the kernel's first chunk
    assert kernel.tolist() == [discrete_laplace_reference(source, s, m) for _ in range(n)]


def test_rates_round_down_and_keep_25_bits() -> None:
    for eps, sens in [(1.0, 2), (0.3, 2), (1e-6, 1 << 16), (5.0, 1 << 16), (1000.0, 2)]:
        s, m = rate_from_epsilon(eps, sens)
        gamma = Fraction(eps) / sens
        assert Fraction(s, 1 << m) < gamma
        assert 0 <= m <= MAX_SHIFT and (m == 0 or s >= 1 << 24)
        assert gamma - Fraction(s, 1 << m) <= gamma / (1 << 23)
    with pytest.raises(ValueError):
        rate_from_fraction(Fraction(1, 1 << 70))


@pytest.mark.parametrize("epsilon", [1.0, 0.2, 4.0])
def test_draws_match_the_pmf_by_chi_square_like_the_float_twin(epsilon: float) -> None:
    """Fixed seeds: the exact sampler and numpy's float sampler (its statistical twin) both fit
    P(z) ∝ e^{−γ|z|}, γ = ε/2, by chi-square over |z| ≤ 12 and a tail bin."""
    n = 60_000
    s, m = rate_from_epsilon(epsilon, 2)
    gamma = s / (1 << m)
    alpha = math.exp(-gamma)
    edges = np.arange(-12, 13)
    pmf = (1 - alpha) / (1 + alpha) * alpha ** np.abs(edges)
    expected = np.append(pmf, 1 - pmf.sum()) * n
    for draws in (
        discrete_laplace(s, m, n, np.random.default_rng(2024)),
        sample_two_sided_geometric(alpha, n, np.random.default_rng(2024)),
    ):
        counts = np.array([np.count_nonzero(draws == k) for k in edges] + [np.count_nonzero(np.abs(draws) > 12)])
        keep = expected > 5
        observed, wanted = counts[keep], expected[keep]
        wanted = wanted * observed.sum() / wanted.sum()
        assert stats.chisquare(observed, wanted).pvalue > 1e-3
        assert abs(draws.mean()) < 6 * math.sqrt(2 * alpha / (1 - alpha) ** 2 / n)


def test_the_priors_draw_from_the_exact_sampler() -> None:
    """The histogram prior and the noised labels take their noise from ``discrete_laplace``,
    word for word (the same seed gives the same noise)."""
    counts = np.array([5, 0, 7, 3], dtype=np.int64)
    prior = LaplaceHistogramPrior(1.0, np.arange(4.0)).fit_counts(counts, np.random.default_rng(3))
    noise = discrete_laplace(*rate_from_epsilon(1.0, 2), 4, np.random.default_rng(3))
    assert prior.noisy_counts_.tolist() == np.maximum(counts + noise, 0).tolist()
    lattice = Lattice.for_domain(LabelDomain("real", 0.0, 1.0), None)
    labels = np.array([0.0, 0.5, 1.0])
    noised = laplace_noised_indices(labels, lattice, 1.0, np.random.default_rng(4))
    expected = lattice.index(labels) + discrete_laplace(
        *rate_from_epsilon(1.0, lattice.n_steps), 3, np.random.default_rng(4)
    )
    assert noised.tolist() == expected.tolist()
