"""Ed25519 signatures over the exact message bytes: only the labels party can make one.

The labels party (the sender) holds a private key (``LABELDP_SIGNING_KEY``); the features party
(the receiver) holds only public keys (``LABELDP_SIGNING_PUBLIC_KEYS``), so it can check a
message but never forge one, and a signature it keeps proves what the sender sent. Each public
key has a key id (``kid``: the first 16 hex digits of SHA-256 over the raw public key), carried
in the signature header, so the receiver picks the key by kid and may trust several at once:
a key rotates without downtime (publish the new public key next to the old one, switch the
sender, then drop the old one).

Formats (all ASCII, URL-safe base64 without padding):

- private key setting: ``ed25519-sk:<32-byte seed>``
- public key setting: comma-separated ``ed25519-pk:<32-byte key>`` entries
- header ``X-Labeldp-Signature``: ``ed25519;kid=<kid>;sig=<64-byte signature>``

What is signed is ``DOMAIN_TAG + SHA-256(body)``, so a 10⁸-row message is signed and checked a
chunk at a time; the tag keeps these signatures from being valid for anything else. Call shapes:
``sign(body, key_setting) -> header``, ``verify(body, key_setting, header) -> bool`` and their
file and stream variants.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from pathlib import Path
from typing import Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

PRIVATE_PREFIX = "ed25519-sk:"
PUBLIC_PREFIX = "ed25519-pk:"
HEADER_SCHEME = "ed25519"
DOMAIN_TAG = b"labeldp message signature v1\x00"


class SigningKeyError(ValueError):
    """A signing or public-key setting that is not one this module reads (a configuration error)."""


class SupportsRead(Protocol):
    def read(self, size: int, /) -> bytes: ...


def secrets_of(secret: str) -> list[str]:
    """The comma-separated secrets (or keys) of one setting: several while one is rotated out."""
    return [part.strip() for part in secret.split(",") if part.strip()]


def signing_secret(secret: str) -> str:
    """The key a sender signs with: the first of a comma-separated list."""
    return next(iter(secrets_of(secret)), "")


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _unb64(text: str, size: int) -> bytes:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise SigningKeyError("not URL-safe base64") from None
    if len(raw) != size or _b64(raw) != text:
        raise SigningKeyError(f"not {size} bytes in canonical URL-safe base64")
    return raw


# --------------------------------------------------------------------------- keys


def generate_keypair() -> tuple[str, str]:
    """A fresh ``(private key setting, public key setting)`` from the OS CSPRNG."""
    private = Ed25519PrivateKey.generate()
    return _private_setting(private), _public_setting(private.public_key())


def _private_setting(key: Ed25519PrivateKey) -> str:
    return PRIVATE_PREFIX + _b64(key.private_bytes_raw())


def _public_setting(key: Ed25519PublicKey) -> str:
    return PUBLIC_PREFIX + _b64(key.public_bytes_raw())


def load_private_key(setting: str) -> Ed25519PrivateKey:
    """The private key of a ``ed25519-sk:`` setting (the first entry, if several are listed)."""
    entry = signing_secret(setting)
    if not entry.startswith(PRIVATE_PREFIX):
        raise SigningKeyError(f"a signing key is {PRIVATE_PREFIX}<base64>: generate one with `labeldp keys generate`")
    return Ed25519PrivateKey.from_private_bytes(_unb64(entry.removeprefix(PRIVATE_PREFIX), 32))


def load_public_keys(setting: str) -> dict[str, Ed25519PublicKey]:
    """kid -> public key, for every ``ed25519-pk:`` entry of a comma-separated setting."""
    out: dict[str, Ed25519PublicKey] = {}
    for entry in secrets_of(setting):
        if not entry.startswith(PUBLIC_PREFIX):
            raise SigningKeyError(f"a public key is {PUBLIC_PREFIX}<base64>, as `labeldp keys generate` prints it")
        raw = _unb64(entry.removeprefix(PUBLIC_PREFIX), 32)
        out[_kid(raw)] = Ed25519PublicKey.from_public_bytes(raw)
    return out


def _kid(raw_public: bytes) -> str:
    return hashlib.sha256(raw_public).hexdigest()[:16]


def public_key_of(private_setting: str) -> str:
    """The public key setting that matches a private key setting."""
    return _public_setting(load_private_key(private_setting).public_key())


def key_id(public_or_private_setting: str) -> str:
    """The kid of a public key setting (or of a private key's public half)."""
    entry = signing_secret(public_or_private_setting)
    if entry.startswith(PRIVATE_PREFIX):
        entry = public_key_of(entry)
    (kid,) = load_public_keys(entry)
    return kid


def header_key_id(header: str | None) -> str | None:
    """The kid a signature header names, or None for a header that is not ours."""
    parsed = _parse_header(header)
    return parsed[0] if parsed else None


# --------------------------------------------------------------------------- sign


def _digest_stream(stream: SupportsRead, chunk: int) -> bytes:
    sha = hashlib.sha256()
    for block in iter(lambda: stream.read(chunk), b""):
        sha.update(block)
    return sha.digest()


def _sign_digest(digest: bytes, key_setting: str) -> str:
    private = load_private_key(key_setting)
    kid = _kid(private.public_key().public_bytes_raw())
    return f"{HEADER_SCHEME};kid={kid};sig={_b64(private.sign(DOMAIN_TAG + digest))}"


def sign(body: bytes, key_setting: str) -> str:
    """Header value ``ed25519;kid=…;sig=…`` for ``body``, signed with the private key ``key_setting``."""
    return _sign_digest(hashlib.sha256(body).digest(), key_setting)


def sign_file(path: Path, key_setting: str, chunk: int = 1 << 20) -> str:
    """:func:`sign` of a file's bytes, read in chunks (a 10⁸-row message is never held whole)."""
    with open(path, "rb") as f:
        return sign_stream(f, key_setting, chunk)


def sign_stream(stream: SupportsRead, key_setting: str, chunk: int = 1 << 20) -> str:
    """:func:`sign` of what a binary stream holds (a file, a stored object), read in chunks."""
    return _sign_digest(_digest_stream(stream, chunk), key_setting)


# --------------------------------------------------------------------------- verify


def _parse_header(header: str | None) -> tuple[str, bytes] | None:
    if not header or not header.isascii():
        return None
    parts = header.strip().split(";")
    if len(parts) != 3 or parts[0] != HEADER_SCHEME:
        return None
    if not parts[1].startswith("kid=") or not parts[2].startswith("sig="):
        return None
    try:
        return parts[1].removeprefix("kid="), _unb64(parts[2].removeprefix("sig="), 64)
    except SigningKeyError:
        return None


def _verify_digest(digest: bytes, key_setting: str, header: str | None) -> bool:
    keys = load_public_keys(key_setting)  # a misconfigured setting raises, never "just" refuses
    parsed = _parse_header(header)
    if parsed is None:
        return False
    kid, signature = parsed
    key = keys.get(kid)
    if key is None:  # a key this receiver does not trust (or no longer does)
        return False
    try:
        key.verify(signature, DOMAIN_TAG + digest)
    except InvalidSignature:
        return False
    return True


def verify(body: bytes, key_setting: str, header: str | None) -> bool:
    """Whether ``header`` is a signature of ``body`` by one of the public keys of ``key_setting``.

    The key is picked by the header's kid; an unknown kid, a malformed or non-ASCII header is a
    wrong signature (False), never an error.
    """
    return _verify_digest(hashlib.sha256(body).digest(), key_setting, header)


def verify_file(path: Path, key_setting: str, header: str | None, chunk: int = 1 << 20) -> bool:
    """:func:`verify` for a file's bytes, read in chunks."""
    with open(path, "rb") as f:
        return verify_stream(f, key_setting, header, chunk)


def verify_stream(stream: SupportsRead, key_setting: str, header: str | None, chunk: int = 1 << 20) -> bool:
    """:func:`verify` for what a binary stream holds, read in chunks."""
    return _verify_digest(_digest_stream(stream, chunk), key_setting, header)
