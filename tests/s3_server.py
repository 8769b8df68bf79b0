"""A real S3-compatible server for the tests: moto's standalone server, in this process, on loopback.

moto (a test dependency in pyproject.toml) speaks the S3 HTTP protocol; services under
test reach it over real HTTP like any S3 endpoint, from this process or from the service
processes the integration tests start. One bucket per session, one fresh prefix per test.
The code lives in ``labeldp_tools.loopback_servers``, which the benches share.
"""

from __future__ import annotations

from labeldp_tools.loopback_servers import ACCESS_KEY, REGION, SECRET_KEY, S3Server, create_bucket

__all__ = ["ACCESS_KEY", "REGION", "SECRET_KEY", "S3Server", "create_bucket"]
