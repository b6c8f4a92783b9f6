"""Issue 47.8: a worker that receives a 429 stops sending to that window at once.

Requests the rate limit let go before the 429 but that were still waiting in Scrapy's download
slot (a ``download_delay`` spaces them out there) are held at the wire until the window opens:
only what was already on the wire arrives inside the window. Measured where it counts, at the
stand-in: each request that arrived inside a closed window, by its seconds after the close.
"""

from __future__ import annotations

import uuid

import pytest

from tests.test_windows import assert_equal_to_the_truth_without_errors

#: A stand-in that closes an address's window past 4 requests in a second, for 2 s.
SITE = {"seed": 7, "scale": 0.2, "latency": "0.005", "throttle": 4, "throttle_seconds": 2}
#: Told: the stand-in's Throttle.TOLD_AFTER, a loaded machine's time to answer and be heard.
TOLD_AFTER = 0.25


@pytest.mark.timing  # the stand-in's rate and the download delay are in wall-clock time
def test_two_workers_send_nothing_into_a_window_after_the_429(crawl_setup, cnki_site):
    """Two workers on one address, the pace off, a download delay of 0.15 s: each worker has
    requests queued in its download slot when CNKI closes the window. None of them goes into
    it: every request that arrives inside a window arrives within TOLD_AFTER of its close (it
    was on the wire, or left before its worker could have heard), none later."""
    site = cnki_site(**SITE)
    setup = crawl_setup(
        "patent",
        "A,B",
        "mysql",
        "2024-03-01",
        "2024-03-01",
        site=site,
        redis={"prefix": f"t{uuid.uuid4().hex[:8]}:"},
        crawl={"pace": "false", "download_delay": "0.15", "log_file": ""},
    )
    workers = [setup.spawn(), setup.spawn()]
    logs = [w.communicate(timeout=600)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], "\n".join(log[-2000:] for log in logs)
    counts = site.stats()["throttled"]
    after = counts["after"]
    print("stand-in 429s:", {k: v for k, v in counts.items() if k != "after"}, "after:", after)
    assert counts["closed"] >= 2, "the crawl met the stand-in's limit"
    late = [seconds for seconds in after if seconds > TOLD_AFTER]
    assert late == [] and counts["told"] == 0, after
    assert_equal_to_the_truth_without_errors(setup)
