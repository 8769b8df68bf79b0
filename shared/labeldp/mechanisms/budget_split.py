"""How much of a release's ε the private prior gets (ε₁); the randomizer keeps ε₂ = ε − ε₁.

Ghazi et al. (2023, Thm 7) bound the excess loss of the two-step randomizer by
B·(ε₁ + √(k/n) + k/(ε₁·n)) for a k-point prior grid and n labels, minimized at
ε₁ = √(k/n) — valid while √(k/n) < ε. Rules (pure functions of public k, n, ε):

* ``"thm7"``: min(√(k/n), ε/2) — the paper's choice, capped at half of ε.
* ``"bound"``: min(√(k/n), 0.9·ε) — the same bound followed past the half-way cap.
  When √(k/n) > ε/2 (small n·ε²), ε₁ + k/(ε₁·n) is still decreasing at ε/2: the
  prior's noise costs more than the budget moved away from the randomizer, whose
  gain is only O(ε₂²) there. 10% of ε is kept for the randomizer. Where the cap
  does not bind the two rules coincide.
* ``"default"``: ``"bound"``.

Decided in docs/decisions/0005-prior-budget-split.md.
"""

from __future__ import annotations

import math

from labeldp.mechanisms.checks import check_epsilon

# Share of ε the randomizer always keeps under the "bound" rule.
RANDOMIZER_MIN_SHARE = 0.1
RULES = ("thm7", "bound", "default")
DEFAULT_RULE = "bound"


def prior_epsilon(rule: str, k: int, n: int, epsilon: float) -> float:
    """ε₁ for a k-point prior grid, n labels and total ε under ``rule`` (see module doc); 0 < ε₁ < ε."""
    epsilon = check_epsilon(epsilon)
    if int(k) != k or k < 1:
        raise ValueError("k must be an integer >= 1")
    if int(n) != n or n < 0:
        raise ValueError("n must be an integer >= 0")
    if rule == "default":
        rule = DEFAULT_RULE
    theorem = math.sqrt(k / n) if n > 0 else math.inf
    if rule == "thm7":
        return min(theorem, epsilon / 2)
    if rule == "bound":
        return min(theorem, (1.0 - RANDOMIZER_MIN_SHARE) * epsilon)
    raise ValueError(f"rule must be one of {', '.join(RULES)}")
