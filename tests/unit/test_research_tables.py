"""research/tables.toml declares every committed results file, and its pipeline can run.

Nothing is run here (the studies take hours): the checks are on the declaration and the files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from labeldp_research import tables

RESULTS = tables.RESULTS


@pytest.fixture(scope="module")
def declared() -> list[tables.Table]:
    return tables.load()


def test_every_committed_results_file_is_declared(declared: list[tables.Table]) -> None:
    outputs = tables.producers(declared)
    undeclared = [path for path in tables.committed() if path not in outputs]
    assert tables.committed(), "research/results/ is empty: the check would pass vacuously"
    assert undeclared == [], f"add these to research/tables.toml: {undeclared}"


def test_every_input_exists_or_is_produced(declared: list[tables.Table]) -> None:
    outputs = tables.producers(declared)
    for table in declared:
        for path in table.inputs:
            assert path in outputs or (RESULTS / path).is_file(), f"{table.name}: {path}"


def test_every_declared_output_is_committed(declared: list[tables.Table]) -> None:
    """A declared table that is not in the repository is a stale declaration."""
    committed = set(tables.committed())
    assert [p for t in declared for p in t.outputs if p not in committed] == []


def test_order_puts_producers_first_and_has_no_cycle(declared: list[tables.Table]) -> None:
    order = [t.name for t in tables.ordered(declared)]
    assert sorted(order) == sorted(t.name for t in declared)
    deps = tables.dependencies(declared)
    assert deps["default_rule"], "default_rule reads the utility tables"
    for name, before in deps.items():
        assert all(order.index(dep) < order.index(name) for dep in before), name


def test_each_command_names_its_outputs_folder_and_a_runnable_program(declared: list[tables.Table]) -> None:
    """Each command writes into research/results (or a folder under it) and runs a program that exists."""
    for table in declared:
        for command in table.commands:
            line = tables.expand(command, "python", "housing.csv")
            assert "research/results" in line, table.name
            words = line.split()
            program = words[1] if words[1] != "-m" else words[2]
            if program.endswith(".py"):
                assert (tables.ROOT / program).is_file(), f"{table.name}: {program}"
            else:
                assert program.startswith("labeldp_research"), f"{table.name}: {program}"


def test_a_cycle_an_unproduced_input_and_a_twice_declared_output_are_refused(tmp_path: Path) -> None:
    def check(text: str, message: str) -> None:
        path = tmp_path / "tables.toml"
        path.write_text(text)
        with pytest.raises(tables.TablesError, match=message):
            tables.ordered(tables.load(path))

    check('[a]\ncommand = "x"\noutputs = ["a.md"]\ninputs = ["b.md"]\n'
          '[b]\ncommand = "x"\noutputs = ["b.md"]\ninputs = ["a.md"]\n', "cycle")
    check('[a]\ncommand = "x"\noutputs = ["a.md"]\ninputs = ["nowhere.md"]\n', "no entry's output")
    check('[a]\ncommand = "x"\noutputs = ["a.md"]\n[b]\ncommand = "x"\noutputs = ["a.md"]\n', "both")
    check('[a]\ncommand = "x"\noutputs = ["a.md"]\ninput = ["b.md"]\n', "unknown keys")


def test_a_folders_readme_is_prose_not_a_table(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    for name in ("a.md", "sub/README.md", "sub/b.json", "README.md", ".hidden"):
        (tmp_path / name).write_text("x")
    assert tables.committed(tmp_path) == ["a.md", "sub/b.json"]


def test_select_names_an_entry_by_name_output_or_stem(declared: list[tables.Table]) -> None:
    assert [t.name for t in tables.select(declared, ["utility_criteo_like"], False)] == ["utility_nonlinear_criteo"]
    assert [t.name for t in tables.select(declared, ["default_rule.md"], False)] == ["default_rule"]
    with_inputs = [t.name for t in tables.select(declared, ["default_rule"], True)]
    assert with_inputs[-1] == "default_rule" and "utility_counts" in with_inputs
    with pytest.raises(tables.TablesError):
        tables.select(declared, ["no_such_table"], False)
