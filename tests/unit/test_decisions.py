"""Decision records (docs/decisions/) and the docstrings that cite them.

Every tuned constant has one record with its measurement; the code cites the record in a
line and carries no measurement essay. These tests keep the two in step: a citation names
an existing record, every record is cited by code and listed in the index, and docstrings
in the product (shared/, services/) stay short and free of result-table paths.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DECISIONS = ROOT / "docs" / "decisions"
PRODUCT = ("shared", "services")
CITING = (*PRODUCT, "tools", "research", "bench")  # code whose citations count
CITATION = re.compile(r"docs/decisions/([0-9]{4}-[a-z0-9-]+\.md)")
RECORD_NAME = re.compile(r"^[0-9]{4}-[a-z0-9-]+\.md$")
MAX_DOCSTRING_LINES = 20
MAX_RECORD_LINES = 40
SECTIONS = ("## Context", "## Decision", "## Evidence", "## Command")

# Docstrings allowed past MAX_DOCSTRING_LINES: each documents an algorithm, a proof or a
# protocol that the code implements, with no measurement in it ("path" is the module
# docstring, "path::name" a class, function or attribute docstring).
LONG_DOCSTRINGS = {
    "shared/labeldp/mechanisms/rr_on_bins_kernels.py": "proof that the fast RR-on-Bins optimizer is exact",
    "shared/labeldp/learning/selection.py": "proof that the private validation estimate ranks as an oracle would",
    "shared/labeldp/mechanisms/unbiased.py": "the LP, its exact integer repair and why it is ε-DP",
    "shared/labeldp/mechanisms/additive.py": "the lattice, exact clipped laws and their closed forms",
    "shared/labeldp/learning/debiasing.py": "what the features party derives from a law: debiasing, shrinkage, mean",
    "shared/labeldp/mechanisms/rr_sampling.py": "why one 64-bit word per label is exact RR",
    "shared/labeldp/service/idempotency.py": "the exactly-once protocol, step by step",
    "shared/labeldp/mechanisms/sampling.py": "the integer alias table and why it is exact",
    "shared/labeldp/mechanisms/kernels.py": "how each kernel consumes the secure words",
    "shared/labeldp/mechanisms/rp_with_prior.py": "the discretized mechanism and why it is ε-DP",
    "shared/labeldp/mechanisms/contract.py": "the mechanism contract (docs/architecture.md)",
    "shared/labeldp/mechanisms/categorical.py": "the categorical mechanisms and their exact sampling",
    "shared/labeldp/mechanisms/exact_noise.py": "the exact discrete Laplace algorithm (CKS 2020) and why it is exact",
    "shared/labeldp/randomness.py": "the ChaCha20 stream: layout, and why both read paths give one keystream",
}


def records() -> list[Path]:
    return sorted(p for p in DECISIONS.glob("*.md") if p.name != "README.md")


def code_files(roots: tuple[str, ...]) -> list[Path]:
    return sorted(p for root in roots for p in (ROOT / root).rglob("*.py"))


def citations() -> dict[str, set[str]]:
    """Record name → the code files that cite it."""
    cited: dict[str, set[str]] = {}
    for path in code_files(CITING):
        for name in CITATION.findall(path.read_text(encoding="utf-8")):
            cited.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return cited


def docstrings(path: Path) -> list[tuple[str, str]]:
    """(key, text) of every docstring of a module: module, classes, functions, and the string
    that follows an assignment in a module or class body (an attribute's docstring)."""
    rel = str(path.relative_to(ROOT))
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[str, str]] = []
    module_doc = ast.get_docstring(tree, clean=False)
    if module_doc is not None:
        found.append((rel, module_doc))

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for before, node in zip([None, *body], body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc is not None:
                    found.append((f"{rel}::{prefix}{node.name}", doc))
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{prefix}{node.name}.")
            elif (
                isinstance(before, (ast.Assign, ast.AnnAssign))
                and isinstance(node, ast.Expr)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                target = before.targets[0] if isinstance(before, ast.Assign) else before.target
                found.append((f"{rel}::{prefix}{ast.unparse(target)}", node.value.value))

    visit(tree.body, "")
    return found


def test_every_record_is_named_as_the_index_says() -> None:
    assert records(), "docs/decisions/ holds no record"
    numbers = [p.name[:4] for p in records()]
    assert len(set(numbers)) == len(numbers), "two records share a number"
    for path in records():
        assert RECORD_NAME.match(path.name), f"{path.name}: name it NNNN-short-name.md"


def test_every_cited_record_exists() -> None:
    missing = {name: sorted(files) for name, files in citations().items() if not (DECISIONS / name).is_file()}
    assert not missing, f"code cites decision records that do not exist: {missing}"


def test_every_record_is_cited_by_code() -> None:
    cited = citations()
    uncited = [p.name for p in records() if p.name not in cited]
    assert not uncited, f"records no code file cites (cite them where the constant lives): {uncited}"


def test_the_index_lists_every_record() -> None:
    index = (DECISIONS / "README.md").read_text(encoding="utf-8")
    unlisted = [p.name for p in records() if f"({p.name})" not in index]
    assert not unlisted, f"docs/decisions/README.md does not list: {unlisted}"


def test_records_are_short_and_complete() -> None:
    for path in records():
        text = path.read_text(encoding="utf-8")
        assert len(text.splitlines()) <= MAX_RECORD_LINES, f"{path.name}: a record is a page, not an essay"
        for section in SECTIONS:
            assert section in text, f"{path.name}: no '{section}' section"
        assert "Status" in text, f"{path.name}: no status line"


def test_no_docstring_in_the_product_is_an_essay() -> None:
    long = {}
    for path in code_files(PRODUCT):
        for key, text in docstrings(path):
            lines = len(inspect.cleandoc(text).splitlines())
            if lines > MAX_DOCSTRING_LINES and key not in LONG_DOCSTRINGS:
                long[key] = lines
    assert not long, (
        f"docstrings over {MAX_DOCSTRING_LINES} lines (move measurements to docs/decisions/, "
        f"or add an algorithm's docstring to LONG_DOCSTRINGS with the reason): {long}"
    )


def test_product_code_cites_records_not_result_tables() -> None:
    tables = re.compile(r"(research|bench)/results/|research/studies/")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in code_files(PRODUCT)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if tables.search(line)
    ]
    assert not offenders, f"cite the decision record (docs/decisions/) instead of the table: {offenders}"
