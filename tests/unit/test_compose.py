"""Invariant 1 in deployment: one way from the labels party to the features party; and the
operations facts of deploy/README.md: CPU by default with a GPU override, health, restarts,
secrets only from an untracked .env."""

import re
import subprocess
import sys
from pathlib import Path

import yaml

from labeldp.service.settings import Settings, parse_api_keys, require_secrets
from labeldp.signing import public_key_of

ROOT = Path(__file__).resolve().parents[2]
LABELS_SERVICES = {"labels-party-api", "labels-party-outbox"}
REQUIRED = re.compile(r"\$\{([A-Z0-9_]+):\?[^}]*\}")


def _compose(name: str = "docker-compose.yml") -> dict:
    return yaml.safe_load((ROOT / name).read_text())


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


def test_compose_runs_on_cpu_by_default_and_the_gpu_is_an_override():
    features = _compose()["services"]["features-party"]
    assert "deploy" not in features  # `docker compose up` works on a laptop without a GPU
    assert _env_file(features["env_file"])["LABELDP_DEVICE"] == "cpu"
    dockerfile = (ROOT / features["build"]["dockerfile"]).read_text()
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in dockerfile  # no CUDA libraries

    gpu = _compose("docker-compose.gpu.yml")["services"]["features-party"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert any("gpu" in d.get("capabilities", []) and d.get("driver") == "nvidia" for d in devices)
    assert gpu["environment"]["LABELDP_DEVICE"] == "cuda"
    assert gpu["build"]["args"]["TORCH_INDEX_URL"] == "https://pypi.org/simple"  # the CUDA build of torch
    assert set(_compose("docker-compose.gpu.yml")["services"]) == {"features-party"}


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


def test_the_labels_party_reaches_the_postgres_service_with_its_password_from_env():
    services = _compose()["services"]
    db = services["postgres"]["environment"]
    assert REQUIRED.fullmatch(db["POSTGRES_PASSWORD"]).group(1) == "POSTGRES_PASSWORD"
    for name in LABELS_SERVICES:
        url = services[name]["environment"]["LABELDP_LABELS_DATABASE_URL"]
        assert REQUIRED.sub(r"<\1>", url) == (
            f"postgresql+psycopg://{db['POSTGRES_USER']}:<POSTGRES_PASSWORD>@postgres:5432/{db['POSTGRES_DB']}"
        ), name


SECRET_NAME = re.compile(r"(KEY|SECRET|PASSWORD)")


def _required_variables(name: str = "docker-compose.yml") -> set[str]:
    return set(REQUIRED.findall((ROOT / name).read_text()))


def _required_by_any_compose_file() -> set[str]:
    return set().union(*(_required_variables(p.name) for p in ROOT.glob("docker-compose*.yml")))


def test_every_secret_comes_from_env_and_compose_refuses_to_start_without_it():
    services = _compose()["services"]
    for name, service in services.items():
        for key, value in (service.get("environment") or {}).items():
            if SECRET_NAME.search(key):
                assert REQUIRED.fullmatch(str(value)), f"{name}: {key} must be ${{{key}:?...}} from .env"
        if "env_file" in service:  # tracked files hold settings, never a secret
            assert not [k for k in _env_file(service["env_file"]) if SECRET_NAME.search(k)], name
    assert not list(ROOT.glob("deploy/*.env.example"))  # no change-me values left to copy
    assert _required_variables() == {
        "LABELDP_LABELS_API_KEY", "LABELDP_FEATURES_API_KEY", "LABELDP_SIGNING_KEY", "LABELDP_SIGNING_PUBLIC_KEYS",
        "LABELDP_INBOX_TRANSPORT_KEY", "POSTGRES_PASSWORD",
    }


def test_each_container_gets_only_the_secrets_it_uses():
    services = _compose()["services"]

    def secrets_of(name: str) -> set[str]:
        return {k for k in services[name].get("environment", {}) if SECRET_NAME.search(k)}

    assert secrets_of("labels-party-api") == {"LABELDP_LABELS_API_KEY"}
    # signs; presents the transport key at the inbox; needs no API key
    assert secrets_of("labels-party-outbox") == {"LABELDP_SIGNING_KEY", "LABELDP_INBOX_TRANSPORT_KEY"}
    # the features party holds the advertiser's public key only: it can verify, never sign
    assert secrets_of("features-party") == {
        "LABELDP_FEATURES_API_KEY", "LABELDP_SIGNING_PUBLIC_KEYS", "LABELDP_INBOX_TRANSPORT_KEY"
    }


def test_the_documented_generator_writes_every_required_secret_and_each_passes_the_services_checks():
    out = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "generate_env.py")], capture_output=True, text=True, check=True
    ).stdout
    values = dict(line.split("=", 1) for line in out.splitlines())
    assert set(values) == _required_by_any_compose_file()
    assert len(set(values.values())) == len(values)  # independent secrets
    settings = Settings(
        labels_api_key=values["LABELDP_LABELS_API_KEY"],
        features_api_key=values["LABELDP_FEATURES_API_KEY"],
        signing_key=values["LABELDP_SIGNING_KEY"],
        signing_public_keys=values["LABELDP_SIGNING_PUBLIC_KEYS"],
        inbox_transport_key=values["LABELDP_INBOX_TRANSPORT_KEY"],
    )
    require_secrets(
        settings, "labels_api_key", "features_api_key", "inbox_transport_key", "signing_key", "signing_public_keys"
    )
    # the stdlib derivation of the public key is the one `cryptography` makes
    assert public_key_of(values["LABELDP_SIGNING_KEY"]) == values.pop("LABELDP_SIGNING_PUBLIC_KEYS")
    assert values.pop("LABELDP_SIGNING_KEY").startswith("ed25519-sk:")
    labels_keys = values.pop("LABELDP_LABELS_API_KEY")  # an admin key and a release key
    assert [(sorted(k.scopes), len(k.key)) for k in parse_api_keys(labels_keys)] == [(["admin"], 43), (["release"], 43)]
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{16,}", v) for v in values.values())  # safe inside a database URL
    assert all(len(v) >= 40 for k, v in values.items() if k.startswith("LABELDP_") or k.endswith("POSTGRES_PASSWORD"))
    # MinIO caps its keys: access key 3-20 characters, secret 8-40
    assert len(values["LABELS_S3_ACCESS_KEY"]) <= 20
    assert all(len(values[k]) <= 40 for k in ("LABELS_S3_SECRET_KEY", "MINIO_ROOT_PASSWORD"))
    assert "python3 deploy/generate_env.py > .env" in (ROOT / "deploy" / "README.md").read_text()


def test_dot_env_is_neither_committed_nor_sent_to_a_build():
    assert ".env" in (ROOT / ".gitignore").read_text().split()
    assert ".env" in (ROOT / ".dockerignore").read_text().split()


def test_every_service_has_a_healthcheck_and_the_outbox_reports_its_heartbeat():
    services = _compose()["services"]
    for name, service in services.items():
        assert service.get("healthcheck", {}).get("test"), name
    probe = services["labels-party-outbox"]["healthcheck"]["test"]
    assert probe[:4] == ["CMD", "python", "-m", "labeldp.service.metrics"] and "heartbeat" in probe


def test_images_leave_local_state_out():
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert {".venv", "var", "bench/cache", ".git", ".env", "tests"} <= ignored
