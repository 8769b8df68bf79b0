"""What a mechanism promises, stated next to the code that earns it.

Every mechanism exposes ``guarantee``: a value object a caller can log, compare
or put in an accounting record. It says which ε (and δ) holds, under which
adjacency, and — for additive-noise mechanisms — the sensitivity the noise was
calibrated to, so a reviewer can check the calibration without reading code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class PrivacyGuarantee:
    """An (ε, δ)-DP claim under ``adjacency`` (default: one label replaced)."""

    epsilon: float
    delta: float = 0.0
    adjacency: str = "replace-one-label"
    sensitivity: float | None = None
    statement: str = ""

    def __post_init__(self) -> None:
        if not (self.epsilon >= 0 and not math.isnan(self.epsilon)):
            raise ValueError("epsilon must be >= 0")
        if not (0.0 <= self.delta <= 1.0):
            raise ValueError("delta must lie in [0, 1]")
        if self.sensitivity is not None and not (self.sensitivity >= 0 and math.isfinite(self.sensitivity)):
            raise ValueError("sensitivity must be a finite number >= 0")
