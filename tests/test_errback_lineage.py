"""Issue 47, point 2, through the crawler's own spider: a request the errback of
``RoundSpider`` yields (the refresh of a stale link, a failed canary's soft-block retry) is the
child of the failed request's lease, as a callback's child is (tests/test_scheduling_epochs.py,
case 9, is the model). Driven by hand on the real Redis with the real ``PaperSpider``: a slow
holder whose lease ran out while another worker finished the round (and, in the second test,
the whole task) cannot make the round outstanding again, nor recreate a key of the task.
"""

from __future__ import annotations

import pytest
import scrapy
from twisted.python.failure import Failure

from cnkispider import signals
from cnkispider.cnki.search import Search
from cnkispider.exceptions import GaveUp
from cnkispider.scheduling.queue import remove_namespace
from cnkispider.spiders.paper import PaperSpider
from tests.fixtures.scheduling import HAND_DRIVEN, finish, in_loop, take_all
from tests.fixtures.waiting import wait_until_async

ROUND = 9
SEARCH = Search.for_day("paper", "2024-01-01", "A").to_dict()

#: Failed requests whose errback yields a request: (meta of the failed request, its reason).
FAILED = {
    # a detail link gone stale (CNKI's verify page): refreshed by a title search
    "refresh": (
        {
            "cnki_kind": "detail",
            "doc_key": "CJFQ/A",
            "search": SEARCH,
            "listing": {"title": "t"},
        },
        "verify",
    ),
    # a day's canary failed for good: the round's own page retried as a soft block
    "soft-block retry": (
        {"cnki_kind": "list", "canary_for": {"search": SEARCH, "page": 1, "round_id": ROUND}},
        "http-500",
    ),
}


def worker(make_scheduler, **settings):
    return make_scheduler(PaperSpider, **HAND_DRIVEN, DATABASE_URL="sqlite://", **settings)


async def errback_of(scheduler, request, reason: str) -> list:
    """What the spider's own errback yields for ``request`` failed for good with ``reason``."""
    failure = Failure(GaveUp(reason, 3))
    failure.request = request
    return [out async for out in scheduler.crawler.spider.on_error(failure)]


def keys(redis_client, namespace: str) -> list[str]:
    return sorted(k.decode() for k in redis_client.scan_iter(match=f"{namespace}:*"))


def outstanding(redis_client, namespace: str) -> int:
    return int(redis_client.get(f"{namespace}:round:{ROUND}:outstanding") or 0)


async def lapsed_holder(make_scheduler, redis_client, namespace: str, kind: str):
    """A slow worker holds the failing request when its lease runs out; another worker takes
    the request over and finishes the round (it drains there). The slow one's scheduler and its
    hand-out are returned, its errback not run yet; and the drains each worker was told of."""
    slow = worker(make_scheduler, SCHEDULER_LEASE_SECONDS=0.5)
    other = worker(make_scheduler)
    drains: list = []

    def drained(round_id, **kwargs):
        drains.append(round_id)

    for scheduler in (slow, other):  # held strongly: signals keep weak references
        scheduler.crawler.signals.connect(drained, signal=signals.round_drained, weak=False)
    meta, _ = FAILED[kind]
    slow.enqueue_request(
        scrapy.Request("https://x/detail?d=1", meta={"round_id": ROUND, **meta}, dont_filter=True)
    )
    slow._kick()
    [held] = take_all(slow)

    def taken_over() -> bool:
        for request in take_all(other):
            finish(other, request)
        return bool(drains)

    await wait_until_async(taken_over, 30, what="the lease to run out and the round to drain")
    assert outstanding(redis_client, namespace) == 0
    return slow, held, drains


@pytest.mark.parametrize("kind", sorted(FAILED))
@in_loop
async def test_an_errback_request_of_a_lapsed_holder_is_refused_after_the_round_drained(
    make_scheduler, redis_client, redis_namespace, kind
):
    slow, held, drains = await lapsed_holder(make_scheduler, redis_client, redis_namespace, kind)
    [late] = await errback_of(slow, held, FAILED[kind][1])
    assert late.meta.get("round_id") == ROUND  # it belongs to the round: it would re-open it
    slow.enqueue_request(late)
    finish(slow, held)
    assert slow.crawler.stats.get_value("scheduler/refused", 0) == 1
    assert outstanding(redis_client, redis_namespace) == 0
    assert redis_client.zcard(f"{redis_namespace}:queue") == 0
    assert not redis_client.exists(f"{redis_namespace}:round:{ROUND}:bloom")
    slow._kick()
    assert drains == [ROUND]  # drained once, not twice


@pytest.mark.parametrize("kind", sorted(FAILED))
@in_loop
async def test_a_late_errback_request_recreates_no_key_of_a_finished_task(
    make_scheduler, redis_client, redis_namespace, kind
):
    """The task finished meanwhile and its keys went (tasks/feeder.py, [redis]
    remove_finished): the slow holder's errback request makes none of them again."""
    slow, held, _ = await lapsed_holder(make_scheduler, redis_client, redis_namespace, kind)
    remove_namespace(redis_client, redis_namespace)
    identity = [f"{redis_namespace}:{k}" for k in ("epoch", "seq", "writers")]
    assert keys(redis_client, redis_namespace) == identity
    [late] = await errback_of(slow, held, FAILED[kind][1])
    slow.enqueue_request(late)
    finish(slow, held)
    slow._kick()
    assert slow.crawler.stats.get_value("scheduler/refused", 0) == 1
    assert keys(redis_client, redis_namespace) == identity


@in_loop
async def test_a_current_holder_s_errback_request_is_queued(
    make_scheduler, redis_client, redis_namespace
):
    """The refusal is of stale hand-outs only: the holder of a current lease has its refresh
    queued, in the round (which does not drain before it is handled)."""
    holder = worker(make_scheduler)
    meta, reason = FAILED["refresh"]
    holder.enqueue_request(
        scrapy.Request("https://x/detail?d=1", meta={"round_id": ROUND, **meta}, dont_filter=True)
    )
    holder._kick()
    [held] = take_all(holder)
    [refresh] = await errback_of(holder, held, reason)
    assert holder.enqueue_request(refresh)
    finish(holder, held)
    assert holder.crawler.stats.get_value("scheduler/refused", 0) == 0
    assert outstanding(redis_client, redis_namespace) == 1  # the refresh, the failed one acked
