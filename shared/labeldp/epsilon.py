"""Privacy-budget arithmetic in integer micro-ε.

Floats cannot hold a budget: 0.1 + 0.2 > 0.3 in binary floating point, so a
label set with budget 0.3 would refuse two releases of 0.1 and 0.2. Every
budget, charge and spent total is therefore an integer number of micro-ε
(1 ε = 1 000 000 µε). A requested ε is converted from its *decimal* text and
rounded **up** (a charge never under-counts); noise is then calibrated to the
charged value or less, never more.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation

MICRO = 1_000_000


class InvalidEpsilon(ValueError):
    """ε that is not a finite, strictly positive number."""


def _decimal(value: float | int | str | Decimal) -> Decimal:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidEpsilon("epsilon must be finite")
        # repr() gives the shortest decimal that round-trips: 0.1 -> "0.1".
        value = repr(value)
    try:
        d = Decimal(value)
    except (InvalidOperation, TypeError) as exc:
        raise InvalidEpsilon("epsilon must be a number") from exc
    if not d.is_finite():
        raise InvalidEpsilon("epsilon must be finite")
    return d


def to_micro_ceil(value: float | int | str | Decimal) -> int:
    """ε → micro-ε, rounded up (use for charges and requested ε)."""
    d = _decimal(value)
    return int((d * MICRO).to_integral_value(rounding=ROUND_CEILING))


def to_micro_floor(value: float | int | str | Decimal) -> int:
    """ε → micro-ε, rounded down (use for what noise may be calibrated to)."""
    d = _decimal(value)
    return int((d * MICRO).to_integral_value(rounding=ROUND_FLOOR))


def positive_micro(value: float | int | str | Decimal) -> int:
    """A requested ε as micro-ε; raises InvalidEpsilon unless it is > 0."""
    micro = to_micro_ceil(value)
    if micro <= 0:
        raise InvalidEpsilon("epsilon must be greater than 0")
    return micro


def from_micro(micro: int) -> float:
    """micro-ε → ε as a float, for calibrating noise and for display."""
    return micro / MICRO


def split_budget(
    total_micro: int,
    support_size: int,
    n_labels: int,
    prior_micro: int | None = None,
    rule: str = "default",
) -> tuple[int, int]:
    """Split a release's ε into (ε_prior, ε_randomizer), both in micro-ε.

    Default ε₁ follows ``labeldp.mechanisms.budget_split.prior_epsilon``: √(k/n)
    (Ghazi et al. 2023, Thm 7) capped so the randomizer keeps at least 10% of ε
    (bench/results/prior_rules.md; ``rule="thm7"`` caps at half instead). ε₁ is
    rounded down and ε₂ is what remains, so ε₁ + ε₂ equals the charge exactly. A
    caller-chosen ``prior_micro`` (0 for a public prior) must leave ε₂ > 0.
    """
    from labeldp.mechanisms.budget_split import prior_epsilon

    if total_micro <= 0:
        raise InvalidEpsilon("epsilon must be greater than 0")
    if prior_micro is None:
        if total_micro < 2:
            prior_micro = 0
        else:
            eps1 = prior_epsilon(rule, support_size, n_labels, from_micro(total_micro))
            prior_micro = max(min(int(math.floor(eps1 * MICRO)), total_micro - 1), 1)
    if prior_micro < 0 or prior_micro >= total_micro:
        raise InvalidEpsilon("epsilon_prior must be >= 0 and smaller than epsilon")
    return prior_micro, total_micro - prior_micro
