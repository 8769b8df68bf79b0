"""A release's privacy accounting, composed from the guarantees of the parts that ran.

The parts of a release (a private prior estimator, the randomizer) each state what they
earned as a :class:`~labeldp.mechanisms.guarantee.PrivacyGuarantee`. The accounting that
travels in the message and is charged to the ledger is their basic composition — ε and
δ add up — checked against the budget each part was allotted, so a part calibrated to
more than its share is an error, not a silently larger release (docs/architecture.md,
invariant 3).
"""

from __future__ import annotations

import math

from labeldp.epsilon import MICRO
from labeldp.mechanisms.guarantee import PrivacyGuarantee
from labeldp.schema import EpsilonPart, PrivacyAccounting


class AccountingError(RuntimeError):
    """A part's guarantee does not fit the ε it was allotted: a bug, never a user error."""


def compose(parts: list[tuple[str, int, PrivacyGuarantee]]) -> PrivacyAccounting:
    """Basic composition of ``(name, allotted µε, guarantee)`` parts into the release's accounting.

    Each guarantee's ε must be at most its allotment (noise calibrated to the charged
    value or less); the accounting records the allotments (what is charged) and the sum
    of the guarantees' δ.
    """
    if not parts:
        raise AccountingError("a release has at least one part")
    delta = 0.0
    for name, allotted, g in parts:
        if allotted < 0 or g.epsilon * MICRO > allotted * (1 + 1e-12) + 1e-9:
            raise AccountingError(f"{name}: guarantee ε {g.epsilon} exceeds its allotment {allotted / MICRO}")
        if g.adjacency != "replace-one-label":
            raise AccountingError(f"{name}: adjacency {g.adjacency!r} does not compose with replace-one-label")
        delta += g.delta
    if not math.isfinite(delta) or delta >= 1:
        raise AccountingError("composed δ must be below 1")
    total = sum(allotted for _, allotted, _ in parts)
    return PrivacyAccounting(
        parts=[EpsilonPart(name=name, epsilon_micro=allotted) for name, allotted, _ in parts],
        total_epsilon_micro=total,
        delta=delta,
    )
