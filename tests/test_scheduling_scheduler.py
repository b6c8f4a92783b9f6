"""LeasedScheduler driven by hand on real Redis: Redis calls run inline (``InlineIO``), the
engine's in-progress set is a plain set, and each test runs inside an asyncio loop so that
signal handlers may be asynchronous."""

from __future__ import annotations

import asyncio

import pytest
import scrapy
from twisted.internet.defer import Deferred

from cnkispider import signals
from cnkispider.exceptions import SchedulerClosed
from cnkispider.scheduling.scheduler import LeasedScheduler
from cnkispider.scheduling.serialize import UnserializableRequest
from tests.fixtures.scheduling import HAND_DRIVEN, in_loop
from tests.fixtures.waiting import wait_until_async


@pytest.fixture
def make(make_scheduler):
    def make(opened: bool = True, **settings) -> LeasedScheduler:
        return make_scheduler(opened=opened, **{**HAND_DRIVEN, **settings})

    return make


def take(scheduler: LeasedScheduler) -> scrapy.Request | None:
    """What the engine does: take a request and mark it in progress."""
    request = scheduler.next_request()
    if request is not None:
        scheduler.engine_inprogress.add(request)
    return request


def done(scheduler: LeasedScheduler, request: scrapy.Request) -> None:
    scheduler.engine_inprogress.discard(request)


async def handled(scheduler: LeasedScheduler, condition=lambda: True) -> None:
    """Wait until ``condition()`` holds and the scheduler's signal handlers have all finished
    (their results are handled in callbacks of the loop, not inline)."""
    await wait_until_async(
        lambda: condition() and scheduler._handlers_running == 0, what="the signal handlers"
    )


@in_loop
async def test_a_request_just_handed_out_is_not_acked_by_the_call_its_hand_out_starts(
    make, redis_client, redis_namespace
):
    scheduler = make()
    for i in range(6):
        scheduler.enqueue_request(scrapy.Request(f"https://x/{i}"))
    scheduler._kick()
    first = take(scheduler)  # the buffer runs low: this starts a call
    take(scheduler)
    take(scheduler)  # and another
    assert redis_client.zscore(f"{redis_namespace}:leases", first.meta["lease_id"]) is not None
    done(scheduler, first)
    scheduler._kick()
    assert redis_client.zscore(f"{redis_namespace}:leases", first.meta["lease_id"]) is None


@in_loop
async def test_popped_requests_carry_their_lease(make):
    scheduler = make()
    scheduler.enqueue_request(scrapy.Request("https://x/a", meta={"round_id": 3}))
    scheduler._kick()
    request = take(scheduler)
    assert request.meta["lease_attempts"] == 1 and request.meta["lease_id"]
    assert request.meta["round_id"] == 3 and request.callback is None


@in_loop
async def test_round_drained_is_sent_by_the_worker_whose_ack_drained_it(
    make, redis_client, redis_namespace
):
    scheduler = make()
    told = []

    def on_drained(round_id, spider):
        told.append(round_id)

    scheduler.crawler.signals.connect(on_drained, signal=signals.round_drained)
    scheduler.enqueue_request(scrapy.Request("https://x/a", meta={"round_id": 12}))
    scheduler._kick()
    done(scheduler, take(scheduler))
    scheduler._kick()
    await handled(scheduler, lambda: told)
    assert told == [12]
    scheduler._kick()  # confirms it
    assert redis_client.zcard(f"{redis_namespace}:drained") == 0


@in_loop
async def test_an_abandoned_request_is_signalled_and_acked_after_its_handlers(
    make, redis_client, redis_namespace
):
    dead = make(SCHEDULER_LEASE_SECONDS=0.1, SCHEDULER_MAX_ATTEMPTS=1)
    dead.enqueue_request(scrapy.Request("https://x/hangs", meta={"round_id": 1}))
    dead._kick()
    assert take(dead) is not None  # then the worker dies: nobody renews the lease
    await asyncio.sleep(0.15)
    alive = make(SCHEDULER_LEASE_SECONDS=0.1, SCHEDULER_MAX_ATTEMPTS=1)
    recorded: list = []
    written = asyncio.Event()

    async def record(request, reason, attempts, spider):
        recorded.append((request.url, reason, attempts))
        await written.wait()  # the error-table write, still running

    alive.crawler.signals.connect(record, signal=signals.request_abandoned)
    alive._kick()
    await wait_until_async(lambda: recorded, what="the abandon handler")
    assert recorded == [("https://x/hangs", "lease-expired", 1)]
    assert alive.next_request() is None  # not handed to the engine
    alive._kick()
    assert redis_client.zcard(f"{redis_namespace}:leases") == 1  # not acked while the write runs
    written.set()
    await handled(alive)
    alive._kick()
    assert redis_client.zcard(f"{redis_namespace}:leases") == 0
    assert (
        redis_client.get(f"{redis_namespace}:round:1:outstanding") is None
    )  # drained: deleted at 0


@in_loop
async def test_a_failed_abandon_handler_leaves_the_request_to_come_back(
    make, redis_client, redis_namespace
):
    dead = make(SCHEDULER_LEASE_SECONDS=0.1, SCHEDULER_MAX_ATTEMPTS=1)
    dead.enqueue_request(scrapy.Request("https://x/hangs"))
    dead._kick()
    take(dead)
    await asyncio.sleep(0.15)
    alive = make(SCHEDULER_LEASE_SECONDS=0.1, SCHEDULER_MAX_ATTEMPTS=1)

    called = []

    def broken(request, reason, attempts, spider):
        called.append(request.url)
        raise RuntimeError("database down")

    alive.crawler.signals.connect(broken, signal=signals.request_abandoned)
    alive._kick()
    await handled(alive, lambda: called)
    alive._kick()
    assert (
        redis_client.hlen(f"{redis_namespace}:requests") == 1
    )  # still there, to be abandoned again


@in_loop
async def test_a_redirect_of_a_leased_document_is_queued_not_dropped_as_a_duplicate(make):
    scheduler = make()
    detail = scrapy.Request("https://x/abstract?v=old", meta={"doc_key": "CJFQ/A1"})
    scheduler.enqueue_request(detail)
    scheduler._kick()
    leased = take(scheduler)
    redirected = leased.replace(url="https://x/abstract?v=new")  # meta (and lease_id) copied
    scheduler.enqueue_request(redirected)
    scheduler.enqueue_request(scrapy.Request("https://x/abstract?v=3", meta={"doc_key": "CJFQ/A1"}))
    done(scheduler, leased)
    scheduler._kick()
    again = take(scheduler)
    assert again.url == "https://x/abstract?v=new"
    assert again.meta["lease_id"] != leased.meta["lease_id"]
    assert scheduler.stats.get_value("dupefilter/filtered") == 1  # the unrelated copy


def test_meta_that_is_not_json_is_refused_at_enqueue(make):
    scheduler = make()
    with pytest.raises(UnserializableRequest, match=r"meta\['when'\]"):
        scheduler.enqueue_request(scrapy.Request("https://x/a", meta={"when": object()}))


@in_loop
async def test_pending_while_anything_is_queued_or_leased_anywhere(
    make, redis_client, redis_namespace
):
    assert make(opened=False).has_pending_requests()  # before its first view of Redis
    other = make()
    scheduler = make()
    assert not scheduler.has_pending_requests()  # the namespace is empty
    other.enqueue_request(scrapy.Request("https://x/a"))
    other._kick()
    taken = take(other)
    scheduler._kick()
    assert scheduler.has_pending_requests()  # another worker holds a lease that may come back
    done(other, taken)
    other._kick()
    scheduler._kick()
    assert not scheduler.has_pending_requests()


class HeldIO:
    """Holds each Redis call (real Redis, the scheduler's own calls) until :meth:`land`: a call
    in flight, as on a slow line."""

    def __init__(self):
        self.held: list[tuple[Deferred, object, tuple]] = []

    def run(self, fn, *args) -> Deferred:
        d: Deferred = Deferred()
        self.held.append((d, fn, args))
        return d

    def land(self) -> None:
        d, fn, args = self.held.pop(0)
        d.callback(fn(*args))

    def shutdown(self) -> None:
        pass


def test_only_an_enqueue_in_flight_is_unfinished_here(make, redis_client, redis_namespace):
    """Flow control's idle check (tasks/feeder.py) reads the queue's sizes, then asks what they
    may miss. A poll in flight is not such a thing; an enqueue in flight, or one that landed
    since the check began, is."""
    scheduler = make()
    io = HeldIO()
    scheduler._io = scheduler._calls.io = io
    assert not scheduler.unfinished_here()
    scheduler._kick()  # the buffer is empty: a poll
    assert scheduler._calls.busy and scheduler.has_pending_requests()
    assert not scheduler.unfinished_here()
    io.land()
    scheduler.enqueue_request(scrapy.Request("https://x/a"))
    assert scheduler.unfinished_here()  # not sent
    landed = scheduler.enqueue_calls
    scheduler._kick()
    assert scheduler._calls.busy and not scheduler._writes.ops()
    assert scheduler.unfinished_here()  # in flight: a size read now may not show it
    assert redis_client.zcard(f"{redis_namespace}:queue") == 0
    io.land()
    assert scheduler.enqueue_calls == landed + 1  # landed since: the caller sees it
    assert not scheduler._calls.busy and scheduler._buffer  # popped in the same call
    assert scheduler.unfinished_here()
    request = take(scheduler)
    done(scheduler, request)
    scheduler._kick()
    assert scheduler._calls.busy and not scheduler.unfinished_here()  # the ack is in flight
    io.land()
    assert not scheduler.unfinished_here() and not scheduler.has_pending_requests()


@in_loop
async def test_closing_releases_unstarted_requests_and_acks_finished_ones(
    make, redis_client, redis_namespace
):
    scheduler = make()
    for i in range(3):
        scheduler.enqueue_request(scrapy.Request(f"https://x/{i}"))
    scheduler._kick()
    done(scheduler, take(scheduler))
    await scheduler.close("shutdown").asFuture(asyncio.get_running_loop())
    assert redis_client.zcard(f"{redis_namespace}:leases") == 0
    assert redis_client.zcard(f"{redis_namespace}:queue") == 2
    assert scheduler.stats.get_value("scheduler/released") == 2
    fresh = make()
    fresh._kick()
    assert [r.meta["lease_attempts"] for r in (take(fresh), take(fresh))] == [1, 1]


@in_loop
async def test_a_flush_fails_once_the_scheduler_closed_so_no_round_is_seeded_on_nothing(
    make, redis_client, redis_namespace
):
    """Flow control marks a round seeded once its flush fires. A feed that resumes after the
    close (the worker got SIGTERM while it claimed a round) enqueues into a scheduler whose
    final writes are done: nothing writes that request, so the flush must fail, not fire."""
    loop = asyncio.get_running_loop()
    scheduler = make()
    scheduler.enqueue_request(scrapy.Request("https://x/early"))
    await scheduler.flush().asFuture(loop)
    assert redis_client.hlen(f"{redis_namespace}:requests") == 1  # fired: it is in Redis
    await scheduler.close("shutdown").asFuture(loop)
    scheduler.enqueue_request(scrapy.Request("https://x/late"))
    with pytest.raises(SchedulerClosed):
        await scheduler.flush().asFuture(loop)
    assert redis_client.hlen(f"{redis_namespace}:requests") == 1  # the late one is nowhere


@in_loop
async def test_a_hold_delays_the_ack(make, redis_client, redis_namespace):
    scheduler = make()
    scheduler.enqueue_request(scrapy.Request("https://x/a"))
    scheduler._kick()
    request = take(scheduler)
    held = scheduler.outcomes.hold(request)  # e.g. an error row still being written
    done(scheduler, request)
    scheduler._kick()
    assert redis_client.zcard(f"{redis_namespace}:leases") == 1
    held.release()
    scheduler._kick()
    assert redis_client.zcard(f"{redis_namespace}:leases") == 0


def test_a_refused_request_does_not_make_a_later_valid_one_a_duplicate(make):
    scheduler = make()
    with pytest.raises(UnserializableRequest):
        scheduler.enqueue_request(scrapy.Request("https://x/a", meta={"when": object()}))
    assert scheduler.enqueue_request(scrapy.Request("https://x/a"))


@in_loop
async def test_duplicates_are_judged_in_redis_by_the_filter_of_their_round(make):
    """No local shortcut: only Redis knows whether a round's filter still describes the crawl
    under way (it is deleted when the round drains)."""
    scheduler = make()
    for meta in ({}, {}, {"round_id": 1}, {"round_id": 1}, {"round_id": 2}):
        assert scheduler.enqueue_request(scrapy.Request("https://x/a", meta=meta))
    assert scheduler.enqueue_request(scrapy.Request("https://x/a", dont_filter=True))
    scheduler._kick()
    assert scheduler.stats.get_value("dupefilter/filtered") == 2
    assert scheduler.queue.sizes()["queued"] + len(scheduler._buffer) == 4
