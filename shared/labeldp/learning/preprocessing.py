"""Features into tensors: numeric columns standardized, categorical ones indexed.

Fitted on training rows only and saved with every model, so prediction sees exactly the
training-time statistics.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def _is_numeric(dtype: pa.DataType) -> bool:
    return pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_decimal(dtype)



@dataclass
class Preprocessor:
    """Standardizes numeric columns and indexes categorical ones (0 = unknown or missing).

    Fitted on training rows only, so validation rows never leak into the statistics.
    """

    numeric_columns: list[str] = field(default_factory=list)
    means: list[float] = field(default_factory=list)
    stds: list[float] = field(default_factory=list)
    categorical_columns: list[str] = field(default_factory=list)
    vocabularies: list[dict[str, int]] = field(default_factory=list)

    @classmethod
    def fit(cls, table: pa.Table) -> Preprocessor:
        """Numeric Arrow columns are numeric features, all others categorical."""
        pre = cls()
        for name in table.column_names:
            column = table.column(name)
            if _is_numeric(column.type):
                values = _float_column(column)
                finite = values[np.isfinite(values)]
                mean = float(finite.mean()) if finite.size else 0.0
                std = float(finite.std()) if finite.size else 1.0
                pre.numeric_columns.append(name)
                pre.means.append(mean)
                pre.stds.append(std if std > 1e-12 else 1.0)
            else:
                distinct: list[str] = pc.unique(column.cast(pa.string())).drop_null().to_pylist()  # type: ignore[assignment]
                pre.categorical_columns.append(name)
                pre.vocabularies.append({value: i + 1 for i, value in enumerate(sorted(distinct))})
        return pre

    def transform(self, table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """(n, numeric) float32 standardized with missing -> mean, (n, categorical) int64.

        Columns absent from ``table`` count as missing in every row.
        """
        n = table.num_rows
        numeric = np.zeros((n, len(self.numeric_columns)), dtype=np.float32)
        for j, name in enumerate(self.numeric_columns):
            if name not in table.column_names:
                continue
            values = _float_column(table.column(name))
            values = np.where(np.isfinite(values), values, self.means[j])
            # A value past float32's range becomes ±inf here, which the prediction routes refuse
            # (invalid_feature_values): an expected outcome, not a warning for the log.
            with np.errstate(over="ignore"):
                numeric[:, j] = (values - self.means[j]) / self.stds[j]
        categorical = np.zeros((n, len(self.categorical_columns)), dtype=np.int64)
        for j, name in enumerate(self.categorical_columns):
            if name not in table.column_names or not self.vocabularies[j]:
                continue
            vocab = sorted(self.vocabularies[j].items(), key=lambda kv: kv[1])
            value_set = pa.array([value for value, _ in vocab], pa.string())
            codes = np.asarray([index for _, index in vocab], dtype=np.int64)
            found = pc.index_in(table.column(name).cast(pa.string()), value_set=value_set)
            positions = cast(pa.Array, pc.fill_null(found, pa.scalar(-1, found.type)))
            pos = np.asarray(positions.to_numpy(zero_copy_only=False), dtype=np.int64)
            categorical[:, j] = np.where(pos >= 0, codes[np.clip(pos, 0, None)], 0)
        return numeric, categorical

    @property
    def vocab_sizes(self) -> list[int]:
        return [len(v) for v in self.vocabularies]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Preprocessor:
        return cls(**data)



def _float_column(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    values = column.cast(pa.float64())
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)


@dataclass
class RunningMoments:
    """Count, mean and population variance merged batch by batch (Chan et al.), in float64.

    Streaming training (:mod:`labeldp.learning.staging`) fits the preprocessor and the
    target scaling in one pass over row groups, so no column is ever held whole.
    """

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def update(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.float64)
        n_b = int(values.size)
        if n_b == 0:
            return
        mean_b = float(values.mean())
        m2_b = float(((values - mean_b) ** 2).sum())
        n = self.count + n_b
        delta = mean_b - self.mean
        self.mean += delta * n_b / n
        self.m2 += m2_b + delta * delta * self.count * n_b / n
        self.count = n

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / self.count) if self.count else 0.0



class PreprocessorBuilder:
    """:meth:`Preprocessor.fit` one batch at a time: the same statistics without the whole table.

    Numeric means and stds agree with :meth:`Preprocessor.fit` up to float rounding;
    vocabularies are identical (sorted distinct values).
    """

    def __init__(self) -> None:
        self._schema: pa.Schema | None = None
        self._moments: dict[str, RunningMoments] = {}
        self._distinct: dict[str, Any] = {}

    def update(self, table: pa.Table) -> None:
        if self._schema is None:
            self._schema = table.schema
        for name in self._schema.names:
            column = table.column(name)
            if _is_numeric(column.type):
                values = _float_column(column)
                self._moments.setdefault(name, RunningMoments()).update(values[np.isfinite(values)])
            else:
                seen: Any = pc.unique(column.cast(pa.string())).drop_null()
                if isinstance(seen, pa.ChunkedArray):
                    seen = seen.combine_chunks()
                previous = self._distinct.get(name)
                merged = seen if previous is None else pc.unique(pa.concat_arrays([previous, seen]))
                self._distinct[name] = merged

    def build(self) -> Preprocessor:
        if self._schema is None:
            raise ValueError("no rows to fit the preprocessor on")
        pre = Preprocessor()
        for name in self._schema.names:
            if _is_numeric(self._schema.field(name).type):
                moments = self._moments.get(name, RunningMoments())
                pre.numeric_columns.append(name)
                pre.means.append(moments.mean if moments.count else 0.0)
                std = moments.std if moments.count else 1.0
                pre.stds.append(std if std > 1e-12 else 1.0)
            else:
                distinct: list[str] = self._distinct.get(name, pa.array([], pa.string())).to_pylist()
                pre.categorical_columns.append(name)
                pre.vocabularies.append({value: i + 1 for i, value in enumerate(sorted(distinct))})
        return pre
