import math

import pytest

from labeldp.epsilon import (
    MICRO,
    InvalidEpsilon,
    exact_micro,
    from_micro,
    split_budget,
    to_micro_ceil,
    to_micro_floor,
)


def test_decimal_sums_fit_their_budget():
    # In floats 0.1 + 0.2 > 0.3; in micro-ε they are exactly equal.
    assert 0.1 + 0.2 > 0.3
    assert to_micro_ceil(0.1) + to_micro_ceil(0.2) == to_micro_ceil(0.3)
    assert to_micro_ceil("0.1") == 100_000


def test_charges_round_up_and_calibration_rounds_down():
    assert to_micro_ceil("0.0000001") == 1
    assert to_micro_floor("0.0000019") == 1
    assert to_micro_ceil(1 / 3) == 333_334
    assert to_micro_floor(1 / 3) == 333_333


@pytest.mark.parametrize("bad", [0, -1, "0", float("nan"), float("inf"), "abc", -0.5])
def test_non_positive_or_non_finite_epsilon_is_rejected(bad):
    with pytest.raises(InvalidEpsilon):
        exact_micro(bad)


def test_default_split_is_sqrt_k_over_n_leaving_the_randomizer_a_tenth():
    eps1, eps2 = split_budget(1 * MICRO, support_size=100, n_labels=10_000)
    assert eps1 == math.floor(math.sqrt(100 / 10_000) * MICRO)
    assert eps1 + eps2 == MICRO
    eps1, eps2 = split_budget(100_000, support_size=100, n_labels=100)  # sqrt(k/n) = 1 > 0.9 ε
    assert eps1 == 90_000 and eps2 == 10_000
    eps1, eps2 = split_budget(100_000, support_size=100, n_labels=100, rule="thm7")  # Thm 7: half
    assert eps1 == 50_000 and eps2 == 50_000


def test_explicit_prior_epsilon_must_leave_randomizer_budget():
    assert split_budget(MICRO, 10, 10, prior_micro=0) == (0, MICRO)
    with pytest.raises(InvalidEpsilon):
        split_budget(MICRO, 10, 10, prior_micro=MICRO)
    assert from_micro(1_500_000) == 1.5


@pytest.mark.parametrize("text", [" 1 ", "1 ", "\t1", "1\n", "١", "١.٥", "１", "1\u00a0", "+ 1", "0x1", "1_0"])
def test_epsilon_text_must_be_plain_ascii_decimal(text):
    # Decimal() reads " 1 ", "١" (Arabic-Indic) and "１" (full-width) as 1: each must be refused instead.
    with pytest.raises(InvalidEpsilon, match="plain ASCII decimal"):
        exact_micro(text)


@pytest.mark.parametrize(("text", "micro"), [("1", MICRO), ("0.5", 500_000), ("1e-3", 1_000), ("+2", 2 * MICRO)])
def test_plain_ascii_decimal_strings_keep_working(text, micro):
    assert exact_micro(text) == micro
    assert exact_micro(1.0) == exact_micro(1) == MICRO


@pytest.mark.parametrize("text", ["0.1+0.2", "1/2", "2*0.5", "1 - 0.5"])
def test_an_expression_is_refused_with_a_message_that_says_so(text: str) -> None:
    with pytest.raises(InvalidEpsilon, match="expression"):
        exact_micro(text)


@pytest.mark.parametrize("text", ["1e-3", "1E+2", "+0.5"])
def test_an_exponent_is_not_an_expression(text: str) -> None:
    assert exact_micro(text) > 0
