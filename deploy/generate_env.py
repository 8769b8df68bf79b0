"""Print a fresh .env for docker compose: one random secret per variable compose requires.

    python3 deploy/generate_env.py > .env && chmod 600 .env

Standard library only, so it runs before anything is installed. Each value is URL-safe (the
database passwords sit inside database URLs) and at least the 16 characters every service
demands (labeldp.service.settings.require_secrets): 32 random bytes, or for MinIO, whose keys
are capped (access key 3-20, secret 8-40 characters), 8 and 16 random bytes in hex. .env is
git- and docker-ignored; rotate a key by listing the new value first, comma-separated, then
removing the old one (README, "Configuration"). docker-compose.yml needs the first four;
docker-compose.fleet.yml all of them.
"""

import base64
import hashlib
import secrets

# Ed25519 (RFC 8032) public key from a private seed, in integers: the advertiser's signing pair is
# generated here too, before `cryptography` is installed; tests/unit/test_compose.py checks it
# against `cryptography`'s derivation.
_P = 2**255 - 19
_D = -121665 * pow(121666, _P - 2, _P) % _P
_BASE = (
    15112221349535400772501151409588531511454012693041857206046113283949847762202,
    46316835694926478169428394003475163141307993866256225615783033603165251855960,
)


def _add(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    (x1, y1), (x2, y2) = a, b
    t = _D * x1 * x2 * y1 * y2 % _P
    return ((x1 * y2 + y1 * x2) * pow(1 + t, _P - 2, _P) % _P, (y1 * y2 + x1 * x2) * pow(1 - t, _P - 2, _P) % _P)


def ed25519_public_key(seed: bytes) -> bytes:
    h = hashlib.sha512(seed).digest()
    scalar = (int.from_bytes(h[:32], "little") & ((1 << 254) - 8)) | (1 << 254)
    point, acc = (0, 1), _BASE
    while scalar:
        if scalar & 1:
            point = _add(point, acc)
        acc, scalar = _add(acc, acc), scalar >> 1
    x, y = point
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def signing_pair() -> tuple[str, str]:
    """The labels party's Ed25519 pair in labeldp.signing's format (``labeldp keys generate``)."""
    seed = secrets.token_bytes(32)
    return "ed25519-sk:" + _b64(seed), "ed25519-pk:" + _b64(ed25519_public_key(seed))


_PAIR = signing_pair()


def _token() -> str:
    return secrets.token_urlsafe(32)


def _scoped_labels_keys() -> str:
    """Two keys: ``admin:`` for whoever decides privacy domains, ``release:`` for the systems that
    upload and release (labeldp.service.settings.parse_api_keys)."""
    return f"admin:{_token()},release:{_token()}"


VARIABLES = {
    "LABELDP_LABELS_API_KEY": _scoped_labels_keys,  # advertiser systems -> labels API
    "LABELDP_FEATURES_API_KEY": _token,  # publisher systems -> features API
    "LABELDP_SIGNING_KEY": lambda: _PAIR[0],  # the labels outbox signs (Ed25519 private key)
    "LABELDP_SIGNING_PUBLIC_KEYS": lambda: _PAIR[1],  # the features inbox verifies (public key)
    "LABELDP_INBOX_TRANSPORT_KEY": _token,  # the labels outbox's bearer key at the features inbox (both hold it)
    "POSTGRES_PASSWORD": _token,  # the labels party's ledger database
    "FEATURES_POSTGRES_PASSWORD": _token,  # the features party's database (fleet)
    "MINIO_ROOT_PASSWORD": lambda: secrets.token_hex(16),  # the labels party's MinIO, admin (fleet)
    "LABELS_S3_ACCESS_KEY": lambda: secrets.token_hex(8),  # ... the labels services' own user
    "LABELS_S3_SECRET_KEY": lambda: secrets.token_hex(16),
}

if __name__ == "__main__":
    for name, make in VARIABLES.items():
        print(f"{name}={make()}")
