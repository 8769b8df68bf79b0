"""The release stream: ChaCha20's keystream as numpy's bit generator, word for word."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from labeldp.mechanisms.sampling import raw_words
from labeldp.randomness import ChaCha20Stream, secure_generator, seeded_generator

KEY = bytes(range(32))


def keystream(key: bytes, words: int, block: int = 0) -> np.ndarray:
    """cryptography's (OpenSSL's) ChaCha20 keystream from ``block`` on, zero nonce, as LE uint64 words."""
    nonce = block.to_bytes(8, "little") + bytes(8)
    data = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor().update(bytes(8 * words))
    return np.frombuffer(data, dtype="<u8")


def test_raw_words_are_chacha20_keystream_across_every_read_size() -> None:
    """Reads of every size (one word, a partial buffer, bulk blocks through OpenSSL, the rest by the
    compiled block function) continue one keystream with no word skipped or repeated."""
    expected = keystream(KEY, 330_000)
    stream = ChaCha20Stream(KEY)
    pos = 0
    for size in (3, 1000, 5, 129, 7, 33_000, 1, 8, 64 * 17, 2000, 31, 40_000, 200_000):  # 1.6 MB: two zero pieces
        assert np.array_equal(stream.random_raw(size), expected[pos : pos + size])
        pos += size
        assert stream.random_raw() == int(expected[pos])
        pos += 1
        assert stream.words_used == pos


def test_numpy_samplers_read_the_same_stream_through_the_compiled_bit_generator() -> None:
    """``Generator.random`` is (word >> 11)·2^-53 of the next keystream word, the kernels' raw words
    continue after it, and every numpy sampler a release uses runs on the stream."""
    expected = keystream(KEY, 64)
    rng = np.random.Generator(ChaCha20Stream(KEY))  # type: ignore[arg-type]
    doubles = rng.random(5)
    assert np.array_equal(doubles, (expected[:5] >> np.uint64(11)).astype(np.float64) * 2.0**-53)
    assert np.array_equal(raw_words(rng, 4), expected[5:9])
    assert rng.integers(0, 10, 100).max() <= 9
    assert sorted(rng.permutation(50).tolist()) == list(range(50))
    assert rng.geometric(0.5, 10).min() >= 1
    assert np.isfinite(rng.standard_normal(10)).all()


def test_secure_generators_get_fresh_os_keys_and_seeded_ones_repeat() -> None:
    a, b = secure_generator(), secure_generator()
    assert not np.array_equal(raw_words(a, 8), raw_words(b, 8))
    assert isinstance(a.bit_generator, ChaCha20Stream)
    assert np.array_equal(raw_words(seeded_generator(5), 100), raw_words(seeded_generator(5), 100))
    assert not np.array_equal(raw_words(seeded_generator(5), 8), raw_words(seeded_generator(6), 8))
    assert "key" in repr(a.bit_generator) and KEY.hex() not in repr(ChaCha20Stream(KEY))


def test_the_stream_is_not_the_old_pcg_and_refuses_bad_keys() -> None:
    with pytest.raises(ValueError):
        ChaCha20Stream(os.urandom(16))
    with pytest.raises(ValueError):
        seeded_generator(-1)
    pcg = np.random.Generator(np.random.PCG64DXSM(np.random.SeedSequence(0)))
    assert not isinstance(pcg.bit_generator, ChaCha20Stream)
    with pytest.raises(TypeError):  # a key must never travel with a pickled generator
        pickle.dumps(ChaCha20Stream(KEY))


def test_the_block_function_and_openssl_agree_far_into_the_stream() -> None:
    """Near block 2^32 − 20: bulk reads that stay below the 32-bit counter boundary come from
    OpenSSL, a read across it from the compiled block function alone (OpenSSL's counter is word 12
    only); both give the keystream of the same blocks, and the crossing read continues it."""
    start = (1 << 32) - 20
    below = ChaCha20Stream(KEY)
    below._state[1] = start  # the next block to generate (test-only reach into the state)
    across = ChaCha20Stream(KEY)
    across._state[1] = start
    first = below.random_raw(8 * 16)  # 16 blocks: OpenSSL
    assert np.array_equal(first, keystream(KEY, 8 * 16, block=start))
    whole = across.random_raw(8 * 40)  # 40 blocks, across 2^32: the block function
    assert np.array_equal(whole[: 8 * 16], first)
    assert np.array_equal(below.random_raw(8 * 24), whole[8 * 16 :])
