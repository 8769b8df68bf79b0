"""Exact discrete Laplace noise from raw words: no float on the way (Canonne, Kamath & Steinke 2020).

The ε₁ priors add two-sided geometric ("discrete Laplace") noise, P(z) ∝ e^{−γ|z|}. numpy's
``Generator.geometric`` inverts a float uniform whose smallest value is 2⁻⁵³: its support is
finite, so a count shifted past that support's edge has probability 0 under one input and
positive under the other — (ε₁, ≈2⁻⁵³)-DP, not pure ε₁. Here every step is a comparison of
integers drawn from the caller's secure stream, so the law is exactly the discrete Laplace of
a rational rate γ' = s/2^m and its support is all of Z.

The rate. γ' = ⌊γ·2^m⌋/2^m ≤ γ with m chosen so s = ⌊γ·2^m⌋ has 25 bits (m ≤ 62): the noise
is at most a relative 2⁻²⁴ wider than asked, and never narrower, so the guarantee holds for
the asked γ. ``rate_from_epsilon`` takes the float ε one ulp down first: ε is the float of a
µε charge (a decimal), rounded to nearest, so the ulp below lies under the charged value.

The algorithms (CKS 2020, Algorithms 1 and 2), with t = 2^m:

* Bernoulli(e^{−x}), x ∈ [0, 1]: K ← 1; while Bernoulli(x/K): K ← K + 1; 1 iff K is odd
  (P = Σ_k (−x)^k/k! = e^{−x}). Bernoulli(x/K) is Bernoulli(x) ∧ Bernoulli(1/K), each an
  exact integer comparison: x = U/t (``bits(m) < U``) or 1 (always), and 1/K
  (``uniform_below(K) == 0``), so K needs no bound and no product overflows.
* Lap_Z(t/s): U uniform on [0, t); reject unless Bernoulli(e^{−U/t}); V ← the number of
  Bernoulli(e^{−1}) successes before the first failure; X = U + t·V (exactly geometric with
  ratio e^{−1/t}); Y = ⌊X/s⌋ (geometric with ratio e^{−s/t}); a sign bit B; reject B = 1,
  Y = 0 (−0 would double P(0)); return (1 − 2B)·Y. Expected words per sample: about 10.

Words. ``bits(b)`` is the top b bits of one word; ``uniform_below(n)`` takes the top
⌈log₂ n⌉ bits of a word and redraws while they reach n (exact, no modulo bias); a coin is
the top bit. ``discrete_laplace_reference`` is the algorithm over Python integers and a word
source (unbounded: the tests drive it down any path); ``discrete_laplace`` is its numba twin
over chunks of ``sampling.raw_words`` — identical outputs for the same words (tests), with
Y = V·⌊t/s⌋ + ⌊(V·(t mod s) + U)/s⌋ so nothing overflows int64 below V = 2^24 (the chance
of V ≥ 2^24 is e^{−2^24}; it raises rather than wrap).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numba
import numpy as np

from labeldp.mechanisms.sampling import CHUNK, raw_words

RATE_BITS = 25
"""Bits of s in γ' = s/2^m: γ' is γ rounded down by a relative 2⁻²⁴ at most."""
MAX_SHIFT = 62
"""Largest m: U = bits(m) of one word, (t mod s)·V below 2^63."""
MAX_PERIODS = 1 << 24
"""V at which the numba kernel raises instead of overflowing (probability e^{−2^24})."""
_WORDS_PER_SAMPLE = 12
"""Words handed to the kernel per draw still to make (a draw takes about 10 on average)."""


def rate_from_epsilon(epsilon: float, sensitivity: int = 1) -> tuple[int, int]:
    """(s, m) of the largest rate s/2^m ≤ ε/sensitivity with 25 significant bits (m ≤ 62).

    ε is taken one ulp down (``math.nextafter``), so the rate stays below the decimal µε the
    release charged even where the float ε rounded up."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("epsilon must be a finite number > 0")
    if sensitivity < 1:
        raise ValueError("sensitivity must be a positive integer")
    gamma = Fraction(math.nextafter(float(epsilon), 0.0)) / int(sensitivity)
    return rate_from_fraction(gamma)


def rate_from_fraction(gamma: Fraction) -> tuple[int, int]:
    """(s, m): s/2^m ≤ γ, s with ``RATE_BITS`` bits where m ≤ ``MAX_SHIFT`` allows, s ≥ 1."""
    if gamma <= 0:
        raise ValueError("the rate must be > 0")
    # floor(log2 γ) from the exact rational: bit lengths give it to within one, then correct.
    e = gamma.numerator.bit_length() - gamma.denominator.bit_length()
    if Fraction(2) ** e > gamma:
        e -= 1
    m = min(max(RATE_BITS - 1 - e, 0), MAX_SHIFT)
    s = (gamma.numerator << m) // gamma.denominator
    if s < 1:
        raise ValueError(f"rate {float(gamma):.3g} below 2^-{MAX_SHIFT}: too small for exact noise")
    return s, m


# --------------------------------------------------------------------------- the reference


class WordSource:
    """Raw 64-bit words one at a time (a numpy Generator's bit generator, or a scripted list)."""

    def __init__(self, next_word: Callable[[], int]) -> None:
        self.next_word = next_word

    @classmethod
    def from_generator(cls, rng: np.random.Generator, chunk: int = 256) -> WordSource:
        buffer: list[int] = []

        def next_word() -> int:
            if not buffer:
                buffer.extend(int(w) for w in raw_words(rng, chunk)[::-1])
            return buffer.pop()

        return cls(next_word)

    def bits(self, b: int) -> int:
        """The top b bits of one word (0 ≤ b ≤ 63; b = 0 reads nothing)."""
        return self.next_word() >> (64 - b) if b else 0

    def uniform_below(self, n: int) -> int:
        """Uniform on [0, n), exact: the top ⌈log₂ n⌉ bits of words until they fall below n."""
        if n == 1:
            return 0
        b = (n - 1).bit_length()
        while True:
            x = self.bits(b)
            if x < n:
                return x

    def coin(self) -> int:
        """The top bit of one word."""
        return self.bits(1)


def bernoulli_exp_minus(source: WordSource, u: int, m: int) -> bool:
    """Bernoulli(e^{−u/2^m}) for 0 ≤ u ≤ 2^m, exactly (CKS Algorithm 1)."""
    k = 1
    while True:
        # Bernoulli(x/K) = Bernoulli(x) ∧ Bernoulli(1/K), x = u/2^m
        if u < (1 << m) and not source.bits(m) < u:
            break
        if source.uniform_below(k) != 0:
            break
        k += 1
    return k % 2 == 1


def discrete_laplace_reference(source: WordSource, s: int, m: int) -> int:
    """One draw of P(z) ∝ e^{−(s/2^m)|z|} (CKS Algorithm 2), over Python integers."""
    t = 1 << m
    while True:
        u = source.bits(m)
        if not bernoulli_exp_minus(source, u, m):
            continue
        v = 0
        while bernoulli_exp_minus(source, t, m):  # Bernoulli(e^{-1})
            v += 1
        y = (u + t * v) // s
        b = source.coin()
        if b == 1 and y == 0:
            continue
        return -y if b else y


# --------------------------------------------------------------------------- the kernel


@numba.njit(cache=True, inline="always")
def _next(words, pos):
    """(word, pos + 1), or (0, −1) once the chunk is used up."""
    if pos < 0 or pos >= words.size:
        return np.uint64(0), -1
    return words[pos], pos + 1


@numba.njit(cache=True, inline="always")
def _bits(words, pos, m):
    """(the top m bits of the next word, pos); m = 0 reads nothing, like ``WordSource.bits``."""
    if m == 0:
        return np.int64(0), pos
    w, pos = _next(words, pos)
    return np.int64(w >> np.uint64(64 - m)), pos


@numba.njit(cache=True, inline="always")
def _uniform_below(words, pos, n):
    """The kernel twin of ``WordSource.uniform_below``: (x, pos); pos = −1 when out of words."""
    if n == 1:
        return np.int64(0), pos
    bits = 0
    rest = n - 1
    while rest > 0:
        bits += 1
        rest >>= 1
    while True:
        x, pos = _bits(words, pos, bits)
        if pos < 0 or x < n:
            return x, pos


@numba.njit(cache=True, inline="always")
def _bernoulli_exp_minus(words, pos, u, m):
    """The kernel twin of ``bernoulli_exp_minus``: (outcome, pos); pos = −1 when out of words."""
    t = np.int64(1) << m
    k = np.int64(1)
    while True:
        if u < t:
            x, pos = _bits(words, pos, m)
            if pos < 0:
                return False, pos
            if not x < u:
                break
        x, pos = _uniform_below(words, pos, k)
        if pos < 0:
            return False, pos
        if x != 0:
            break
        k += 1
    return k % 2 == 1, pos


@numba.njit(cache=True, boundscheck=False)
def _discrete_laplace_kernel(words, s, m, out, start):
    """Fill out[start:] while the words last; returns (next index, 1 if V reached MAX_PERIODS)."""
    t = np.int64(1) << m
    q = t // s
    r = t % s
    pos = 0
    for i in range(start, out.size):
        while True:
            u, pos = _bits(words, pos, m)
            if pos < 0:
                return i, 0
            ok, pos = _bernoulli_exp_minus(words, pos, u, m)
            if pos < 0:
                return i, 0
            if not ok:
                continue
            v = np.int64(0)
            while True:
                a, pos = _bernoulli_exp_minus(words, pos, t, m)
                if pos < 0:
                    return i, 0
                if not a:
                    break
                v += 1
                if v >= MAX_PERIODS:
                    return i, 1
            y = v * q + (v * r + u) // s
            b, pos = _bits(words, pos, 1)
            if pos < 0:
                return i, 0
            if b == 1 and y == 0:
                continue
            out[i] = -y if b == 1 else y
            break
    return out.size, 0


def discrete_laplace(s: int, m: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` exact draws of P(z) ∝ e^{−(s/2^m)|z|} (int64) from the raw words of ``rng``.

    The words go to the kernel in chunks; a draw the chunk cannot finish is dropped with the
    rest of the chunk and restarted on fresh words (draws never depend on where chunks end,
    only on their own words, so the law is unchanged).
    """
    if not (1 <= s and 0 <= m <= MAX_SHIFT):
        raise ValueError("need s >= 1 and 0 <= m <= 62")
    out = np.empty(int(size), dtype=np.int64)
    done = 0
    while done < out.size:
        words = raw_words(rng, _WORDS_PER_SAMPLE * min(out.size - done, CHUNK) + 64)
        done, overflow = _discrete_laplace_kernel(words, np.int64(s), np.int64(m), out, np.int64(done))
        if overflow:  # pragma: no cover - probability e^{-2^24}
            raise OverflowError("a geometric run of 2^24 periods: refusing to wrap")
    return out
