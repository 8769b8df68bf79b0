"""Each party installs from its own extra, and the labels party never carries torch.

The import graph is checked statically by ``lint-imports`` (docs/architecture.md, "Layers");
these tests hold the packaging side: the extras, the images that use them, and what a
labels-party process actually loads.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SELF = re.compile(r"^labeldp\[(?P<extras>[^\]]+)\]$")


def _requirements(extra: str) -> set[str]:
    """Distribution names an extra pulls in, following the project's own ``labeldp[...]`` aliases."""
    names: set[str] = set()
    for req in PROJECT["optional-dependencies"][extra]:
        alias = SELF.match(req.replace(" ", ""))
        if alias:
            for inner in alias["extras"].split(","):
                names |= _requirements(inner.strip())
        else:
            names.add(re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0].lower())
    return names


def _base() -> set[str]:
    return {re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0].lower() for req in PROJECT["dependencies"]}


def test_labels_extra_and_base_dependencies_carry_no_torch() -> None:
    assert "torch" not in _base()
    assert "torch" not in _requirements("labels")


def test_features_extra_carries_torch_and_train_is_its_alias() -> None:
    assert "torch" in _requirements("features")
    assert _requirements("train") == _requirements("features")


def _pip_installs(dockerfile: str) -> list[str]:
    text = (ROOT / "deploy" / dockerfile).read_text()
    return re.findall(r"^RUN pip install [^\n]*?(\S+)$", text, flags=re.MULTILINE)


def test_each_image_installs_its_party_extra() -> None:
    assert _pip_installs("labels-party.Dockerfile") == ['".[labels]"']
    # torch first, from the CPU wheel index by default (deploy/README.md), at the extra's own pin;
    # then the extra, which that torch already satisfies.
    assert _pip_installs("features-party.Dockerfile") == [f'"{_torch_pin()}"', '".[features]"']


def _torch_pin() -> str:
    (pin,) = [r.replace(" ", "") for r in PROJECT["optional-dependencies"]["features"] if r.startswith("torch")]
    return pin


def test_labels_party_process_loads_no_torch_and_no_features_party() -> None:
    probe = (
        "import sys\n"
        "import labels_party.app, labels_party.outbox, labels_party.offline\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'features_party'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == ""
