"""Unpredictable randomness for privatization: a ChaCha20 keystream as numpy's bit generator.

Every release draws all of its noise from one stream: the ChaCha20 keystream (Bernstein 2008;
the block function of RFC 8439, 20 rounds) under a fresh 256-bit key from ``os.urandom``, read
as little-endian 64-bit words. ChaCha20 is a cryptographic stream cipher, so an observer who
sees any number of outputs (the features party sees every privatized label) learns nothing
about the words still to come — unlike PCG64DXSM, whose state follows from a few outputs. Google's DP
libraries and OpenDP draw from a CSPRNG for the same reason.

``ChaCha20Stream`` is a numpy bit generator: ``np.random.Generator(ChaCha20Stream(key))`` has
every numpy sampler (``integers``, ``random``, ``permutation``, …) and ``random_raw`` for the
raw words the kernels read (``labeldp.mechanisms.sampling.raw_words``). The block function is
compiled by numba and reached by numpy through a C ``bitgen_t`` whose function pointers are
numba ``cfunc``s — no Python call per word. Layout: constants, key, a 64-bit block counter
(words 12–13), a zero 64-bit nonce (words 14–15); block n is RFC 8439's keystream block at
counter n with a zero nonce for every n < 2^32 (2^35 words, 256 GiB a release), which the tests
compare byte for byte with ``cryptography``'s ChaCha20.

Generators are created per release, never at import time, so a forked worker never shares a
stream with its parent (docs/architecture.md, privacy invariant 6). ``seeded_generator`` is
the same stream under a key derived from an integer seed: reproducible, for tests and
benchmarks only — no service calls it.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import sys
import threading

import numba
import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from numba import types

KEY_BYTES = 32
BUFFER_WORDS = 32
"""Words generated per refill (4 ChaCha20 blocks of 8 words)."""
_BULK_BLOCKS = 16
"""From this many whole blocks on, ``random_raw`` asks OpenSSL for them."""
_LITTLE_ENDIAN = sys.byteorder == "little"  # OpenSSL's bytes are the words in place only there
_HEADER = 8  # st[0] position in the buffer, st[1] next block, st[2:6] key, st[6] nonce, st[7] unused
_STATE_WORDS = _HEADER + BUFFER_WORDS
_MASK = np.uint64(0xFFFFFFFF)
_SIGMA = np.array([0x61707865, 0x3320646E, 0x79622D32, 0x6B206574], dtype=np.uint64)  # "expand 32-byte k"


@numba.njit(cache=True, inline="always")
def _rotl(x: np.uint64, n: int) -> np.uint64:
    return ((x << np.uint64(n)) | (x >> np.uint64(32 - n))) & _MASK


@numba.njit(cache=True, inline="always")
def _quarter(x: np.ndarray, a: int, b: int, c: int, d: int) -> None:
    x[a] = (x[a] + x[b]) & _MASK
    x[d] = _rotl(x[d] ^ x[a], 16)
    x[c] = (x[c] + x[d]) & _MASK
    x[b] = _rotl(x[b] ^ x[c], 12)
    x[a] = (x[a] + x[b]) & _MASK
    x[d] = _rotl(x[d] ^ x[a], 8)
    x[c] = (x[c] + x[d]) & _MASK
    x[b] = _rotl(x[b] ^ x[c], 7)


@numba.njit(cache=True, boundscheck=False)
def _refill(st: np.ndarray) -> None:
    """Fill st's buffer with the next BUFFER_WORDS keystream words; st[0] = 0, st[1] advances."""
    inp = np.empty(16, np.uint64)
    x = np.empty(16, np.uint64)
    for i in range(4):
        inp[i] = _SIGMA[i]
    for i in range(4):
        inp[4 + 2 * i] = st[2 + i] & _MASK
        inp[5 + 2 * i] = st[2 + i] >> np.uint64(32)
    inp[14] = st[6] & _MASK
    inp[15] = st[6] >> np.uint64(32)
    for blk in range(BUFFER_WORDS // 8):
        counter = st[1]
        inp[12] = counter & _MASK
        inp[13] = counter >> np.uint64(32)
        for i in range(16):
            x[i] = inp[i]
        for _ in range(10):
            _quarter(x, 0, 4, 8, 12)
            _quarter(x, 1, 5, 9, 13)
            _quarter(x, 2, 6, 10, 14)
            _quarter(x, 3, 7, 11, 15)
            _quarter(x, 0, 5, 10, 15)
            _quarter(x, 1, 6, 11, 12)
            _quarter(x, 2, 7, 8, 13)
            _quarter(x, 3, 4, 9, 14)
        for i in range(8):
            lo = (x[2 * i] + inp[2 * i]) & _MASK
            hi = (x[2 * i + 1] + inp[2 * i + 1]) & _MASK
            st[_HEADER + 8 * blk + i] = lo | (hi << np.uint64(32))
        st[1] = counter + np.uint64(1)
    st[0] = np.uint64(0)


@numba.njit(cache=True, inline="always")
def _next_word(st: np.ndarray) -> np.uint64:
    if st[0] >= BUFFER_WORDS:
        _refill(st)
    w = st[_HEADER + st[0]]
    st[0] += np.uint64(1)
    return w


@numba.njit(cache=True, boundscheck=False)
def _fill(st: np.ndarray, out: np.ndarray) -> None:
    for i in range(out.size):
        out[i] = _next_word(st)


def _state_of(ptr: ctypes.c_void_p) -> np.ndarray:  # pragma: no cover - compiled by numba, traced through the cfuncs
    return numba.carray(ptr, (_STATE_WORDS,), np.uint64)


_state_view = numba.njit(cache=True, inline="always")(_state_of)


@numba.cfunc(types.uint64(types.voidptr), cache=True)
def _next_uint64(ptr: ctypes.c_void_p) -> np.uint64:
    return _next_word(_state_view(ptr))


@numba.cfunc(types.uint32(types.voidptr), cache=True)
def _next_uint32(ptr: ctypes.c_void_p) -> np.uint32:
    return np.uint32(_next_word(_state_view(ptr)) >> np.uint64(32))


@numba.cfunc(types.float64(types.voidptr), cache=True)
def _next_double(ptr: ctypes.c_void_p) -> float:
    return np.float64(_next_word(_state_view(ptr)) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


_ZERO_BYTES = 1 << 20
_ZEROS = memoryview(bytes(_ZERO_BYTES))
"""What ``random_raw`` encrypts, a MiB at a time: the keystream itself."""


class _BitGen(ctypes.Structure):
    """numpy's ``bitgen_t`` (numpy/random/bitgen.h)."""

    _fields_ = [
        ("state", ctypes.c_void_p),
        ("next_uint64", ctypes.c_void_p),
        ("next_uint32", ctypes.c_void_p),
        ("next_double", ctypes.c_void_p),
        ("next_raw", ctypes.c_void_p),
    ]


_CAPSULE_NAME = b"BitGenerator"
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class ChaCha20Stream:
    """A numpy bit generator over the ChaCha20 keystream of a 256-bit key (see the module doc).

    Holds the state array the compiled functions read and write; ``np.random.Generator`` keeps
    a reference to this object, so the state lives as long as any generator over it.
    """

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError("a ChaCha20 key is 32 bytes")
        self._state = np.zeros(_STATE_WORDS, dtype=np.uint64)
        self._state[0] = BUFFER_WORDS  # empty buffer: the first word refills from block 0
        self._state[2:6] = np.frombuffer(key, dtype="<u8")
        self.lock = threading.Lock()
        self._bitgen = _BitGen(
            self._state.ctypes.data,
            _next_uint64.address,
            _next_uint32.address,
            _next_double.address,
            _next_uint64.address,
        )
        self.capsule = _capsule_new(ctypes.addressof(self._bitgen), _CAPSULE_NAME, None)

    def random_raw(self, size: int | None = None) -> np.ndarray | int:
        """The next ``size`` keystream words (uint64), or one as an int when ``size`` is None.

        The words left in the buffer first, then whole blocks from OpenSSL's ChaCha20 (through
        ``cryptography``, SIMD: several times the compiled block function's speed), then the
        rest from the block function: the same keystream, word for word, either way.
        """
        out = np.empty(1 if size is None else int(size), dtype=np.uint64)
        with self.lock:
            st = self._state
            left = min(BUFFER_WORDS - int(st[0]), out.size)
            _fill(st, out[:left])
            blocks = (out.size - left) // 8
            counter = int(st[1])
            no_carry = (counter & 0xFFFFFFFF) + blocks <= 1 << 32  # OpenSSL's counter is word 12 alone
            if _LITTLE_ENDIAN and blocks >= _BULK_BLOCKS and no_carry:
                start = left + 8 * blocks
                nonce = counter.to_bytes(8, "little") + int(st[6]).to_bytes(8, "little")
                cipher = Cipher(algorithms.ChaCha20(st[2:6].tobytes(), nonce), mode=None).encryptor()
                target = out[left:start].view(np.uint8)  # the LE keystream bytes are the words in place
                for at in range(0, target.size, _ZERO_BYTES):
                    piece = target[at : at + _ZERO_BYTES]
                    cipher.update_into(_ZEROS[: piece.size], piece.data)
                st[1] = np.uint64(counter + blocks)
                left = start
            _fill(st, out[left:])
        return int(out[0]) if size is None else out

    @property
    def words_used(self) -> int:
        """Keystream words handed out so far (block counter and buffer position)."""
        return int(self._state[1]) * 8 - (BUFFER_WORDS - int(self._state[0]))

    def __repr__(self) -> str:
        return "ChaCha20Stream(<key hidden>)"


def secure_generator() -> np.random.Generator:
    """A fresh numpy Generator over the ChaCha20 keystream of a 256-bit key from ``os.urandom``."""
    return np.random.Generator(ChaCha20Stream(os.urandom(KEY_BYTES)))  # type: ignore[arg-type]


def seeded_generator(seed: int) -> np.random.Generator:
    """The same stream under the key SHA-256("labeldp.randomness.seeded" ‖ seed): reproducible
    releases for tests and benchmarks. Never for a real release (the key is guessable)."""
    if seed < 0:
        raise ValueError("seed must be >= 0")
    key = hashlib.sha256(b"labeldp.randomness.seeded" + int(seed).to_bytes(32, "little")).digest()
    return np.random.Generator(ChaCha20Stream(key))  # type: ignore[arg-type]


def pcg64_generator() -> np.random.Generator:
    """The generator releases used before the ChaCha20 stream (PCG64DXSM, 256 OS bits): for the
    speed comparison in bench/bench_privatize_speed.py only — not a CSPRNG."""
    return np.random.Generator(np.random.PCG64DXSM(np.random.SeedSequence(int.from_bytes(os.urandom(32), "little"))))
