"""Schemathesis against both services' contracts, as real processes on loopback (issue 10, item 1).

The schemathesis CLI runs all four of its phases on each service: the contract's own
examples, coverage of its boundaries, fuzzing, and stateful sequences along the contract's
links (create a label set, then upload to it, release it, read and redeliver the release;
upload a feature table, then read it). Bounded: 25 cases per operation and a fixed seed, so
both services take well under a minute together. Every answer must be no server error and
conform to the contract (documented status, content type, headers, body schema).

The inbox (``POST /v1/releases``) is fuzzed without the exchange secret, so it only ever
answers 401/413/422/503 here; signed messages are covered by tests/unit/test_features_app.py.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from labeldp_tools.local_stack import LocalStack

CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
        "unsupported_method",  # a method the path lacks: 405 ...
        "allow_header_conformance",  # ... with an Allow header naming exactly the path's methods
    ]
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    s = LocalStack(tmp_path_factory.mktemp("schemathesis"), extra_env={"LABELDP_MAX_BODY_BYTES": "2000000"})
    s.start("labels", "features")
    yield s
    s.stop()


def schemathesis(base_url: str, key: str, report: Path) -> subprocess.CompletedProcess[str]:
    command = [
        str(Path(sys.executable).parent / "schemathesis"),
        "run",
        f"{base_url}/openapi.json",
        "--header",
        f"Authorization: Bearer {key}",
        "--checks",
        CHECKS,
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--max-examples",
        "25",
        "--seed",
        "20261124",
        "--workers",
        "1",
        "--request-timeout",
        "30",
        # The inbox's event stream is open until the client or the server ends it (or max_seconds, which
        # the fuzzer may pick large): tests/unit/test_inbox_events.py and test_routes.py call it instead.
        "--exclude-path",
        "/v1/inbox/events",
        "--no-color",
        "--report",
        "junit",
        "--report-dir",
        str(report),
    ]
    # Run in the test's folder: schemathesis keeps its example database under the working directory.
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=report)


@pytest.mark.parametrize("party", ["labels", "features"])
def test_no_server_error_and_no_answer_outside_the_contract(stack: LocalStack, party: str, tmp_path: Path) -> None:
    url, key = (stack.labels_url, stack.labels_key) if party == "labels" else (stack.features_url, stack.features_key)
    result = schemathesis(url, key, tmp_path)
    summary = result.stdout[-8000:]
    assert result.returncode == 0, summary + result.stderr[-2000:]
    # It really ran: every operation was tested, in all four phases, with cases generated.
    assert "Tested: " in summary and " generated, " in summary and "passed" in summary, summary
    for phase in ("Examples", "Coverage", "Fuzzing", "Stateful"):
        assert f"✅ {phase}" in summary, summary
    log = stack.log_path(party).read_text(errors="replace")
    # Log lines are JSON (labeldp.service.logs): an exception logged with its stack carries "error_type"
    # (the access line of a request that raised too); a traceback printed outside logging reads "Traceback".
    assert "unhandled error" not in log and "Traceback" not in log and '"error_type"' not in log, log[-4000:]
