"""When is a request done? When its outcome is written; then, and only then, its lease is acked.

The scheduler acknowledges a leased request once Scrapy's engine has finished with it *and* no
one holds it. The engine finishes with a request only after everything that came of it has been
handled:

- a response: the callback's whole output was consumed, every item went through the item
  pipelines (each ``process_item`` returned, so a pipeline that stores the item before returning
  has stored it) and every new request was handed to the scheduler (children are written to
  Redis in the same step as, and before, their parent's ack);
- a download failure: the errback ran to its end (an ``async def`` errback is awaited) and its
  output was handled the same way; without an errback the failure was logged;
- a callback exception: the spider middlewares' ``process_spider_exception`` and the
  ``spider_error`` signal handlers ran;
- a redirect or a retry: the new request was handed to the scheduler (it gets its own lease;
  being a continuation of the same document it skips the dupefilter, see the scheduler);
- a request dropped by a downloader middleware (``IgnoreRequest``): its errback ran, or without
  one it was logged. Either way it is acked, not leaked: replaying it would only drop it again.

So spider code needs nothing for the ordinary case, errbacks included::

    async def on_error(self, failure):
        await record_download_failure(self.crawler, failure)  # awaited: written before the ack

Only work that outlives the callback, errback, pipeline or signal handler that started it must be
declared, or the request could be acked before that work is written:

- ``hold(crawler, request)`` returns a :class:`Hold`; call ``release()`` (or use it as a context
  manager) when the outcome is written. For the errors component recording a callback
  exception from a ``spider_error`` handler (which Scrapy does not wait for), that is
  ``h = hold(crawler, response.request)`` in the handler and ``h.release()`` after the write.

A hold taken after the request was acked does nothing (and logs why). It does nothing
when the crawler does not run the leased scheduler.

A lease held here is in one of these states (the Redis side is described in :mod:`.queue`):
``buffered`` (popped, waiting in the scheduler's local buffer), ``handed`` (given to the engine),
``abandoned`` (its ``request_abandoned`` handlers are running). The scheduler alone moves them;
all of them are renewed together.

Settings: none.
"""

from __future__ import annotations

import logging
from collections.abc import Container
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cnkispider.scheduling.queue import Held

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

BUFFERED, HANDED, ABANDONED = "buffered", "handed", "abandoned"


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


def _tracker(crawler: Crawler) -> OutcomeTracker | None:
    try:
        scheduler = crawler.engine.scheduler
    except (AttributeError, RuntimeError):  # not crawling
        return None
    return getattr(scheduler, "outcomes", None)


def hold(crawler: Crawler, request: Request) -> Hold:
    """Keep ``request``'s lease until the returned :class:`Hold` is released."""
    tracker = _tracker(crawler)
    if tracker is None:
        return Hold(None, None)
    return tracker.hold(request)
