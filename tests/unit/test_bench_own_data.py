"""`python -m labeldp_research utility --data FILE`, the paper-matched Housing configuration and
`labeldp privatize --mechanism auto` (issue 11 item 6, issue 12 item 3)."""

from __future__ import annotations

import csv
import json
import math
import re

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from labeldp.release.defaults import default_mechanism
from labeldp_research import data_file, utility
from labeldp_research import datasets as ds
from labeldp_research.cli import main as bench_main
from labeldp_tools.cli import main

SECRET = 7.123456789  # a label value that must never appear in a message


def _rows(n: int = 60) -> list[dict[str, object]]:
    rng = np.random.default_rng(3)
    rows = []
    for i in range(n):
        x = float(rng.normal())
        rows.append(
            {
                "user": f"u{i:03d}",
                "x": round(x, 4),
                "zip": 10_000 + i % 3,  # numeric, but a category
                "city": ["a", "b", "c"][i % 3],  # text: always a category
                "note": "n/a",
                "y": round(2.5 + 2.0 * math.tanh(x), 4),  # inside [0, 5]
            }
        )
    rows[5]["y"] = SECRET  # above the domain: clipped
    rows[7]["y"] = ""  # no label: left out
    return rows


def _write_csv(path, rows) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_a_csv_becomes_features_labels_and_a_public_domain(tmp_path):
    path = tmp_path / "My Sales.csv"
    _write_csv(path, _rows())
    data = data_file.from_file(path, "y", (0.0, 5.0), categorical=["zip"], id_column="user", drop=["note"])
    assert data.name == "my_sales" and data.task == "regression"
    assert data.n == 59  # the unlabelled row is left out
    assert data.table.column_names == ["id", "x", "zip", "city"]
    assert data.table.column("id").to_pylist()[:2] == ["u000", "u001"]
    assert data.table.schema.field("x").type == pa.float64()
    assert data.table.schema.field("zip").type == pa.string() and data.categorical == ["zip", "city"]
    assert (data.domain.low, data.domain.high) == (0.0, 5.0)
    assert data.labels.max() == 5.0  # the label above the domain is clipped to it
    assert "1 rows without a label left out" in data.description and "1 labels clipped" in data.description
    assert str(SECRET) not in data.description

    # The same data as Parquet loads to the same table and labels (the cache key is the data's digest).
    pq.write_table(pacsv.read_csv(path), tmp_path / "My Sales.parquet")
    again = data_file.from_file(
        tmp_path / "My Sales.parquet", "y", (0.0, 5.0), categorical=["zip"], id_column="user", drop=["note"]
    )
    assert again.fingerprint() == data.fingerprint()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target": "nope"}, "no column(s) 'nope'"),
        ({"target": "city"}, "not numeric"),
        ({"id_column": "zip"}, "repeated values"),
        ({"domain": (5.0, 1.0)}, "finite LOW < HIGH"),
        ({"categorical": ["y"]}, "cannot also be a feature"),
        ({"name": "../evil"}, "letters, digits and _"),
    ],
)
def test_bad_files_and_arguments_are_refused_without_showing_a_label(tmp_path, kwargs, message):
    path = tmp_path / "d.csv"
    _write_csv(path, _rows())
    args = {"target": "y", "domain": (0.0, 5.0), **kwargs}
    with pytest.raises(data_file.DataFileError) as info:
        data_file.from_file(path, args.pop("target"), args.pop("domain"), **args)
    assert message in str(info.value) and str(SECRET) not in str(info.value)


def test_unreadable_short_and_unknown_files_are_refused(tmp_path):
    with pytest.raises(data_file.DataFileError, match="no such file"):
        data_file.from_file(tmp_path / "absent.csv", "y", (0, 1))
    (tmp_path / "d.xlsx").write_text("x")
    with pytest.raises(data_file.DataFileError, match=r"\.csv, \.tsv or \.parquet"):
        data_file.from_file(tmp_path / "d.xlsx", "y", (0, 1))
    _write_csv(tmp_path / "short.csv", _rows(9))
    with pytest.raises(data_file.DataFileError, match="at least 10"):
        data_file.from_file(tmp_path / "short.csv", "y", (0, 5), drop=["note"])


def _bench(tmp_path, *extra: str) -> list[str]:
    return [
        "utility",
        *extra,
        "--trials",
        "2",
        "--epochs",
        "1",
        "--epsilons",
        "1,inf",
        "--mechanisms",
        "laplace",
        "--learners",
        "plain",
        "--out",
        str(tmp_path / "results"),
        "--cache",
        str(tmp_path / "cache"),
        "--threads",
        "1",
        "--device",
        "cpu",
    ]


def test_cli_runs_the_protocol_on_a_users_file_and_resumes(tmp_path, capsys):
    path = tmp_path / "sales.csv"
    _write_csv(path, _rows())
    args = _bench(tmp_path, "--data", str(path), "--target", "y", "--domain", "0,5", "--id", "user",
                  "--categorical", "zip", "--drop", "note")
    assert bench_main(args) == 0
    captured = capsys.readouterr()
    printed = captured.out
    assert "[sales] 4 cells computed, 0 cached" in printed
    # issue 26: a folder of its own per run, inside --out (research/runs by default), never over results
    (run,) = (tmp_path / "results").iterdir()
    assert run.name.startswith("sales-") and run.is_dir()
    md = (run / "utility_sales.md").read_text()
    assert "your data: `sales.csv`, target `y`" in md and "--data" in md
    assert "59 rows" in md or "n=59" in md
    assert (run / "utility_sales.png").stat().st_size > 5_000
    summary = json.loads((run / "utility_sales.json").read_text())
    assert summary["dataset"] == "sales" and summary["trials"] == 2
    assert str(SECRET) not in md and str(SECRET) not in printed
    # 2 trials: warned on the command line and in the report
    assert "unreliable below 5 trials" in captured.err and "**Warning**: only 2 trial(s)" in md
    # one line per finite ε: the advertiser's mechanism, the publisher's learner, RMSE in label units
    assert re.search(r"\[sales\] at ε = 1, use `(laplace|auto)` \(advertiser\) with `plain` \(publisher\): "
                     r"test RMSE \d+\.\d+ ± \d+\.\d+ \(label units\)", printed), printed
    assert "## What to use" in md and "at ε = 1, use" in md

    assert bench_main(args) == 0
    assert "[sales] 0 cells computed, 4 cached" in capsys.readouterr().out
    assert len(list((tmp_path / "results").iterdir())) == 2  # the second run: a second folder
    # the re-render of its JSON works like the built-in sets'
    assert bench_main(["report", str(run / "utility_sales.json")]) == 0


def test_cli_own_data_arguments_go_together(tmp_path, capsys):
    path = tmp_path / "d.csv"
    _write_csv(path, _rows())
    assert bench_main(_bench(tmp_path, "--data", str(path), "--domain", "0,5")) == 2
    assert "--target COLUMN and --domain" in capsys.readouterr().err
    both = _bench(tmp_path, "--data", str(path), "--target", "y", "--domain", "0,5", "--datasets", "linear")
    assert bench_main(both) == 2
    assert bench_main(_bench(tmp_path, "--target", "y")) == 2
    assert "only go with --data" in capsys.readouterr().err
    assert bench_main(_bench(tmp_path, "--data", str(path), "--target", "nope", "--domain", "0,5")) == 2
    assert "no column(s) 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


HOUSING_COLUMNS = (
    "longitude,latitude,housing_median_age,total_rooms,total_bedrooms,population,households,"
    "median_income,median_house_value,ocean_proximity"
)


def test_the_paper_housing_configuration_has_their_features_and_their_table(tmp_path):
    path = tmp_path / "california_housing.csv"
    rng = np.random.default_rng(0)
    lines = [HOUSING_COLUMNS]
    for i in range(30):
        bedrooms = "" if i == 3 else f"{rng.integers(100, 900)}.0"
        lines.append(
            f"-122.{i},37.{i},{rng.integers(1, 50)}.0,{rng.integers(900, 3000)}.0,{bedrooms},"
            f"{rng.integers(100, 3000)}.0,{rng.integers(50, 800)}.0,{rng.uniform(1, 9):.4f},"
            f"{rng.integers(20_000, 500_001)}.0,{'NEAR BAY' if i % 2 else 'INLAND'}"
        )
    path.write_text("\n".join(lines) + "\n")
    ours = ds.california_housing(path)
    paper = ds.california_housing(path, statlib_only=True)
    statlib = ["MedInc", "HouseAge", "AveRooms", "AveBedrms", "Population", "AveOccup", "Latitude", "Longitude"]
    assert paper.table.column_names == ["id", *statlib] and paper.categorical == []
    assert ours.table.column_names == ["id", *statlib, "ocean_proximity"]
    np.testing.assert_array_equal(paper.labels, ours.labels)
    assert paper.domain == ours.domain and paper.fingerprint() != ours.fingerprint()

    plans = utility.default_plans(housing=path)
    second = plans["california_housing_paper"]
    assert second.reference == "liu_huang_housing" == plans["california_housing"].reference
    assert second.training == utility.LIU_HUANG_TRAINING  # their learner's recipe (§5.3)
    assert second.load().table.column_names == paper.table.column_names
    assert second.params != plans["california_housing"].params  # its own cache folder


def _auto_ran(doc: dict, band: str) -> bool:
    """The band's pick ran, or (decision 0025) its rp_with_prior became rr_on_bins from the prior's tail."""
    from labeldp.release.defaults import tail_pick
    from labeldp.schema import NoisyPrior
    from labeldp.specs.rp_with_prior import RPWithPriorSpec

    if doc["mechanism"] == band == "rp_with_prior":
        return tail_pick(NoisyPrior(**doc["prior"]), RPWithPriorSpec(**doc["spec"])) == band
    return doc["mechanism"] == band or (band, doc["mechanism"]) == ("rp_with_prior", "rr_on_bins")


@pytest.mark.parametrize(
    ("epsilon", "label_type", "rows"),
    [("0.1", "real", 300), ("0.499999", "real", 300), ("0.5", "real", 3000), ("0.7", "integer", 300),
     ("1", "real", 3000), ("8", "real", 300), ("2", "categorical", 300)],
)
def test_offline_auto_resolves_like_the_service(tmp_path, epsilon, label_type, rows):
    """``auto`` offline is the labels party's pick for the same label type, exact ε and row count."""
    from labels_party.offline import privatize_csv

    src = tmp_path / "in.csv"
    src.write_text("id,label\n" + "".join(f"i{k:05d},{k % 2}\n" for k in range(rows)))
    kwargs = {"classes": ["0", "1"]} if label_type == "categorical" else {"domain": (0.0, 1.0)}
    doc = privatize_csv("auto", epsilon, src, tmp_path / "out.csv", label_type=label_type, **kwargs)
    assert _auto_ran(doc, default_mechanism(label_type, float(epsilon), rows)) and doc["resolved_from"] == "auto"
    assert privatize_csv("laplace" if label_type != "categorical" else "randomized_response", epsilon, src,
                         tmp_path / "out2.csv", label_type=label_type, **kwargs).get("resolved_from") is None


def test_privatize_auto_runs_the_resolved_mechanism_and_says_so(tmp_path, capsys):
    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    src.write_text("id,label\n" + "".join(f"i{k:03d},{(k % 10) / 10}\n" for k in range(200)))
    for eps, expected in (("0.3", "rr_on_bins"), ("0.7", "rp_with_prior"), ("8", "unbiased")):
        assert expected == default_mechanism("real", float(eps), 200)
        code = main(["privatize", "--mechanism", "auto", "--epsilon", eps, "--input", str(src), "--output",
                     str(out), "--domain", "0,1"])
        assert code == 0
        doc = json.loads(capsys.readouterr().out)
        assert _auto_ran(doc, expected) and doc["resolved_from"] == "auto"
        assert doc["spec"]["name"] == doc["mechanism"]
        assert math.isclose(doc["epsilon_total"], float(eps))
    # the service refuses an ε it would have to round; so does the command line
    code = main(["privatize", "--mechanism", "auto", "--epsilon", "0.0000001", "--input", str(src), "--output",
                 str(out), "--domain", "0,1"])
    assert code == 2 and "invalid_epsilon" in capsys.readouterr().err


def test_large_values_are_written_with_the_digits_their_spread_supports():
    """`23510325409.8 ± 371884140.0` (a house price's squared error) was unreadable; values below
    1e5 keep the decimals every committed table has."""
    from labeldp_research import report

    assert report.fmt_pair(23510325409.8, 371884140.0) == "23.51 G ± 0.37 G"
    assert report.fmt_pair(153331.2, 1210.0) == "153.3 k ± 1.2 k"
    assert report.fmt_pair(2.5e18, 0.0) == "2.50e18 ± 0.00e18"
    assert report.fmt_pair(4321.4, 2.2) == "4321.4 ± 2.2"
