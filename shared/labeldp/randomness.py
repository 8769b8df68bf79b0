"""Unpredictable randomness for privatization.

Every generator is seeded from the operating system's CSPRNG (``secrets``), so an
observer who knows the code cannot predict the noise. Generators are created per
release, never at import time, so a forked worker never shares a stream with its
parent (docs/architecture.md, privacy invariant 6).
"""

from __future__ import annotations

import secrets

import numpy as np


def secure_generator() -> np.random.Generator:
    """A fresh numpy Generator seeded with 256 bits from the OS CSPRNG."""
    seed = np.random.SeedSequence(secrets.randbits(256))
    return np.random.Generator(np.random.PCG64DXSM(seed))
