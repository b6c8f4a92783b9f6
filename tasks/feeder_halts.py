"""The feeder's halts: the worker's circuit breaker fed with its list pages, the task halted
(once across the cluster) on what the breaker, a rejection or an unreadable request says, and
a worker stopped alone on a fault of its own (a part of :class:`tasks.feeder.RoundFeeder`).
"""

from __future__ import annotations

import logging

from scrapy.utils.defer import deferred_from_coro

from cnkispider import signals as cnki_signals
from cnkispider.cnki.refusals import REJECTION, kind_of
from cnkispider.runtime.offload import in_thread
from cnkispider.watch.halting import LOCAL_FAULT

# logs as the feeder did before its split (issue 49.2): operators know "tasks.feeder"
logger = logging.getLogger("tasks.feeder")

#: The stat holding the reason of a worker that stopped itself (cnkispider.watch.halting.LOCAL_FAULT).
LOCAL_FAULT_STAT = "local_fault"


class FeederHalts:
    """Halting the task, or stopping this worker (a part of :class:`tasks.feeder.RoundFeeder`)."""

    def response_received(self, response, request, spider=None):
        """A list page came back (refused pages never get here: they became retries)."""
        if request.meta.get("cnki_kind") == "list":
            self.breaker.ok(request)

    def list_failed(self, reason, detail="", request=None, spider=None):
        """The spider recorded a list-stage failure: count it; halt when the breaker trips."""
        verdict = self.breaker.failed(reason, detail, key=request)
        if verdict is None or kind_of(reason) == REJECTION:
            return  # a rejection is halted as it is recorded (errors.middleware), before its ack
        if self.breaker.local and self.local_fault_stops:
            self._stop_self(verdict)
            return
        d = deferred_from_coro(self.halt(verdict))
        d.addErrback(lambda f: logger.error("cannot halt the task: %s", f.getErrorMessage()))

    def _stop_self(self, reason: str) -> None:
        """Every request of this worker failed for a local cause: stop this worker only. Its
        requests still in hand are held (``context.halted``, in memory: the retry middleware
        holds them, their leases bring them back to the other workers); the task row is not
        halted, so a healthy worker goes on."""
        if self.context is not None and self.context.halted is None:
            self.context.halted = reason
        self.crawler.stats.set_value(LOCAL_FAULT_STAT, reason)
        logger.error("this worker stops (its own fault, the task is not halted): %s", reason)
        self._close(LOCAL_FAULT)

    def request_unreadable(self, reason, spider=None):
        """A request in Redis was refused by the trust boundary: what it held is not crawled, so
        the task halts with the reason (``task resume`` after fixing the cause)."""
        if self.task_id is None or self.halt_reason is not None:
            return
        d = deferred_from_coro(self.halt(f"unreadable: {reason}"))
        d.addErrback(lambda f: logger.error("cannot halt the task: %s", f.getErrorMessage()))

    async def halt(self, reason: str) -> bool:
        """Halt the task (once across the cluster: the first reason stays) and stop this worker
        (signal ``task_halted``). The retry middleware stops retrying at once, before the halt
        is written. False if no task is open."""
        context = self.context
        if context is None:
            return False
        context.halted = context.halted or reason
        if await in_thread(context.tasks.halt, context.task_id, reason):
            logger.error("task %s halted: %s", context.task.name, reason)
        self.crawler.signals.send_catch_log(
            cnki_signals.task_halted, task_id=context.task_id, reason=reason, spider=self.spider
        )
        return True

    async def halt_requested(self, reason, spider=None) -> bool:
        """errors.middleware recorded a rejection: halt the task at once (see :meth:`halt`)."""
        return await self.halt(reason)

    def task_halted(self, task_id, reason, spider=None):
        if task_id == self.task_id:
            self._halted(reason)

    def _halted(self, reason: str) -> None:
        if self.halt_reason is None:
            self.halt_reason = reason
            if self.context.halted is None:
                self.context.halted = reason  # the retry middleware stops retrying
            logger.info("task %s is halted: this worker stops", self.task_id)
        self._close("halted")
