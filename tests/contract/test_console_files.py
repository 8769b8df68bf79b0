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


@pytest.mark.parametrize("party", ["labels", "features"])
def test_the_console_reads_each_list_newest_first_and_only_what_it_shows(party: str, tmp_path) -> None:
    """Every list the page reads goes through ``newest(path, n)``: ``order=desc`` pages until n items, never
    the whole list read oldest first and reversed (issue 26); each path is a list route of the contract."""
    app = labels_app(tmp_path) if party == "labels" else features_app(tmp_path)
    with TestClient(app) as client:
        script = client.get(f"/console/{party}.js").text
        common = client.get("/console/common.js").text
        spec = client.app.openapi()  # type: ignore[attr-defined]
    newest = re.search(r"async newest\(path, n\) \{(.*?)\n  \},", common, re.S)
    assert newest is not None and "order=desc" in newest.group(1) and "items.length < n" in newest.group(1)
    assert "reverse()" not in script and "C.all(" not in script and "async all(" not in common
    listed = re.findall(r'C\.newest\("([^"]+)", (\d+)\)', script)
    assert len(listed) >= 3
    list_routes = {
        path.removeprefix("/") for path, item in spec["paths"].items()
        if any(p["name"] == "order" for p in item.get("get", {}).get("parameters", []))
    }
    for path, n in listed:
        assert path in list_routes and 1 <= int(n) <= 500, path
