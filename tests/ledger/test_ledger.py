"""The per-id ledger: no id of a privacy domain ever spends more than its budget, on SQLite and PostgreSQL.

These run the labels party's domain functions (no HTTP) against a real database from
the ``database_url`` fixture. Each was shown red with a planted bug (see the commit
messages): charging without the per-id check, and reading the spent column outside the
domain lock.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select
from tests.release_jobs import CHARGED, settle

from labeldp.errors import LabelDPError
from labeldp.service.database import make_engine, make_session_factory
from labeldp.service.settings import Settings
from labels_party import ledger
from labels_party.context import LabelsContext
from labels_party.label_sets import LabelSetCreate, create_label_set, read_ids
from labels_party.privacy_domains import PrivacyDomainCreate, create_privacy_domain
from labels_party.releases import ReleaseCreate, create_release
from labels_party.store import Base, LabelSetRow, PrivacyDomainRow, ReleaseRow
from labels_party.uploads import upload_labels


def make_ctx(database_url: str, tmp_path: Path, **settings: object) -> LabelsContext:
    engine = make_engine(database_url)
    if engine.dialect.name == "postgresql":
        engine.dispose()
        from sqlalchemy import create_engine

        engine = create_engine(database_url, pool_size=20, max_overflow=20)
    Base.metadata.create_all(engine)
    return LabelsContext(make_session_factory(engine), tmp_path / "data", Settings(**settings))  # type: ignore[arg-type]


def new_domain(ctx: LabelsContext, name: str, epsilon: float, delta: float = 0.0) -> str:
    """Create the domain ``name`` (its id source too); its ``pd_`` id, what every reference takes."""
    body = PrivacyDomainCreate(name=name, id_source=name, epsilon=epsilon, delta=delta)
    return str(create_privacy_domain(ctx, body, None).body["id"])


def domain_id(ctx: LabelsContext, name: str) -> str:
    """The ``pd_`` id of the domain ``name`` (tests name domains; the API takes ids only)."""
    with ctx.sessions() as s:
        found = s.scalar(select(PrivacyDomainRow.id).where(PrivacyDomainRow.name == name))
    assert found is not None, name
    return found


def labeled_set(ctx: LabelsContext, tmp_path: Path, domain: str, ids: list[str], cap: float | None = None) -> str:
    """A set of the domain named ``domain`` holding ``ids``, each labelled."""
    body = {"name": "s", "domain": {"low": 0, "high": 10}, "privacy_domain": domain_id(ctx, domain), "ids": ids}
    if cap is not None:
        body["total_epsilon"] = cap
    ls = create_label_set(ctx, LabelSetCreate.model_validate(body), None).body
    csv = tmp_path / f"{ls['id']}.csv"
    values = np.random.default_rng(len(ids)).uniform(0, 10, len(ids))
    csv.write_text("id,label\n" + "".join(f"{i},{float(v)!r}\n" for i, v in zip(ids, values)))
    upload_labels(ctx, ls["id"], csv, "text/csv", validate_only=False, claim=None)
    return str(ls["id"])


def release(ctx: LabelsContext, label_set_id: str, epsilon: float, mechanism: str = "laplace", **extra: object) -> dict:
    """Queue the release and run jobs here until it is charged (or its job failed: JobFailed)."""
    body = ReleaseCreate.model_validate({"mechanism": mechanism, "epsilon": epsilon, **extra})
    return settle(ctx, create_release(ctx, label_set_id, body, None).body["id"])


def spent_per_id(ctx: LabelsContext, domain: str) -> dict[str, int]:
    with ctx.sessions() as s:
        row = s.scalar(select(PrivacyDomainRow).where(PrivacyDomainRow.name == domain))
        assert row is not None
        ids, spent, _ = ledger.spent_by_id(ctx, s, row)
    return dict(zip(ids.to_pylist(), spent.tolist()))


def expected_from_releases(ctx: LabelsContext) -> dict[str, int]:
    """What the ledger must hold: every accepted release's ε on every id of its label set."""
    total: dict[str, int] = {}
    with ctx.sessions() as s:
        rows = s.execute(
            select(ReleaseRow.label_set_id, ReleaseRow.epsilon_micro).where(ReleaseRow.status.in_(CHARGED))
        ).all()
        sets = {r.id: r for r in s.scalars(select(LabelSetRow))}
    for label_set_id, eps in rows:
        for i in read_ids(ctx, sets[label_set_id]).column("id").to_pylist():
            total[i] = total.get(i, 0) + eps
    return total


def test_label_sets_over_the_same_ids_share_one_budget(database_url: str, tmp_path: Path) -> None:
    # The measurement: three label sets over the same 5 ids, each released at ε = 1,
    # spent 3 ε per id. Within one privacy domain the third is refused.
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "conversions", epsilon=2)
    ids = [f"u{i}" for i in range(5)]
    sets = [labeled_set(ctx, tmp_path, "conversions", ids) for _ in range(3)]
    release(ctx, sets[0], 1)
    release(ctx, sets[1], 1)
    with pytest.raises(LabelDPError) as exc:
        release(ctx, sets[2], 1)
    assert (exc.value.status_code, exc.value.code) == (409, "budget_exhausted")
    assert spent_per_id(ctx, "conversions") == dict.fromkeys(ids, 2_000_000)
    with ctx.sessions() as s:
        assert len(s.scalars(select(ReleaseRow)).all()) == 2  # a refused request records no job
    # A fourth set over some of these ids and one new id starts from what they spent.
    fourth = labeled_set(ctx, tmp_path, "conversions", ["u0", "new"])
    with pytest.raises(LabelDPError):
        release(ctx, fourth, 0.5)
    other = labeled_set(ctx, tmp_path, "conversions", ["new", "other"])
    release(ctx, other, 0.5)
    assert spent_per_id(ctx, "conversions")["new"] == 500_000


def test_a_label_set_cap_and_the_per_id_budget_both_bind(database_url: str, tmp_path: Path) -> None:
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "d", epsilon=5)
    capped = labeled_set(ctx, tmp_path, "d", ["a", "b"], cap=1)
    release(ctx, capped, 0.6)
    with pytest.raises(LabelDPError) as exc:
        release(ctx, capped, 0.6)
    assert exc.value.code == "budget_exhausted"
    assert spent_per_id(ctx, "d") == {"a": 600_000, "b": 600_000}


def test_delta_is_budgeted_per_id(database_url: str, tmp_path: Path) -> None:
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "g", epsilon=100, delta=2.5e-6)
    ls = labeled_set(ctx, tmp_path, "g", ["a", "b", "c"])
    for _ in range(2):
        out = release(ctx, ls, 1, "gaussian", params={"delta": 1e-6})
        assert out["delta"] == pytest.approx(1e-6)
    with pytest.raises(LabelDPError) as exc:
        release(ctx, ls, 1, "gaussian", params={"delta": 1e-6})
    assert exc.value.code == "budget_exhausted" and "delta" in exc.value.message
    release(ctx, ls, 1, "laplace")  # pure ε releases still fit


@pytest.mark.parametrize(("budget", "stored_units"), [(1e-16, 0), (1.5e-15, 1), (2e-15, 2), (2.9999e-15, 2)])
def test_delta_budgets_round_down(database_url: str, tmp_path: Path, budget: float, stored_units: int) -> None:
    # Charges round up and budgets round down (issue 24): a domain created with δ = 1e-16
    # stores 0 units and refuses any Gaussian release; 1.5e-15 stores 1e-15, never 2e-15.
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "tiny", epsilon=100, delta=budget)
    with ctx.sessions() as session:
        row = session.scalars(select(PrivacyDomainRow).where(PrivacyDomainRow.name == "tiny")).one()
        assert row.delta_budget_units == stored_units
    ls = labeled_set(ctx, tmp_path, "tiny", ["a", "b"])
    charge = 9e-16 if stored_units == 0 else stored_units * 1e-15 + 1e-16  # rounds up to stored_units + 1
    with pytest.raises(LabelDPError) as exc:
        release(ctx, ls, 1, "gaussian", params={"delta": charge})
    assert exc.value.code == "budget_exhausted"


def test_concurrent_releases_never_overspend_any_id(database_url: str, tmp_path: Path) -> None:
    # 36 releases over three overlapping label sets of one domain, 8 at a time. Each set can be
    # accepted at most 10 times (ε = 0.1 of 1 per id), so 12 attempts per set end each one
    # refused: then every id in all three sets is exactly exhausted, whatever the interleaving.
    ctx = make_ctx(database_url, tmp_path)
    new_domain(ctx, "shared", epsilon=1)
    a = [f"id{i:03d}" for i in range(40)]
    b = [f"id{i:03d}" for i in range(20, 60)]
    c = [f"id{i:03d}" for i in range(10, 50)]
    sets = [labeled_set(ctx, tmp_path, "shared", ids) for ids in (a, b, c)]
    outcomes: list[str] = []
    lock = threading.Lock()

    def one(k: int) -> None:
        try:
            release(ctx, sets[k % 3], 0.1)
            result = "accepted"
        except LabelDPError as exc:
            result = exc.code
        with lock:
            outcomes.append(result)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(36)))
    assert set(outcomes) <= {"accepted", "budget_exhausted"}
    accepted = outcomes.count("accepted")
    spent = spent_per_id(ctx, "shared")
    assert max(spent.values()) <= 1_000_000
    assert spent == dict(expected_from_releases(ctx)) | {
        i: 0 for i in spent if i not in expected_from_releases(ctx)
    }
    # Every id in the overlap of all three sets is exactly exhausted: the ledger lets
    # through everything that fits, not less.
    assert spent["id025"] == 1_000_000
    assert 10 <= accepted <= 30
