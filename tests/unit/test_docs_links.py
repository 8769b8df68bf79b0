"""The documentation stays walkable: every relative link resolves, the README stays a front door.

Checks the README, CONTRIBUTING.md, docs/*.md and the research, bench and deploy READMEs: every
relative link points to a file that exists (and, for a link into a Markdown file with an
anchor, to a heading that exists); the README is at most 200 lines and starts with the two
set-up commands; its mechanism table names every registry entry; every LABELDP_ variable the
pages name is a setting, and docs/operations.md lists every setting.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labeldp.mechanisms.registry import ENTRIES
from labeldp.service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")]
    + [ROOT / p for p in ("research/README.md", "bench/README.md", "deploy/README.md")]
)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code, where brackets are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def links(text: str) -> list[str]:
    return [a or b for a, b in LINK.findall(prose(text))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return "".join(c for c in text if c.isalnum() or c in " -_").replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", text).splitlines():
        if match := re.match(r"#{1,6}\s+(.*)", line):
            base = slug(match.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    text = page.read_text()
    broken = []
    for target in links(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        missing_anchor = file.exists() and anchor and file.suffix == ".md" and anchor not in anchors(file.read_text())
        if not file.exists() or missing_anchor:
            broken.append(target)
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_an_existing_file(page: Path) -> None:
    assert page.is_file(), page
    assert broken_links(page) == []


def test_the_checker_sees_a_broken_link_and_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A heading: with `code`\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#a-heading-with-code) [gone](missing.md) [bad](there.md#nope)\n"
        "`[not a link](nowhere.md)` [web](https://example.org/x)\n```\n[code](nowhere.md)\n```\n"
    )
    assert broken_links(page) == ["missing.md", "there.md#nope"]


def test_readme_is_a_front_door_that_starts_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    first_block = re.search(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M)
    assert first_block is not None
    before = text[: first_block.start()].strip()
    assert before.startswith("# ") and "\n" not in before, "only the title comes before the commands"
    assert first_block.group(1).splitlines() == ["make demo", "make test"]


def test_readme_mechanism_table_names_every_registry_entry() -> None:
    text = (ROOT / "README.md").read_text()
    rows = {m.group(1) for m in re.finditer(r"^\| `([a-z_]+)` \|", text, re.M)}
    assert {e.name for e in ENTRIES} <= rows


def test_every_named_setting_exists_and_operations_lists_them_all() -> None:
    fields = {f"LABELDP_{name.upper()}" for name in Settings.model_fields}
    named = {m for page in PAGES for m in re.findall(r"LABELDP_[A-Z0-9_]*[A-Z0-9]", page.read_text())}
    assert named - fields == set(), "documented settings that do not exist"
    operations = (ROOT / "docs" / "operations.md").read_text()
    assert {f for f in fields if f not in operations} == set(), "settings missing from docs/operations.md"
