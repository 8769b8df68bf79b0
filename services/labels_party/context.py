"""What every labels-party domain function needs: the catalogue, the data directory, the settings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from labeldp.service.idempotency import IdempotencyKeys
from labeldp.service.settings import Settings

from .store import IDEMPOTENCY_KEYS


@dataclass(frozen=True)
class LabelsContext:
    sessions: sessionmaker[Session]
    data_dir: Path
    settings: Settings

    @property
    def idempotency(self) -> IdempotencyKeys:
        return IdempotencyKeys(IDEMPOTENCY_KEYS, self.sessions, self.settings.idempotency_lease_seconds)

    def label_set_dir(self, label_set_id: str) -> Path:
        return self.data_dir / "label_sets" / label_set_id

    @property
    def messages_dir(self) -> Path:
        return self.data_dir / "messages"

    @property
    def spool_dir(self) -> Path:
        return self.data_dir / "spool"
