"""The privacy–utility benchmark runner: a tiny end-to-end run, its tables, plot and cache."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest

from labeldp_research import datasets as ds
from labeldp_research import references, report, utility
from labeldp_research.utility import DatasetPlan, PlainRegressor, TrainingRecipe


@pytest.fixture(autouse=True)
def _frozen_code_fingerprint(monkeypatch):
    """Other work may edit the mechanism sources while these tests run; the cache tests
    must not see that as a code change (code_fingerprint has its own test)."""
    real = utility.code_fingerprint
    monkeypatch.setattr(
        utility, "code_fingerprint", lambda modules=None: "frozen" if modules is None else real(modules)
    )


TINY_RECIPE = TrainingRecipe(epochs=1, batch_size=64, optimizer="adam", schedule="step", step_epoch=1, source="test")
MEAN_STD = re.compile(r"^(\*\*)?-?\d+\.\d+ ± \d+\.\d+(\*\*)?( †)?$")


@dataclasses.dataclass(frozen=True)
class CountingRegressor(PlainRegressor):
    """The plain learner (same name and fingerprint) that counts its trainings."""

    calls: list = dataclasses.field(default_factory=list, compare=False)

    def fit_predict(self, job):
        self.calls.append(job.labels.size)
        return super().fit_predict(job)


def _plan(n: int = 240, recipe: TrainingRecipe = TINY_RECIPE) -> DatasetPlan:
    return DatasetPlan(
        "tiny_linear",
        lambda: ds.simulated("linear", n, 3),
        {"loader": "simulated", "kind": "linear", "n": n, "d": 3},
        recipe,
        reference="liu_huang_simulated_linear",
    )


def _run(plan, cache, learner=None, **kw):
    return utility.run_utility(
        plan,
        trials=2,
        epsilons=[0.5, 4.0, math.inf],
        mechanisms=["laplace", "rr_on_bins"],
        learners=[learner or PlainRegressor()],
        cache_dir=cache,
        device="cpu",
        threads=1,
        progress=None,
        **kw,
    )


def _block(markdown: str, heading: str) -> list[list[str]]:
    """The table under the first heading that starts with ``heading``, as rows of cells."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("## " + heading))
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_tiny_run_writes_tables_plot_and_resumes_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    first = CountingRegressor()
    result = _run(_plan(), cache, first)
    # 2 trials × (non-private + 2 mechanisms × 2 finite ε)
    assert (result.computed, result.cached) == (10, 0)
    assert len(first.calls) == 10
    assert set(first.calls) == {192}  # every training row (80 % of 240)

    command = "python -m labeldp_research utility --test"
    md, png, js = report.write_all(result, tmp_path / "out", command=command, quick=True)
    text = md.read_text()
    assert "QUICK RUN" in text and "python -m labeldp_research utility --test" in text
    assert "device **cpu**" in text

    for heading in ("Mechanism MSE", "Test MSE — learner `plain`"):
        rows = _block(text, heading)
        assert rows[0] == ["ε", "`laplace`", "`rr_on_bins`"]
        assert [r[0] for r in rows[1:]] == ["0.5", "4", "∞"]
        for row in rows[1:]:
            assert len(row) == 3
            assert all(MEAN_STD.match(c) for c in row[1:]), row
    excess = _block(text, "Relative excess")
    assert [r[0] for r in excess[1:]] == ["0.5", "4"]
    # ours, and beside it the draft's own relative excess (its Table 7 value over its ε = ∞ value)
    assert all(re.match(r"^[+-]\d+\.\d% ± \d+\.\d% \(paper [+-]\d+\.\d%\)$", c) for r in excess[1:] for c in r[1:])
    # the ∞ row is the same non-private model for every mechanism
    inf_row = _block(text, "Test MSE — learner `plain`")[-1]
    assert inf_row[1] == inf_row[2]
    assert "Reference: RPWithPrior ICLR draft" in text

    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000
    summary = json.loads(js.read_text())
    assert summary["trials"] == 2 and len(summary["cells"]) == 3 * 2

    # A second run reads every cell from the cache and trains nothing.
    second = CountingRegressor()
    again = _run(_plan(), cache, second)
    assert (again.computed, again.cached) == (0, 10) and second.calls == []
    for eps in (0.5, 4.0, math.inf):
        for m in ("laplace", "rr_on_bins"):
            np.testing.assert_array_equal(
                again.values(m, eps, "test_mse", "plain"), result.values(m, eps, "test_mse", "plain")
            )

    # An interrupted run resumes: only the missing cell is computed, to the same numbers.
    cell = next(cache.glob("*/laplace__eps4__trial1.json"))
    cell.unlink()
    third = CountingRegressor()
    resumed = _run(_plan(), cache, third)
    assert (resumed.computed, resumed.cached) == (1, 9) and len(third.calls) == 1
    np.testing.assert_allclose(
        resumed.values("laplace", 4.0, "mechanism_mse"), result.values("laplace", 4.0, "mechanism_mse"), rtol=0
    )
    np.testing.assert_allclose(
        resumed.values("laplace", 4.0, "test_mse", "plain"),
        result.values("laplace", 4.0, "test_mse", "plain"),
        rtol=1e-6,
    )


def test_a_changed_training_recipe_or_data_set_never_reads_stale_cells(tmp_path):
    cache = tmp_path / "cache"
    _run(_plan(), cache)
    other_recipe = _run(_plan(recipe=TINY_RECIPE.model_copy(update={"batch_size": 32})), cache)
    assert other_recipe.cached == 0
    other_data = _run(_plan(n=200), cache)
    assert other_data.cached == 0
    assert len(list(cache.iterdir())) == 3


def test_the_cache_key_follows_the_mechanism_and_training_code(tmp_path, monkeypatch):
    pkg = tmp_path / "fake_mechs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "kernel.py").write_text("SCALE = 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = utility.code_fingerprint(("fake_mechs",))
    assert utility.code_fingerprint(("fake_mechs",)) == before
    (pkg / "kernel.py").write_text("SCALE = 1.5\n")  # a planted change in a package's module
    assert utility.code_fingerprint(("fake_mechs",)) != before
    assert "labeldp.release.randomizer" in utility.CODE_MODULES and "labeldp.learning.loop" in utility.CODE_MODULES


def test_the_code_fingerprint_ignores_docstrings_comments_and_layout_but_not_code(tmp_path, monkeypatch):
    pkg = tmp_path / "fake_kernels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    source = 'def scale(x):\n    """Why."""\n    return 2 * x\n'
    (pkg / "kernel.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = utility.code_fingerprint(("fake_kernels",))
    (pkg / "kernel.py").write_text(
        '"""A module docstring."""\n\n# a comment\ndef scale(x):\n    """Why, said better."""\n\n'
        '    return 2 * x  # doubled\n\n\n"""A note that is a bare string statement."""\n'
    )
    assert utility.code_fingerprint(("fake_kernels",)) == before
    (pkg / "kernel.py").write_text('def scale(x):\n    """Why."""\n    return 3 * x\n')
    assert utility.code_fingerprint(("fake_kernels",)) != before
    (pkg / "kernel.py").write_text('def scale(x):\n    """Why."""\n    return 2 * x\nLIMIT = 3\n')
    assert utility.code_fingerprint(("fake_kernels",)) != before
    (pkg / "kernel.py").write_text("def scale(x):\n    return 2 * x\n")
    assert utility.code_fingerprint(("fake_kernels",)) == before


def test_trials_use_new_splits_and_seeds_but_mechanisms_share_them(tmp_path):
    result = _run(_plan(), tmp_path / "cache")
    for m in ("laplace", "rr_on_bins"):
        v = result.values(m, 0.5, "mechanism_mse")
        assert v.size == 2 and v[0] != v[1]
    base = result.values(utility.NON_PRIVATE, math.inf, "test_mse", "plain")
    assert base.size == 2 and base[0] != base[1]


def test_every_trial_splits_80_20_without_overlap_and_subsamples_only_training_rows():
    seen = []
    for t in range(3):
        train, test, fit = utility.trial_split(1000, 200, 300, 0, "d", t)
        assert train.size == 800 and test.size == 200
        assert np.intersect1d(train, test).size == 0
        np.testing.assert_array_equal(np.union1d(train, test), np.arange(1000))
        assert fit.size == 300 and np.unique(fit).size == 300 and fit.max() < 800
        again = utility.trial_split(1000, 200, 300, 0, "d", t)
        np.testing.assert_array_equal(again[1], test)
        seen.append(test)
    assert not np.array_equal(seen[0], seen[1])
    _, _, full = utility.trial_split(1000, 200, 800, 0, "d", 0)
    np.testing.assert_array_equal(full, np.arange(800))


def test_classification_reports_accuracy_and_mean_class_accuracy(tmp_path):
    plan = DatasetPlan(
        "tiny_classes",
        lambda: ds.imbalanced_classes([60, 40, 20], "tiny_classes", d=4),
        {"loader": "imbalanced_classes", "counts": [60, 40, 20]},
        TINY_RECIPE,
        task="classification",
    )
    result = utility.run_utility(
        plan,
        trials=2,
        epsilons=[2.0, math.inf],
        mechanisms=["randomized_response", "laplace"],
        cache_dir=tmp_path / "cache",
        device="cpu",
        threads=1,
        progress=None,
    )
    # laplace does not take classes; randomized response is what "auto" picks for classes
    assert result.mechanisms == [utility.DEFAULT, "randomized_response"]
    md, png, _ = report.write_all(result, tmp_path / "out")
    text = md.read_text()
    for heading in ("Test accuracy — learner `plain`", "Mean per-class test accuracy — learner `plain`"):
        rows = _block(text, heading)
        assert [r[0] for r in rows[1:]] == ["2", "∞"]
        assert all(MEAN_STD.match(r[1]) and MEAN_STD.match(r[2]) for r in rows[1:])
    goal = _block(text, "The default configuration against the field: test accuracy")
    assert goal[1][0] == "2" and "`randomized_response` / `plain`" in goal[1][1] and "**best**" in goal[1][3]
    acc = result.values("randomized_response", 2.0, "test_accuracy", "plain")
    assert acc.size == 2 and np.all((0 <= acc) & (acc <= 1))
    assert png.exists()


def test_mean_std_formatting():
    assert report.fmt_mean_std(np.array([1.0, 2.0])) == "1.5000 ± 0.7071"
    assert report.fmt_mean_std(np.array([4322.91, 4319.86])) == "4321.4 ± 2.2"
    assert report.fmt_mean_std(np.array([0.5])) == "0.5000 ± 0.0000"
    assert report.fmt_mean_std(np.array([])) == "—"
    assert report.fmt_percent(np.array([0.1, 0.3])) == "+20.0% ± 14.1%"


def test_best_is_bold_and_one_standard_error_is_marked():
    def cell(m, v):
        return utility.Cell(m, 1.0, 0, {}, {"plain": {"test_mse": v}}, 0.0)

    cells = (
        [cell("a", v) for v in (1.0, 1.2)] + [cell("b", v) for v in (1.05, 1.25)] + [cell("c", v) for v in (3.0, 3.1)]
    )
    for i, c in enumerate(cells):
        c.trial = i % 2
    result = utility.RunResult(
        plan=_plan(),
        data_description="",
        n_rows=0,
        n_features=0,
        n_train=0,
        n_test=0,
        n_train_fit=0,
        trials=2,
        epsilons=[1.0],
        mechanisms=["a", "b", "c"],
        learners=["plain"],
        cells=cells,
        config={},
        environment={},
        wall_seconds=0,
        computed=0,
        cached=0,
        cache_dir="",
    )
    row = report.metric_block(result, "test_mse", "plain")[-1]
    a, b, c = [x.strip() for x in row.strip("|").split("|")][1:]
    assert a.startswith("**") and b.endswith("†") and "†" not in c and "**" not in c


def test_reference_tables_are_complete():
    t = references.LIU_HUANG_HOUSING
    assert len(t.rows) == 13 and all(len(r) == 6 for r in t.rows.values())
    assert t.get(1.0, "rp_with_prior") == (1.0726, 0.0673)
    assert t.get(math.inf, "laplace") == (0.5922, 0.0244)
    assert references.GHAZI_CRITEO_GENERALIZATION.get(0.05, "rr_on_bins") == (11339.71, 36.45)
    assert references.GHAZI_CRITEO_MECHANISM.get(8.0, "laplace") == (3239.22, 6.54)
    assert references.LIU_HUANG_SIMULATED_NONLINEAR.get(0.1, "rp_with_prior") == (53.9678, 22.0496)
    assert [r.key for r in references.references_for("ghazi_criteo")] == ["ghazi_criteo", "ghazi_criteo_mechanism"]


def test_quick_plans_follow_the_papers_recipes(tmp_path):
    csv = tmp_path / "california_housing.csv"
    csv.write_text("x\n")
    plans = utility.default_plans(housing=csv, quick=False)
    assert set(plans) == {
        "california_housing",
        "california_housing_paper",
        "california_housing_small",
        "simulated_linear",
        "simulated_nonlinear",
        "bounded_wide",
        "counts",
        "counts_small",
        "criteo_like",
        "cifar10_1",
        "cifar10_2",
        *utility.HELDOUT_SETS,
    }
    held = [plans[name] for name in utility.HELDOUT_SETS]  # confirmation sets: their own data and cache keys
    assert len({repr(sorted(p.params.items())) for p in plans.values()}) == len(plans)
    assert all("held-out" in p.note and p.params["seed"] >= 1 for p in held)
    from labeldp_research.cli import default_sets

    assert default_sets(plans, True) == [n for n in plans if n not in utility.HELDOUT_SETS]  # only when named
    b = plans["bounded_wide"].load()
    assert (b.n, b.table.num_columns - 1, b.domain.low, b.domain.high) == (2_000, 100, 0.0, 1.0)
    assert 0.0 < b.labels.min() and b.labels.max() < 1.0
    k = plans["counts"].load()
    assert k.domain.kind == "integer" and np.all(k.labels == np.round(k.labels)) and k.labels.max() <= 30
    assert np.mean(k.labels == 0) > 0.15 and np.mean(k.labels) < 3  # skewed: many zeros, a long tail
    small = plans["counts_small"].load()  # rows of `counts`, drawn without looking at the labels
    assert small.n == utility.SMALL_ROWS and small.domain == k.domain and small.name == "counts_small"
    ids = small.table.column("id").to_pylist()
    assert ids == sorted(ids) and set(ids) <= set(k.table.column("id").to_pylist())
    by_id = dict(zip(k.table.column("id").to_pylist(), k.labels, strict=True))
    assert np.array_equal(small.labels, [by_id[i] for i in ids])  # each row keeps its own label
    assert plans["counts_small"].load().table.equals(small.table)  # the same rows every time
    assert plans["counts_small"].params != plans["counts"].params  # a distinct cache key
    h = plans["california_housing"].training
    assert (
        h.optimizer,
        h.learning_rate,
        h.epochs,
        h.batch_size,
        h.schedule,
        h.step_epoch,
        h.step_factor,
        h.weight_decay,
    ) == ("adam", 1e-3, 50, 256, "step", 25, 0.1, 1e-4)
    c = plans["criteo_like"]
    assert (c.training.optimizer, c.training.schedule, c.training.batch_size) == ("rmsprop", "cosine", 8192)
    assert c.params["n"] >= 1_000_000 and c.train_rows == utility.CPU_CRITEO_TRAIN_ROWS == 25_000
    quick = utility.default_plans(housing=None, quick=True)
    assert "california_housing" not in quick
    assert quick["simulated_linear"].training.epochs == 10 and quick["simulated_linear"].training.step_epoch == 5
    config = utility.training_config(h, seed=1, device="cpu", threads=1)
    assert config.validation_fraction == 0.0 and config.epochs == 50
    assert (config.optimizer, config.schedule, config.step_epoch) == ("adam", "step", 25)


def test_cli_bench_utility_end_to_end(tmp_path, capsys):
    from labeldp_research.cli import main

    out, cache = tmp_path / "results", tmp_path / "cache"
    args = [
        "utility",
        "--datasets",
        "linear",
        "--sim-n",
        "200",
        "--sim-d",
        "2",
        "--trials",
        "2",
        "--epochs",
        "1",
        "--epsilons",
        "1,inf",
        "--mechanisms",
        "laplace",
        "--out",
        str(out),
        "--cache",
        str(cache),
        "--threads",
        "1",
        "--device",
        "cpu",
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "ETA" in printed and "1/4" in printed  # one progress line per cell
    text = (out / "utility_simulated_linear.md").read_text()
    assert "n = 200, d = 2" in text and "--sim-n 200" in text
    assert (out / "utility_simulated_linear.png").exists()
    assert main(args) == 0
    assert "0 cells computed, 4 cached" in capsys.readouterr().out


def test_cli_rejects_bad_epsilons_and_unknown_data_sets(tmp_path, capsys):
    from labeldp_research.cli import main

    with pytest.raises(SystemExit):
        main(["utility", "--epsilons", "1,-2"])
    assert main(["utility", "--datasets", "nope", "--out", str(tmp_path)]) == 2


def test_private_and_oracle_learners_run_through_the_same_cells(tmp_path):
    learners = utility.learners_for("regression", ["plain", "private", "oracle"])
    result = utility.run_utility(
        _plan(),
        trials=2,
        epsilons=[1.0, math.inf],
        mechanisms=["rr_on_bins"],
        learners=learners,
        cache_dir=tmp_path / "cache",
        device="cpu",
        threads=1,
        progress=None,
    )
    for name in ("plain", "private", "oracle"):
        v = result.values("rr_on_bins", 1.0, "test_mse", name)
        assert v.size == 2 and np.all(np.isfinite(v))
    text = report.write_markdown(result, tmp_path / "u.md").read_text()
    assert "Test MSE — learner `private`" in text and "Test MSE — learner `oracle`" in text


def test_default_column_copies_the_cells_of_the_mechanism_the_rule_picks():
    from labeldp.release.defaults import default_mechanism
    from labeldp_research.utility import DEFAULT, Cell, default_cells

    cells = [
        Cell(m, eps, t, {"mechanism_mse": 1.0 + i}, {"private": {"test_mse": 2.0 + i}}, 0.1)
        for i, (m, eps, t) in enumerate(
            (m, eps, t) for m in ("rr_on_bins", "unbiased") for eps in (0.05, 8.0) for t in (0, 1)
        )
    ]
    out = default_cells(cells, "real", ["rr_on_bins", "unbiased"])
    assert len(out) == 4 and all(c.mechanism == DEFAULT for c in out)
    for c in out:
        source = next(
            x
            for x in cells
            if (x.mechanism, x.epsilon, x.trial) == (default_mechanism("real", c.epsilon), c.epsilon, c.trial)
        )
        assert c.learners == source.learners and c.mechanism_metrics == source.mechanism_metrics
    assert default_cells(cells, "real", ["laplace"]) == []  # the pick was not run: no column


def test_default_column_follows_the_tail_rule_where_the_cell_records_the_prior_s_tail():
    """Decision 0025: an rp_with_prior cell whose prior's tail passes TAIL_CLIP_ABOVE stands for rr_on_bins."""
    from labeldp.release.defaults import TAIL_CLIP_ABOVE
    from labeldp_research.utility import Cell, default_cells

    tails = {0: TAIL_CLIP_ABOVE * 2, 1: TAIL_CLIP_ABOVE / 2}
    cells = [Cell("rp_with_prior", 1.0, t, {"mechanism_mse": 1.0, "prior_tail": tails[t]},
                  {"private": {"test_mse": 10.0 + t}}, 0.1) for t in (0, 1)]
    cells += [Cell("rr_on_bins", 1.0, t, {"mechanism_mse": 2.0}, {"private": {"test_mse": 20.0 + t}}, 0.1)
              for t in (0, 1)]
    out = {c.trial: c.learners["private"]["test_mse"] for c in default_cells(cells, "real", ["rp_with_prior"])}
    assert out == {0: 20.0, 1: 11.0}
    # Record 0032: a release of TAIL_ROWS_BELOW rows or more keeps the band's pick whatever its prior's tail.
    from labeldp.release.defaults import TAIL_ROWS_BELOW

    full = default_cells(cells, "real", ["rp_with_prior"], TAIL_ROWS_BELOW)
    assert {c.trial: c.learners["private"]["test_mse"] for c in full} == {0: 10.0, 1: 11.0}


def test_where_the_run_has_auto_cells_they_are_the_default_column():
    """The product's own ``auto`` release, where run, is the column at its ε; elsewhere the band's copy."""
    from labeldp_research.utility import AUTO, DEFAULT, Cell, default_cells

    cells = [Cell(AUTO, 1.0, t, {"auto_switched": 1.0}, {"private": {"test_mse": 5.0 + t}}, 0.1) for t in (0, 1)]
    cells += [Cell(m, eps, t, {"mechanism_mse": 1.0}, {"private": {"test_mse": 10.0 + t}}, 0.1)
              for m in ("rp_with_prior", "rr_on_bins") for eps in (0.1, 1.0) for t in (0, 1)]
    out = default_cells(cells, "real", ["rp_with_prior", "rr_on_bins"])
    assert all(c.mechanism == DEFAULT for c in out) and len(out) == 4  # one per (ε, trial), none doubled
    at = {(c.epsilon, c.trial): c.learners["private"]["test_mse"] for c in out}
    assert at == {(1.0, 0): 5.0, (1.0, 1): 6.0, (0.1, 0): 10.0, (0.1, 1): 11.0}


@pytest.mark.parametrize("clip_above, switched", [(-1.0, 1.0), (math.inf, 0.0)])
def test_an_auto_run_releases_as_the_product_does_tail_rule_included(tmp_path, monkeypatch, clip_above, switched):
    """``--mechanisms auto`` runs ``Release(auto=True)``: at an ε in rp_with_prior's band the release's own prior
    decides (record 0025), and the cell says which mechanism ran; the table is the default column alone."""
    import labeldp.release.defaults as defaults

    monkeypatch.setattr(defaults, "TAIL_CLIP_ABOVE", clip_above)
    result = utility.run_utility(
        _plan(), trials=2, epsilons=[1.0, math.inf], mechanisms=[utility.AUTO], learners=[PlainRegressor()],
        cache_dir=tmp_path / "cache", device="cpu", threads=1, progress=None,
    )
    assert defaults.default_mechanism("real", 1.0, 192) == "rp_with_prior"
    assert result.mechanisms == [utility.DEFAULT]
    np.testing.assert_array_equal(result.values(utility.DEFAULT, 1.0, utility.AUTO_SWITCHED), [switched, switched])
    md, _, js = report.write_all(result, tmp_path / "out", command="python -m labeldp_research utility --auto")
    rebuilt = report.result_from_summary(json.loads(js.read_text()))
    assert rebuilt.mechanisms == [utility.DEFAULT]
    np.testing.assert_array_equal(rebuilt.values(utility.DEFAULT, 1.0, "test_mse", "plain"),
                                  result.values(utility.DEFAULT, 1.0, "test_mse", "plain"))
    assert _block(md.read_text(), "Test MSE — learner `plain`")[0] == ["ε", "`default`"]


def test_a_summary_rebuilds_the_run_and_re_renders_the_same_tables(tmp_path):
    learners = utility.learners_for("regression", ["plain", "private", "oracle"])
    result = utility.run_utility(
        _plan(),
        trials=2,
        epsilons=[0.1, 4.0, math.inf],
        mechanisms=["rr_on_bins", "unbiased", "laplace"],
        learners=learners,
        cache_dir=tmp_path / "cache",
        device="cpu",
        threads=1,
        progress=None,
    )
    md, _, js = report.write_all(result, tmp_path / "a", command="python -m labeldp_research utility --tiny")
    doc = json.loads(js.read_text())
    rebuilt = report.result_from_summary(doc, source="a/utility_tiny_linear.json")
    computed = [c for c in result.cells if c.mechanism != utility.DEFAULT]
    assert len(computed) == 2 * (1 + 3 * 2)  # the default column copies cells: its time is not counted twice
    assert result.compute_seconds == pytest.approx(sum(c.seconds for c in computed))
    assert rebuilt.compute_seconds == pytest.approx(result.compute_seconds)
    assert rebuilt.mechanisms == result.mechanisms and rebuilt.learners == result.learners
    for m in result.mechanisms:
        for eps in result.epsilons:
            for lr in (None, "plain", "private", "oracle"):
                metric = "mechanism_mse" if lr is None else "test_mse"
                np.testing.assert_array_equal(rebuilt.values(m, eps, metric, lr), result.values(m, eps, metric, lr))
    md2 = report.write_markdown(rebuilt, tmp_path / "b.md")
    text, text2 = md.read_text(), md2.read_text()
    for heading in ("Mechanism MSE", "Test MSE — learner `private`", "Private vs oracle", "The default configuration"):
        assert _block(text, heading) == _block(text2, heading)
    assert "python -m labeldp_research utility --tiny" in text2
    assert "Re-rendered by `python -m labeldp_research report" in text2

    # A format-1 summary (per-trial lists only, as session-1 runs wrote) rebuilds to the same numbers.
    old = {
        k: v
        for k, v in doc.items()
        if k
        not in (
            "format",
            "plan",
            "raw_cells",
            "epsilons",
            "mechanisms",
            "learners",
            "learner_info",
            "n_features",
            "command",
        )
    }
    legacy = report.result_from_summary(old)
    for m in ("rr_on_bins", "unbiased", "laplace", utility.DEFAULT):
        for eps in result.epsilons:
            np.testing.assert_array_equal(
                legacy.values(m, eps, "test_mse", "private"), result.values(m, eps, "test_mse", "private")
            )


def test_the_goal_block_compares_the_default_with_every_deployable_learner():
    from labeldp_research.utility import Cell

    def cells(mech, eps, plain, private, oracle):
        return [
            Cell(
                mech,
                eps,
                t,
                {"mechanism_mse": 1.0},
                {
                    "plain": {"test_mse": plain[t]},
                    "private": {"test_mse": private[t]},
                    "oracle": {"test_mse": oracle[t]},
                },
                0.1,
            )
            for t in range(2)
        ]

    raw = (
        cells("rp_with_prior", 1.0, [2.0, 2.2], [1.0, 1.2], [0.1, 0.1])  # default: private 1.1 ± 0.1
        + cells("laplace", 1.0, [0.5, 0.7], [3.0, 3.0], [0.1, 0.1])  # plain beats it: not met
        + cells("rp_with_prior", 2.0, [2.0, 2.0], [1.0, 1.2], [0.1, 0.1])
        + cells("laplace", 2.0, [1.05, 1.05], [3.0, 3.0], [0.1, 0.1])
    )  # within one SE of the default's
    result = dataclasses.replace(
        _fake_result(),
        cells=raw + utility.default_cells(raw, "real", ["rp_with_prior", "laplace"]),
        epsilons=[1.0, 2.0],
        mechanisms=[utility.DEFAULT, "rp_with_prior", "laplace"],
    )
    rows = report.default_goal_block(result, [references.LIU_HUANG_HOUSING], "test_mse")
    one, two = rows[2].split("|"), rows[3].split("|")
    assert "`rp_with_prior` / `private` 1.1" in one[2]
    assert "`laplace` / `plain` 0.6" in one[3] and "NOT MET" in one[4] and "+83.3%" in one[4]
    assert "0.886" in one[5] and "no" in one[6]
    assert "`rp_with_prior` / `private` 1.1" in two[2]
    assert "`laplace` / `plain` 1.05" in two[3] and "within 1 SE" in two[4]
    # oracle numbers (true labels) never count as the field
    assert all("oracle" not in r for r in rows)


def _fake_result():
    return utility.RunResult(
        plan=_plan(),
        data_description="",
        n_rows=0,
        n_features=0,
        n_train=0,
        n_test=0,
        n_train_fit=0,
        trials=2,
        epsilons=[],
        mechanisms=[],
        learners=["plain", "private", "oracle"],
        cells=[],
        config={},
        environment={},
        wall_seconds=0.0,
        computed=0,
        cached=0,
        cache_dir="",
    )


def test_cli_bench_report_re_renders_without_recomputing(tmp_path, capsys):
    from labeldp_research.cli import main

    out, cache = tmp_path / "results", tmp_path / "cache"
    args = [
        "utility",
        "--datasets",
        "linear",
        "--sim-n",
        "200",
        "--sim-d",
        "2",
        "--trials",
        "2",
        "--epochs",
        "1",
        "--epsilons",
        "1,inf",
        "--mechanisms",
        "unbiased",
        "--out",
        str(out),
        "--cache",
        str(cache),
        "--threads",
        "1",
        "--device",
        "cpu",
    ]
    assert main(args) == 0
    before = (out / "utility_simulated_linear.md").read_text()
    capsys.readouterr()
    assert main(["report", str(out / "utility_simulated_linear.json"), "--out", str(tmp_path / "re")]) == 0
    assert "re-rendered 4 cells" in capsys.readouterr().out
    after = (tmp_path / "re" / "utility_simulated_linear.md").read_text()
    assert _block(after, "Test MSE — learner `private`") == _block(before, "Test MSE — learner `private`")
    (tmp_path / "bad.json").write_text("{}")
    assert main(["report", str(tmp_path / "bad.json")]) == 2
    assert "not a utility summary" in capsys.readouterr().err


def _housing_like(values: dict[tuple[str, float], list[float]], learners=("plain", "private")) -> utility.RunResult:
    """A run on Housing's reference table from given per-trial test MSEs (same for every learner)."""
    from labeldp_research.utility import NON_PRIVATE, Cell

    raw = [
        Cell(m, eps, t, {"mechanism_mse": 1.0 + t}, {lr: {"test_mse": v} for lr in learners}, 0.1)
        for (m, eps), trials in values.items()
        for t, v in enumerate(trials)
        if m != NON_PRIVATE
    ] + [
        Cell(NON_PRIVATE, math.inf, t, {"mechanism_mse": 0.0}, {lr: {"test_mse": v} for lr in learners}, 0.1)
        for t, v in enumerate(values[(NON_PRIVATE, math.inf)])
    ]
    mechanisms = sorted({m for m, _ in values if m != NON_PRIVATE})
    plan = dataclasses.replace(_plan(), name="housing_like", reference="liu_huang_housing")
    return dataclasses.replace(
        _fake_result(),
        plan=plan,
        learners=list(learners),
        cells=raw + utility.default_cells(raw, "real", mechanisms),
        epsilons=sorted({e for _, e in values}),
        mechanisms=[utility.DEFAULT, *mechanisms],
        environment=utility.environment("cpu"),
    )


def test_the_fair_comparison_sets_the_papers_relative_excess_beside_ours():
    from labeldp_research.utility import NON_PRIVATE

    result = _housing_like(
        {
            (NON_PRIVATE, math.inf): [0.30, 0.28],
            ("rp_with_prior", 1.0): [0.525, 0.49],  # the default at ε = 1: +75 % over its own non-private model
            ("staircase", 1.0): [0.42, 0.42],
            ("rp_with_prior", 4.0): [0.30, 0.30],  # +3.6 %: below the paper's best (+8.1 %)
            ("staircase", 4.0): [0.33, 0.30],
        }
    )
    ref = references.LIU_HUANG_HOUSING
    # The paper's relative excess is its own value over its own ε = ∞ value: Staircase 0.8862 / 0.5922.
    assert report.paper_excess(ref, 1.0, "staircase") == pytest.approx(0.8862 / 0.5922 - 1)
    assert report.paper_best_excess(ref, 1.0) == ("staircase", pytest.approx(0.8862 / 0.5922 - 1))
    excess = _rows_of(report.excess_block(result, "private", ref))
    assert excess[0][1] == "`default`" and excess[0][3] == "`staircase`"
    assert excess[1][3] == "+45.0% ± 7.1% (paper +49.6%)"  # 0.42/0.30 and 0.42/0.28, paired per trial
    assert "(paper" not in excess[1][1]  # the default is no column of the paper

    goal = _rows_of(report.default_goal_block(result, references.references_for("liu_huang_housing"), "test_mse"))
    header, at1, at4 = goal
    assert header[-3:] == [
        "default's excess over its non-private model, mean ± SE",
        "best excess in Liu & Huang",
        "default's excess ≤ it?",
    ]
    assert at1[0] == "1" and at1[-3] == "+75.0% ± 0.0%"
    assert at1[-2] == "+49.6% (`staircase`)" and at1[-1] == "no (+25.4 points)"
    assert at4[0] == "4" and at4[-2] == "+8.1% (`rp_with_prior`)" and at4[-1] == "yes"
    # the absolute comparison stays beside it: 0.50 is below the paper's best 0.8862, yet the fair one says no
    assert at1[5] == "yes"

    md = report.write_markdown(result, Path(tempfile.mkdtemp()) / "u.md").read_text()
    assert "the paper's own relative excess" in md and "fair comparison" in md


def _rows_of(lines: list[str]) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines if not line.startswith("|---")]


def test_clip_top_and_the_grid():
    assert report.clip_top([77.6, 1.57, 1.5]) == pytest.approx(3 * 1.57)
    assert report.clip_top([6.6, 1.6, 1.5]) is None  # 4×: every curve stays readable unclipped
    assert report.clip_top([5.0]) is None
    for panels in range(1, 9):
        rows, cols, slot = report._grid(panels)
        assert rows * cols == panels + slot, panels  # never an empty cell


def test_the_plot_labels_clips_marks_the_paper_and_shares_one_legend():
    from labeldp_research.utility import NON_PRIVATE

    values = {(NON_PRIVATE, math.inf): [0.30, 0.28]}
    for eps in (0.1, 1.0, 4.0):
        values[("staircase", eps)] = [1.2 / eps**0.3, 1.1 / eps**0.3]
        values[("rr_on_bins", eps)] = [1.3, 1.25]
        values[("unbiased", eps)] = [80.0 / eps**2, 70.0 / eps**2]  # squeezes the others at small ε
    result = _housing_like(values)
    fig = report.figure(result)
    try:
        axes = [ax for ax in fig.axes if ax.get_visible()]
        panels = [ax for ax in axes if ax.lines or ax.collections]
        # mechanism MSE, test MSE × 2 learners, the fair comparison: a 2 × 2 grid, the legend below it
        assert len(panels) == 4 and len(axes) == 4  # no empty panel
        assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in panels)  # one shared legend
        assert all(ax.get_ylabel() for ax in panels)
        labels = [t.get_text() for t in fig.legends[0].get_texts()]
        assert {"staircase", "rr_on_bins", "unbiased", "non-private model (ε = ∞)"} <= set(labels)
        assert any("Liu & Huang" in t for t in labels) and any("off the scale" in t for t in labels)
        test_panels = [ax for ax in panels if ax.get_ylabel() == "test MSE"]
        assert len(test_panels) == 2
        for ax in test_panels:
            low, high = ax.get_ylim()
            assert high < 80.0 / 0.1**2 / 10 and low < 0.28  # clipped far below unbiased's peak
            # the paper's Table 4 values at ε we ran, as markers: Staircase 0.8862 at ε = 1 among them
            offsets = np.concatenate([c.get_offsets() for c in ax.collections if len(c.get_offsets())])
            assert any(np.allclose(o, (1.0, 0.8862)) for o in offsets)
            assert any(t.get_text() == "7.5e+03" for t in ax.texts)  # the hidden peak (its mean) is printed
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
    # With one learner there are three panels: the legend takes the 2 × 2 grid's fourth cell.
    one = dataclasses.replace(result, learners=["private"])
    fig = report.figure(one)
    try:
        axes = [ax for ax in fig.axes if ax.get_visible()]
        panels = [ax for ax in axes if ax.lines or ax.collections]
        assert len(panels) == 3 and len(axes) == 4 and not fig.legends
        (legend_axis,) = [ax for ax in axes if ax not in panels]
        assert legend_axis.get_legend() is not None and not legend_axis.axison
    finally:
        plt.close(fig)


def test_the_paper_learner_trains_on_unscaled_features_through_the_runner(tmp_path):
    from labeldp_research.cli import _learners
    from labeldp_research.paper_learner import PAPER, RawFeatureMLP

    assert [lr.name for lr in _learners("regression", ["plain", "paper"])] == ["plain", PAPER]
    assert [lr.name for lr in _learners("regression", ["paper"])] == [PAPER]
    assert [lr.name for lr in _learners("regression", None)] == ["plain", "private"]  # private carries oracle
    learner = RawFeatureMLP()
    result = utility.run_utility(
        _plan(),
        trials=1,
        epsilons=[2.0, math.inf],
        mechanisms=["laplace"],
        learners=[PlainRegressor(), learner],
        cache_dir=tmp_path / "cache",
        device="cpu",
        threads=1,
        progress=None,
    )
    for eps in (2.0, math.inf):
        paper, plain = (result.values("laplace", eps, "test_mse", lr) for lr in (PAPER, "plain"))
        assert paper.size == 1 and np.isfinite(paper).all() and paper[0] != plain[0]
    text = report.write_markdown(result, tmp_path / "u.md").read_text()
    assert "Test MSE — learner `paper`" in text and "unscaled" in text

    # Same seed, same predictions; a text feature or a cosine schedule is refused, not silently changed.
    data = ds.simulated("linear", 120, 2)
    features = data.table.drop(["id"])
    config = utility.training_config(TINY_RECIPE, seed=5, device="cpu", threads=1)
    job = utility.FitJob(features, data.labels, None, config, features)
    np.testing.assert_array_equal(learner.fit_predict(job)[PAPER], learner.fit_predict(job)[PAPER])
    with pytest.raises(ValueError, match="numeric features only"):
        learner.fit_predict(dataclasses.replace(job, train_table=features.append_column("c", data.table["id"])))
    with pytest.raises(ValueError, match="cosine"):
        learner.fit_predict(dataclasses.replace(job, config=config.replace(schedule="cosine")))


def test_git_commit_is_read_in_a_worktree_too(tmp_path):
    """Results computed in a `git worktree` checkout name their commit (the .git there is a file)."""
    main_git = tmp_path / "main" / ".git"
    (main_git / "refs" / "heads").mkdir(parents=True)
    (main_git / "refs" / "heads" / "topic").write_text("ab" * 20 + "\n")
    wt_git = main_git / "worktrees" / "wt"
    wt_git.mkdir(parents=True)
    (wt_git / "HEAD").write_text("ref: refs/heads/topic\n")
    (wt_git / "commondir").write_text("../..\n")
    checkout = tmp_path / "wt"
    (checkout / "pkg").mkdir(parents=True)
    (checkout / ".git").write_text(f"gitdir: {wt_git}\n")
    assert utility.git_commit(checkout / "pkg") == "ab" * 20


def test_every_release_has_its_private_mean_beside_the_learners_and_misses_are_listed(tmp_path):
    """Issue 12 item 1: the private-mean predictor is recorded per cell, tabled, and a learner cell
    above it by more than one SE is named under the learner's table."""
    from labeldp_research.utility import Cell, mean_predictors

    result = utility.run_utility(
        _plan(), trials=2, epsilons=[0.5, math.inf], mechanisms=["laplace"], learners=[PlainRegressor()],
        cache_dir=tmp_path / "cache", device="cpu", threads=1, progress=None,
    )
    floor = result.values("laplace", 0.5, "private_mean_mse")
    truth = result.values("laplace", 0.5, "training_mean_mse")
    assert floor.size == 2 and truth.size == 2 and np.all(floor > 0)
    y = np.array([1.0, 2.0, 3.0])
    got = mean_predictors(np.array([2.0, 2.0]), np.array([1.0, 3.0]), None, y)  # identity law: the plain mean
    assert got == {"private_mean_mse": pytest.approx(2 / 3), "training_mean_mse": pytest.approx(2 / 3)}

    text = report.write_markdown(result, tmp_path / "u.md").read_text()
    rows = _block(text, "Test MSE of the private-mean predictor")
    assert rows[0] == ["ε", "`laplace`", "true training mean (not private)"] and rows[1][0] == "0.5"
    assert "Worse than its release's private mean by more than one SE:" in text

    # A learner far above its release's private mean is listed; one at it is not.
    def cells(learned: float) -> list[Cell]:
        return [
            Cell("laplace", 0.5, t, {"private_mean_mse": 1.0 + 0.01 * t}, {"plain": {"test_mse": learned + t}}, 0.1)
            for t in range(2)
        ]

    far = dataclasses.replace(result, cells=cells(5.0))
    assert report.mean_floor_misses(far, "plain") == [("laplace", 0.5, pytest.approx(4.495))]
    near = dataclasses.replace(result, cells=cells(1.0))
    assert report.mean_floor_misses(near, "plain") == []
