"""Every failure labeldp reports with a stable code: one hierarchy, read top to bottom.

Domain code (the release pipeline, the training engine, the services' use cases) raises
these; the HTTP edge (:mod:`labeldp.service.http_api`) turns any of them into the error
envelope with the class's status. A message never quotes a raw label: row errors name the
row and the public id.

    LabelDPError                 a failure with a stable ``code``
    ├── InvalidInput             422  the content of a request is refused
    │   └── RandomizerError           a release the pipeline cannot serve
    ├── NotFound                 404  no such resource (or not yours to see)
    ├── Conflict                 409  the resource's state forbids it (budget spent, key reused)
    ├── Unauthorized             401  no or a wrong credential
    ├── Forbidden                403  a right credential without the scope this needs
    ├── PayloadTooLarge          413  over a public size limit
    ├── UnsupportedMediaType     415  a body type this route does not read
    ├── Busy                     429  a bounded queue is full: retry later
    └── Unavailable              503  a dependency is down: retry later
        └── StorageError         503  the object store failed (storage_unavailable)
"""

from __future__ import annotations

from typing import Any, ClassVar


class LabelDPError(Exception):
    """A failure with a stable, documented ``code`` and a message safe to show anyone."""

    status_code: ClassVar[int] = 500
    """The HTTP status the edge answers with (the one place a status is chosen: the class)."""

    def __init__(
        self,
        code: str,
        message: str,
        details: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details = details or []
        self.headers = headers


class InvalidInput(LabelDPError):
    status_code = 422


class NotFound(LabelDPError):
    status_code = 404


class Conflict(LabelDPError):
    status_code = 409


class Unauthorized(LabelDPError):
    status_code = 401


class Forbidden(LabelDPError):
    status_code = 403


class PayloadTooLarge(LabelDPError):
    status_code = 413


class UnsupportedMediaType(LabelDPError):
    status_code = 415


class Busy(LabelDPError):
    status_code = 429


class Unavailable(LabelDPError):
    status_code = 503


class RandomizerError(InvalidInput, ValueError):
    """A release the pipeline cannot serve (also a ValueError: research runners report those as cells)."""

    def __str__(self) -> str:
        return self.message


BY_STATUS: dict[int, type[LabelDPError]] = {
    cls.status_code: cls
    for cls in (
        InvalidInput, NotFound, Conflict, Unauthorized, Forbidden, PayloadTooLarge, UnsupportedMediaType, Busy,
        Unavailable,
    )
}


class StorageError(Unavailable):
    """The object store failed (network, throttling, a full disk): transient, retry later.

    Code ``storage_unavailable``; a missing key is :class:`NotFound` instead.
    """

    def __init__(
        self,
        code: str = "storage_unavailable",
        message: str = "the object store is unavailable",
        details: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(code, message, details, headers if headers is not None else {"Retry-After": "1"})
