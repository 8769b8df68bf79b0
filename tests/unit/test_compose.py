"""Invariant 1 in deployment: one way from the labels party to the features party."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
LABELS_SERVICES = {"labels-party-api", "labels-party-outbox"}


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _networks(service: dict) -> set[str]:
    nets = service.get("networks", [])
    return set(nets if isinstance(nets, list) else nets.keys())


def test_outbox_publishes_and_exposes_no_port():
    outbox = _compose()["services"]["labels-party-outbox"]
    assert "ports" not in outbox and "expose" not in outbox
    assert outbox["command"][:2] == ["labeldp", "outbox"]


def test_outbox_is_the_only_labels_party_container_on_the_exchange_network():
    services = _compose()["services"]
    features_nets = _networks(services["features-party"])
    on_shared = {name for name in LABELS_SERVICES if _networks(services[name]) & features_nets}
    assert on_shared == {"labels-party-outbox"}


def test_features_party_shares_no_network_with_the_labels_api():
    services = _compose()["services"]
    assert not (_networks(services["features-party"]) & _networks(services["labels-party-api"]))


def test_exchange_network_is_internal():
    compose = _compose()
    services = compose["services"]
    shared = _networks(services["features-party"]) & _networks(services["labels-party-outbox"])
    assert shared, "outbox must reach the features party"
    for net in shared:
        assert (compose["networks"][net] or {}).get("internal") is True


def test_features_party_requests_a_gpu():
    devices = _compose()["services"]["features-party"]["deploy"]["resources"]["reservations"]["devices"]
    assert any("gpu" in d.get("capabilities", []) for d in devices)


def test_every_service_has_its_dockerfile():
    for name, service in _compose()["services"].items():
        if "image" in service:  # a published image (the ledger's PostgreSQL)
            continue
        assert (ROOT / service["build"]["dockerfile"]).is_file(), name


API_SERVICES = {"labels-party-api": 8001, "features-party": 8002}


def _env_file(path: str) -> dict[str, str]:
    out = {}
    for line in (ROOT / path).read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def test_every_service_restarts_unless_stopped():
    for name, service in _compose()["services"].items():
        assert service.get("restart") == "unless-stopped", name


def test_apis_are_healthy_only_when_readyz_answers():
    services = _compose()["services"]
    for name, port in API_SERVICES.items():
        probe = " ".join(services[name]["healthcheck"]["test"])
        assert f":{port}/readyz" in probe, name
        assert "/healthz" not in probe, name  # liveness alone says nothing about the database


def test_the_ledger_database_is_postgres_reached_only_by_the_labels_party():
    compose = _compose()
    services = compose["services"]
    db = services["postgres"]
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    assert any(v.split(":")[1] == "/var/lib/postgresql/data" for v in db["volumes"])
    assert not (_networks(db) & _networks(services["features-party"]))
    for name in LABELS_SERVICES:
        assert _networks(db) & _networks(services[name]), name
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy", name


def test_the_labels_env_example_points_at_the_postgres_service():
    services = _compose()["services"]
    db_env = _env_file(services["postgres"]["env_file"])
    url = _env_file(services["labels-party-api"]["env_file"])["LABELDP_LABELS_DATABASE_URL"]
    expected = (
        f"postgresql+psycopg://{db_env['POSTGRES_USER']}:{db_env['POSTGRES_PASSWORD']}"
        f"@postgres:5432/{db_env['POSTGRES_DB']}"
    )
    assert url == expected


def test_images_leave_local_state_out():
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert {".venv", "var", "bench/cache", ".git"} <= ignored
