"""The feeder's phase moves: when no round is due, the phase rule (tasks/phase.py) is asked
with the database's, the queue's and the error tables' facts, and what it says is done: error
rows replayed, crawl moved to recrawl and to done (once across the cluster), the worker closed
(a part of :class:`tasks.feeder.RoundFeeder`).
"""

from __future__ import annotations

import dataclasses
import logging

from cnkispider.runtime.offload import in_thread
from cnkispider.scheduling.outcome import RoundScheduler
from tasks.phase import Action, Phase, PhaseFacts, next_action

# logs as the feeder did before its split (issue 49.2): operators know "tasks.feeder"
logger = logging.getLogger("tasks.feeder")


class FeederPhase:
    """What the feeder does when no round is due (a part of :class:`tasks.feeder.RoundFeeder`)."""

    async def _maybe_finish(self):
        """No round was due: ask the phase rules (tasks.flow.next_action) what to do, and do it.
        A move of the phase is followed by another look (crawl -> recrawl may replay at once).
        A task that follows today looks back first, when its look is due (tasks/lookback.py)."""
        if await self._look_back() or await self._refresh_counts():
            return
        for _attempt in range(3):
            facts = await self._phase_facts()
            action = next_action(facts)
            if action is Action.START_RECRAWL:
                if await in_thread(self.store.start_recrawl, self.task_id):
                    logger.info(
                        "task %s: every round is done; crawl phase finished", self.task_name
                    )
                continue
            if action is Action.SKIP_RECRAWL:
                await in_thread(self.store.set_phase, self.task_id, Phase.DONE, Phase.RECRAWL)
                continue
            if action is Action.UP_TO_DATE:
                logger.info("task %s is up to date (no round due until tomorrow)", self.task_name)
                self._close("up_to_date")
            elif action is Action.REPLAY:
                await self._replay_errors()
            elif action is Action.FINISH:
                if await in_thread(self.store.set_phase, self.task_id, Phase.DONE, Phase.RECRAWL):
                    counts = await in_thread(self.error_recorder.outstanding, self.task_id)
                    logger.info(
                        "task %s finished; permanent failures left: %s",
                        self.task_name,
                        counts or "none",
                    )
            elif action is Action.HALT:
                await self.halt(await in_thread(self.store.all_failed_reason, self.task_id))
            elif action is Action.CLOSE:
                await in_thread(self._remove_keys)
                self._close("finished")
            return

    async def _phase_facts(self) -> PhaseFacts:
        """The facts next_action needs for the task's phase: the database's, then the queue's
        and the error tables' where the phase looks at them."""
        facts = await in_thread(self.store.phase_facts, self.task_id)
        # a task that follows today runs on and looks when due, unless `run --until-idle`
        exit_when_idle = self.exit_when_idle and (self.until_idle or not self.follows)
        changes: dict = {"recrawl": self.recrawl, "exit_when_idle": exit_when_idle}
        crawl_done_for_now = facts.phase == Phase.CRAWL and facts.exhausted and facts.open_ended
        if facts.phase in (Phase.RECRAWL, Phase.DONE) or crawl_done_for_now:
            changes["queue_idle"] = await self._idle_everywhere()
        if facts.phase == Phase.RECRAWL and self.recrawl and changes["queue_idle"]:
            changes["errors_pending"] = bool(
                await in_thread(self.error_recorder.pending, self.task_id)
            )
        return dataclasses.replace(facts, **changes)

    async def _replay_errors(self) -> bool:
        """Seed a batch of error rows (errorCode first, then errorLink); True if any."""
        table, build = "error_code", self.spider.replay_code
        rows = await in_thread(self.error_recorder.claim_codes, self.task_id, self.worker_id, 10)
        if not rows:
            table, build = "error_link", self.spider.replay_link
            rows = await in_thread(
                self.error_recorder.claim_links, self.task_id, self.worker_id, 100
            )
        requests = await self._replays(table, rows, build)
        for request in requests:
            self.crawler.engine.crawl(request)
        if requests:
            # which rows: a row whose replay ends neither stored nor failed again waits out its
            # claim lease (ErrorRecorder.lease) before it is claimed again
            ids = [row["id"] for row in rows]
            logger.debug("task %s: replaying %s rows %s", self.task_name, table, ids)
            self.crawler.stats.inc_value("recrawl/requests", len(requests))
            await self._flushed()
        return bool(requests)

    async def _replays(self, table: str, rows: list, build) -> list:
        """The replay request of each claimed row. A row none can be built from becomes
        permanent with the reason (one line each); the others replay. Left claimed, it would
        be claimed again every lease, for ever, and its task would never finish."""
        requests = []
        for row in rows:
            try:
                requests.append(build(row))
            except Exception as exc:
                why = f"{type(exc).__name__}: {exc}"
                await in_thread(self.error_recorder.unreplayable, table, row["id"], why)
                self.crawler.stats.inc_value(f"recrawl/unreplayable/{table}")
                logger.error(
                    "%s row %s cannot be replayed (made permanent): %s", table, row["id"], why
                )
        return requests

    async def _idle_everywhere(self) -> bool:
        """Nothing queued or leased in Redis for this task, by any worker, nor unfinished here.

        Redis's side is read at one moment: queued, leased, and drained rounds not confirmed
        (an ack that drains a round leaves it there until the round is closed in the database).
        Asked after that read, ``unfinished_here`` covers what it may miss: a write not sent, or
        an enqueue in flight or landed since (``enqueue_calls``). A poll or an ack in flight
        does not count (the read shows what it carries): on a slow line one is in flight most
        of the time, and counting it kept a finished worker from exiting for minutes."""
        scheduler = self.scheduler
        if not isinstance(scheduler, RoundScheduler):
            return False
        enqueue_calls = scheduler.enqueue_calls
        left = await in_thread(self._sizes, True)
        idle = (
            left is not None
            and not any(left.values())
            and not scheduler.unfinished_here()
            and scheduler.enqueue_calls == enqueue_calls
        )
        if not idle:
            logger.debug("task %s: the queue is not idle (%s)", self.task_name, left)
        return idle
