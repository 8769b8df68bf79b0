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

import secrets


def _token() -> str:
    return secrets.token_urlsafe(32)


def _scoped_labels_keys() -> str:
    """Two keys: ``admin:`` for whoever decides privacy domains, ``release:`` for the systems that
    upload and release (labeldp.service.settings.parse_api_keys)."""
    return f"admin:{_token()},release:{_token()}"


VARIABLES = {
    "LABELDP_LABELS_API_KEY": _scoped_labels_keys,  # advertiser systems -> labels API
    "LABELDP_FEATURES_API_KEY": _token,  # publisher systems -> features API
    "LABELDP_EXCHANGE_SECRET": _token,  # outbox signs, inbox verifies (HMAC-SHA256)
    "POSTGRES_PASSWORD": _token,  # the labels party's ledger database
    "FEATURES_POSTGRES_PASSWORD": _token,  # the features party's database (fleet)
    "MINIO_ROOT_PASSWORD": lambda: secrets.token_hex(16),  # the labels party's MinIO, admin (fleet)
    "LABELS_S3_ACCESS_KEY": lambda: secrets.token_hex(8),  # ... the labels services' own user
    "LABELS_S3_SECRET_KEY": lambda: secrets.token_hex(16),
}

if __name__ == "__main__":
    for name, make in VARIABLES.items():
        print(f"{name}={make()}")
