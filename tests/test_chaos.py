"""The chaos test in its short form (the 20-kill run is `python bench/chaos.py`).

Three worker processes crawl one task; workers are killed with SIGKILL at random moments and
replaced, and Redis (a server of the test's own) is killed twice at random moments (the seed
puts them in two different kill intervals) and restarted empty each time. The run must
end with the database equal to the stand-in's ground truth: no document lost or duplicated, no
round lost, and a dead worker's leases handed out again within about one lease period.
"""

from __future__ import annotations

import pytest

from bench.chaos import LEASE, run

pytestmark = pytest.mark.slow  # every test crawls the stand-in in a worker subprocess


def test_kill_9_of_workers_and_of_redis_at_random_moments_lose_nothing():
    result = run(kills=4, workers=3, seed=3, redis_kills=2, days=2, quiet=True, scale=2.0)
    assert result["worker kills"] == 4 and result["redis crashes"] == 2, result
    assert result["documents expected"] > 500
    assert result["documents lost"] == 0, result
    assert result["documents duplicated"] == 0 and result["documents differing"] == 0, result
    assert result["rounds lost"] == 0, result
    assert result["final worker exit"] == 0, result
    assert result["task keys left in Redis"] == 0, result  # [redis] remove_finished
    assert result["longest lease recovery (s)"] is not None
    assert result["longest lease recovery (s)"] < LEASE + 2, result


@pytest.mark.parametrize("mode", ["held", "snapshot"])
def test_redis_back_with_leases_held_across_it_or_from_an_older_snapshot_loses_nothing(mode):
    """Issue 43, case 1: Redis restarted empty while the workers hold leases for longer than the
    restart (their acks reach the new Redis), or brought back from a snapshot saved earlier in
    the interval (the old epoch and ``seq``): no document and no round lost."""
    result = run(
        kills=3, workers=3, seed=5, redis_kills=2, days=2, quiet=True, scale=1.0, redis_mode=mode
    )
    assert result["redis crashes"] == 2, result
    assert result["documents lost"] == 0, result
    assert result["documents duplicated"] == 0 and result["documents differing"] == 0, result
    assert result["rounds lost"] == 0, result
    assert result["final worker exit"] == 0, result
    assert result["task keys left in Redis"] == 0, result
