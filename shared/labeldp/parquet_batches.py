"""Columnar uploads: Parquet read in bounded batches, and every column checked before it is used.

pyarrow's ``ParquetFile`` pre-buffers column chunks by default, and ``iter_batches``
then keeps every buffered chunk until the iteration ends: a pass over a file grows with
the file. Every streamed pass (the features party's staging join and batch prediction, the
labels party's upload parser) opens its file here, with pre-buffering off (docs/architecture.md,
"Training at scale"). Decided in docs/decisions/0017-parquet-no-prebuffer.md.

An uploaded column may hold any Arrow type and any bytes; a cast that pyarrow cannot do
(a struct, a list) or text that is not Unicode (a lone surrogate, invalid UTF-8) would
otherwise escape as a 500. :func:`check_column_type` and :func:`utf8_text` turn each into a
422 with a stable code that names the column or the row, never the value
(docs/architecture.md, invariant 5).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TypeVar, cast

import pyarrow as pa
import pyarrow.parquet as pq

from labeldp.errors import InvalidInput

UNSUPPORTED_COLUMN_TYPE = "unsupported_column_type"
Column = TypeVar("Column", pa.Array, pa.ChunkedArray)
_SCAN = 4096  # rows cast at a time while looking for the first row that is not UTF-8


def open_for_batches(path: str | Path | pa.NativeFile) -> pq.ParquetFile:
    """``path`` (or an open random-access file, such as an object store's) for ``iter_batches``: one batch
    in memory at a time (raises as ``pq.ParquetFile`` does)."""
    return pq.ParquetFile(path, pre_buffer=False)


def _flat_type(dtype: pa.DataType) -> pa.DataType:
    return dtype.value_type if pa.types.is_dictionary(dtype) else dtype


def is_text(dtype: pa.DataType) -> bool:
    t = _flat_type(dtype)
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
                or pa.types.is_large_binary(t))


def is_number(dtype: pa.DataType) -> bool:
    t = _flat_type(dtype)
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))


def check_column_type(name: str, dtype: pa.DataType, *, numbers: bool = True) -> None:
    """Refuse a column that is not text (or, with ``numbers``, a number): nested, temporal, boolean…"""
    if is_text(dtype) or pa.types.is_null(dtype) or (numbers and is_number(dtype)):
        return
    wanted = "text or numbers" if numbers else "text"
    raise InvalidInput(
        UNSUPPORTED_COLUMN_TYPE,
        f"column {name[:100]!r} has type {str(dtype)[:100]}; it must hold {wanted} (no nested or other types)",
        [{"column": name[:100], "type": str(dtype)[:100]}],
    )


def utf8_text(values: Column, *, code: str, what: str, first_row: int = 1) -> Column:
    """``values`` as a string array, or 422 ``code`` naming the first row (``first_row`` based) that is not UTF-8."""
    if pa.types.is_string(values.type):
        return values  # Arrow validated these bytes when it built the array
    try:
        return cast(Column, values.cast(pa.string()))
    except pa.ArrowInvalid:
        pass
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    offset = 0
    for chunk in chunks:
        for start in range(0, len(chunk), _SCAN):
            part = chunk.slice(start, _SCAN)
            try:
                part.cast(pa.string())
                continue
            except pa.ArrowInvalid:
                pass
            for k, raw in enumerate(part.to_pylist()):
                if isinstance(raw, bytes):
                    try:
                        raw.decode("utf-8")
                    except UnicodeDecodeError:
                        raise not_unicode(code, what, first_row + offset + start + k) from None
        offset += len(chunk)
    raise not_unicode(code, what, first_row)  # unreachable unless pyarrow disagrees with Python


def is_unicode(text: str) -> bool:
    """Whether UTF-8 can hold ``text``: JSON's "\\ud800" decodes to a lone surrogate that it cannot."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_unicode(texts: Iterable[object], *, code: str, what: str, first_row: int = 1) -> None:
    """422 ``code`` naming the first Python ``str`` that UTF-8 cannot hold (a lone surrogate from JSON)."""
    for k, text in enumerate(texts):
        if isinstance(text, str) and not is_unicode(text):
            raise not_unicode(code, what, first_row + k)


def not_unicode(code: str, what: str, row: int) -> InvalidInput:
    return InvalidInput(
        code,
        f"row {row}: the {what} is not valid Unicode text (a lone surrogate or bytes that are not UTF-8)",
        [{"row": row, "code": code}],
    )
