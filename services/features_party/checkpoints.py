"""Where a training's checkpoint lives (the model, optimizer and selection state after an epoch), and its stage.

A worker that dies leaves its training to another worker, which resumes after the last
checkpoint (features_party.leases, docs/architecture.md "Training jobs"). The checkpoint is
the object ``checkpoints/<training id>.pt`` of the object store every API and worker shares
(``LABELDP_STORAGE_URL``: a local folder on one host, ``s3://…`` across hosts), so the worker
that resumes need not be on the host that wrote it. An object is written whole or not at
all (:meth:`labeldp.storage.ObjectStore.open_output_stream`): a reader sees the previous
checkpoint or this one, never half. These functions are the only place that knows it.

A streaming training's stage (its release joined with the feature table, partitioned
Parquet: :mod:`labeldp.learning.staging`) lies beside it under ``stages/<training id>/``, so
the worker that resumes trains the stage the first one wrote; it goes when the checkpoint
goes (:func:`remove`).
"""

from __future__ import annotations

import io
import logging
from typing import Any

import torch

from labeldp.errors import NotFound
from labeldp.learning.staging import remove_stage
from labeldp.storage import ObjectStore

log = logging.getLogger("labeldp.features")

CHECKPOINTS_DIR = "checkpoints"
SUFFIX = ".pt"
STAGES_DIR = "stages"


def stage_key(training_id: str) -> str:
    """Where a streaming training's stage lies in the store (:func:`labeldp.learning.streamed.stage_prefix`
    adds what else decides its content)."""
    return f"{STAGES_DIR}/{training_id}"


def _key(training_id: str) -> str:
    return f"{CHECKPOINTS_DIR}/{training_id}{SUFFIX}"


def save(objects: ObjectStore, training_id: str, state: dict[str, Any]) -> None:
    """Write the state as one object (replacing the previous checkpoint only once complete)."""
    with objects.open_output_stream(_key(training_id)) as out:
        torch.save(state, out)


def load(objects: ObjectStore, training_id: str) -> dict[str, Any] | None:
    """The last checkpoint of a training, or None (none written, or unreadable: start over)."""
    try:
        data = objects.get_bytes(_key(training_id))
    except NotFound:
        return None
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
    except Exception as exc:  # a checkpoint we cannot read is no reason to fail the training
        log.warning("checkpoint of %s unreadable (%s); starting over", training_id, type(exc).__name__)
        return None
    return state if isinstance(state, dict) else None


def remove(objects: ObjectStore, training_id: str) -> None:
    """Once the training is over (succeeded, failed or cancelled) its checkpoint and its stage have no use."""
    objects.delete(_key(training_id))
    remove_stage(objects, stage_key(training_id))


def stored(objects: ObjectStore) -> list[str]:
    """The trainings that have a checkpoint (a worker's sweep removes those of finished trainings)."""
    names = (key.removeprefix(CHECKPOINTS_DIR + "/") for key in objects.list(CHECKPOINTS_DIR))
    found = {name.removesuffix(SUFFIX) for name in names if name.endswith(SUFFIX) and "/" not in name}
    found |= {key.split("/")[1] for key in objects.list(STAGES_DIR)}
    return sorted(found)
