"""When is a request done? When its outcome is written; then, and only then, its lease is acked.

The scheduler acknowledges a leased request once Scrapy's engine has finished with it *and* no
one holds it. The engine finishes with a request only after everything that came of it has been
handled: a response's callback output consumed and every item through the pipelines, a
failure's errback run to its end, a redirect's or retry's new request handed to the scheduler
(the full list: docs/INTERNALS.md). So spider code needs nothing for the ordinary case.

Only work that outlives the callback, errback, pipeline or signal handler that started it must be
declared, or the request could be acked before that work is written:

- ``hold(crawler, request)`` returns a :class:`Hold`; call ``release()`` (or use it as a context
  manager) when the outcome is written. For the errors component recording a callback
  exception from a ``spider_error`` handler (which Scrapy does not wait for), that is
  ``h = hold(crawler, response.request)`` in the handler and ``h.release()`` after the write.

A hold taken after the request was acked does nothing (and logs why). It does nothing
when the crawler does not run the leased scheduler.

A request a callback makes is the child of the lease being handled: :class:`LeaseLineage` (a
spider middleware) writes that lease into its meta (``lease_parent``), and the scheduler sends
it with the child, so Redis refuses a child whose parent's hand-out is no longer current (the
holder's lease ran out and the request went to another worker, or Redis lost its state).

Settings: none.

The rest of this module's story: docs/INTERNALS.md#cnkispiderschedulingoutcomepy.
"""

from __future__ import annotations

import logging
from collections.abc import Container
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from scrapy import Request

from cnkispider.scheduling.queue import Held

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred

    from cnkispider.scheduling.queue import LeasedQueue
    from cnkispider.watch.halting import Cooldown

logger = logging.getLogger(__name__)

BUFFERED, HANDED, ABANDONED = "buffered", "handed", "abandoned"

#: Meta key of a request made by a callback: ``[lease_id, lease_token]`` of the hand-out it was
#: made from (:class:`LeaseLineage`); the scheduler takes it out before the request is written.
LEASE_PARENT = "lease_parent"

#: Meta key of a round's seed (tasks/feeder.py): the seeding it starts (``round.seeding``); the
#: scheduler takes it out and writes it with the request (``{ns}:seedings``), and the round's
#: drain is reported with it (tasks/rounds.py: only that seeding's handlers may close it).
ROUND_SEEDING = "round_seeding"


@dataclass
class _Lease:
    held: Held
    request: Request
    state: str
    holds: int = 0


class Hold:
    """Keeps one request's lease from being acked until :meth:`release` (idempotent)."""

    def __init__(self, tracker: OutcomeTracker | None, lease_id: str | None):
        self._tracker, self._lease_id = tracker, lease_id

    def release(self) -> None:
        if self._tracker is not None and self._lease_id is not None:
            self._tracker._release(self._lease_id)
        self._tracker = None

    def __enter__(self) -> Hold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class OutcomeTracker:
    """The leases this worker holds and what still keeps each one from being acked."""

    def __init__(self) -> None:
        self._leases: dict[str, _Lease] = {}

    def __len__(self) -> int:
        return len(self._leases)

    def leased(self, held: Held, request: Request, state: str = BUFFERED) -> None:
        self._leases[held.lease_id] = _Lease(held, request, state)

    def handed_out(self, request: Request) -> None:
        lease = self._leases.get(request.meta.get("lease_id"))
        if lease is not None:
            lease.state = HANDED

    def held_of(self, lease_id: str | None) -> Held | None:
        """The hand-out of a lease this worker holds; None if it holds no such lease (acked,
        forgotten, or of an epoch Redis no longer has)."""
        lease = self._leases.get(lease_id)
        return lease.held if lease is not None else None

    def request_of(self, lease_id: str) -> Request | None:
        lease = self._leases.get(lease_id)
        return lease.request if lease is not None else None

    def hold(self, request: Request) -> Hold:
        lease_id = request.meta.get("lease_id")
        lease = self._leases.get(lease_id)
        if lease is None:
            logger.debug("No lease to hold for %(request)s (acked already?)", {"request": request})
            return Hold(None, None)
        lease.holds += 1
        return Hold(self, lease_id)

    def _release(self, lease_id: str) -> None:
        lease = self._leases.get(lease_id)
        if lease is not None and lease.holds > 0:
            lease.holds -= 1

    def finished(self, inprogress: Container[Request]) -> list[Held]:
        """Leases whose request the engine is done with and nobody holds; they stop being tracked
        here (the caller acks them)."""
        done = [
            lease_id
            for lease_id, lease in self._leases.items()
            if lease.state == HANDED and not lease.holds and lease.request not in inprogress
        ]
        return [self._leases.pop(lease_id).held for lease_id in done]

    def finished_any(self, inprogress: Container[Request]) -> bool:
        return any(
            lease.state == HANDED and not lease.holds and lease.request not in inprogress
            for lease in self._leases.values()
        )

    def settle(self, lease_id: str) -> Held | None:
        """Stop tracking one lease (to ack it); ``None`` if it is not tracked."""
        lease = self._leases.pop(lease_id, None)
        return lease.held if lease is not None else None

    def forget(self, lease_id: str) -> None:
        """Stop tracking and renewing a lease without acking it: it will run out and return."""
        self._leases.pop(lease_id, None)

    def forget_all(self) -> int:
        """Stop tracking every lease (Redis has a new epoch: they are gone there, and flow
        control replays their rounds); how many there were."""
        count = len(self._leases)
        self._leases.clear()
        return count

    def take_buffered(self) -> list[Held]:
        """Every buffered lease (to release them); they stop being tracked."""
        ids = [i for i, lease in self._leases.items() if lease.state == BUFFERED]
        return [self._leases.pop(i).held for i in ids]

    def held(self) -> list[Held]:
        """Every lease this worker holds (to renew them)."""
        return [lease.held for lease in self._leases.values()]

    def holding(self) -> int:
        """Leases the engine is done with but someone still holds."""
        return sum(1 for lease in self._leases.values() if lease.holds)


class LeaseLineage:
    """Spider middleware: each request a callback yields carries the hand-out of the response's
    request (its ``lease_id`` and ``lease_token``) in meta ``lease_parent``, for the scheduler
    to send with it (see the module's docstring). Scrapy runs spider middlewares on callbacks
    only: an errback marks what it yields itself, with :func:`errback_lineage` (the spiders'
    ``on_error``), so a late holder's refresh, relist or retry is refused as its callbacks' are."""

    def process_spider_output(self, response, result, spider=None):
        parent = hand_out(response.request)
        for out in result:
            yield mark(out, parent)

    async def process_spider_output_async(self, response, result, spider=None):
        parent = hand_out(response.request)
        async for out in result:
            yield mark(out, parent)


async def errback_lineage(failure, output):
    """What an errback yields (``output``, an async iterable), each request marked as the child
    of the failed request's hand-out, as :class:`LeaseLineage` marks a callback's."""
    parent = hand_out(failure.request)
    async for out in output:
        yield mark(out, parent)


def hand_out(request) -> list[str] | None:
    """``[lease_id, lease_token]`` of the hand-out ``request`` came from; None when it was not
    leased (no leased scheduler)."""
    meta = request.meta
    if meta.get("lease_id") is None:
        return None
    return [meta["lease_id"], meta.get("lease_token")]


def mark(out: object, parent: list[str] | None) -> object:
    if parent is not None and isinstance(out, Request):
        out.meta[LEASE_PARENT] = parent
    return out


@runtime_checkable
class LeaseTracking(Protocol):
    """What :func:`hold` asks of the crawl's scheduler: its lease tracker."""

    outcomes: OutcomeTracker


@runtime_checkable
class RoundScheduler(LeaseTracking, Protocol):
    """What flow control asks of the crawl's scheduler (the leased one,
    :class:`cnkispider.scheduling.scheduler.LeasedScheduler`). A Protocol, not an isinstance of
    the class: Scrapy's ``BaseScheduler`` metaclass calls every scheduler-like object one, and
    flow control sits below the scheduler in the layers."""

    epoch: str | None  # changes when Redis lost the namespace
    queue: LeasedQueue | None  # None before open and after close
    enqueue_calls: int  # calls to Redis carrying enqueues that have ended

    def cooldown(self) -> Cooldown | None: ...

    def flush(self) -> Deferred: ...

    def unfinished_here(self) -> bool: ...


def _scheduler(crawler: Crawler) -> object:
    try:
        return crawler.engine.scheduler
    except (AttributeError, RuntimeError):  # not crawling
        return None


def round_scheduler(crawler: Crawler) -> RoundScheduler | None:
    """The crawl's scheduler if it is a :class:`RoundScheduler` (None when not crawling, or
    with any other scheduler)."""
    scheduler = _scheduler(crawler)
    return scheduler if isinstance(scheduler, RoundScheduler) else None


def _tracker(crawler: Crawler) -> OutcomeTracker | None:
    scheduler = _scheduler(crawler)
    return scheduler.outcomes if isinstance(scheduler, LeaseTracking) else None


def hold(crawler: Crawler, request: Request) -> Hold:
    """Keep ``request``'s lease until the returned :class:`Hold` is released."""
    tracker = _tracker(crawler)
    if tracker is None:
        return Hold(None, None)
    return tracker.hold(request)
