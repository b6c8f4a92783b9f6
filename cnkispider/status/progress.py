"""ProgressLog: one line per worker every PROGRESS_INTERVAL seconds, in the style of LogStats.

Scrapy's LogStats says how fast a crawl goes; a day-long distributed crawl also needs to know
*which* worker, *where* in the task (the rounds it is working on) and *how badly* CNKI is
refusing it, from the log file alone::

    Progress of worker srv:4242:1a2b3c: rounds 2024-01-03 G06, 2024-01-03 H04; 180 pages/min,
    150 items/min (5400 pages, 4500 items, 12 rounds done); 7 errors (+2: detail/verify 2)

"Rounds" are the rounds of the responses this worker received during the interval (a round is
one day x category; a split round shows the child category it was on), "rounds done" those this
worker completed (stats ``rounds/done``), errors the stats under ``errors/`` (what failed for good
after retries), with the new ones of the interval by key. A last line at close gives the totals
and the average rates.

Settings
--------
PROGRESS_ENABLED    on by default
PROGRESS_INTERVAL   seconds between lines (60); 0 switches the extension off
"""

from __future__ import annotations

import logging
import os
import socket
import time

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.asyncio import create_looping_call

from cnkispider.words import i18n
from tasks.feeder import RoundFeeder
from tasks.phase import Phase

logger = logging.getLogger("cnkispider.progress")  # its name before the move: log lines keep it


SHOWN_ROUNDS = 4
SHOWN_ERROR_KEYS = 3


def task_line(entry: dict) -> tuple[str, dict]:
    """The per-minute line of a task from its status entry: rounds done (the failed ones apart:
    a failed round stored nothing, it is no progress), rounds in flight, the percentage, the
    rate and the ETA. In English, as every log line: the log is grepped, not read by one."""
    rounds = entry["rounds"]
    total = rounds.get("total")
    done = rounds.get("done", rounds["finished"] - rounds.get("failed", 0))
    per_hour = entry["rate"]["rounds_per_hour"]
    if entry.get("halted"):
        eta = "halted"
    elif entry.get("eta_seconds") is not None:
        eta = "ETA " + i18n.duration(entry["eta_seconds"], unknown="?", language="en")
    elif total is not None and rounds["finished"] >= total and not rounds["in_flight"]:
        eta = "ETA -: nothing left"
    else:
        eta = "ETA unknown until a round is done"
    args = {
        "task": entry["name"],
        "phase": entry["phase"],
        "done": done,
        "total": "?" if total is None else total,
        "percent": 100.0 * (entry["progress"] or 0.0),
        "failed": f", {rounds['failed']} failed" if rounds.get("failed") else "",
        "in_flight": rounds["in_flight"],
        "rate": f"{per_hour:,.1f} rounds/h" if per_hour else "- rounds/h",
        "eta": eta,
    }
    msg = (
        "Task %(task)s (%(phase)s): %(done)s of %(total)s rounds done (%(percent).1f%%)"
        "%(failed)s, %(in_flight)s in flight; %(rate)s; %(eta)s"
    )
    return msg, args


class ProgressLog:
    def __init__(
        self, stats, interval: float = 60.0, worker_id: str | None = None, clock=time.monotonic
    ):
        self.stats = stats
        self.interval = interval
        self.multiplier = 60.0 / interval
        self.worker_id = worker_id
        self.clock = clock
        self.task = None
        self.crawler = None
        self.pages_before = self.items_before = 0
        self.errors_before: dict[str, int] = {}
        self.rounds: dict[int, str] = {}  # round id -> "day category", this interval
        self.started = clock()
        self.phase: str | None = None  # the task's phase at the last line (its changes are said)

    @classmethod
    def from_crawler(cls, crawler):
        settings = crawler.settings
        if not settings.getbool("PROGRESS_ENABLED"):
            raise NotConfigured
        interval = settings.getfloat("PROGRESS_INTERVAL")
        if not interval:
            raise NotConfigured
        from cnkispider.watch import logs

        # `scrapy crawl` too: the same console (-s LOG_FILE=... keeps every line in the file)
        # (only when a door set CNKI_VERBOSE: a test's own crawler keeps the loggers as they are)
        if settings.get("CNKI_VERBOSE") is not None:
            logs.apply(
                not logs.is_quiet(settings.getbool("CNKI_VERBOSE"), settings.get("LOG_FILE"))
            )
        progress = cls(crawler.stats, interval)
        progress.crawler = crawler
        crawler.signals.connect(progress.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(progress.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(progress.response_received, signal=signals.response_received)
        return progress

    def spider_opened(self, spider=None):
        self.started = self.clock()
        self.task = create_looping_call(self.log, spider)
        self.task.start(self.interval, now=False)

    def response_received(self, response, request, spider=None):
        round_id = request.meta.get("round_id")
        if round_id is None or round_id in self.rounds:
            return
        search = request.meta.get("search") or {}
        self.rounds[round_id] = f"{search.get('day_start', '?')} {search.get('category') or 'all'}"

    def _worker(self) -> str:
        """The worker id flow control registered (RoundFeeder), else host:pid."""
        if self.worker_id is None:
            feeder = self._feeder()
            if feeder is not None and feeder.worker_id:
                self.worker_id = feeder.worker_id
        return self.worker_id or f"{socket.gethostname()}:{os.getpid()}"

    def _errors(self) -> dict[str, int]:
        return {
            k[len("errors/") :]: v
            for k, v in self.stats.get_stats().items()
            if k.startswith("errors/")
        }

    def line(self) -> tuple[str, dict]:
        """The message and its arguments for this interval; moves the interval on."""
        pages = self.stats.get_value("response_received_count", 0)
        items = self.stats.get_value("item_scraped_count", 0)
        errors = self._errors()
        new = {
            k: v - self.errors_before.get(k, 0)
            for k, v in errors.items()
            if v > self.errors_before.get(k, 0)
        }
        top = sorted(new.items(), key=lambda kv: (-kv[1], kv[0]))[:SHOWN_ERROR_KEYS]
        rounds = [self.rounds[r] for r in sorted(self.rounds)]
        shown = ", ".join(rounds[:SHOWN_ROUNDS]) + (
            f" (+{len(rounds) - SHOWN_ROUNDS} more)" if len(rounds) > SHOWN_ROUNDS else ""
        )
        args = {
            "worker": self._worker(),
            "rounds": shown or "none",
            "pagerate": (pages - self.pages_before) * self.multiplier,
            "itemrate": (items - self.items_before) * self.multiplier,
            "pages": pages,
            "items": items,
            "done": self.stats.get_value("rounds/done", 0),
            "errors": sum(errors.values()),
            "new": sum(new.values()),
            "which": (": " + ", ".join(f"{k} {v}" for k, v in top)) if top else "",
        }
        self.pages_before, self.items_before, self.errors_before = pages, items, errors
        self.rounds = {}
        msg = (
            "Progress of worker %(worker)s: rounds %(rounds)s; %(pagerate)d pages/min, "
            "%(itemrate)d items/min (%(pages)d pages, %(items)d items, %(done)d rounds done); "
            "%(errors)d errors (+%(new)d%(which)s)"
        )
        return msg, args

    def log(self, spider=None):
        msg, args = self.line()
        logger.info(msg, args, extra={"spider": spider})
        feeder = self._feeder()
        if feeder is None or feeder.task_id is None:
            return None
        from cnkispider.runtime.offload import deferred_in_thread

        # The task line reads the database off the reactor and logs when it has it. Nothing is
        # returned: Scrapy's asyncio looping call refuses a function that returns a Deferred.
        d = deferred_in_thread(self._task_report, feeder)
        d.addCallback(self._log_task, spider)
        d.addErrback(
            lambda failure: logger.debug("no task progress this minute: %s", failure.value)
        )
        return None

    def _feeder(self) -> RoundFeeder | None:
        """Flow control's extension (None without flow control, or before the crawl built its
        extensions)."""
        if self.crawler is None or self.crawler.extensions is None:
            return None
        return self.crawler.get_extension(RoundFeeder)

    @staticmethod
    def _task_report(feeder) -> dict:
        from cnkispider.status.collecting import collect

        report = collect(
            feeder.store.engine,
            None,
            heartbeat_seconds=feeder.heartbeat_seconds,
            base_dir=feeder.base_dir,
            task_name=feeder.task_name,
        )
        return report["tasks"][0]

    def _log_task(self, entry: dict, spider=None):
        msg, args = task_line(entry)
        logger.info(msg, args, extra={"spider": spider})
        if self.phase is not None and entry["phase"] != self.phase:
            errors = entry["errors"]
            logger.info(
                "task %(task)s: phase %(old)s -> %(new)s%(what)s",
                {
                    "task": entry["name"],
                    "old": self.phase,
                    "new": entry["phase"],
                    "what": (
                        f" (replaying {errors['errorCode']['total']} errorCode and "
                        f"{errors['errorLink']['total']} errorLink rows)"
                        if entry["phase"] == Phase.RECRAWL
                        else ""
                    ),
                },
                extra={"spider": spider},
            )
        self.phase = entry["phase"]

    def spider_closed(self, spider=None, reason=None):
        if self.task is not None and self.task.running:
            self.task.stop()
        minutes = max(self.clock() - self.started, 1e-9) / 60
        pages = self.stats.get_value("response_received_count", 0)
        items = self.stats.get_value("item_scraped_count", 0)
        logger.info(
            "Worker %(worker)s finished (%(reason)s) after %(minutes).1f min: %(pages)d pages "
            "(%(pagerate).1f/min), %(items)d items (%(itemrate).1f/min), %(done)d rounds done, "
            "%(errors)d errors",
            {
                "worker": self._worker(),
                "reason": reason,
                "minutes": minutes,
                "pages": pages,
                "pagerate": pages / minutes,
                "items": items,
                "itemrate": items / minutes,
                "done": self.stats.get_value("rounds/done", 0),
                "errors": sum(self._errors().values()),
            },
            extra={"spider": spider},
        )
