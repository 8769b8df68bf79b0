"""Batch prediction: a Parquet file of ids or of feature rows in, a Parquet file of predictions out.

Rows are read and predicted one Parquet batch at a time and written as they come, so
the input may be larger than memory (of a feature table that ids are looked up in, the
id column and the model's feature columns are read whole, as ``POST /v1/models/{id}/predict``
reads its table). Output columns: the id column when the
input has one, then ``prediction`` (label units, after debiasing and shrinkage) for a
regressor, or ``prediction`` (class name) and ``p_<class>`` per class for a classifier.

With a feature table the input holds ids, looked up in that table; without one it holds
the model's feature columns (every one of them; values may be null). What is wrong with
an input is a :class:`PredictionError` with a stable ``code`` (the CLI prints it, the route
answers it as a 422) whose message gives counts and column names, never ids or values.

Entry points: ``labeldp predict MODEL.pt IN.parquet OUT.parquet [--id-column id]
[--feature-table TABLE.parquet]`` and ``POST /v1/models/{id}/predictions``
(docs/architecture.md, "Training at scale"); ``python -m labeldp.learning.batch_predict``
is an alias of the former.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from labeldp.learning.persistence import TrainedClassifier, TrainedModel
from labeldp.parquet_batches import open_for_batches

BATCH_ROWS = 65_536
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OSError)


class PredictionError(ValueError):
    """An input batch prediction refuses; ``code`` is stable, ``details`` hold counts and column names."""

    code = "invalid_input"

    def __init__(self, message: str, details: list[dict[str, Any]] | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.details = details or []
        if code is not None:
            self.code = code


class UnknownIds(PredictionError):
    """Some input ids have no row in the feature table (the message carries a count, never ids' data)."""

    code = "unknown_ids"


def _missing_ids(source: pq.ParquetFile, id_column: str, table_ids: pa.Array, batch_rows: int) -> int:
    """How many ids of the whole input are not in ``table_ids`` (the id column alone is read)."""
    missing = 0
    for batch in source.iter_batches(batch_size=batch_rows, columns=[id_column]):
        present = pc.is_in(batch.column(0).cast(pa.string()), value_set=table_ids)
        missing += len(present) - int(pc.sum(pc.cast(present, pa.int64())).as_py() or 0)
    return missing


def _model_columns(model: TrainedModel) -> list[str]:
    pre = model.preprocessor_
    return [*pre.numeric_columns, *pre.categorical_columns]


def check_feature_values(model: TrainedModel, features: pa.Table) -> None:
    """Refuse NaN and ±infinity in the model's numeric columns: the same rule for every route.

    A null is a missing value, imputed as at training (the training mean; a missing or unseen
    category is the "unknown" category, index 0): docs/api-guide.md "Predictions".
    """
    for name in model.preprocessor_.numeric_columns:
        if name not in features.column_names:
            continue
        column = features.column(name)
        if not pa.types.is_floating(column.type):
            continue
        finite = pc.is_finite(column)  # null stays null: a missing value, not a bad one
        if pc.any(pc.invert(finite)).as_py():
            raise PredictionError(f"column {name!r} holds NaN or an infinite value", [{"column": name}],
                                  code="invalid_feature_values")


def predict_columns(model: TrainedModel, features: pa.Table) -> dict[str, pa.Array]:
    """The prediction columns for ``features`` (as :func:`features_party.models.predict` answers).

    Raises :class:`PredictionError` ``invalid_feature_values`` for NaN or infinite inputs, or when
    a value so far outside the training range makes the prediction itself infinite.
    """
    check_feature_values(model, features)
    if isinstance(model, TrainedClassifier):
        probabilities = model.predict_proba(features)
        names = [model.classes_[i] for i in probabilities.argmax(axis=1)]
        columns: dict[str, pa.Array] = {"prediction": pa.array(names, pa.string())}
        for j, name in enumerate(model.classes_):
            columns[f"p_{name}"] = pa.array(probabilities[:, j], pa.float64())
        return columns
    predictions = model.predict(features)
    if not np.isfinite(predictions).all():
        raise PredictionError("a feature value is too far outside the training range to predict",
                              code="invalid_feature_values")
    return {"prediction": pa.array(predictions, pa.float64())}


def predict_parquet(
    model: TrainedModel,
    source: str | Path,
    destination: str | Path,
    *,
    id_column: str | None = "id",
    feature_table: str | Path | pa.NativeFile | None = None,
    table_id_column: str | None = None,
    batch_rows: int = BATCH_ROWS,
) -> int:
    """Predict every row of ``source`` into ``destination`` (written atomically); returns the row count.

    ``table_id_column``: the feature table's id column (default ``id_column``). Raises
    :class:`PredictionError` for an input it cannot predict, and leaves no output then.
    """
    try:
        source_file = open_for_batches(source)
    except _ARROW_ERRORS:
        raise PredictionError("the input is not a Parquet file", code="invalid_parquet") from None
    names = source_file.schema_arrow.names
    if id_column is not None and id_column not in names:
        if feature_table is not None:
            raise PredictionError(f"the input has no id column {id_column!r}", [{"column": id_column}],
                                  code="missing_id_column")
        id_column = None  # feature rows without ids: the output has predictions only
    lookup: pa.Table | None = None
    table_ids: pa.Array = pa.array([], pa.string())
    if feature_table is not None:
        if id_column is None:
            raise PredictionError("looking ids up in a feature table needs an id column", code="missing_id_column")
        key = table_id_column or id_column
        stored = pq.read_schema(feature_table).names
        if key not in stored:
            raise PredictionError(f"the feature table has no id column {key!r}", [{"column": key}],
                                  code="missing_id_column")
        # the id column and the model's features only: a table may hold columns the model never used
        lookup = pq.read_table(feature_table, columns=[key, *(c for c in _model_columns(model) if c in stored)])
        table_ids = lookup.column(key).combine_chunks().cast(pa.string())
        lookup = lookup.drop_columns([key])
    else:
        absent = [c for c in _model_columns(model) if c not in names]
        if absent:
            raise PredictionError(f"the input lacks {len(absent)} feature columns of the model",
                                  [{"column": c} for c in absent[:50]], code="missing_columns")
    destination = Path(destination)
    tmp = destination.with_name(destination.name + ".tmp")
    writer: pq.ParquetWriter | None = None
    rows = 0
    try:
        for batch in source_file.iter_batches(batch_size=batch_rows):
            part = pa.Table.from_batches([batch])
            ids = part.column(id_column) if id_column is not None else None
            if lookup is not None and ids is not None:
                positions = pc.index_in(ids.cast(pa.string()), value_set=table_ids)
                if positions.null_count:
                    assert id_column is not None
                    count = _missing_ids(source_file, id_column, table_ids, batch_rows)
                    raise UnknownIds(f"{count} ids of the input are not in the feature table", [{"count": count}])
                features = lookup.take(positions)
            else:
                features = part.drop_columns([id_column]) if id_column is not None else part
            try:
                columns = predict_columns(model, features)
            except _ARROW_ERRORS:
                raise PredictionError("a feature column does not hold values of the model's kind",
                                      code="invalid_feature_values") from None
            out = pa.table({**({id_column: ids} if ids is not None and id_column is not None else {}), **columns})
            if writer is None:
                writer = pq.ParquetWriter(tmp, out.schema)
            writer.write_table(out)
            rows += out.num_rows
        if writer is None:  # an empty input still gets a file with the right columns
            empty = pa.Table.from_batches([], schema=source_file.schema_arrow)
            features = empty.drop_columns([id_column]) if id_column is not None and lookup is None else empty
            if lookup is not None:
                features = lookup.slice(0, 0)
            writer = pq.ParquetWriter(tmp, pa.table(predict_columns(model, features)).schema)
        writer.close()
        writer = None
        os.replace(tmp, destination)
    except _ARROW_ERRORS as exc:
        if isinstance(exc, OSError) and not isinstance(exc, pa.ArrowException):
            raise  # the disk, not the input
        raise PredictionError("the input is not a readable Parquet file", code="invalid_parquet") from None
    finally:
        if writer is not None:
            writer.close()
        tmp.unlink(missing_ok=True)
    return rows


def predict_file(
    model_path: str | Path,
    source: str | Path,
    destination: str | Path,
    *,
    id_column: str | None = "id",
    feature_table: str | Path | None = None,
    batch_rows: int = BATCH_ROWS,
) -> dict[str, Any]:
    """The command line's job: check the files exist, load the model, predict; what was written."""
    from labeldp.learning.export import read_model

    for path in (source, feature_table):
        if path is not None and not Path(path).is_file():
            raise PredictionError(f"{path}: no such file", code="file_not_found")
    model = read_model(model_path)
    rows = predict_parquet(model, source, destination, id_column=id_column, feature_table=feature_table,
                           batch_rows=batch_rows)
    return {"rows": rows, "output": str(destination)}


def main(argv: list[str] | None = None) -> None:
    """``python -m labeldp.learning.batch_predict``: the same as ``labeldp predict``."""
    from labeldp.learning.export import ExportError

    parser = argparse.ArgumentParser(description="Predict a Parquet file of ids or feature rows (= labeldp predict).")
    parser.add_argument("model", type=Path)
    parser.add_argument("input", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--id-column", default="id", help="the input's id column (kept in the output); '' for none")
    parser.add_argument("--feature-table", type=Path, help="look the input's ids up in this Parquet feature table")
    parser.add_argument("--batch-rows", type=int, default=BATCH_ROWS)
    args = parser.parse_args(argv)
    try:
        result = predict_file(args.model, args.input, args.output, id_column=args.id_column or None,
                              feature_table=args.feature_table, batch_rows=args.batch_rows)
    except (PredictionError, ExportError) as exc:
        parser.exit(2, f"error: {exc.code}: {exc}\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
