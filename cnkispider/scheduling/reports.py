"""What the leased scheduler reports to flow control, and what it does with the answer: a request
whose lease ran out too often (``request_abandoned``: acknowledged once a handler recorded it)
and a round whose last request was acknowledged (``round_drained``: confirmed in Redis, checked
again later when a handler says ``DRAIN_LATER``, dropped when Redis went to a new epoch
meanwhile). A mixin of :class:`cnkispider.scheduling.scheduler.LeasedScheduler`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy.utils.asyncio import call_later
from scrapy.utils.defer import deferred_from_coro
from twisted.python.failure import Failure

from cnkispider import signals
from cnkispider.scheduling import defaults
from cnkispider.scheduling.outcome import ABANDONED
from cnkispider.scheduling.queue import Held

if TYPE_CHECKING:
    from scrapy import Request

# the scheduler's log, as before this module left scheduler.py (the log lines keep their name)
logger = logging.getLogger("cnkispider.scheduling.scheduler")


class DrainsAndAbandons:
    """The scheduler's signals to flow control and their handling."""

    def _abandon(self, request: Request, popped: Any) -> None:
        held = popped.held
        self.outcomes.leased(held, request, ABANDONED)
        self._inc("scheduler/abandoned")
        logger.warning(
            "Abandoning %(request)s: its lease ran out %(n)d times",
            {"request": request, "n": popped.attempts},
        )
        self._handlers_running += 1
        d = deferred_from_coro(
            self.crawler.signals.send_catch_log_async(
                signals.request_abandoned,
                request=request,
                reason="lease-expired",
                attempts=popped.attempts,
                spider=self.spider,
            )
        )
        d.addCallback(self._abandon_handled, request, held)

    def _abandon_handled(self, results: list, request: Request, held: Held) -> None:
        self._handlers_running -= 1
        if _any_failed(results):
            logger.error(
                "A request_abandoned handler failed for %(request)s; it is not acknowledged "
                "and will be abandoned again",
                {"request": request},
            )
            self.outcomes.forget(held.lease_id)
            return
        if not results:
            logger.warning("No handler recorded abandoned %(request)s", {"request": request})
        if self.outcomes.settle(held.lease_id) is not None:
            self._writes.acks.append(held)

    def _drained(self, round_id: str, epoch: str, seeding: str | None = None) -> None:
        value: int | str = int(round_id) if round_id.lstrip("-").isdigit() else round_id
        self._inc("scheduler/rounds_drained")
        # one a round (thousands a run): for whoever debugs the drain, not the operator's log
        logger.debug(
            "Round %(round)s drained (epoch %(epoch)s, seeding %(seeding)s)",
            {"round": value, "epoch": epoch, "seeding": seeding},
        )
        self._handlers_running += 1
        d = deferred_from_coro(
            self.crawler.signals.send_catch_log_async(
                signals.round_drained,
                round_id=value,
                epoch=epoch,
                seeding=seeding,
                spider=self.spider,
            )
        )
        d.addCallback(self._drain_handled, round_id, epoch, seeding)

    def _drain_handled(
        self, results: list, round_id: str, epoch: str, seeding: str | None = None
    ) -> None:
        self._handlers_running -= 1
        if epoch != self.epoch:
            # Redis went to a new epoch while the handlers ran: that drain's entry is gone, and
            # a confirmation or recheck now would act on the new epoch's round of that id
            logger.debug("Round %(round)s: drain of an old epoch dropped", {"round": round_id})
            self._inc("scheduler/drains_dropped")
            return
        if _any_failed(results):
            logger.error(
                "A round_drained handler failed for round %(round)s; it will be reported again",
                {"round": round_id},
            )
            return
        if any(result == signals.DRAIN_LATER for _, result in results):
            delay = self._recheck_delay.get(round_id, defaults.DRAINED_RECHECK_SECONDS)
            self._recheck_delay[round_id] = min(2 * delay, defaults.DRAINED_RECHECK_MAX)
            logger.debug("Round %(round)s: drain to be checked again", {"round": round_id})
            if not self._closing:
                call_later(delay, self._recheck, round_id, epoch)
            return  # unconfirmed: if this worker dies, another one is told in time
        self._recheck_delay.pop(round_id, None)
        # with its seeding: a late confirmation leaves a later seeding's drain in Redis
        self._writes.confirms.append(round_id if seeding is None else f"{round_id}\n{seeding}")

    def _recheck(self, round_id: str, epoch: str) -> None:
        if self._closing:
            return
        if epoch != self.epoch:  # see _drain_handled
            self._inc("scheduler/drains_dropped")
            return
        self._writes.rechecks.append(round_id)
        self._kick()


def _any_failed(results: list) -> bool:
    return any(isinstance(r, (Failure, BaseException)) for _, r in results)
