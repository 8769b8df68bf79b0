"""HMAC-SHA256 over the exact message bytes: how the inbox knows who sent them."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path
from typing import Protocol


def sign(body: bytes, secret: str) -> str:
    """Header value ``sha256=<hex>`` for ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def sign_file(path: Path, secret: str, chunk: int = 1 << 20) -> str:
    """:func:`sign` of a file's bytes, read in chunks (a 10⁸-row message is never held whole)."""
    with open(path, "rb") as f:
        return sign_stream(f, secret, chunk)


def sign_stream(stream: SupportsRead, secret: str, chunk: int = 1 << 20) -> str:
    """:func:`sign` of what a binary stream holds (a file, a stored object), read in chunks."""
    mac = hmac.new(secret.encode(), digestmod=hashlib.sha256)
    for block in iter(lambda: stream.read(chunk), b""):
        mac.update(block)
    return "sha256=" + mac.hexdigest()


class SupportsRead(Protocol):
    def read(self, size: int, /) -> bytes: ...


def secrets_of(secret: str) -> list[str]:
    """The comma-separated secrets (or keys) of one setting: several while one is rotated out."""
    return [part.strip() for part in secret.split(",") if part.strip()]


def _matches(signatures: list[str], header: str | None) -> bool:
    # Every candidate is compared, as bytes: the time taken does not tell which one matched,
    # and a header with non-ASCII characters is a wrong signature, never an error.
    if not header:
        return False
    offered = header.strip().encode("utf-8", "surrogateescape")
    matched = False
    for signature in signatures:
        matched |= hmac.compare_digest(signature.encode("ascii"), offered)
    return matched


def verify(body: bytes, secret: str, header: str | None) -> bool:
    """Constant-time check of a signature header against ``body``.

    ``secret`` may list several comma-separated secrets (rotation: the sender signs with
    the first, the receiver accepts any).
    """
    return _matches([sign(body, one) for one in secrets_of(secret)], header)


def verify_file(path: Path, secret: str, header: str | None) -> bool:
    """:func:`verify` for a file's bytes, read in chunks."""
    return _matches([sign_file(path, one) for one in secrets_of(secret)], header)


def signing_secret(secret: str) -> str:
    """The secret a sender signs with: the first of a comma-separated list."""
    return next(iter(secrets_of(secret)), "")
