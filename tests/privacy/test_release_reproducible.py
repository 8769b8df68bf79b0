"""A seed-fixed release is byte-identical across refactors of the release pipeline.

Every registry entry × prior kind (the whole-release pairs of release_cases.py: none, the
Laplace histogram, noised labels, the label-independent split, a public prior) is released
with a fixed seed on its small label set and on the set tiled to 1 000+ rows; the digest
covers the privatized labels' bytes and the JSON of the mechanism spec, the prior and the
accounting — what the message carries. The seed keys the release stream itself
(``labeldp.randomness.seeded_generator``: the ChaCha20 keystream every release draws from,
under a key derived from the seed), so the pin covers the stream as well as the pipeline.

The digests in release_digests.json were regenerated when the stream moved from PCG64DXSM to
ChaCha20 and the ε₁ priors' noise to the exact integer sampler (every draw changed, on
purpose); regenerate them only for such a deliberate change of the draws:
``python -m tests.privacy.test_release_reproducible``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from labeldp.randomness import seeded_generator

from .release_cases import release_pairs
from .whole_release import ReleasePair

DIGESTS = Path(__file__).with_name("release_digests.json")
PAIRS = release_pairs()
TILES = 50


def _digest(pair: ReleasePair, labels: np.ndarray, seed: int) -> str:
    out = pair.release(labels, seeded_generator(seed))
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(out.labels, dtype=np.float64).tobytes())
    h.update(out.mechanism.model_dump_json().encode())
    h.update(b"none" if out.prior is None else out.prior.model_dump_json().encode())
    h.update(out.accounting.model_dump_json().encode())
    return h.hexdigest()


def digests(pair: ReleasePair) -> list[str]:
    return [_digest(pair, pair.labels, 0), _digest(pair, np.tile(pair.labels, TILES), 1)]


@pytest.mark.parametrize("pair", PAIRS, ids=str)
def test_a_seed_fixed_release_is_unchanged(pair: ReleasePair) -> None:
    expected = json.loads(DIGESTS.read_text())
    assert digests(pair) == expected[pair.name]


def test_the_pins_are_keyed_by_the_seed() -> None:
    """Meaningful pins: the same seed gives the same digest, another seed another one."""
    pair = PAIRS[0]
    assert _digest(pair, pair.labels, 0) == _digest(pair, pair.labels, 0)
    assert _digest(pair, pair.labels, 0) != _digest(pair, pair.labels, 2)


def test_every_registry_entry_is_pinned() -> None:
    from labeldp.mechanisms.registry import NAMES

    assert {p.mechanism for p in PAIRS} == set(NAMES)
    assert set(json.loads(DIGESTS.read_text())) == {p.name for p in PAIRS}


if __name__ == "__main__":  # pragma: no cover - regenerates the pinned digests
    DIGESTS.write_text(json.dumps({p.name: digests(p) for p in PAIRS}, indent=1) + "\n")
