"""Categorical mechanisms (Liu & Ding): exact laws, DP ratios, optimality, BlockRR's closed form, Alg. 2.

The reference formulas here are written independently of the module, from the
paper's text: Def. 2.3/2.4 with e^ε directly, eq. (3.1)/(3.2) literally, the
weight matrix of eq. (3.3) in full.
"""

from __future__ import annotations

import itertools
import json
import math
from typing import cast

import numpy as np
import pytest
from pydantic import ValidationError

from labeldp.mechanisms import categorical as cat
from labeldp.mechanisms.categorical import (
    BlockRR,
    RandomizedResponse,
    RRWithPrior,
    SplitPriorRandomizer,
    block_rr_coefficients,
    cell_table,
    check_class_labels,
    check_classes,
    majority_mask,
    optimal_top_k,
    prior_split_mask,
    prior_split_size,
    randomized_response_matrix,
    realized_matrix,
    weight_matrix,
)
from labeldp.mechanisms.contract import Prior
from labeldp.mechanisms.reference import rows as rows_reference
from labeldp.mechanisms.registry import entry_for_spec
from labeldp.mechanisms.release_laws import release_laws
from labeldp.specs.categorical import BlockRRSpec, RandomizedResponseSpec, RRWithPriorSpec

EPSILONS = [0.01, 0.1, 0.6, 1.0, 2.0, 4.0, 8.0, 30.0]
RATIO_RTOL = 1e-12  # float rounding of closed forms; a real violation is orders larger


def imbalanced_prior(k: int = 10) -> np.ndarray:
    """CIFAR-10₂'s class counts (Liu & Ding §5.1.1), the paper's imbalanced setting."""
    counts = np.array([5000, 4900, 4700, 4600, 4500, 4800, 600, 500, 700, 400], dtype=float)[:k]
    return counts / counts.sum()


def random_prior(rng: np.random.Generator, k: int) -> np.ndarray:
    p = rng.dirichlet(np.full(k, 0.5))
    if k > 2:
        p[rng.random(k) < 0.2] = 0.0
        p[rng.integers(k)] += 0.1
    return p / p.sum()


def column_ratio(matrix: np.ndarray) -> float:
    """max over columns of max/min, all-zero columns skipped; the test's own DP check."""
    worst = 1.0
    for col in np.asarray(matrix).T:
        if col.max() == 0:
            continue
        worst = max(worst, math.inf if col.min() == 0 else col.max() / col.min())
    return worst


def fitted_mechanisms(epsilon: float, prior: np.ndarray):
    k = prior.size
    yield "rr", RandomizedResponse(epsilon, k).fit_to()
    yield "rr_with_prior", RRWithPrior(epsilon, k).fit_to(Prior.over_classes(prior))
    for sigma, l in [(0.5, 0), (0.5, 2), (1.2, None), (0.2, 1), (50.0, 3)]:
        yield f"block_rr σ={sigma} l={l}", BlockRR(epsilon, k, sigma=sigma, l=l).fit_to(Prior.over_classes(prior))
    yield "block_rr majority", BlockRR(epsilon, k, sigma=0.5, outputs="majority").fit_to(Prior.over_classes(prior))


# --------------------------------------------------------------------------- the law and its DP ratio


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rows_sum_to_one_and_every_column_ratio_is_at_most_e_eps(epsilon: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    priors = [imbalanced_prior(), random_prior(rng, 2), random_prior(rng, 7)]
    for prior in priors:
        for label, mech in fitted_mechanisms(epsilon, prior):
            t = mech.transition_matrix()
            assert t.shape == (prior.size, prior.size)
            assert np.all(t >= 0), label
            np.testing.assert_allclose(t.sum(axis=1), 1.0, rtol=0, atol=1e-13, err_msg=label)
            bound = math.exp(epsilon) * (1 + RATIO_RTOL)
            assert column_ratio(t) <= bound, (label, column_ratio(t), math.exp(epsilon))
            assert cat.max_privacy_loss(t) <= epsilon + RATIO_RTOL, label
            # The law actually sampled (integer cells out of 2^63) keeps the bound too.
            real = realized_matrix(mech.cells_)
            assert column_ratio(real) <= bound, label
            np.testing.assert_allclose(real, t, rtol=0, atol=1e-15, err_msg=label)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_ratio_reaches_e_eps_where_the_bound_is_tight(epsilon: float) -> None:
    """RR (Def. 2.3), RRWithPrior with k >= 2, BlockRR (ratio e^ε in S̃₁∖… or S̃₂ columns)."""
    prior = imbalanced_prior()
    tight = math.exp(epsilon)
    assert column_ratio(randomized_response_matrix(epsilon, 10)) == pytest.approx(tight, rel=1e-9)
    for label, mech in fitted_mechanisms(epsilon, prior):
        if isinstance(mech, RRWithPrior) and mech.k_ == 1:
            assert column_ratio(mech.transition_matrix()) == 1.0  # one output, reported always
            continue
        if isinstance(mech, BlockRR) and mech.outputs == "majority" and mech.majority_.size == 1:
            continue
        assert column_ratio(mech.transition_matrix()) == pytest.approx(tight, rel=1e-9), label


def test_ratio_check_has_power_against_rr_at_one_and_a_half_epsilon() -> None:
    """The check above fails a mechanism calibrated to 1.5ε (kept as the plant of the suite)."""
    for epsilon in EPSILONS[:-1]:
        broken = randomized_response_matrix(1.5 * epsilon, 5)
        assert column_ratio(broken) > math.exp(epsilon) * (1 + 1e-6)
        assert cat.max_privacy_loss(broken) > epsilon


def test_randomized_response_matches_definition_2_3() -> None:
    for epsilon in [0.3, 1.0, 5.0]:
        for k in [2, 3, 10]:
            e = math.exp(epsilon)
            mech = RandomizedResponse(epsilon, k).fit_to()
            expected = np.full((k, k), 1 / (e + k - 1))
            np.fill_diagonal(expected, e / (e + k - 1))
            np.testing.assert_allclose(mech.transition_matrix(), expected, rtol=1e-14)
            assert mech.keep_probability_ == pytest.approx(e / (e + k - 1), rel=1e-14)


def test_output_probabilities_and_expected_loss_are_exact() -> None:
    prior = imbalanced_prior()
    for label, mech in fitted_mechanisms(1.0, prior):
        t = mech.transition_matrix()
        for y in range(prior.size):
            np.testing.assert_array_equal(mech.output_probabilities(y), t[y])
        accuracy = sum(prior[y] * t[y, y] for y in range(prior.size))
        assert mech.expected_accuracy(Prior.over_classes(prior)) == pytest.approx(accuracy, rel=1e-13), label
        assert mech.loss_under(Prior.over_classes(prior)) == pytest.approx(1 - accuracy, rel=1e-12), label
    # ``grid`` names the classes the probabilities refer to.
    mech = RandomizedResponse(1.0, 4).fit_to()
    assert mech.expected_accuracy(Prior(np.asarray([2]), np.asarray([1.0]))) == pytest.approx(mech.keep_probability_)


# --------------------------------------------------------------------------- sampling


def test_empirical_frequencies_match_the_exact_rows() -> None:
    rng = np.random.default_rng(7)
    prior = np.array([0.35, 0.3, 0.2, 0.1, 0.04, 0.01])
    draws = 60_000
    for label, mech in fitted_mechanisms(1.0, prior):
        t = mech.transition_matrix()
        for y in range(prior.size):
            out = mech.privatize(np.full(draws, y), rng)
            assert out.dtype == np.int64
            freq = np.bincount(out, minlength=prior.size) / draws
            sd = np.sqrt(t[y] * (1 - t[y]) / draws)
            assert np.all(np.abs(freq - t[y]) <= 5.5 * sd + 1e-12), (label, y, freq, t[y])
            assert np.all(freq[t[y] == 0] == 0), (label, y)


def test_privatize_is_vectorized_over_mixed_labels_and_shapes() -> None:
    rng = np.random.default_rng(3)
    mech = BlockRR(1.0, 6, sigma=0.5, l=1).fit_to(Prior.over_classes(np.array([0.35, 0.3, 0.2, 0.1, 0.04, 0.01])))
    labels = rng.integers(0, 6, size=(40, 50))
    out = mech.privatize(labels, np.random.default_rng(11))
    assert out.shape == labels.shape and out.dtype == np.int64
    # Same seed, same words: equals the numpy twin of the kernel.
    twin = rows_reference(labels.ravel(), mech.sampler(), np.random.default_rng(11))
    np.testing.assert_array_equal(out.ravel(), twin)
    # Floats that are whole numbers (the wire's label column) are accepted.
    np.testing.assert_array_equal(mech.privatize(labels.astype(float), np.random.default_rng(11)), out)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 8.0])
def test_sampler_owns_exactly_the_cells_and_never_draws_a_zero_cell(epsilon: float) -> None:
    """The alias table behind ``privatize`` gives each output exactly its cells of 2^63 (ε-DP nudge included)."""
    for label, mech in fitted_mechanisms(epsilon, imbalanced_prior()):
        table = mech.sampler()
        cells = np.diff(mech.cells_, axis=1, prepend=np.zeros((mech.cells_.shape[0], 1), dtype=np.uint64))
        np.testing.assert_array_equal(table.cells(), cells, err_msg=label)
        # Words at every bucket's edges and thresholds: kernel == twin, and only outputs with cells.
        k = cells.shape[0]
        capacity = np.uint64(1 << table.shift)
        thresholds = table.table.reshape(k, table.n_buckets) >> np.uint64(table.g)
        starts = np.broadcast_to(np.arange(table.n_buckets, dtype=np.uint64) * capacity, thresholds.shape)
        last = capacity - np.uint64(1)
        x = np.concatenate([starts + np.minimum(thresholds, last), starts + last, starts,
                            starts + np.maximum(thresholds, np.uint64(1)) - np.uint64(1)], axis=1)
        rows = np.repeat(np.arange(k), x.shape[1])
        words = x.ravel() << np.uint64(1)
        out = table.draw(rows, words)
        np.testing.assert_array_equal(out, table.draw_reference(rows, words), err_msg=label)
        assert np.all(cells[rows, out] > 0), label


def test_cell_table_rounds_small_entries_up_and_gives_zero_entries_no_cells() -> None:
    for epsilon in [0.1, 3.0, 30.0]:
        for _, mech in fitted_mechanisms(epsilon, imbalanced_prior()):
            t = mech.transition_matrix()
            cdf = cell_table(t)
            assert np.all(cdf[:, -1] == np.uint64(1 << 63))
            cells = np.diff(cdf, axis=1, prepend=np.zeros((t.shape[0], 1), dtype=np.uint64))
            scaled = np.ldexp(t, 63)
            sink = np.argmax(t, axis=1)
            for y in range(t.shape[0]):
                for j in range(t.shape[1]):
                    if j != sink[y]:
                        assert float(cells[y, j]) >= scaled[y, j]  # never rounded down
                        assert float(cells[y, j]) <= scaled[y, j] + 1
            assert np.all(cells[t == 0] == 0)


# --------------------------------------------------------------------------- RRWithPrior


def rr_with_prior_reference(epsilon: float, prior: np.ndarray, subset: list[int]) -> np.ndarray:
    """Def. 2.4 with e^ε directly, for any candidate set."""
    k, e, n = len(subset), math.exp(epsilon), prior.size
    t = np.zeros((n, n))
    for y in range(n):
        for j in subset:
            if y in subset:
                t[y, j] = (e if j == y else 1.0) / (e + k - 1)
            else:
                t[y, j] = 1.0 / k
    return t


@pytest.mark.parametrize("epsilon", [0.05, 0.3, 1.0, 2.0, 5.0])
def test_rr_with_prior_k_maximizes_the_exact_probability_of_a_correct_output(epsilon: float) -> None:
    rng = np.random.default_rng(int(epsilon * 100))
    priors = [imbalanced_prior(), np.full(5, 0.2)] + [random_prior(rng, k) for k in (2, 3, 6, 7) for _ in range(3)]
    for prior in priors:
        mech = RRWithPrior(epsilon, prior.size).fit_to(Prior.over_classes(prior))
        achieved = mech.expected_accuracy(Prior.over_classes(prior))
        # Brute force over k with the top-k set of the prior.
        ranked = sorted(range(prior.size), key=lambda i: (-prior[i], i))
        by_k = []
        for k in range(1, prior.size + 1):
            t = rr_with_prior_reference(epsilon, prior, ranked[:k])
            by_k.append(float(np.dot(prior, np.diag(t))))
        assert achieved == pytest.approx(max(by_k), rel=1e-12, abs=1e-15)
        assert by_k[mech.k_ - 1] == pytest.approx(max(by_k), rel=1e-12, abs=1e-15)
        np.testing.assert_allclose(mech.accuracy_by_k_, by_k, rtol=1e-12, atol=1e-15)
        reference = rr_with_prior_reference(epsilon, prior, ranked[: mech.k_])
        np.testing.assert_allclose(mech.transition_matrix(), reference, rtol=1e-13, atol=1e-16)
        # And no candidate set of any size does better (top-k is optimal for each k).
        if prior.size <= 7:
            best_any = max(
                math.exp(epsilon) / (math.exp(epsilon) + len(s) - 1) * prior[list(s)].sum()
                for r in range(1, prior.size + 1)
                for s in itertools.combinations(range(prior.size), r)
            )
            assert achieved >= best_any * (1 - 1e-12)


def test_rr_with_prior_top_k_is_ranked_and_tie_broken_by_index() -> None:
    order, k, _ = optimal_top_k(np.array([0.2, 0.3, 0.2, 0.3]), 3.0)
    assert order.tolist() == [1, 3, 0, 2]
    mech = RRWithPrior(3.0, ["a", "b", "c", "d"]).fit_to(Prior.over_classes(np.array([0.2, 0.3, 0.2, 0.3])))
    assert mech.top_k_.tolist() == order[:k].tolist()
    with pytest.raises(ValueError):
        RRWithPrior(1.0, 4).fit_to()


# --------------------------------------------------------------------------- BlockRR


def eq_3_2(epsilon: float, n1: int, n2: int, l: int, b: int = 1) -> tuple[float, float]:
    """β, γ of eq. (3.2), transcribed literally."""
    e1 = (math.exp(epsilon) - 1) * b
    s = n1 + n2
    beta1 = e1 + l * n2 / s
    gamma1 = (e1 + l) - l / s * (e1 + n1)
    kappa = (e1 + n1) * (e1 + n2) - (n1 - l) * n2
    return beta1 / kappa, gamma1 / kappa


@pytest.mark.parametrize("epsilon", [0.01, 0.3, 1.0, 3.0, 8.0])
def test_block_rr_beta_gamma_match_eq_3_2_and_solve_eq_3_1(epsilon: float) -> None:
    e = math.exp(epsilon)
    for n1 in range(1, 7):
        for n2 in range(6):
            betas, gammas = [], []
            for l in range(n1 + 1):
                beta, gamma, keep_beta, keep_gamma = block_rr_coefficients(epsilon, n1, n2, l)
                ref_beta, ref_gamma = eq_3_2(epsilon, n1, n2, l)
                assert beta == pytest.approx(ref_beta, rel=1e-11)
                assert keep_beta == pytest.approx(e * ref_beta, rel=1e-11)
                if n2:
                    assert gamma == pytest.approx(ref_gamma, rel=1e-11, abs=1e-300)
                    assert keep_gamma == pytest.approx(e * ref_gamma, rel=1e-11, abs=1e-300)
                s = n1 + n2
                # Eq. (3.1): the two normalization equations.
                assert (e + n1 - 1) * beta + n2 * gamma == pytest.approx(1.0, abs=1e-13)
                if n2:
                    assert (n1 - l) * beta + (e + n2 - 1) * gamma == pytest.approx(1 - l / s, abs=1e-13)
                # Appendix C: β <= 1/|S̃| <= e^ε β.
                assert beta <= 1 / s * (1 + 1e-13) and 1 / s <= keep_beta * (1 + 1e-13)
                betas.append(beta)
                gammas.append(gamma)
            if n2:
                # Lemma 3.1: β increases and γ decreases in l; max γ = min β (at l = 0).
                assert all(b2 >= b1 * (1 - 1e-13) for b1, b2 in zip(betas, betas[1:]))
                assert all(g2 <= g1 * (1 + 1e-13) for g1, g2 in zip(gammas, gammas[1:]))
                assert max(gammas) == pytest.approx(min(betas), rel=1e-12)


def test_block_rr_partition_is_the_weight_matrix_rule() -> None:
    rng = np.random.default_rng(17)
    priors = [imbalanced_prior(), np.full(4, 0.25), np.array([0.5, 0.5 * math.exp(-1 / 0.7), 0.1, 0.0])]
    priors += [random_prior(rng, k) for k in (2, 5, 9) for _ in range(5)]
    for prior in priors:
        for sigma in [0.1, 0.3, 0.7, 1.0, 1.4, 5.0]:
            w = weight_matrix(prior, sigma)
            assert w.shape == (prior.size, prior.size)
            expected = np.array([all(w[i, i] >= w[i, j] for j in range(prior.size)) for i in range(prior.size)])
            np.testing.assert_array_equal(majority_mask(prior, sigma), expected)
            for l in [0, 1, 3, None]:
                mech = BlockRR(1.0, prior.size, sigma=sigma, l=l).fit_to(Prior.over_classes(prior))
                np.testing.assert_array_equal(mech.majority_, np.flatnonzero(expected))
                np.testing.assert_array_equal(mech.minority_, np.flatnonzero(~expected))
                want_l = expected.sum() if l is None else min(l, expected.sum())
                ranked = sorted(np.flatnonzero(expected), key=lambda i: (-prior[i], i))
                assert mech.delta_.tolist() == ranked[:want_l]


def block_rr_reference(epsilon: float, prior: np.ndarray, majority: set[int], delta: set[int]) -> np.ndarray:
    """Alg. 1 lines 3–11 with B = identity and S̃ = S, entry by entry."""
    n = prior.size
    n1 = len(majority)
    beta, gamma = eq_3_2(epsilon, n1, n - n1, len(delta))
    e = math.exp(epsilon)
    t = np.zeros((n, n))
    for y in range(n):
        for j in range(n):
            if y not in majority:
                t[y, j] = 1 / n if j in delta else (e * gamma if j == y else (beta if j in majority else gamma))
            else:
                t[y, j] = gamma if j not in majority else (e * beta if j == y else beta)
    return t


@pytest.mark.parametrize("epsilon", [0.2, 1.0, 3.0])
def test_block_rr_matrix_follows_algorithm_1(epsilon: float) -> None:
    prior = imbalanced_prior()
    for sigma, l in [(1.2, 5), (0.8, 2), (0.5, 0), (1.4, 6)]:
        mech = BlockRR(epsilon, 10, sigma=sigma, l=l).fit_to(Prior.over_classes(prior))
        ref = block_rr_reference(epsilon, prior, set(mech.majority_.tolist()), set(mech.delta_.tolist()))
        np.testing.assert_allclose(mech.transition_matrix(), ref, rtol=1e-11, atol=1e-15)


@pytest.mark.parametrize("epsilon", [0.05, 0.6, 1.0, 3.0, 8.0])
def test_block_rr_reduces_to_rr_when_l_is_zero_or_s2_is_empty(epsilon: float) -> None:
    """Lemma 3.1 / Remark 3.3 (l = 0) and Table 1 (S₁ = S)."""
    prior = imbalanced_prior()
    rr = randomized_response_matrix(epsilon, 10)
    l_zero = BlockRR(epsilon, 10, sigma=1.2, l=0).fit_to(Prior.over_classes(prior))
    assert l_zero.minority_.size > 0  # a real partition, yet plain RR
    np.testing.assert_allclose(l_zero.transition_matrix(), rr, rtol=1e-12)
    everything_major = BlockRR(epsilon, 10, sigma=0.2, l=4).fit_to(Prior.over_classes(prior))  # small σ: S₂ = ∅
    assert everything_major.minority_.size == 0
    np.testing.assert_allclose(everything_major.transition_matrix(), rr, rtol=1e-12)
    uniform = BlockRR(epsilon, 10, sigma=0.1).fit_to(Prior.over_classes(np.full(10, 0.1)))
    np.testing.assert_allclose(uniform.transition_matrix(), rr, rtol=1e-12)


@pytest.mark.parametrize("epsilon", [0.3, 0.6, 1.0, 2.0])
def test_block_rr_reduces_to_rr_with_prior_in_table_1_configuration(epsilon: float) -> None:
    """S̃ = S̃₁ = S₁ = Y_k, Δ = S̃₁ (l = |S̃₁|): BlockRR is RRWithPrior."""
    rng = np.random.default_rng(int(epsilon * 10))
    priors = [imbalanced_prior()] + [random_prior(rng, 8) for _ in range(5)]
    checked = 0
    for prior in priors:
        rrp = RRWithPrior(epsilon, prior.size).fit_to(Prior.over_classes(prior))
        ranked = np.sort(prior)[::-1]
        k = rrp.k_
        if k < prior.size and ranked[k] == ranked[k - 1]:
            continue  # no threshold separates Y_k from the next class
        # Pick σ whose threshold e^{−1/σ}·max p falls between p_(k+1) and p_(k).
        low = ranked[k] / ranked[0] if k < prior.size else 0.0
        c = 0.5 * (low + ranked[k - 1] / ranked[0]) if k > 1 or low > 0 else 0.5
        sigma = -1.0 / math.log(c) if c < 1 else 1e6
        block = BlockRR(epsilon, prior.size, sigma=sigma, outputs="majority").fit_to(Prior.over_classes(prior))
        assert sorted(block.majority_.tolist()) == sorted(rrp.top_k_.tolist())
        np.testing.assert_allclose(block.transition_matrix(), rrp.transition_matrix(), rtol=1e-12, atol=1e-16)
        checked += 1
    assert checked >= 3


def test_block_rr_parameter_checks() -> None:
    prior = imbalanced_prior()
    with pytest.raises(ValueError):
        BlockRR(1.0, 10, sigma=0.0).fit_to(Prior.over_classes(prior))
    with pytest.raises(ValueError):
        BlockRR(1.0, 10, l=-1).fit_to(Prior.over_classes(prior))
    with pytest.raises(ValueError):
        BlockRR(1.0, 10, outputs="majority", l=2).fit_to(Prior.over_classes(prior))
    with pytest.raises(ValueError):
        BlockRR(1.0, 10).fit_to()
    assert BlockRR(1.0, 10, sigma=1.2, l=99).fit_to(Prior.over_classes(prior)).l_ == 6  # capped at |S̃₁|


# --------------------------------------------------------------------------- specs


def test_specs_round_trip_to_the_same_matrix() -> None:
    prior = imbalanced_prior()
    names = [f"class_{i}" for i in range(10)]
    mechs = [
        RandomizedResponse(1.0, names).fit_to(),
        RRWithPrior(1.0, names).fit_to(Prior.over_classes(prior)),
        BlockRR(1.0, names, sigma=1.2, l=5).fit_to(Prior.over_classes(prior)),
        BlockRR(1.0, names, sigma=0.5, outputs="majority").fit_to(Prior.over_classes(prior)),
    ]
    for mech in mechs:
        spec = mech.to_spec()
        assert spec.classes == names and spec.name == mech.name
        wire = json.loads(spec.model_dump_json())
        again = type(spec).model_validate(wire)
        rebuilt = cast(RandomizedResponse, entry_for_spec(again).from_spec(again))
        np.testing.assert_array_equal(rebuilt.transition_matrix(), mech.transition_matrix())
        assert rebuilt.guarantee.epsilon == 1.0


def test_spec_validation_rejects_inconsistent_fields() -> None:
    with pytest.raises(ValidationError):
        RandomizedResponseSpec(epsilon=1.0, classes=["a", "a"], keep_probability=0.5, other_probability=0.5)
    with pytest.raises(ValidationError):
        RRWithPriorSpec(
            epsilon=1.0, classes=["a", "b"], top_k=[2], keep_probability=1, other_probability=0, outside_probability=1
        )
    with pytest.raises(ValidationError):
        BlockRRSpec(epsilon=1.0, classes=["a", "b", "c"], sigma=1, majority=[0], delta=[1], beta=0.1, gamma=0.1)
    with pytest.raises(ValidationError):
        BlockRRSpec(epsilon=1.0, classes=["a", "b"], sigma=1, majority=[0], delta=[], beta=0.1, gamma=0.1, extra=1)


def test_class_and_label_checks() -> None:
    assert check_classes(3) == ["0", "1", "2"]
    assert check_classes(["cat", "dog"]) == ["cat", "dog"]
    for bad in [1, ["a", "a"], "ab", ["a", ""]]:
        with pytest.raises(ValueError):
            check_classes(bad)
    np.testing.assert_array_equal(check_class_labels(np.array([0.0, 2.0]), 3), [0, 2])
    for bad in [np.array([3]), np.array([-1]), np.array([0.5]), np.array([np.nan])]:
        with pytest.raises(ValueError):
            check_class_labels(bad, 3)


# --------------------------------------------------------------------------- Alg. 2: the split prior


def test_prior_split_is_a_function_of_the_row_count_only() -> None:
    for n in [0, 1, 2, 7, 100, 1001]:
        for fraction in [0.01, 0.1, 0.5, 1.0]:
            for rule in ["prefix", "evenly_spaced"]:
                mask = prior_split_mask(n, fraction, rule)
                assert mask.shape == (n,) and int(mask.sum()) == prior_split_size(n, fraction)
    assert prior_split_size(30, 0.1) == 3 and prior_split_size(5, 0.01) == 1
    assert np.flatnonzero(prior_split_mask(10, 0.3, "evenly_spaced")).tolist() == [0, 3, 6]
    assert np.flatnonzero(prior_split_mask(10, 0.3, "prefix")).tolist() == [0, 1, 2]

    rng = np.random.default_rng(0)
    prior = imbalanced_prior()
    masks = []
    for labels in [rng.choice(10, size=5000, p=prior), np.zeros(5000, dtype=np.int64), np.arange(5000) % 10]:
        split = SplitPriorRandomizer(BlockRR, 1.0, 10, prior_fraction=0.05, sigma=1.2, l=5)
        split.privatize(labels, np.random.default_rng(1))
        masks.append(split.prior_mask_)
    assert all(np.array_equal(masks[0], m) for m in masks)
    np.testing.assert_array_equal(masks[0], prior_split_mask(5000, 0.05, "evenly_spaced"))


def test_split_randomizes_each_row_exactly_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two draws over complementary rows: the first stage's RR table, then the fitted mechanism's."""
    calls: list[tuple[bool, np.ndarray, object]] = []
    original_at, original_where = cat.kernels.rows_at, cat.kernels.rows_where

    def recording_at(row_index, positions, table, rng, out):
        calls.append((True, np.asarray(row_index)[positions].copy(), table))
        return original_at(row_index, positions, table, rng, out)

    def recording_where(row_index, mask, select, table, rng, out):
        calls.append((select, np.asarray(row_index)[np.asarray(mask) == select].copy(), table))
        return original_where(row_index, mask, select, table, rng, out)

    monkeypatch.setattr(cat.kernels, "rows_at", recording_at)
    monkeypatch.setattr(cat.kernels, "rows_where", recording_where)
    rng = np.random.default_rng(2)
    labels = rng.choice(10, size=3000, p=imbalanced_prior())
    for mechanism_cls in [RRWithPrior, BlockRR]:
        calls.clear()
        split = SplitPriorRandomizer(mechanism_cls, 1.0, 10, prior_fraction=0.1)
        out = split.privatize(labels, rng)
        assert out.shape == labels.shape and out.dtype == np.int64
        assert [select for select, _, _ in calls] == [True, False]
        assert calls[0][2] is split.first_stage_.sampler() and calls[1][2] is split.mechanism_.sampler()
        np.testing.assert_array_equal(calls[0][1], labels[split.prior_mask_])
        np.testing.assert_array_equal(calls[1][1], labels[~split.prior_mask_])
        assert calls[0][1].size + calls[1][1].size == labels.size


def test_split_prior_is_post_processing_of_first_stage_outputs_only() -> None:
    rng = np.random.default_rng(4)
    labels = rng.choice(10, size=4000, p=imbalanced_prior())
    split = SplitPriorRandomizer(BlockRR, 1.0, 10, prior_fraction=0.2, sigma=1.2, l=5)
    out = split.privatize(labels, np.random.default_rng(9))
    mask = split.prior_mask_
    np.testing.assert_array_equal(split.prior_, split.first_stage_.estimate_prior(out[mask]))
    np.testing.assert_array_equal(
        split.mechanism_.transition_matrix(), split.mechanism_for_prior(split.prior_).transition_matrix()
    )
    # Changing every label outside the prior split changes neither the first stage nor the prior.
    other = labels.copy()
    other[~mask] = (other[~mask] + 3) % 10
    split2 = SplitPriorRandomizer(BlockRR, 1.0, 10, prior_fraction=0.2, sigma=1.2, l=5)
    out2 = split2.privatize(other, np.random.default_rng(9))
    np.testing.assert_array_equal(out2[mask], out[mask])
    np.testing.assert_array_equal(split2.prior_, split.prior_)


def test_split_release_law_is_eps_dp_exactly_on_a_tiny_data_set() -> None:
    """Enumerate every label vector and every release of n = 3 rows, K = 3 classes."""
    epsilon, k, n = 0.8, 3, 3
    split = SplitPriorRandomizer(BlockRR, epsilon, k, prior_fraction=0.4, sigma=0.6, l=1)
    mask = prior_split_mask(n, 0.4)
    assert 0 < mask.sum() < n
    first = RandomizedResponse(epsilon, k).fit_to().transition_matrix()
    outputs = list(itertools.product(range(k), repeat=n))
    labelings = list(itertools.product(range(k), repeat=n))
    second: dict[tuple, np.ndarray] = {}
    law = np.zeros((len(labelings), len(outputs)))
    for b, o in enumerate(outputs):
        o = np.array(o)
        key = tuple(o[mask])
        if key not in second:
            prior = RandomizedResponse(epsilon, k).fit_to().estimate_prior(o[mask])
            second[key] = split.mechanism_for_prior(prior).transition_matrix()
        for a, y in enumerate(labelings):
            y = np.array(y)
            law[a, b] = np.prod(first[y[mask], o[mask]]) * np.prod(second[key][y[~mask], o[~mask]])
    np.testing.assert_allclose(law.sum(axis=1), 1.0, atol=1e-12)
    assert len({v.tobytes() for v in second.values()}) > 1  # the prior really adapts
    worst = 0.0
    for a, b in itertools.permutations(range(len(labelings)), 2):
        if sum(u != v for u, v in zip(labelings[a], labelings[b])) == 1:
            worst = max(worst, float(np.max(law[a] / law[b])))
    assert worst <= math.exp(epsilon) * (1 + RATIO_RTOL)


def test_split_spec_describes_each_rows_law() -> None:
    rng = np.random.default_rng(6)
    labels = rng.choice(10, size=2000, p=imbalanced_prior())
    for mechanism_cls, params in [(RRWithPrior, {}), (BlockRR, {"sigma": 1.2, "l": 5})]:
        split = SplitPriorRandomizer(mechanism_cls, 2.0, [f"c{i}" for i in range(10)], prior_fraction=0.1, **params)
        split.privatize(labels, rng)
        spec = type(split.to_spec()).model_validate_json(split.to_spec().model_dump_json())
        assert spec.prior_split is not None and spec.prior_split.prior_rows == 200
        assert spec.prior_split.first_stage.epsilon == 2.0
        stage, matrices = release_laws(spec, labels.size)
        np.testing.assert_array_equal(stage.astype(bool), split.prior_mask_)
        np.testing.assert_array_equal(matrices[0], split.mechanism_.transition_matrix())
        np.testing.assert_array_equal(matrices[1], split.first_stage_.transition_matrix())
        assert split.guarantee.epsilon == 2.0
        with pytest.raises(ValueError):
            release_laws(spec, labels.size + 1)
    with pytest.raises(ValueError):
        SplitPriorRandomizer(RandomizedResponse, 1.0, 3).privatize(np.zeros(10, dtype=np.int64), rng)


def test_rr_estimate_prior_is_consistent() -> None:
    rng = np.random.default_rng(8)
    prior = imbalanced_prior()
    rr = RandomizedResponse(1.0, 10).fit_to()
    out = rr.privatize(rng.choice(10, size=200_000, p=prior), rng)
    np.testing.assert_allclose(rr.estimate_prior(out), prior, atol=0.01)
    np.testing.assert_array_equal(rr.estimate_prior(np.array([], dtype=np.int64)), np.full(10, 0.1))


def test_block_rr_auto_l_maximizes_exact_accuracy_over_every_l():
    prior = np.array([5000, 4000, 3000, 2500, 2000, 1500, 1500, 1500, 1500, 1500], float)
    prior /= prior.sum()
    for epsilon in (0.3, 0.6, 2.0, 8.0):
        auto = BlockRR(epsilon, 10).fit_to(Prior.over_classes(prior))
        every = [BlockRR(epsilon, 10, l=l).fit_to(Prior.over_classes(prior)) for l in range(auto.majority_.size + 1)]
        best = max(m.expected_accuracy(Prior.over_classes(prior)) for m in every)
        assert auto.expected_accuracy(Prior.over_classes(prior)) == pytest.approx(best, rel=1e-12)
    # At large ε the minority labels must not lose half their mass to Δ.
    assert np.min(np.diag(BlockRR(8.0, 10).fit_to(Prior.over_classes(prior)).transition_matrix())) > 0.99
