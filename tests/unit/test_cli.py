import subprocess
import sys

import pytest

COMMANDS = [[], ["demo"], ["serve"], ["outbox"]]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a) or "labeldp")
def test_every_command_has_help(args):
    out = subprocess.run(
        [sys.executable, "-m", "labeldp.cli", *args, "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "usage: labeldp" in out.stdout


def test_unknown_party_is_a_usage_error():
    out = subprocess.run(
        [sys.executable, "-m", "labeldp.cli", "serve", "nobody"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "invalid choice" in out.stderr
