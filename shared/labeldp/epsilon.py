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
import re
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation
from typing import Annotated

from pydantic import AfterValidator, StrictFloat, StrictInt

from labeldp.errors import InvalidInput

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


MAX_EPSILON_MICRO = 1_000 * MICRO  # no meaningful guarantee is left beyond ε = 1000
# ASCII digits only, no surrounding blanks: ``str.isdigit``/``\d`` would also take "١" (Arabic-Indic)
# or "１" (full-width), which Decimal() reads as 1 — a budget must be spelled one way only.
_DECIMAL_TEXT = re.compile(r"\+?([0-9]{1,12}(\.[0-9]{0,12})?|\.[0-9]{1,12})([eE][+-]?[0-9]{1,3})?", re.ASCII)


_EXPRESSION = re.compile(r"[0-9.)]\s*[-+*/^]\s*[0-9.(]")
"""Arithmetic between numbers (``0.1+0.2``, ``1/2``) but not an exponent's sign (``1e-3``)."""


def exact_micro(value: object, *, allow_zero: bool = False) -> int:
    """A requested ε as exact micro-ε; refuses rather than rounds (docs/architecture.md, invariant 3).

    Takes an int, a float (its shortest repr) or a plain ASCII decimal string ("0.5", "1e-3";
    no blanks, no non-ASCII digits). Booleans, values that
    are not a multiple of 10⁻⁶, ≤ 0 (or < 0 with ``allow_zero``) and values above
    ``MAX_EPSILON_MICRO`` raise :class:`InvalidEpsilon`. A string is checked against a
    bounded pattern before any arithmetic, so parsing is O(length) and no exponent can
    make it slow.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InvalidEpsilon("epsilon must be a number or a decimal string")
    if isinstance(value, int):
        if not (0 <= value <= MAX_EPSILON_MICRO // MICRO):
            raise InvalidEpsilon(f"epsilon must be between 0 and {MAX_EPSILON_MICRO // MICRO}")
        micro = value * MICRO
    else:
        text = repr(value) if isinstance(value, float) else value
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidEpsilon("epsilon must be finite")
        if len(text) > 40 or not _DECIMAL_TEXT.fullmatch(text):
            if _EXPRESSION.search(text):
                raise InvalidEpsilon(
                    "epsilon is an expression, which is never evaluated: send its value as a JSON number "
                    "(e.g. 0.3, not \"0.1+0.2\")"
                )
            raise InvalidEpsilon(
                "epsilon must be a JSON number or a plain ASCII decimal string such as \"0.5\" or \"1e-3\""
                " (no blanks, no other digits)"
            )
        d = Decimal(text)
        if d > MAX_EPSILON_MICRO // MICRO:
            raise InvalidEpsilon(f"epsilon must be at most {MAX_EPSILON_MICRO // MICRO}")
        scaled = d * MICRO
        if scaled != scaled.to_integral_value():
            raise InvalidEpsilon("epsilon must be a multiple of 0.000001 (it is never rounded)")
        micro = int(scaled)
    if micro < 0 or (micro == 0 and not allow_zero):
        raise InvalidEpsilon("epsilon must be greater than 0" if not allow_zero else "epsilon must be >= 0")
    return micro


def _ascii_text(value: float | int | str) -> float | int | str:
    if isinstance(value, str) and not value.isascii():
        # Refused while the body is parsed: a lone surrogate ("\\ud800") would otherwise break the
        # idempotency fingerprint (a 500) before exact_micro ever saw it.
        raise InvalidInput("invalid_epsilon", "epsilon must be a JSON number or a plain ASCII decimal string")
    return value


EpsilonIn = Annotated[StrictFloat | StrictInt | str, AfterValidator(_ascii_text)]
"""A requested ε in a request body: a JSON number or ASCII text, checked in full by :func:`exact_micro`."""


DELTA_UNIT = Decimal("1e-15")
MAX_DELTA = 0.5


def _delta_units(delta: float, rounding: str) -> int:
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not math.isfinite(delta):
        raise InvalidEpsilon("delta must be a finite number")
    if not (0 <= delta <= MAX_DELTA):
        raise InvalidEpsilon(f"delta must be between 0 and {MAX_DELTA}")
    return int((Decimal(repr(float(delta))) / DELTA_UNIT).to_integral_value(rounding=rounding))


def delta_units_ceil(delta: float) -> int:
    """δ → integer units of 10⁻¹⁵, rounded up: a δ charge never under-counts."""
    return _delta_units(delta, ROUND_CEILING)


def delta_units_floor(delta: float) -> int:
    """δ → integer units of 10⁻¹⁵, rounded down: a δ budget never grows in storage."""
    return _delta_units(delta, ROUND_FLOOR)


def from_delta_units(units: int) -> float:
    return float(Decimal(units) * DELTA_UNIT)


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
    (docs/decisions/0005-prior-budget-split.md; ``rule="thm7"`` caps at half instead). ε₁ is
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
