"""HMAC-SHA256 over the exact message bytes: how the inbox knows who sent them."""

from __future__ import annotations

import hashlib
import hmac


def sign(body: bytes, secret: str) -> str:
    """Header value ``sha256=<hex>`` for ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(body: bytes, secret: str, header: str | None) -> bool:
    """Constant-time check of a signature header against ``body``."""
    if not header:
        return False
    return hmac.compare_digest(sign(body, secret), header.strip())
