"""A release's privatized labels as a file (issue 26): Parquet, Arrow or CSV, the JSON answer's rows."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
from tests.contract.conftest import FEATURES_AUTH, Parties

from features_party.inbox import write_labels_file
from labeldp.errors import InvalidInput

READ = {
    "parquet": lambda data: pq.read_table(io.BytesIO(data)),
    "arrow": lambda data: ipc.open_stream(data).read_all(),
    "csv": lambda data: pacsv.read_csv(io.BytesIO(data), convert_options=pacsv.ConvertOptions(
        column_types={"id": pa.string()})),
}


def test_every_format_holds_the_json_answers_rows(parties: Parties) -> None:
    release = parties.flow.release["id"]
    url = f"/v1/releases/{release}/labels"
    expected = parties.features.get(url, headers=FEATURES_AUTH).json()
    for fmt, media in (("parquet", "application/vnd.apache.parquet"),
                       ("arrow", "application/vnd.apache.arrow.stream"), ("csv", "text/csv")):
        got = parties.features.get(f"{url}/file", params={"format": fmt}, headers=FEATURES_AUTH)
        assert got.status_code == 200 and got.headers["content-type"].startswith(media), (fmt, got.text[:200])
        assert f"labels-{release}" in got.headers["content-disposition"]
        table = READ[fmt](got.content)
        assert table.column_names == ["id", "label"], fmt
        assert table.column("id").to_pylist() == expected["ids"], fmt
        np.testing.assert_allclose(table.column("label").to_numpy(), expected["labels"], rtol=1e-12)
    default = parties.features.get(f"{url}/file", headers=FEATURES_AUTH)
    assert default.headers["content-type"] == "application/vnd.apache.parquet"
    refused = parties.features.get(f"{url}/file", params={"format": "xlsx"}, headers=FEATURES_AUTH)
    assert refused.status_code == 422
    missing = parties.features.get("/v1/releases/rel_nope/labels/file", headers=FEATURES_AUTH)
    assert missing.status_code == 404 and missing.json()["code"] == "release_not_found"
    assert not list((parties.features.app.state.ctx.data_dir / "spool").glob("labels-*"))  # no file left behind


def test_class_names_are_written_as_text_and_other_formats_refused(tmp_path: Path) -> None:
    ids, labels = pa.array(["a", "b"]), np.array(["cat", "dog"], dtype=object)
    write_labels_file(ids, labels, "parquet", tmp_path / "l.parquet")
    assert pq.read_table(tmp_path / "l.parquet").to_pydict() == {"id": ["a", "b"], "label": ["cat", "dog"]}
    with pytest.raises(InvalidInput) as refused:
        write_labels_file(ids, labels, "xlsx", tmp_path / "l.xlsx")
    assert refused.value.code == "invalid_format"
