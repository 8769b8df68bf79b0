"""Print a fresh .env for docker compose: one random secret per variable compose requires.

    python3 deploy/generate_env.py > .env && chmod 600 .env

Standard library only, so it runs before anything is installed. Each value is 32 random
bytes, URL-safe (the ledger password sits inside a database URL), well above the 16
characters every service demands (labeldp.service.settings.require_secrets). .env is git- and
docker-ignored; rotate a key by listing the new value first, comma-separated, then removing
the old one (README, "Configuration").
"""

import secrets

VARIABLES = (
    "LABELDP_LABELS_API_KEY",  # advertiser systems -> labels API
    "LABELDP_FEATURES_API_KEY",  # publisher systems -> features API
    "LABELDP_EXCHANGE_SECRET",  # outbox signs, inbox verifies (HMAC-SHA256)
    "POSTGRES_PASSWORD",  # the ledger database
)

if __name__ == "__main__":
    for name in VARIABLES:
        print(f"{name}={secrets.token_urlsafe(32)}")
