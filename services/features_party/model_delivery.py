"""A model's file and its batch predictions over HTTP: ``GET /v1/models/{id}/export`` and
``POST /v1/models/{id}/predictions`` (docs/architecture.md, "Training at scale").

The routes stay thin; this module turns the file tools (:mod:`labeldp.learning.export`,
:mod:`labeldp.learning.batch_predict`) into the service's answers: a model file that is
gone is a 409, an input the tools refuse is a 422 with their stable code. Models and
their exports are objects of the shared object store: an export is built once, as
``exports/<model id>.<suffix>`` (a model never changes once written, so neither does its
export), and streamed from there by any API replica; predictions are written to a file under
``<data dir>/spool`` (this process's scratch) that the route streams back and then removes.
"""

from __future__ import annotations

import contextlib
import secrets
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from features_party import feature_tables, store
from features_party.models import ModelCache, get_model
from labeldp.errors import Conflict, InvalidInput, LabelDPError, StorageError
from labeldp.learning.batch_predict import PredictionError, predict_parquet
from labeldp.learning.export import SUFFIXES, ExportError, export_as
from labeldp.learning.persistence import TrainedModel, load_model
from labeldp.storage import ObjectStore

EXPORTS_DIR = "exports"
PARQUET = "application/vnd.apache.parquet"
PARQUET_TYPES = {PARQUET, "application/x-parquet", "application/octet-stream"}
"""Content types a Parquet upload may be sent with."""


def _unavailable() -> LabelDPError:
    return Conflict("model_unavailable", "the model's file cannot be read on this server")


def export_filename(model_id: str, fmt: str) -> str:
    """The file name a download is offered under (``Content-Disposition``)."""
    return f"{model_id}{SUFFIXES[fmt]}"


def export_key(model_id: str, fmt: str) -> str:
    return f"{EXPORTS_DIR}/{export_filename(model_id, fmt)}"


def exported_object(
    session_factory: sessionmaker[Session], objects: ObjectStore, scratch: Path, model_id: str, fmt: str
) -> str:
    """The key of the model as ``fmt`` (ONNX or TorchScript with the sidecar embedded), built once and stored.

    404 ``model_not_found``; 409 ``model_unavailable`` when its object is gone or unreadable;
    422 ``model_not_exportable`` when the exporter refuses the network. The exporter writes a
    local file (``scratch``), which is then stored: concurrent first requests each store the
    same bytes under the same key, and either write is whole.
    """
    with session_factory() as session:
        row = get_model(session, model_id)
    key = export_key(row.model_id, fmt)
    if objects.exists(key):
        return key
    try:  # a fresh CPU copy: export moves the network to the CPU, which a cached CUDA model must not see
        model = load_model(objects.get_bytes(row.path))
    except StorageError:
        raise
    except Exception:  # missing, truncated or foreign file: torch.load's failures are many
        raise _unavailable() from None
    scratch.mkdir(parents=True, exist_ok=True)
    tmp = scratch / f"export-{secrets.token_hex(8)}{SUFFIXES[fmt]}"
    try:
        export_as(model, fmt, tmp, sidecar_file=False)
        objects.put_file(key, tmp)
    except ExportError as exc:
        raise InvalidInput(exc.code, str(exc)) from None
    finally:
        tmp.unlink(missing_ok=True)
    return key


def _cached_model(cache: ModelCache, row: store.Model) -> TrainedModel:
    try:
        return cache.get(row)
    except Exception:
        raise _unavailable() from None


def predict_upload(
    session_factory: sessionmaker[Session],
    objects: ObjectStore,
    cache: ModelCache,
    model_id: str,
    upload: Path,
    feature_table_id: str | None,
    id_column: str,
) -> Path:
    """Predict the spooled Parquet ``upload`` into a new file under the spool folder; the caller removes it.

    With ``feature_table_id`` the upload holds ids (column ``id_column``) looked up in that
    table; without it, feature rows. 422 with the tools' code (``invalid_parquet``,
    ``unknown_ids``, ``missing_columns``, ``missing_id_column``, ``invalid_feature_values``).
    """
    with session_factory() as session:
        row = get_model(session, model_id)
        table = feature_tables.get_feature_table_by_id(session, feature_table_id) if feature_table_id else None
    model = _cached_model(cache, row)
    output = upload.with_name(f"predictions-{secrets.token_hex(12)}.parquet")
    with contextlib.ExitStack() as files:
        feature_table = files.enter_context(objects.open_input_file(table.path)) if table is not None else None
        try:
            predict_parquet(
                model, upload, output, id_column=id_column, feature_table=feature_table,
                table_id_column=table.id_column if table is not None else None,
            )
        except PredictionError as exc:
            raise InvalidInput(exc.code, str(exc), exc.details) from None
    return output
