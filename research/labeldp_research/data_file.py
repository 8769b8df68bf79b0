"""A user's own CSV or Parquet file as a data set of the benchmark protocol (issue 11, item 6).

``python -m labeldp_research utility --data FILE --target COLUMN --domain LOW,HIGH`` runs the
papers' protocol (docs/architecture.md, "Benchmark protocol") on it through the same
runner, tables and plots as the built-in sets. Kept apart from
:mod:`labeldp_research.datasets` because the runner's cache fingerprints that module's
source; a file's cells are keyed by the data's own digest
(:meth:`BenchmarkData.fingerprint`) and the plan's parameters instead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from labeldp.mechanisms import LabelDomain
from labeldp_research.datasets import BenchmarkData, row_ids
from labeldp_research.utility import LIU_HUANG_TRAINING, DatasetPlan


class DataFileError(ValueError):
    """A data file that cannot be benchmarked as asked. The message names columns and counts,
    never a label value (docs/architecture.md, "Privacy invariants" 5)."""


MIN_FILE_ROWS = 10
"""Fewest labelled rows a file may have: the 80/20 split needs at least two test rows."""


def read_table(path: str | Path) -> pa.Table:
    """A CSV (``.csv``, ``.tsv``, optionally gzipped) or Parquet (``.parquet``, ``.pq``) file as one table."""
    path = Path(path)
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    kind = suffixes[-1] if suffixes else ""
    try:
        if kind in (".parquet", ".pq"):
            return pq.read_table(path)
        if kind in (".csv", ".tsv"):
            delimiter = "\t" if kind == ".tsv" else ","
            return pacsv.read_csv(path, parse_options=pacsv.ParseOptions(delimiter=delimiter))
    except FileNotFoundError:
        raise DataFileError(f"{path}: no such file") from None
    except (OSError, pa.ArrowInvalid) as exc:
        raise DataFileError(f"{path}: cannot be read as {kind[1:]} ({type(exc).__name__})") from None
    raise DataFileError(f"{path}: expected a .csv, .tsv or .parquet file")


def _dataset_name(path: Path) -> str:
    stem = path.name.split(".")[0]
    return re.sub(r"[^a-z0-9_]+", "_", stem.lower()).strip("_") or "data"


def from_file(
    path: str | Path,
    target: str,
    domain: tuple[float, float],
    *,
    categorical: Sequence[str] = (),
    id_column: str | None = None,
    drop: Sequence[str] = (),
    name: str | None = None,
) -> BenchmarkData:
    """A user's CSV or Parquet file as a regression data set of the protocol (issue 11, item 6).

    ``target`` is the label column and ``domain`` its public range (given on the command
    line, never read from the labels); labels outside it are clipped to it and rows
    without a label are left out, and the description says how many of each. Every
    other column except ``id_column`` and ``drop`` is a feature: numeric columns as
    numbers, text and boolean columns and those named in ``categorical`` as categories.
    ``id_column`` (unique, no nulls) names the rows; without it they are numbered.
    """
    path = Path(path)
    if name is not None and not re.fullmatch(r"[A-Za-z0-9_]{1,64}", name):
        raise DataFileError("the data set name takes letters, digits and _ only (it names the result files)")
    low, high = (float(x) for x in domain)
    if not (np.isfinite(low) and np.isfinite(high) and low < high):
        raise DataFileError("the domain needs finite LOW < HIGH")
    raw = read_table(path)
    columns = raw.column_names
    named = [target, *categorical, *drop] + ([id_column] if id_column else [])
    absent = [c for c in dict.fromkeys(named) if c not in columns]
    if absent:
        raise DataFileError(f"{path}: no column(s) {', '.join(map(repr, absent))}; it has {', '.join(columns)}")
    if target in categorical or target == id_column or target in drop:
        raise DataFileError(f"the target {target!r} cannot also be a feature, the id or dropped")
    if id_column and id_column in categorical:
        raise DataFileError(f"the id column {id_column!r} cannot also be a feature")
    y_col = raw.column(target)
    if not (pa.types.is_integer(y_col.type) or pa.types.is_floating(y_col.type) or pa.types.is_decimal(y_col.type)):
        raise DataFileError(f"the target {target!r} is {y_col.type}, not numeric")
    y = y_col.cast(pa.float64()).to_numpy(zero_copy_only=False)
    labelled = np.isfinite(y)
    n_unlabelled = int(np.count_nonzero(~labelled))
    if n_unlabelled:
        raw = raw.filter(pa.array(labelled))
        y = y[labelled]
    n = raw.num_rows
    if n < MIN_FILE_ROWS:
        raise DataFileError(f"{path}: {n} labelled rows; the protocol needs at least {MIN_FILE_ROWS}")
    n_clipped = int(np.count_nonzero((y < low) | (y > high)))

    if id_column:
        ids = raw.column(id_column).cast(pa.string())
        if ids.null_count:
            raise DataFileError(f"the id column {id_column!r} has {ids.null_count} empty values")
        if len(pc.unique(ids)) != n:
            raise DataFileError(f"the id column {id_column!r} has repeated values")
        id_array: pa.Array | pa.ChunkedArray = ids
    else:
        id_array = row_ids(n, "r")
    skip = {target, *drop} | ({id_column} if id_column else set())
    features: dict[str, pa.Array | pa.ChunkedArray] = {}
    forced = set(categorical)
    for c in columns:
        if c in skip:
            continue
        col = raw.column(c)
        numeric = pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_decimal(col.type)
        if numeric and c not in forced:
            features[c] = col.cast(pa.float64())
        elif numeric or pa.types.is_string(col.type) or pa.types.is_large_string(col.type) or (
            pa.types.is_boolean(col.type) or pa.types.is_dictionary(col.type)
        ):
            features[c] = col.cast(pa.string())
            forced.add(c)
        else:
            raise DataFileError(f"column {c!r} is {col.type}: neither numeric nor text (leave it out with --drop)")
    if not features:
        raise DataFileError(f"{path}: no feature columns are left")
    if "id" in features:
        raise DataFileError("a feature column is called 'id'; name it as the id (--id id) or drop it")
    cats = [c for c in features if c in forced]
    notes = [f"{n_unlabelled} rows without a label left out"] if n_unlabelled else []
    notes += [f"{n_clipped} labels clipped to the domain"] if n_clipped else []
    description = (
        f"{path.name}, target `{target}`, n={n}, {len(features) - len(cats)} numeric + {len(cats)} categorical "
        f"features, public domain [{low:g}, {high:g}]" + "".join(f"; {note}" for note in notes)
    )
    return BenchmarkData(
        name or _dataset_name(path),
        pa.table({"id": id_array, **features}),
        np.clip(y, low, high),
        LabelDomain("real", low, high),
        description=description,
        categorical=cats,
    )


def file_plan(
    data: BenchmarkData,
    path: str | Path,
    *,
    target: str,
    categorical: Sequence[str] = (),
    id_column: str | None = None,
    drop: Sequence[str] = (),
    quick: bool = False,
    epochs: int | None = None,
) -> DatasetPlan:
    """The protocol's plan for a loaded file: the project's default training (Liu & Huang's
    recipe, what ``POST /v1/trainings`` runs with no options), shortened like the built-in
    sets' by ``quick`` or ``epochs``; no paper table to print beside it."""
    recipe = LIU_HUANG_TRAINING
    if epochs is not None:
        recipe = recipe.with_epochs(epochs)
    elif quick:
        recipe = recipe.with_epochs(10)
    if data.domain is None:
        raise DataFileError("a file's data set is a regression with a public label domain")
    path = Path(path)
    params = {
        "loader": "file",
        "file": path.name,
        "bytes": path.stat().st_size,
        "target": target,
        "domain": [data.domain.low, data.domain.high],
        "categorical": list(categorical),
        "id": id_column,
        "drop": list(drop),
    }
    return DatasetPlan(
        data.name,
        lambda: data,
        params,
        recipe,
        note=f"your data: `{path.name}`, target `{target}`, public label domain "
        f"[{data.domain.low:g}, {data.domain.high:g}] given on the command line",
    )
