"""ε₁ rules: Thm 7 with the half cap, the bound rule with the 0.9 cap, and their invariants."""

from __future__ import annotations

import math

import pytest

from labeldp.mechanisms.budget_split import DEFAULT_RULE, RULES, prior_epsilon


def test_thm7_rule_is_sqrt_k_over_n_capped_at_half() -> None:
    assert prior_epsilon("thm7", 100, 10_000, 1.0) == pytest.approx(0.1)
    assert prior_epsilon("thm7", 100, 100, 1.0) == 0.5  # √(k/n) = 1 > ε/2
    assert prior_epsilon("thm7", 16, 0, 2.0) == 1.0  # no labels: the cap


def test_bound_rule_follows_the_bound_to_ninety_percent() -> None:
    assert prior_epsilon("bound", 100, 10_000, 1.0) == pytest.approx(0.1)  # cap not binding: = thm7
    assert prior_epsilon("bound", 16, 1000, 0.1) == pytest.approx(0.09)  # √(k/n) = 0.126 > 0.9ε
    assert prior_epsilon("bound", 16, 1000, 0.2) == pytest.approx(math.sqrt(0.016))
    assert DEFAULT_RULE in RULES
    assert prior_epsilon("default", 16, 1000, 0.1) == prior_epsilon(DEFAULT_RULE, 16, 1000, 0.1)


@pytest.mark.parametrize("rule", RULES)
def test_prior_epsilon_always_leaves_the_randomizer_a_share(rule: str) -> None:
    """0 < ε₁ and ε − ε₁ >= 10% of ε, whatever k, n, ε: the split never spends the whole budget."""
    for k in (1, 16, 1024, 2048):
        for n in (0, 1, 10, 1000, 10**7):
            for eps in (1e-6, 0.05, 1.0, 8.0, 100.0):
                eps1 = prior_epsilon(rule, k, n, eps)
                assert 0 < eps1 and eps - eps1 >= 0.1 * eps * (1 - 1e-12), (rule, k, n, eps, eps1)


def test_prior_epsilon_rejects_bad_input() -> None:
    for args in [("nope", 16, 10, 1.0), ("thm7", 0, 10, 1.0), ("thm7", 16, -1, 1.0), ("thm7", 16, 10, 0.0),
                 ("thm7", 16, 10, math.inf), ("thm7", 2.5, 10, 1.0)]:
        with pytest.raises(ValueError):
            prior_epsilon(*args)  # type: ignore[arg-type]
