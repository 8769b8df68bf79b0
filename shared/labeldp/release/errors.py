"""The one error the release pipeline raises for a request it cannot serve."""

from __future__ import annotations


class RandomizerError(ValueError):
    """A request the randomizer cannot serve; ``code`` is the API error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
