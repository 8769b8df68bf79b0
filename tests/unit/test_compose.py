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
        assert (ROOT / service["build"]["dockerfile"]).is_file(), name
