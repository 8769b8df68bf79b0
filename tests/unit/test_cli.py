import subprocess
import sys

import pytest

COMMANDS = [[], ["demo"], ["serve"], ["outbox"], ["worker"], ["watch"], ["export"], ["predict"]]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a) or "labeldp")
def test_every_command_has_help(args):
    out = subprocess.run(
        [sys.executable, "-m", "labeldp_tools.cli", *args, "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "usage: labeldp" in out.stdout


def test_unknown_party_is_a_usage_error():
    out = subprocess.run(
        [sys.executable, "-m", "labeldp_tools.cli", "serve", "nobody"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "invalid choice" in out.stderr


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"LABELDP_LABELS_API_KEY": "short"}, "LABELDP_LABELS_API_KEY holds a development value"),
        ({"LABELDP_TRAINING_QUEUE_MAX": "many"}, "LABELDP_TRAINING_QUEUE_MAX: Input should be a valid integer"),
    ],
)
def test_a_refused_setting_is_one_line_not_a_traceback(env, says, tmp_path):
    import os

    clean = {k: v for k, v in os.environ.items() if not k.startswith("LABELDP_")}
    out = subprocess.run(
        [sys.executable, "-m", "labeldp_tools.cli", "serve", "labels", "--port", "1"],
        capture_output=True, text=True, timeout=60, env={**clean, "LABELDP_DATA_DIR": str(tmp_path), **env},
    )
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith("labeldp: refused to start: ") and says in out.stderr


def _run(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "labeldp_tools.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", ["optimize", "privatize"])
def test_offline_commands_have_help(command):
    assert _run(command, "--help").returncode == 0


def test_optimize_prints_the_fitted_bins_and_their_exact_loss(tmp_path):
    import json

    import numpy as np

    from labeldp.mechanisms import RROnBins
    from labeldp.mechanisms.contract import Prior

    values, probs = list(range(11)), [5, 9, 7, 5, 4, 3, 2, 2, 1, 1, 1]
    (tmp_path / "prior.json").write_text(json.dumps({"values": values, "probs": probs}))
    out = _run("optimize", "--mechanism", "rr_on_bins", "--epsilon", "2", "--prior", str(tmp_path / "prior.json"))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    p = np.asarray(probs, float) / sum(probs)
    ref = RROnBins(2.0).fit_to(Prior(np.asarray(values, float), p))
    assert doc["parameters"]["outputs"] == ref.outputs_.tolist()
    assert doc["expected_loss"] == pytest.approx(ref.expected_loss_, rel=1e-12)
    assert len(doc["parameters"]["cut_points"]) == len(doc["parameters"]["outputs"]) - 1


def test_privatize_writes_every_id_once_sorted_and_reports_epsilon(tmp_path):
    import csv
    import json

    ids = [f"u{i}" for i in (5, 3, 9, 1, 7, 0, 2, 8, 6, 4)] * 30
    ids = [f"{i}_{k}" for k, i in enumerate(ids)]
    with open(tmp_path / "in.csv", "w") as f:
        f.write("id,label\n" + "".join(f"{i},{(k % 7) * 1.5}\n" for k, i in enumerate(ids)))
    out = _run(
        "privatize", "--mechanism", "rr_on_bins", "--epsilon", "1.5", "--input", str(tmp_path / "in.csv"),
        "--output", str(tmp_path / "out.csv"), "--domain", "0,10",
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert sum(doc["epsilon_parts"].values()) == pytest.approx(1.5) and doc["epsilon_total"] == 1.5
    with open(tmp_path / "out.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["id"] for r in rows] == sorted(ids)
    assert {float(r["label"]) for r in rows} <= set(doc["spec"]["outputs"])


def test_privatize_refuses_bad_input_and_writes_nothing(tmp_path):
    (tmp_path / "in.csv").write_text("id,label\na,1.0\nb,nan\n")
    base = ["privatize", "--mechanism", "laplace", "--epsilon", "1", "--input", str(tmp_path / "in.csv"),
            "--output", str(tmp_path / "out.csv")]
    out = _run(*base)  # no --domain: the range must be public
    assert out.returncode == 2 and "--domain" in out.stderr
    out = _run(*base, "--domain", "0,10")
    assert out.returncode == 2 and "non_finite" in out.stderr
    assert "nan" not in out.stderr.lower().replace("non_finite", "")
    assert not (tmp_path / "out.csv").exists()


def test_privatize_refuses_an_epsilon_the_service_would_refuse_instead_of_rounding_it(tmp_path):
    (tmp_path / "in.csv").write_text("id,label\na,1.0\nb,2.0\n")
    for epsilon, prior in (("0.0000015", None), ("1", "0.0000001")):
        args = ["privatize", "--mechanism", "rr_on_bins", "--epsilon", epsilon, "--domain", "0,10",
                "--input", str(tmp_path / "in.csv"), "--output", str(tmp_path / "out.csv")]
        if prior is not None:
            args += ["--epsilon-prior", prior]
        out = _run(*args)
        assert out.returncode == 2 and "multiple of 0.000001" in out.stderr, out.stderr
        assert not (tmp_path / "out.csv").exists()
