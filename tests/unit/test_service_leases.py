"""labeldp.service.leases: the heartbeat thread both parties' job workers renew their leases with."""

from __future__ import annotations

import re

from labeldp.service.leases import LeaseKeeper, new_owner


def test_an_owner_id_names_host_and_process_and_is_never_reused() -> None:
    a, b = new_owner(), new_owner()
    assert a != b and re.fullmatch(r"[^:]+:\d+:[0-9a-f]{8}", a)


def test_the_keeper_renews_until_the_job_is_no_longer_its_own() -> None:
    calls: list[int] = []

    def renew() -> bool:
        calls.append(1)
        return len(calls) < 3  # the third renewal finds the row taken over

    with LeaseKeeper(renew, lease_seconds=0.15, name="release rel_x") as keeper:
        assert keeper.lost.wait(5)
    assert len(calls) == 3


def test_renewals_that_fail_count_as_lost_once_the_lease_ran_out() -> None:
    calls: list[int] = []

    def renew() -> bool:  # the database is away
        calls.append(1)
        raise ConnectionError("down")

    with LeaseKeeper(renew, lease_seconds=0.3, name="release rel_y") as keeper:
        assert not keeper.lost.wait(0.2)  # the lease may still hold: keep trying
        assert keeper.lost.wait(5)
    assert len(calls) >= 2
