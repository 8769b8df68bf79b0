"""Request bodies streamed to disk: an upload's size never becomes the service's memory."""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import Request


@dataclass(frozen=True)
class SpooledBody:
    path: Path
    sha256: str
    size: int

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


async def spool_body(request: Request, directory: Path) -> SpooledBody:
    """Write the body to a private temp file while hashing it (the hash keys idempotency)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"body-{secrets.token_hex(12)}"
    h = hashlib.sha256()
    size = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            async for chunk in request.stream():
                if chunk:
                    f.write(chunk)
                    h.update(chunk)
                    size += len(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return SpooledBody(path, h.hexdigest(), size)
