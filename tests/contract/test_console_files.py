"""The console's files (labeldp.service.console) without a browser: public, locked down by their
headers, each service's own page beside the common files, nothing outside those folders, and the
API behind them still asking for a key (the browser test is tests/integration/test_console.py)."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from tests.contract.conftest import features_app, labels_app


@pytest.mark.parametrize("party", ["labels", "features"])
def test_console_files_are_public_static_and_locked_down(party: str, tmp_path) -> None:
    app = labels_app(tmp_path) if party == "labels" else features_app(tmp_path)
    with TestClient(app) as client:
        moved = client.get("/console", follow_redirects=False)
        assert moved.status_code == 308 and moved.headers["location"] == "console/"
        page = client.get("/console/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe" not in csp
        assert page.headers["referrer-policy"] == "no-referrer"
        scripts = re.findall(r'<script src="([^"]+)"', page.text)
        assert scripts == ["common.js", f"{party}.js"] and "<script>" not in page.text  # no inline script
        for name in [*scripts, "console.css"]:
            served = client.get(f"/console/{name}")
            assert served.status_code == 200 and served.headers["content-security-policy"] == csp, name
        other = "features" if party == "labels" else "labels"
        assert client.get(f"/console/{other}.js").status_code == 404  # only this service's page
        assert client.get("/console/..%2Fconsole.py").status_code == 404
        assert client.get("/console/%2E%2E/app.py").status_code == 404
        assert client.get("/v1/releases").status_code == 401  # the data still needs a key
