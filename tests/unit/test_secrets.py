"""Secrets that cannot be left at their defaults, several keys for rotation, and headers that never crash."""

from __future__ import annotations

import base64
import io
import logging
import secrets
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.local_settings import TRANSPORT_AUTH, TRANSPORT_KEY

from labeldp.service.settings import InsecureSettings, Settings, require_secrets
from labeldp.signing import (
    SigningKeyError,
    generate_keypair,
    header_key_id,
    key_id,
    sign,
    sign_file,
    verify,
    verify_file,
    verify_stream,
)
from labels_party.app import create_app


def _settings(tmp_path: Path, **kw: object) -> Settings:
    return Settings(
        labels_database_url=f"sqlite:///{tmp_path / 'l.db'}", labels_data_dir=tmp_path / "data", **kw  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("key", ["", " , ", "dev-labels-key", "change-me-advertiser-key", "short-key"])
def test_a_service_refuses_to_start_with_an_empty_dev_or_short_key(tmp_path: Path, key: str) -> None:
    with pytest.raises(InsecureSettings) as exc:
        create_app(_settings(tmp_path, labels_api_key=key))
    assert "LABELDP_LABELS_API_KEY" in str(exc.value)


def test_dev_keys_need_the_explicit_local_setting_and_empty_keys_never_pass(tmp_path: Path) -> None:
    require_secrets(_settings(tmp_path, allow_dev_secrets=True), "labels_api_key", "signing_key")
    with pytest.raises(InsecureSettings):
        require_secrets(_settings(tmp_path, allow_dev_secrets=True, labels_api_key=""), "labels_api_key")


def test_any_of_several_keys_is_accepted_and_odd_headers_are_401(tmp_path: Path) -> None:
    old, new = "old-key-Qx7vK2mP9wR4tY8z", "new-key-Hn3bV6cX1jL5sD0f"
    app = create_app(_settings(tmp_path, labels_api_key=f"{old}, {new}"))
    with TestClient(app) as client:
        for key in (old, new):
            assert client.get("/v1/label-sets/ls_x", headers={"Authorization": f"Bearer {key}"}).status_code == 404
        for header in ("Bearer wrong", "Bearer ", "Basic " + old, "Bearer \u00e9\u00e8-key", "Bearer " + old + ","):
            r = client.get("/v1/label-sets/ls_x", headers={"Authorization": header.encode("latin-1")})
            assert r.status_code == 401 and r.json()["code"] == "unauthorized", header


def test_signatures_verify_under_any_trusted_key_by_kid_and_odd_headers_are_false() -> None:
    """Rotation without downtime: the receiver lists the old and the new public key, picks one by kid."""
    body = b'{"release_id": "r"}'
    (old, old_pub), (new, new_pub) = generate_keypair(), generate_keypair()
    trusted = f"{old_pub}, {new_pub}"
    for private, public in ((old, old_pub), (new, new_pub)):
        header = sign(body, private)
        assert header_key_id(header) == key_id(public) == key_id(private)
        assert verify(body, trusted, header)
    assert not verify(body, old_pub, sign(body, new))  # the new key before the receiver lists it
    # a signature whose kid names one trusted key but was made by another is refused
    forged_kid = sign(body, new).replace(key_id(new), key_id(old))
    assert not verify(body, trusted, forged_kid)
    for header in (None, "", "sha256=00", "ed25519;kid=x;sig=\u00e9\u00e8", sign(body, old) + "x", "ed25519;kid=;sig="):
        assert not verify(body, trusted, header), header


def test_a_message_signed_by_a_key_the_receiver_does_not_trust_is_refused(tmp_path: Path) -> None:
    from features_party.app import create_app as features_app
    from labeldp.schema import SIGNATURE_HEADER

    trusted, trusted_pub = generate_keypair()
    stranger, _ = generate_keypair()
    settings = Settings(
        features_database_url=f"sqlite:///{tmp_path / 'f.db'}", features_data_dir=tmp_path / "f",
        features_api_key="features-key-Vb8nM3qZ7xK1", signing_public_keys=trusted_pub, device="cpu",
        inbox_transport_key=TRANSPORT_KEY,
    )
    body = b'{"release_id": "rel_x"}'
    with TestClient(features_app(settings), headers=TRANSPORT_AUTH) as client:
        r = client.post("/v1/releases", content=body,
                        headers={"content-type": "application/json", SIGNATURE_HEADER: sign(body, stranger)})
        assert (r.status_code, r.json()["code"]) == (401, "bad_signature")
        # the trusted key's signature passes the check (then the body is refused as a message, 422)
        r = client.post("/v1/releases", content=body,
                        headers={"content-type": "application/json", SIGNATURE_HEADER: sign(body, trusted)})
        assert r.status_code == 422, r.text


def test_the_features_party_cannot_sign_with_what_it_holds() -> None:
    """Issue 24: with a shared HMAC secret the publisher could forge a message "from" the advertiser.
    Everything the features party holds (the advertiser's public key, its own API key) fails to make a
    signature the inbox accepts, by any construction this module or HMAC offers."""
    import hashlib
    import hmac

    body = b'{"release_id": "forged"}'
    _, public = generate_keypair()
    held = [public, public.removeprefix("ed25519-pk:"), "features-key-Vb8nM3qZ7xK1"]
    for material in held:
        with pytest.raises(SigningKeyError):
            sign(body, material)  # not a private key
        mac = hmac.new(material.encode(), body, hashlib.sha256)
        for header in ("sha256=" + mac.hexdigest(), f"ed25519;kid={key_id(public)};sig={mac.hexdigest()}"):
            assert not verify(body, public, header)
    # a private key made from the public key's bytes signs under another kid, which is not trusted
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    raw = base64.urlsafe_b64decode(public.removeprefix("ed25519-pk:") + "=")
    fake = "ed25519-sk:" + base64.urlsafe_b64encode(
        Ed25519PrivateKey.from_private_bytes(raw).private_bytes_raw()).decode().rstrip("=")
    assert not verify(body, public, sign(body, fake))


def test_signing_a_stream_or_a_file_gives_the_bytes_signature(tmp_path: Path) -> None:
    private, public = generate_keypair()
    body = bytes(range(256)) * 5000
    path = tmp_path / "m"
    path.write_bytes(body)
    header = sign_file(path, private, chunk=4096)
    assert verify(body, public, header) and verify_file(path, public, header)
    assert verify_stream(io.BytesIO(body), public, sign(body, private), chunk=1000)
    path.write_bytes(body[:-1] + b"x")
    assert not verify_file(path, public, header)


WEAK = ["aaaaaaaaaaaaaaaaaaaa", "abcdefghijklmnopqrst", "Password12345678", "0123456789abcdef0123"]


@pytest.mark.parametrize("key", WEAK)
def test_a_guessable_key_of_sixteen_characters_or_more_is_refused(tmp_path: Path, key: str) -> None:
    assert len(key) >= 16
    with pytest.raises(InsecureSettings, match="guessable"):
        require_secrets(_settings(tmp_path, labels_api_key=f"admin:{key}"), "labels_api_key")


@pytest.mark.parametrize(
    "key", ["cl\u00e9-tr\u00e8s-secr\u00e8te-Qx7vK2", "key with spaces Qx7vK2mP9w", "key\x00Qx7vK2mP9wR4tY"]
)
def test_a_non_ascii_or_blank_key_is_refused_even_on_a_laptop(tmp_path: Path, key: str) -> None:
    for allow in (False, True):
        with pytest.raises(InsecureSettings, match="non-ASCII"):
            require_secrets(_settings(tmp_path, features_api_key=key, allow_dev_secrets=allow), "features_api_key")


def test_the_parties_keys_and_the_signing_keys_are_distinct(tmp_path: Path) -> None:
    shared = "shared-key-Qx7vK2mP9wR4tY8z"
    with pytest.raises(InsecureSettings, match="LABELDP_FEATURES_API_KEY"):
        require_secrets(_settings(tmp_path, labels_api_key=f"release:{shared}", features_api_key=shared),
                        "labels_api_key")
    private, public = generate_keypair()
    for key in (private, private.removeprefix("ed25519-sk:"), public.removeprefix("ed25519-pk:")):
        with pytest.raises(InsecureSettings, match="LABELDP_SIGNING"):
            require_secrets(_settings(tmp_path, labels_api_key=key, signing_key=private, signing_public_keys=public),
                            "labels_api_key")
    require_secrets(_settings(tmp_path, labels_api_key="admin:" + secrets.token_urlsafe(32), signing_key=private,
                              signing_public_keys=public), "labels_api_key", "signing_key", "signing_public_keys")


def test_signing_settings_must_be_keys_and_not_the_dev_pair(tmp_path: Path) -> None:
    private, public = generate_keypair()
    for field, value in (("signing_key", public), ("signing_key", "a-long-hmac-secret-0123456789"),
                         ("signing_public_keys", private), ("signing_key", f"{private},{generate_keypair()[0]}")):
        with pytest.raises(InsecureSettings, match="ed25519"):
            require_secrets(_settings(tmp_path, **{field: value}), field)
    for field in ("signing_key", "signing_public_keys"):  # the defaults: the dev pair everyone knows
        with pytest.raises(InsecureSettings, match="development key pair"):
            require_secrets(_settings(tmp_path), field)
        require_secrets(_settings(tmp_path, allow_dev_secrets=True), field)


def test_allowing_dev_secrets_logs_a_warning_at_every_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="labeldp.settings"):
        require_secrets(_settings(tmp_path, labels_api_key="admin:" + secrets.token_urlsafe(32)), "labels_api_key")
        assert not caplog.records
        require_secrets(_settings(tmp_path, allow_dev_secrets=True), "labels_api_key")
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "LABELDP_ALLOW_DEV_SECRETS" in caplog.records[0].getMessage()


def test_keys_generate_prints_a_pair_that_signs_and_verifies_under_its_kid(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from labeldp_tools.cli import main

    assert main(["keys", "generate", "--format", "json"]) == 0
    pair = json.loads(capsys.readouterr().out)
    header = sign(b"m", pair["private_key"])
    assert verify(b"m", pair["public_key"], header)
    assert header_key_id(header) == pair["kid"] == key_id(pair["public_key"])
    assert main(["keys", "generate"]) == 0
    lines = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines() if not line.startswith("#"))
    assert verify(b"m", lines["LABELDP_SIGNING_PUBLIC_KEYS"], sign(b"m", lines["LABELDP_SIGNING_KEY"]))


def test_keys_tls_writes_a_ca_and_certificates_it_signed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import ipaddress
    import ssl

    from cryptography import x509

    from labeldp.service.server import server_config
    from labeldp_tools.cli import main

    assert main(["keys", "tls", str(tmp_path), "--host", "127.0.0.1", "--host", "inbox.example"]) == 0
    lines = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines() if not line.startswith("#"))
    ca = x509.load_pem_x509_certificate(Path(lines["LABELDP_SERVER_TLS_CLIENT_CA_FILE"]).read_bytes())
    server = x509.load_pem_x509_certificate(Path(lines["LABELDP_SERVER_TLS_CERTFILE"]).read_bytes())
    client = x509.load_pem_x509_certificate(Path(lines["LABELDP_OUTBOX_TLS_CERTFILE"]).read_bytes())
    for leaf in (server, client):
        leaf.verify_directly_issued_by(ca)
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert names.get_values_for_type(x509.DNSName) == ["inbox.example"]
    assert Path(lines["LABELDP_OUTBOX_TLS_KEYFILE"]).stat().st_mode & 0o077 == 0

    tls = {k.removeprefix("LABELDP_").lower(): v for k, v in lines.items() if k.startswith("LABELDP_SERVER_TLS")}
    config = server_config(None, "127.0.0.1", 0, _settings(tmp_path, **tls))
    assert config.ssl_cert_reqs == ssl.CERT_OPTIONAL and config.ssl_ca_certs == tls["server_tls_client_ca_file"]
    assert server_config(None, "127.0.0.1", 0, _settings(tmp_path)).ssl_certfile is None  # off by default
    with pytest.raises(InsecureSettings, match="LABELDP_SERVER_TLS_CERTFILE"):
        ca_only = _settings(tmp_path, server_tls_client_ca_file=tls["server_tls_client_ca_file"])
        server_config(None, "127.0.0.1", 0, ca_only)
    with pytest.raises(InsecureSettings, match="LABELDP_SERVER_TLS_KEYFILE names no file"):
        server_config(None, "127.0.0.1", 0, _settings(tmp_path, **{**tls, "server_tls_keyfile": "/nowhere.key"}))
    from labels_party.outbox import outbox_client

    with pytest.raises(InsecureSettings, match="LABELDP_OUTBOX_TLS_CERTFILE names no file"):
        outbox_client(_settings(tmp_path, outbox_tls_certfile=str(tmp_path / "missing.crt")))
    outbox_client(_settings(tmp_path, outbox_tls_ca_file=lines["LABELDP_OUTBOX_TLS_CA_FILE"],
                            outbox_tls_certfile=lines["LABELDP_OUTBOX_TLS_CERTFILE"],
                            outbox_tls_keyfile=lines["LABELDP_OUTBOX_TLS_KEYFILE"])).close()
