"""Issue 47.8: a worker that receives a 429 stops sending to that window at once.

Requests the rate limit let go before the 429 but that were still waiting in Scrapy's download
slot (a ``download_delay`` spaces them out there) are held at the wire until the window opens:
only what was already on the wire arrives inside the window. Measured where it counts, at the
stand-in: each request that arrived inside a closed window, by its seconds after the close.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import redis
from scrapy.http import Response
from scrapy.statscollectors import StatsCollector
from scrapy.utils.test import get_crawler

from cnkispider.middlewares.ratelimit import RateLimitMiddleware
from cnkispider.pace.store import SharedRateLimit
from cnkispider.runtime.offload import ThreadIO
from tests.fixtures.windows import assert_equal_to_the_truth_without_errors, cnki

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


def test_a_request_queued_when_the_429_came_is_held_at_the_wire_until_the_window_opens(
    redis_url, redis_namespace
):
    """The middleware let two requests go; the first draws a 429 (Retry-After: 1) while the
    second still waits in the download slot. At the wire the second is held, not sent and not
    failed, until the window opens, and goes with a new reservation; a request whose window did
    not close since its slot was granted passes the wire at once."""
    stats = StatsCollector(get_crawler())

    async def main() -> dict:
        limiter = SharedRateLimit(
            lambda: redis.Redis.from_url(redis_url), site_rate=50, prefix=f"{redis_namespace}:rl"
        )
        io = ThreadIO()
        middleware = RateLimitMiddleware(limiter, stats=stats, io=io)
        try:
            first, queued = cnki(), cnki()
            assert await middleware.process_request(first) is None
            assert await middleware.process_request(queued) is None
            # nothing closed yet: the wire lets it go at once
            assert await middleware.at_wire(queued) is None
            assert stats.get_value("ratelimit/window/held_at_wire") is None
            granted = queued.meta["_ratelimit_windows"][0]
            answer = Response(first.url, status=429, headers={"Retry-After": "1"}, request=first)
            middleware.process_response(first, answer)
            closed = time.monotonic()
            assert middleware.closed_since_granted(queued)
            assert await middleware.at_wire(queued) is None  # held, then let go
            held = time.monotonic() - closed
            regranted = queued.meta["_ratelimit_windows"][0]
            # a fresh request after the window opened goes at once
            later = cnki()
            assert await middleware.process_request(later) is None
            assert await middleware.at_wire(later) is None
            return {"held": held, "regranted": regranted > granted}
        finally:
            await asyncio.to_thread(limiter.close)
            io.shutdown()

    result = asyncio.run(main())
    # Retry-After: 1 (Redis's clock; this worker's own estimate adds up to a second's margin)
    assert result["held"] >= 0.9 and result["regranted"], result
    assert stats.get_value("ratelimit/window/held_at_wire") == 1
    assert stats.get_value("ratelimit/window/429") == 1
