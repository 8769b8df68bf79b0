"""Where a training's checkpoint lives: the model, optimizer and selection state after an epoch.

A worker that dies leaves its training to another worker, which resumes after the last
checkpoint (features_party.leases, docs/architecture.md "Training jobs"). For now the
checkpoint is a file under the features data directory (``checkpoints/<training id>.pt``),
which every API and worker must share, as they share the feature tables and models;
these three functions are the only place that knows it, so moving checkpoints to object
storage changes this module alone.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger("labeldp.features")

CHECKPOINTS_DIR = "checkpoints"


def _path(data_dir: Path, training_id: str) -> Path:
    return Path(data_dir) / CHECKPOINTS_DIR / f"{training_id}.pt"


def save(data_dir: Path, training_id: str, state: dict[str, Any]) -> None:
    """Write the state atomically: a reader sees the previous checkpoint or this one, never half."""
    path = _path(data_dir, training_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    torch.save(state, partial)
    os.replace(partial, path)


def load(data_dir: Path, training_id: str) -> dict[str, Any] | None:
    """The last checkpoint of a training, or None (none written, or unreadable: start over)."""
    path = _path(data_dir, training_id)
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # a checkpoint we cannot read is no reason to fail the training
        log.warning("checkpoint of %s unreadable (%s); starting over", training_id, type(exc).__name__)
        return None
    return state if isinstance(state, dict) else None


def remove(data_dir: Path, training_id: str) -> None:
    """Once the training is over (succeeded, failed or cancelled) its checkpoint has no use."""
    _path(data_dir, training_id).unlink(missing_ok=True)


def stored(data_dir: Path) -> list[str]:
    """The trainings that have a checkpoint (a worker's sweep removes those of finished trainings)."""
    folder = Path(data_dir) / CHECKPOINTS_DIR
    return sorted(p.stem for p in folder.glob("*.pt")) if folder.is_dir() else []
