"""The feeder's looks: a task that follows today claims its look when one is due (the rounds
of the look-back re-opened, tasks/lookback.py), a look's census round seeded with the parts it
recounts (tasks/parts.py), and the counts over the look-back refreshed by a process of their
own (cnkispider/watch/refresh.py) (a part of :class:`tasks.feeder.RoundFeeder`).
"""

from __future__ import annotations

import dataclasses
import logging
import subprocess

from cnkispider import signals as cnki_signals
from cnkispider.runtime.offload import in_thread
from cnkispider.watch import refresh
from cnkispider.words.i18n import _
from tasks.parts import facet_codes

# logs as the feeder did before its split (issue 49.2): operators know "tasks.feeder"
logger = logging.getLogger("tasks.feeder")


class FeederLooks:
    """A follow task's looks and counts refreshes (a part of :class:`tasks.feeder.RoundFeeder`)."""

    async def _look_back(self) -> bool:
        """Claim the task's look when one is due (True: it re-opened rounds, feed them). The
        look this worker claimed is told once its rounds are all closed (signal
        ``look_finished``: the notifier's one message a look)."""
        self.follows = await in_thread(self.store.follows, self.task_id)
        if not self.follows:
            return False
        # the last look's end, told once by whichever worker finds its rounds closed first
        told = await in_thread(self.store.claim_look_told, self.task_id)
        if told is not None:
            logger.info(
                "task %s: look %s done: %s rows more listed, %s days re-opened",
                self.task_name,
                told["number"],
                told["gained"],
                told["days"],
            )
            self.crawler.signals.send_catch_log(
                cnki_signals.look_finished,
                task=self.task_name,
                number=told["number"],
                gained=told["gained"],
                days=told["days"],
                spider=self.spider,
            )
        look = await in_thread(
            self.store.claim_look,
            self.task_id,
            self.look_back_days,
            self.follow_every,
            self.started_at,
            self.looks_at_start,
            self.worker_id,
            self.look_tiers,
            self.facet_counts,
        )
        if look is None:
            return False
        self.crawler.stats.inc_value("follow/looks")
        self.crawler.stats.inc_value("follow/rounds-reopened", look.reopened)
        return bool(look.reopened)

    async def _census_seeding(self, round_, seeding: str):
        """A census round bound to ``seeding`` (written to its row first: its split by facet
        counts, cnkispider/spiders/daysplit.py, and its recount act only for it), with the
        parts it holds if a look re-opened it (tasks/parts.py), to be recounted by one
        group/result; parts the facet cannot count, or ``facet_counts`` off: every part is
        re-opened now, walked from its first page as before (the census seeds its page 1).
        None when the census is no longer this worker's (its new holder seeds it)."""
        if not await in_thread(self.store.bind_seeding, round_.id, self.worker_id, seeding):
            return None
        parts = await in_thread(self.store.look_parts, round_.id)
        if not parts:
            return round_
        if self.facet_counts and any(p.code in facet_codes(self.spider.doc_type) for p in parts):
            return dataclasses.replace(round_, parts=tuple(parts))
        if self.facet_counts:
            self.crawler.stats.inc_value("facets/fallback/codes")
            logger.info(
                _("round %s (%s): the facet counts none of its %s parts: each part's first page"),
                round_.id,
                round_.day,
                len(parts),
            )
        await in_thread(self.store.recount_parts, round_.id, None, seeding=seeding)
        return round_

    async def _refresh_counts(self) -> bool:
        """Refresh the counts over the look-back when due (True: it ran a refresh; the phase
        is asked again at the next idle). The crawl of ``NAME~counts`` is a process of its own
        (``refresh-counts --claimed``, cnkispider/watch/refresh.py), which this worker waits for: a
        `run --until-idle` exits only once it is done. A refresh in flight is joined, once per
        claim by a worker (one that ends unfinished is taken up by the next run)."""
        if not self.follows or self.refresh_counts_every <= 0:
            return False
        claimed = await in_thread(
            self.store.claim_counts,
            self.task_id,
            self.look_back_days,
            self.refresh_counts_every,
        )
        if claimed is None or claimed.claimed_at == self.counts_tried:
            return False
        self.counts_tried = claimed.claimed_at
        command = refresh.command(
            self.config_file, self.task_name, claimed.first_day, claimed.last_day
        )
        logger.info(
            "task %s: %s counts of %s..%s: %s",
            self.task_name,
            "refreshing" if claimed.claimed_now else "joining the refresh of",
            claimed.first_day,
            claimed.last_day,
            claimed.task_name,
        )
        self.crawler.stats.inc_value("follow/counts-refreshes")
        code = await in_thread(lambda: subprocess.run(command, check=False).returncode)
        if code != 0:
            logger.warning(
                "task %s: the counts refresh %s ended with exit status %s; the next run goes on "
                "with it",
                self.task_name,
                claimed.task_name,
                code,
            )
        return True
