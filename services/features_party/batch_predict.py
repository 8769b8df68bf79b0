"""Batch prediction: a Parquet file of ids or of feature rows in, a Parquet file of predictions out.

Rows are read and predicted one Parquet batch at a time and written as they come, so
the input may be larger than memory (a feature table that ids are looked up in is read
whole, as ``POST /v1/models/{id}/predict`` does). Output columns: the id column when the
input has one, then ``prediction`` (label units, after debiasing and shrinkage) for a
regressor, or ``prediction`` (class name) and ``p_<class>`` per class for a classifier.

Usage: ``python -m features_party.batch_predict MODEL.pt IN.parquet OUT.parquet
[--id-column id] [--feature-table TABLE.parquet]``. With ``--feature-table`` the input
holds only ids, looked up in that table; without it the input holds feature columns.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from features_party.persistence import TrainedClassifier, TrainedModel, load_model

BATCH_ROWS = 65_536


class UnknownIds(ValueError):
    """Some input ids have no row in the feature table (the message carries a count, never ids' data)."""


def predict_columns(model: TrainedModel, features: pa.Table) -> dict[str, pa.Array]:
    """The prediction columns for ``features`` (as :func:`features_party.models.predict` answers)."""
    if isinstance(model, TrainedClassifier):
        probabilities = model.predict_proba(features)
        names = [model.classes_[i] for i in probabilities.argmax(axis=1)]
        columns: dict[str, pa.Array] = {"prediction": pa.array(names, pa.string())}
        for j, name in enumerate(model.classes_):
            columns[f"p_{name}"] = pa.array(probabilities[:, j], pa.float64())
        return columns
    return {"prediction": pa.array(model.predict(features), pa.float64())}


def predict_parquet(
    model: TrainedModel,
    source: str | Path,
    destination: str | Path,
    *,
    id_column: str | None = "id",
    feature_table: str | Path | None = None,
    batch_rows: int = BATCH_ROWS,
) -> int:
    """Predict every row of ``source`` into ``destination`` (written atomically); returns the row count."""
    source_file = pq.ParquetFile(source)
    names = source_file.schema_arrow.names
    if id_column is not None and id_column not in names:
        if feature_table is not None:
            raise ValueError(f"the input has no id column {id_column!r}")
        id_column = None  # feature rows without ids: the output has predictions only
    lookup: pa.Table | None = None
    table_ids: pa.Array = pa.array([], pa.string())
    if feature_table is not None:
        if id_column is None:
            raise ValueError("looking ids up in a feature table needs an id column")
        lookup = pq.read_table(feature_table)
        if id_column not in lookup.column_names:
            raise ValueError(f"the feature table has no id column {id_column!r}")
        table_ids = lookup.column(id_column).combine_chunks()
        lookup = lookup.drop_columns([id_column])
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
                    raise UnknownIds(f"{positions.null_count} ids of the input are not in the feature table")
                features = lookup.take(positions)
            else:
                features = part.drop_columns([id_column]) if id_column is not None else part
            columns = predict_columns(model, features)
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
    finally:
        if writer is not None:
            writer.close()
        tmp.unlink(missing_ok=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Predict a Parquet file of ids or feature rows into Parquet.")
    parser.add_argument("model", type=Path)
    parser.add_argument("input", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--id-column", default="id", help="the input's id column (kept in the output); '' for none")
    parser.add_argument("--feature-table", type=Path, help="look the input's ids up in this Parquet feature table")
    parser.add_argument("--batch-rows", type=int, default=BATCH_ROWS)
    args = parser.parse_args(argv)
    rows = predict_parquet(
        load_model(args.model), args.input, args.output, id_column=args.id_column or None,
        feature_table=args.feature_table, batch_rows=args.batch_rows,
    )
    print(json.dumps({"rows": rows, "output": str(args.output)}))


if __name__ == "__main__":
    main()
