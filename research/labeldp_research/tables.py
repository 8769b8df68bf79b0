"""``python -m labeldp_research.tables``: regenerate a results table from its declared inputs.

``research/tables.toml`` declares, for every file under ``research/results/``, the command that
writes it, the tables it reads (``inputs``, written by other entries) and the outside data it
needs (``data``). This module reads that declaration, checks it (each output declared once,
every input produced by some entry, no cycle) and runs entries in dependency order, so no table
depends on a step that lives only in someone's shell history.

    python -m labeldp_research.tables --list                 # entries in dependency order
    python -m labeldp_research.tables default_rule           # one entry (or an output's file name)
    python -m labeldp_research.tables default_rule --with-inputs   # and every entry it reads from
    python -m labeldp_research.tables --all [--dry-run]      # everything
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

RESEARCH = Path(__file__).resolve().parent.parent
ROOT = RESEARCH.parent
DECLARATION = RESEARCH / "tables.toml"
RESULTS = RESEARCH / "results"
DEFAULT_HOUSING = "../shared/data/california_housing.csv"
_KEYS = {"command", "outputs", "inputs", "data"}


class TablesError(ValueError):
    """The declaration is inconsistent, or a name or a data file is unknown."""


@dataclass(frozen=True)
class Table:
    """One entry: the commands that write ``outputs`` (paths under research/results/)."""

    name: str
    commands: tuple[str, ...]
    outputs: tuple[str, ...]
    inputs: tuple[str, ...] = ()
    data: tuple[str, ...] = ()


def load(path: Path = DECLARATION) -> list[Table]:
    """The entries of ``path`` in file order; an unknown key or a missing field is an error."""
    raw = tomllib.loads(path.read_text())
    tables = []
    for name, body in raw.items():
        if not isinstance(body, dict):
            raise TablesError(f"{name}: expected a table, got {type(body).__name__}")
        unknown = set(body) - _KEYS
        if unknown:
            raise TablesError(f"{name}: unknown keys {sorted(unknown)}")
        if "command" not in body or not body.get("outputs"):
            raise TablesError(f"{name}: needs command and outputs")
        command = body["command"]
        commands = (command,) if isinstance(command, str) else tuple(command)
        tables.append(Table(name, commands, tuple(body["outputs"]), tuple(body.get("inputs", ())),
                            tuple(body.get("data", ()))))
    return tables


def producers(tables: Sequence[Table]) -> dict[str, Table]:
    """Output path → the entry that writes it; an output declared twice is an error."""
    out: dict[str, Table] = {}
    for table in tables:
        for path in table.outputs:
            if path in out:
                raise TablesError(f"{path} is an output of both {out[path].name} and {table.name}")
            out[path] = table
    return out


def dependencies(tables: Sequence[Table]) -> dict[str, list[str]]:
    """Entry name → the entries whose outputs it reads; an input nobody writes is an error."""
    by_output = producers(tables)
    deps: dict[str, list[str]] = {}
    for table in tables:
        names: list[str] = []
        for path in table.inputs:
            if path not in by_output:
                raise TablesError(f"{table.name}: input {path} is no entry's output")
            if by_output[path].name not in names:
                names.append(by_output[path].name)
        deps[table.name] = names
    return deps


def ordered(tables: Sequence[Table]) -> list[Table]:
    """Every entry after the entries it reads from (file order otherwise); a cycle is an error."""
    deps = dependencies(tables)
    by_name = {t.name: t for t in tables}
    done: list[Table] = []
    state: dict[str, str] = {}

    def visit(name: str, path: tuple[str, ...]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            raise TablesError("cycle: " + " → ".join((*path, name)))
        state[name] = "visiting"
        for dep in deps[name]:
            visit(dep, (*path, name))
        state[name] = "done"
        done.append(by_name[name])

    for table in tables:
        visit(table.name, ())
    return done


def committed(results: Path = RESULTS) -> list[str]:
    """Every file under ``results`` as a path relative to it (hidden files and a folder's ``README.md``,
    the prose that says what its tables found, aside: no command writes it)."""
    return sorted(p.relative_to(results).as_posix() for p in results.rglob("*")
                  if p.is_file() and not p.name.startswith(".") and p.name != "README.md")


def select(tables: Sequence[Table], names: Iterable[str], with_inputs: bool) -> list[Table]:
    """The entries ``names`` stand for (an entry name, an output path or its file stem), in run
    order, with every entry they read from when ``with_inputs``."""
    by_output = producers(tables)
    by_name = {t.name: t for t in tables}
    wanted: set[str] = set()
    for name in names:
        match = by_name.get(name) or by_output.get(name) or next(
            (t for path, t in by_output.items() if Path(path).with_suffix("").as_posix() == name), None)
        if match is None:
            raise TablesError(f"unknown table {name!r} (see --list)")
        wanted.add(match.name)
    if with_inputs:
        deps = dependencies(tables)
        stack = list(wanted)
        while stack:
            for dep in deps[stack.pop()]:
                if dep not in wanted:
                    wanted.add(dep)
                    stack.append(dep)
    return [t for t in ordered(tables) if t.name in wanted]


def expand(text: str, python: str, housing: str) -> str:
    """A declared command or data path with its placeholders filled in."""
    return text.format(python=shlex.quote(python), housing=shlex.quote(housing))


def run(table: Table, python: str, housing: str, dry_run: bool) -> int:
    """Run one entry's commands from the repository root (research/ on PYTHONPATH); 2 when its
    outside data is missing, else the first non-zero exit status."""
    missing = [d for d in (expand(d, python, housing) for d in table.data)
               if not (ROOT / shlex.split(d)[0]).exists()]
    if missing and not dry_run:
        print(f"{table.name}: missing data {', '.join(missing)} (give --housing PATH)", file=sys.stderr)
        return 2
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(RESEARCH), os.environ.get("PYTHONPATH", "")]))}
    for command in table.commands:
        line = expand(command, python, housing)
        print(f"[{table.name}] {line}", flush=True)
        if dry_run:
            continue
        status = subprocess.call(shlex.split(line), cwd=ROOT, env=env)
        if status != 0:
            return status
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="entries (or output files) to regenerate")
    parser.add_argument("--list", action="store_true", help="print the entries in run order and exit")
    parser.add_argument("--all", action="store_true", help="regenerate every entry")
    parser.add_argument("--with-inputs", action="store_true", help="also regenerate the entries the named ones read")
    parser.add_argument("--dry-run", action="store_true", help="print the commands without running them")
    parser.add_argument("--housing", default=DEFAULT_HOUSING,
                        help=f"California Housing CSV, relative to the repository root (default {DEFAULT_HOUSING})")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the commands (default: this one)")
    args = parser.parse_args(argv)
    try:
        tables = load()
        if args.list:
            deps = dependencies(tables)
            for table in ordered(tables):
                reads = f"  (reads {', '.join(deps[table.name])})" if deps[table.name] else ""
                print(f"{table.name}: {', '.join(table.outputs)}{reads}")
            return 0
        if not args.all and not args.names:
            parser.error("name an entry, or give --all or --list")
        chosen = ordered(tables) if args.all else select(tables, args.names, args.with_inputs)
    except TablesError as exc:
        print(f"labeldp_research.tables: {exc}", file=sys.stderr)
        return 2
    for table in chosen:
        status = run(table, args.python, args.housing, args.dry_run)
        if status != 0:
            return status
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
