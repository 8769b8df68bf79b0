"""Both services' migrations, by the name the CLI uses; ``make migrations`` rewrites their first revision.

``python -m labeldp_tools.migrations regenerate`` rewrites each service's single initial
revision from its current models. That is right only while no database is deployed;
after the first deployment, add revisions instead.
"""

from __future__ import annotations

import argparse

from labeldp.service.migrations import regenerate_initial

SERVICES = {"labels": "labels_party.migrations", "features": "features_party.migrations"}
"""Each service's migrations package (the service names its own: ``store.MIGRATIONS``)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labeldp_tools.migrations", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("regenerate", help="rewrite both services' initial revisions from their models")
    parser.parse_args(argv)
    for name, package in SERVICES.items():
        print(f"{name}: {regenerate_initial(package)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
