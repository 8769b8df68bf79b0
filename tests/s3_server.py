"""A real S3-compatible server for the tests: moto's standalone server, in this process, on loopback.

moto (a test dependency in pyproject.toml) speaks the S3 HTTP protocol; services under
test reach it over real HTTP like any S3 endpoint, from this process or from the service
processes the integration tests start. One bucket per session, one fresh prefix per test.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import pyarrow.fs as pafs

from labeldp.storage import ObjectStore

REGION = "us-east-1"
ACCESS_KEY = "labeldp-test"
SECRET_KEY = "labeldp-test-secret"


@dataclass
class S3Server:
    """Where the server listens, and how to reach its bucket."""

    host: str
    port: int
    bucket: str

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, prefix: str | None = None) -> str:
        """``s3://bucket/<prefix>``: a fresh prefix unless one is given."""
        return f"s3://{self.bucket}/{prefix or secrets.token_hex(6)}"

    def store(self, url: str | None = None) -> ObjectStore:
        return ObjectStore.from_url(url or self.url(), **self.options())

    def options(self) -> dict[str, str]:
        return dict(endpoint_override=self.endpoint, access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION)

    def env(self, url: str) -> dict[str, str]:
        """The ``LABELDP_STORAGE_*`` variables of a service that keeps its objects at ``url``."""
        return {
            "LABELDP_STORAGE_URL": url,
            "LABELDP_STORAGE_S3_ENDPOINT": self.endpoint,
            "LABELDP_STORAGE_S3_REGION": REGION,
            "LABELDP_STORAGE_S3_ACCESS_KEY": ACCESS_KEY,
            "LABELDP_STORAGE_S3_SECRET_KEY": SECRET_KEY,
        }


def create_bucket(host: str, port: int, bucket: str) -> None:
    fs = pafs.S3FileSystem(
        endpoint_override=f"{host}:{port}", scheme="http", access_key=ACCESS_KEY, secret_key=SECRET_KEY,
        region=REGION, allow_bucket_creation=True,
    )
    fs.create_dir(bucket)
