"""The console of both services (``/console``) rendered by a real headless Chromium against real
service processes: the pages draw the API's data (domains with their spent-ε histogram, label
sets, releases followed to delivery, the audit log; the inbox, a training's loss curve, a model
card's plots, an export and predictions) and a page whose script breaks fails the test.

Chromium is Debian's ``chromium`` package, installed by ``make install``/``make test`` (the
Makefile's ``browser`` target); this test installs nothing. Set ``CONSOLE_SCREENSHOTS``
to a folder (``docs/console``) to keep the screenshots it takes there.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest

from labeldp_tools.local_stack import LocalStack

from .conftest import upload_csv, wait_for_status

EPOCHS = 3


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    text: str = ""

    def all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Node]:
        found = []
        for c in self.children:
            classes = c.attrs.get("class", "").split()
            if (tag is None or c.tag == tag) and (cls is None or cls in classes) and all(
                c.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items()
            ):
                found.append(c)
            found.extend(c.all(tag, cls, **attrs))
        return found

    def one(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Node:
        found = self.all(tag, cls, **attrs)
        assert len(found) == 1, (tag, cls, attrs, len(found))
        return found[0]

    def texts(self) -> str:
        return self.text + " ".join(c.texts() for c in self.children)


VOID = {"meta", "link", "input", "br", "img", "hr", "source", "area", "base", "col", "wbr"}


class _Tree(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.root = Node("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].text += data


def render(url: str, tmp_path: Path, name: str, height: int) -> Node:
    """The page's DOM once its scripts settled (virtual time), and its screenshot beside it."""
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium package is missing: `make install` installs it (the Makefile's browser target)"
    shot = tmp_path / f"{name}.png"
    done = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--window-size=1280,{height}",
         f"--user-data-dir={tmp_path / 'chromium'}", "--virtual-time-budget=20000", f"--screenshot={shot}",
         "--dump-dom", url],
        capture_output=True, text=True, timeout=90, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.stat().st_size > 20_000  # a drawn page, not a blank one
    if keep := os.environ.get("CONSOLE_SCREENSHOTS"):
        shutil.copy(shot, Path(keep) / shot.name)
    tree = _Tree()
    tree.feed(done.stdout)
    body = tree.root.one("body")
    errors = body.one(id="errors")
    # Any exception of the page's scripts lands here and in body[data-state]: the page is broken.
    assert body.attrs["data-state"] == "ready" and not errors.texts().strip(), errors.texts()
    for section in body.all("div", data_state="error"):
        raise AssertionError(f"section {section.attrs['id']}: {section.texts()}")
    return body


@pytest.fixture(scope="module")
def seeded(stack: LocalStack, data, feature_table: str) -> dict[str, str]:
    """A privacy domain (ε 3 per id) whose 400 ids spent 1 ε and 100 of them 3 ε (exhausted), both
    releases delivered, and a model trained on the first."""
    truth = dict(zip(data.ids, data.labels))
    with stack.labels_client() as labels, stack.features_client() as features:
        r = labels.post("/v1/privacy-domains", json={"name": "retail", "id_source": "crm:customer", "epsilon": 3})
        assert r.status_code == 201, r.text
        retail = r.json()["id"]
        releases = []
        for n, eps in ((400, 1), (100, 2)):
            ids = list(data.ids[:n])
            r = labels.post("/v1/label-sets", json={
                "name": f"spend-{n}", "label_type": "real", "domain": {"low": 0, "high": float(data.clip)},
                "privacy_domain": retail, "ids": ids,
            })
            assert r.status_code == 201, r.text
            assert upload_csv(labels, r.json()["id"], [(i, float(truth[i])) for i in ids]).status_code == 200
            r = labels.post(f"/v1/label-sets/{r.json()['id']}/releases",
                            json={"mechanism": "laplace", "epsilon": eps, "feature_table": feature_table})
            assert r.status_code == 202, r.text
            releases.append(r.json()["id"])
        for release_id in releases:
            wait_for_status(labels, release_id, "delivered")
        r = features.post("/v1/trainings", json={"release_id": releases[0], "epochs": EPOCHS, "batch_size": 64})
        assert r.status_code == 202, r.text
        deadline = time.monotonic() + 120
        while (t := features.get(f"/v1/trainings/{r.json()['id']}").json())["status"] not in ("succeeded", "failed"):
            assert time.monotonic() < deadline, t
            time.sleep(0.2)
        assert t["status"] == "succeeded", t
    return {"release": releases[0], "release_2": releases[1], "training": t["id"], "model": t["model_id"],
            "ids": ",".join(data.ids[1400:1403])}


def test_console_pages_are_public_static_and_locked_down(stack: LocalStack) -> None:
    for url in (stack.labels_url, stack.features_url):
        with httpx.Client(base_url=url) as anonymous:
            moved = anonymous.get("/console")
            assert moved.status_code == 308 and moved.headers["location"] == "console/"
            page = anonymous.get("/console/")
            assert page.status_code == 200 and "<script src=\"common.js\"" in page.text
            assert "script-src 'self'" in page.headers["content-security-policy"]
            assert anonymous.get("/console/common.js").status_code == 200
            assert anonymous.get("/v1/releases").status_code == 401  # the data is not public


def test_labels_console_shows_domains_histogram_sets_releases_and_audit(
    stack: LocalStack, seeded: dict[str, str], tmp_path: Path
) -> None:
    page = render(f"{stack.labels_url}/console/#key={stack.labels_key}", tmp_path, "labels", 1000)
    domain = page.one("div", "domain", data_name="retail")
    assert "100 exhausted" in domain.texts() and "400 ids" in domain.texts()
    bars = [float(b.attrs["data-value"]) for b in domain.all("rect", "bar")]
    # 10 bins of 0.3 ε over [0, 3]: 300 ids spent 1 ε (bin [0.9, 1.2)), 100 spent 3 ε (the last bin).
    assert bars == [0, 0, 0, 300, 0, 0, 0, 0, 0, 100]
    assert {"spend-400", "spend-100"} <= {td.texts() for td in page.one(id="label-sets").all("td")}
    for release_id in (seeded["release"], seeded["release_2"]):
        row = page.one("tr", data_id=release_id)
        # Followed through the release's event stream to its end: delivered.
        assert row.attrs["data-status"] == "delivered" and row.attrs["data-followed"] == "end", row.attrs
        assert int(row.attrs["data-events"]) >= 1 and row.one(cls="stage").texts() == "delivered"
    audit = page.one(id="audit").texts()
    assert "privacy_domain.created" in audit and "retail" in audit
    for log in ("labels", "outbox"):  # the key went in headers only, never in a URL
        assert stack.labels_key not in stack.log_path(log).read_text()


def test_features_console_shows_inbox_curves_model_plots_export_and_predictions(
    stack: LocalStack, seeded: dict[str, str], tmp_path: Path
) -> None:
    model = seeded["model"]
    with stack.features_client() as features:  # one more, still queued or running as the page opens
        r = features.post("/v1/trainings", json={"release_id": seeded["release_2"], "epochs": EPOCHS})
        assert r.status_code == 202, r.text
    page = render(
        f"{stack.features_url}/console/#key={stack.features_key}&predict={model}&ids={seeded['ids']}&export={model}",
        tmp_path, "features", 1900,
    )
    inbox = page.one(id="inbox")
    assert inbox.one("tr", data_id=seeded["release"]) and inbox.one("tr", data_id=seeded["release_2"])
    training = page.one("div", "training", data_id=seeded["training"])
    assert training.attrs["data-status"] == "succeeded" and training.attrs["data-followed"] == "end"
    for series in ("train loss", "validation loss"):  # one point per epoch on each curve
        assert len(training.all("circle", "pt", data_series=series)) == EPOCHS
    live = page.one("div", "training", data_id=r.json()["id"])  # followed live: at least its first event
    assert int(live.attrs["data-events"]) >= 1, live.attrs
    card = page.one("div", "model", data_id=model)
    assert len(card.all("circle", "pt", data_series="train loss")) == EPOCHS
    fit = [float(b.attrs["data-value"]) for b in card.all("rect", "bar")]
    with stack.features_client() as features:
        true_label = features.get(f"/v1/models/{model}").json()["metrics"]["true_label"]
    assert fit == [true_label["test_mse"], true_label["baseline_mse"]]  # debiased: may be below zero
    assert int(card.one("a", "export").attrs["data-bytes"]) > 10_000  # the ONNX file, fetched with the key
    predictions = [float(td.texts().replace(",", "")) for td in card.all("td", "prediction")]
    assert len(predictions) == 3 and all(math.isfinite(p) for p in predictions)
    assert stack.features_key not in stack.log_path("features").read_text()
