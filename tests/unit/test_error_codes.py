"""The error-code list (labeldp.error_codes) is the codes the source raises: no more, no fewer.

Read from the source itself (ast), so a new ``raise InvalidInput("new_code", ...)`` without an
entry fails here, and so does an entry nothing raises any more.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from labeldp import errors
from labeldp.error_codes import ERROR_CODES

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "shared", ROOT / "services", ROOT / "tools"]
ERROR_CLASSES = {n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, errors.LabelDPError)} | {
    "ExportError",  # labeldp.learning: a code the features party answers with (model_delivery)
    "PredictionError",
    "UnknownIds",
}
MESSAGE_FIRST = {"PredictionError", "UnknownIds"}  # (message, details, code=...)
CODE_SHAPE = re.compile(r"^[a-z]+(_[a-z0-9]+)*$")


def _python_files() -> list[Path]:
    return [p for root in SOURCES for p in root.rglob("*.py") if p.name != "error_codes.py"]


def _callee(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def raised_codes() -> dict[str, list[str]]:
    """Every constant code given to an error class or to ``error_response``, with where."""
    found: dict[str, list[str]] = {}
    constants: dict[str, str] = {}
    for path in _python_files():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):  # module constants named like a code, e.g. UNSUPPORTED_COLUMN_TYPE
            if isinstance(node, ast.Assign) and isinstance(getattr(node.value, "value", None), str):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id.isupper():
                        constants[target.id] = node.value.value
        for node in ast.walk(tree):  # a class's own code: ``class UnknownIds(PredictionError): code = "unknown_ids"``
            if isinstance(node, ast.ClassDef) and node.name in ERROR_CLASSES:
                for item in node.body:
                    named_code = isinstance(item, ast.Assign) and [ast.unparse(t) for t in item.targets] == ["code"]
                    if named_code and isinstance(item.value, ast.Constant):  # type: ignore[attr-defined]
                        where = f"{path.relative_to(ROOT)}:{item.lineno}"
                        found.setdefault(str(item.value.value), []).append(where)  # type: ignore[attr-defined]
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = _callee(node)
            keyword = next((k.value for k in node.keywords if k.arg == "code"), None)
            if name in MESSAGE_FIRST:
                arg = keyword
            elif name in ERROR_CLASSES:
                arg = node.args[0] if node.args else keyword
            elif name == "error_response" and len(node.args) >= 2:
                arg = node.args[1]
            elif name == "send_error" and len(node.args) >= 3:  # a middleware's answer: (send, status, code, …)
                arg = node.args[2]
            else:
                continue
            code: str | None = None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                code = arg.value
            elif isinstance(arg, ast.Name) and arg.id in constants:
                code = constants[arg.id]
            if code is not None:
                found.setdefault(code, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_raised_code_is_listed() -> None:
    raised = raised_codes()
    assert len(raised) > 50, "the scan found too few codes: it no longer reads the source"
    missing = {code: where for code, where in raised.items() if code not in ERROR_CODES}
    assert not missing, f"codes raised but not in labeldp.error_codes.ERROR_CODES: {missing}"


def test_every_listed_code_is_used_somewhere() -> None:
    text = "\n".join(p.read_text() for p in _python_files())
    unused = [code for code in ERROR_CODES if f'"{code}"' not in text]
    assert not unused, f"codes listed but raised nowhere: {unused}"


def test_codes_are_stable_names_with_a_meaning() -> None:
    for code, meaning in ERROR_CODES.items():
        assert CODE_SHAPE.match(code), code
        assert meaning and len(meaning) <= 120, code
