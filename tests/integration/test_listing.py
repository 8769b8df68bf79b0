"""Label sets and releases can be listed page by page, and raw labels deleted once spent."""

from __future__ import annotations

from .conftest import upload_csv, wait_charged


def _pages(labels, url: str, limit: int, **query: str) -> list[dict]:  # type: ignore[no-untyped-def]
    # The filters go in ``query``: httpx's ``params`` replace a query string written into ``url``.
    items, cursor = [], None
    while True:
        params = {**query, "limit": limit, **({"cursor": cursor} if cursor else {})}
        page = labels.get(url, params=params).json()
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items


def test_lists_page_through_everything_once_in_creation_order(stack) -> None:
    with stack.labels_client() as labels:
        created = []
        for k in range(5):
            r = labels.post("/v1/label-sets", json={"name": f"page-{k}", "domain": {"low": 0, "high": 1},
                                                    "ids": [f"p{k}-a", f"p{k}-b"]})
            created.append(r.json()["id"])
        listed = [item["id"] for item in _pages(labels, "/v1/label-sets", 2)]
        assert len(listed) == len(set(listed))
        assert [i for i in listed if i in created] == created
        newest = [item["id"] for item in _pages(labels, "/v1/label-sets", 2, order="desc")]  # the real database's
        assert len(newest) == len(set(newest)) and [i for i in newest if i in created] == created[::-1]
        assert labels.get("/v1/label-sets", params={"cursor": "not-a-cursor"}).json()["code"] == "invalid_cursor"
        assert labels.get("/v1/label-sets", params={"limit": 0}).status_code == 422

        ls = created[0]
        assert upload_csv(labels, ls, [("p0-a", 0.5), ("p0-b", 0.25)]).status_code == 200
        ids = [labels.post(f"/v1/label-sets/{ls}/releases", json={"mechanism": "laplace", "epsilon": 0.5}).json()["id"]
               for _ in range(3)]
        assert [r["id"] for r in _pages(labels, "/v1/releases", 2, label_set_id=ls)] == ids


def test_raw_labels_can_be_deleted_after_release_and_the_ledger_stays(stack) -> None:
    with stack.labels_client() as labels:
        r = labels.post("/v1/label-sets", json={"name": "spent", "domain": {"low": 0, "high": 1}, "ids": ["d1", "d2"]})
        ls = r.json()["id"]
        assert upload_csv(labels, ls, [("d1", 0.5), ("d2", 0.25)]).status_code == 200
        release = labels.post(f"/v1/label-sets/{ls}/releases", json={"mechanism": "laplace", "epsilon": 1}).json()
        wait_charged(labels, release["id"])  # charged: its job read the labels
        before = labels.get(f"/v1/label-sets/{ls}").json()["budget"]
        folder = stack.workdir / "labels-data" / "label_sets" / ls / "labels"  # the local object store
        assert list(folder.glob("*"))
        gone = labels.delete(f"/v1/label-sets/{ls}/labels")
        assert gone.status_code == 200 and gone.json()["labels_deleted"] is True
        assert not list(folder.glob("*"))
        assert gone.json()["budget"]["spent_micro"] == before["spent_micro"]
        again = labels.post(f"/v1/label-sets/{ls}/releases", json={"mechanism": "laplace", "epsilon": 1})
        assert again.status_code == 409 and again.json()["code"] == "labels_deleted"
        assert upload_csv(labels, ls, [("d1", 0.5)]).json()["code"] == "labels_deleted"
        assert labels.delete(f"/v1/label-sets/{ls}/labels").status_code == 409
        assert labels.get(f"/v1/releases/{release['id']}").json()["epsilon_micro"] == 1_000_000
