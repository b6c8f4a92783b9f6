"""RoundFeeder: the Scrapy extension that runs flow control inside a worker.

It registers the task and the worker, claims rounds as the shared queue drains and seeds them
into Redis, heart-beats, closes a round when its last request is acknowledged (done when its
ledger balances, else failed: ``TaskStore.close_round``), moves the task to its recrawl phase and
then to done, exactly once across the cluster, and only then lets the spider close.

Phases of a task (``task.phase``)::

    crawl --every round done or failed for good, cursor past end_date--> recrawl --error tables
      ^   '--every round failed: the task halts (never "finished")        empty or permanent--> done
      |                                                                                          |
      '-------------------- end_date extended (the next claim sets crawl again) ------------------'

Halting: the feeder runs the worker's circuit breaker (:class:`cnkispider.watch.halting.Breaker`):
one reason repeating over list pages, or CNKI not reachable at all, halts the task; a rejection
halts it at once. A halted task seeds nothing and marks no round done. A worker never closes on
an idle timeout: it closes when its task is done or has no round due. The feeder is the one
writer of the worker's :class:`~cnkispider.runtime.context.CrawlContext`.

Settings: ``TASKS_ENABLED``, ``TASKS_NAME``, ``TASKS_TYPE``, ``TASKS_START_DATE``,
``TASKS_END_DATE``, ``TASKS_CATEGORIES``, ``TASKS_BASE_DIR``, ``TASKS_ROUND_LEASE``,
``TASKS_ROUND_ATTEMPTS``, ``TASKS_HEARTBEAT``, ``TASKS_ROUNDS_IN_FLIGHT``, ``TASKS_RECRAWL``,
``TASKS_EXIT_WHEN_IDLE``, ``TASKS_FOLLOW``, ``TASKS_LOOK_BACK_DAYS``, ``TASKS_FOLLOW_EVERY``,
``TASKS_LOOK_TIERS``, ``TASKS_FACET_COUNTS`` (tasks/parts.py),
``TASKS_UNTIL_IDLE``, ``TASKS_REFRESH_COUNTS_EVERY``, ``TASKS_HALT_AFTER``, ``TASKS_HALT_WINDOW``,
``TASKS_UNREACHABLE_AFTER``, ``TASKS_LOCAL_FAULT_STOPS``, ``DATABASE_URL``,
``ERRORS_MAX_ATTEMPTS`` (each explained in docs/INTERNALS.md#tasksfeederpy, the rest of its story).

Pieces: tasks/feeder_halts.py, tasks/feeder_looks.py (looks), tasks/feeder_phase.py (no round due).
"""

from __future__ import annotations

import logging
import secrets
from pathlib import Path

from scrapy import signals
from scrapy.exceptions import DontCloseSpider, NotConfigured
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from twisted.internet import task as twisted_task
from twisted.internet import threads

from cnkispider import signals as cnki_signals
from cnkispider.clock import cnki_today
from cnkispider.cnki.groups import FACET_SEEDING
from cnkispider.config.looktiers import parse_tiers
from cnkispider.exceptions import CnkiSpiderError, SchedulerClosed, TaskRowError
from cnkispider.items import DEFAULT_DEPTH
from cnkispider.runtime.context import CrawlContext, context_of, open_context
from cnkispider.runtime.offload import in_thread
from cnkispider.scheduling.outcome import ROUND_SEEDING, RoundScheduler
from cnkispider.store.db import is_transient, open_database
from cnkispider.watch.halting import Breaker
from errors.middleware import LAST_ERROR_STAT
from errors.recorder import ErrorRecorder
from tasks.categories import DAY, round_label
from tasks.feeder_halts import FeederHalts
from tasks.feeder_looks import FeederLooks
from tasks.feeder_phase import FeederPhase
from tasks.flow import TaskStore, new_worker_id
from tasks.roundstate import RoundState

logger = logging.getLogger(__name__)


class RoundFeeder(FeederHalts, FeederLooks, FeederPhase):
    def __init__(self, crawler, settings):
        self.crawler = crawler
        self.database_url = settings.get("DATABASE_URL")
        self.task_name = settings.get("TASKS_NAME")
        self.task_type = settings.get("TASKS_TYPE")
        self.start_date = settings.get("TASKS_START_DATE")
        self.end_date = settings.get("TASKS_END_DATE")
        self.categories = settings.get("TASKS_CATEGORIES")
        self.depth = settings.get("TASKS_DEPTH") or DEFAULT_DEPTH
        self.query = settings.get("TASKS_QUERY") or None
        base_dir = settings.get("TASKS_BASE_DIR")
        self.base_dir = Path(base_dir) if base_dir else None
        self.round_lease = settings.getint("TASKS_ROUND_LEASE")
        self.round_attempts = settings.getint("TASKS_ROUND_ATTEMPTS")
        self.day_census = settings.getbool("TASKS_DAY_CENSUS")
        self.heartbeat_seconds = settings.getfloat("TASKS_HEARTBEAT")
        self.rounds_in_flight = settings.getint("TASKS_ROUNDS_IN_FLIGHT")
        self.recrawl = settings.getbool("TASKS_RECRAWL")
        self.exit_when_idle = settings.getbool("TASKS_EXIT_WHEN_IDLE")
        # a task that follows today (tasks/lookback.py): its looks, and whether a run ends
        self.follow = settings.getbool("TASKS_FOLLOW")
        self.look_back_days = settings.getint("TASKS_LOOK_BACK_DAYS")
        self.follow_every = settings.getint("TASKS_FOLLOW_EVERY")
        # [task] look_tiers (checked when config.ini was read; a bad -s value stops here)
        self.look_tiers = parse_tiers(settings.get("TASKS_LOOK_TIERS") or "off")
        # [task] facet_counts: a split day's parts recounted by one group/result (tasks/parts.py)
        self.facet_counts = settings.getbool("TASKS_FACET_COUNTS")
        self.until_idle = settings.getbool("TASKS_UNTIL_IDLE")
        # and its counts over the look-back, every TASKS_REFRESH_COUNTS_EVERY (0: never)
        self.refresh_counts_every = settings.getint("TASKS_REFRESH_COUNTS_EVERY")
        self.config_file = settings.get("CNKI_CONFIG_FILE") or ""
        self.counts_tried = None  # the counts refresh this worker ran last (its claim's time)
        self.follows = False
        self.started_at = None  # the database's clock when this worker began (follow_every 0)
        self.looks_at_start = None  # the task's looks then: follow_every 0 looks once a start
        self.error_attempts = settings.getint("ERRORS_MAX_ATTEMPTS")
        self.breaker = Breaker(
            consecutive=settings.getint("TASKS_HALT_AFTER"),
            window=settings.getint("TASKS_HALT_WINDOW"),
            unreachable_after=settings.getint("TASKS_UNREACHABLE_AFTER"),
        )
        self.local_fault_stops = settings.getbool("TASKS_LOCAL_FAULT_STOPS")
        self.halt_reason: str | None = None
        self._cooldown = None
        #: The session runtime waits for a person to pass a session (signal ``person_waiting``).
        self.waiting_for_person = False
        self.spider = None
        self.task_id: int | None = None
        self.worker_id = new_worker_id()
        #: The round this worker seeded last (``day category``), for its heartbeat (worker row).
        self.current_round: str | None = None
        self.busy = False
        self.closing = False
        self.finished_reason: str | None = None
        self.summary: dict = {}
        self._feed_errors: set[str] = set()

    @classmethod
    def from_crawler(cls, crawler):
        settings = crawler.settings
        if not settings.getbool("TASKS_ENABLED"):
            raise NotConfigured
        if not settings.get("DATABASE_URL"):
            raise NotConfigured("DATABASE_URL is not set")
        feeder = cls(crawler, settings)
        crawler.signals.connect(feeder.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(feeder.spider_idle, signal=signals.spider_idle)
        crawler.signals.connect(feeder.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(feeder.round_drained, signal=cnki_signals.round_drained)
        crawler.signals.connect(feeder.response_received, signal=signals.response_received)
        crawler.signals.connect(feeder.list_failed, signal=cnki_signals.list_failed)
        crawler.signals.connect(feeder.task_halted, signal=cnki_signals.task_halted)
        crawler.signals.connect(feeder.halt_requested, signal=cnki_signals.halt_requested)
        crawler.signals.connect(feeder.request_unreadable, signal=cnki_signals.request_unreadable)
        crawler.signals.connect(feeder.person_waiting, signal=cnki_signals.person_waiting)
        return feeder

    @property
    def context(self) -> CrawlContext | None:
        """What this worker's components share about its task, once it is open
        (cnkispider/runtime/context.py); they ask for it with ``context_of(crawler)``."""
        return context_of(self.crawler)

    # -- start and stop ------------------------------------------------------------------

    async def spider_opened(self, spider):
        self.spider = spider
        try:
            engine = await in_thread(open_database, self.database_url)
        except CnkiSpiderError as exc:
            logger.error("%s", exc)
            self._close("database_error")
            return
        self.store = TaskStore(
            engine,
            round_lease=self.round_lease,
            round_attempts=self.round_attempts,
            base_dir=self.base_dir,
            day_census=self.day_census,
        )
        self.error_recorder = ErrorRecorder(engine, max_attempts=self.error_attempts)
        name = spider.task_name or self.task_name
        try:
            await self._open_task(spider, name)
        except (CnkiSpiderError, LookupError, ValueError) as exc:
            logger.error("cannot start: %s", exc)
            self._close("task_error")
        except Exception as exc:
            # A database error here (a category list longer than its column, a table missing,
            # the database gone past its outage time) would leave the worker idle, to say "no
            # task" later: it stops at once, naming the real cause in one line.
            logger.error("cannot start: %s", one_line(exc))
            logger.debug("the cause", exc_info=True)
            self._close("database_error")

    async def _open_task(self, spider, name: str) -> None:
        """Register (or join) the task and this worker, then start the heartbeat and feeding."""
        if spider.task_name:
            task = await in_thread(self.store.get, name)
        else:
            if self.task_type and self.task_type != spider.doc_type:
                raise CnkiSpiderError(
                    f"config.ini [task] type is {self.task_type} but the spider is {spider.doc_type}; "
                    f"run `scrapy crawl {self.task_type}` or pass -a task=NAME"
                )
            start = self.start_date or cnki_today().isoformat()
            task, created = await in_thread(
                self.store.register,
                name,
                spider.doc_type,
                start,
                self.end_date,
                self.categories,
                self.depth,
                None,
                self.query,
                follow=self.follow,
            )
            logger.info(
                "%s task %s (%s)", "registered" if created else "joined", task.name, task.id
            )
        if task.type != spider.doc_type:
            logger.error("task %s is a %s task, not %s", task.name, task.type, spider.doc_type)
            self._close("task_error")
            return
        open_context(
            self.crawler,
            CrawlContext(
                task=task,
                tasks=self.store,
                error_recorder=self.error_recorder,
                worker_id=self.worker_id,
            ),
        )
        self.task_id = task.id
        self.task_name = task.name  # the row's (``-a task=NAME`` may have chosen it)
        self.started_at = await in_thread(self.store.database_now)
        self.looks_at_start = await in_thread(self.store.looks_now, task.id)
        self.follows = task.follow
        await in_thread(self.store.register_worker, self.worker_id, task.id)
        self.heartbeat_loop = twisted_task.LoopingCall(self._heartbeat)
        self.heartbeat_loop.start(self.heartbeat_seconds, now=False)
        self.feed_loop = twisted_task.LoopingCall(self._kick)
        self.feed_loop.start(1.0, now=True)

    def _close(self, reason: str) -> None:
        if not self.closing:
            self.closing = True
            self.finished_reason = reason
            d = deferred_from_coro(self.crawler.engine.close_spider_async(reason=reason))
            d.addErrback(lambda f: logger.debug("closing: %s", f.getErrorMessage()))

    async def spider_closed(self, spider, reason):
        for loop in ("heartbeat_loop", "feed_loop"):
            running = getattr(self, loop, None)
            if running is not None and running.running:
                running.stop()
        if self.task_id is not None:
            await in_thread(self._beat, "stopped")
            self.summary = await in_thread(self.store.progress, self.task_id)
            logger.info("task %s: %s", self.task_id, self.summary)

    # -- the heartbeat ---------------------------------------------------------------------

    def _heartbeat(self):
        d = threads.deferToThread(self._beat, "running")
        d.addErrback(lambda f: logger.warning("heartbeat failed: %s", f.getErrorMessage()))
        return d

    def _beat(self, state: str) -> None:
        stats = self.crawler.stats
        self.store.heartbeat(
            self.worker_id,
            self.task_id,
            pages=stats.get_value("response_received_count", 0),
            items=stats.get_value("item_scraped_count", 0),
            errors=sum(v for k, v in stats.get_stats().items() if k.startswith("errors/")),
            challenges=stats.get_value("retry/challenges", 0),
            last_error=stats.get_value(LAST_ERROR_STAT),
            export_batch=stats.get_value("depth/export/batch_size"),
            current_round=self.current_round,
            state=state,
        )

    # -- feeding rounds ----------------------------------------------------------------------

    @property
    def scheduler(self):
        return self.crawler.engine.scheduler

    def spider_idle(self, spider):
        if self.finished_reason is None:
            self._kick()
            raise DontCloseSpider

    def _kick(self):
        if self.busy or self.closing or self.task_id is None:
            return None
        self.busy = True
        d = deferred_from_coro(self.feed())
        d.addErrback(self._feed_failed)
        d.addBoth(self._not_busy)
        return d

    def _feed_failed(self, failure) -> None:
        """Feeding runs every second: a failure that repeats is one line each time, its
        traceback only the first time (a bad task row is the store's to report, once)."""
        error = failure.value
        if isinstance(error, TaskRowError):
            self.store.report_bad_row(error)
            return
        if isinstance(error, SchedulerClosed):  # the worker stops: the round was handed back
            logger.info(
                "flow control: %s (a round being seeded is handed back; error rows being "
                "replayed come back after their claim lease)",
                error,
            )
            return
        line = one_line(error)
        if line in self._feed_errors or is_transient(
            error
        ):  # an outage: cnkispider.store.db says more
            logger.error("flow control: %s", line)
            return
        self._feed_errors.add(line)
        logger.error("flow control: %s", failure.getTraceback())

    def _not_busy(self, result):
        self.busy = False
        return result

    async def feed(self):
        """Claim and seed rounds while the shared queue is short; when none is due, finish.

        The queue length (all workers' requests) is the throttle, not this worker's own rounds:
        any worker may finish a round another seeded. A halted task stops this worker; during
        the task's challenge cool-down nothing is seeded.
        """
        halt = await in_thread(self.store.halt_of, self.task_id)
        if halt:
            self._halted(halt)
            return
        if await self._cooling_down() or self.waiting_for_person:
            return
        local = self.breaker.only_local() if self.local_fault_stops else None
        if local is not None:  # claim nothing: a round's attempts are every worker's
            self._stop_self(local)
            return
        scheduler = self.scheduler
        low_water = self.crawler.settings.getint("CONCURRENT_REQUESTS")
        seeded = 0
        while seeded < self.rounds_in_flight and not self.closing:
            sizes = await in_thread(self._sizes)
            if sizes is None or sizes["queued"] >= low_water:
                return  # (None: the scheduler closed under this feed at shutdown)
            round_ = await in_thread(
                self.store.claim,
                self.task_id,
                self.worker_id,
                scheduler.epoch,
                self._idle_in_redis,
            )
            if round_ is None:
                break
            try:
                # the task's tree as it is now (its categories file may have been edited): a
                # new root's children are known when its search has to be split
                self.context.task = await in_thread(self.store.get, self.task_id)
                # This seeding's token: written with the seed to Redis and to the round when
                # it is marked seeded; its drain names it, so only this seeding's handlers may
                # close the round (a late handler of an earlier one changes nothing).
                seeding = secrets.token_hex(8)
                held = round_
                if round_.category == DAY:  # a census: its split or recount bound to `seeding`
                    held = await self._census_seeding(round_, seeding)
                if held is None:  # taken over meanwhile
                    ours = False
                else:
                    round_ = held
                    for request in self.spider.round_requests(round_):
                        if request.meta.get("round_id") == round_.id:
                            request.meta[ROUND_SEEDING] = seeding
                            if round_.category == DAY:  # kept in meta (the scheduler strips
                                request.meta[FACET_SEEDING] = seeding  # ROUND_SEEDING)
                        self.crawler.engine.crawl(request)
                    # Seeded only once the first request is in Redis: a crash before that
                    # leaves the round claimed, and its lease hands it to another worker.
                    await self._flushed()
                    ours = await in_thread(
                        self.store.mark_seeded, round_.id, self.worker_id, scheduler.epoch, seeding
                    )
            except BaseException:
                # This worker lives on: a round it failed to seed (the task row edited into
                # nonsense since the claim, the database away) is handed back at once, rather
                # than after its lease (its heartbeat renews it no more either).
                await in_thread(self.store.release_claim, round_.id, self.worker_id)
                raise
            if not ours:
                # Another worker holds the round now (this worker's lease lapsed and the round
                # was taken over, or the operator re-opened it): that worker seeds it. What this
                # one flushed is a copy of the round's first page under the same round id, whose
                # handling is idempotent (its total set, its rows' ledger rows written once);
                # it seeds nothing more of it.
                logger.warning(
                    "round %s (%s %s) is no longer this worker's (taken over while it was being "
                    "seeded): its new holder seeds it",
                    round_.id,
                    round_.day,
                    round_label(round_.category),
                )
                continue
            seeded += 1
            self.current_round = f"{round_.day} {round_label(round_.category)}"
            logger.debug(  # one a round: the progress line says how many, once a minute
                "round %s seeded: %s %s (attempt %s)",
                round_.id,
                round_.day,
                round_label(round_.category),
                round_.attempts,
            )
        if seeded == 0:
            await self._maybe_finish()

    async def _cooling_down(self) -> bool:
        if self._cooldown is None:
            # the leased scheduler's: it owns the task's Redis client and namespace (none: no
            # cool-down, as with any other scheduler)
            scheduler = self.scheduler
            cooldown = scheduler.cooldown() if isinstance(scheduler, RoundScheduler) else None
            self._cooldown = cooldown or False
        if not self._cooldown:
            return False
        try:
            return await in_thread(self._cooldown.remaining) > 0
        except Exception:  # Redis trouble is the scheduler's to report
            return False

    def person_waiting(self, waiting: bool, spider=None) -> None:
        """No verified session is usable (cnkispider.sessions.runtime): claim nothing new until
        one is there again."""
        self.waiting_for_person = waiting

    def _sizes(self, work_left: bool = False) -> dict[str, int] | None:
        """The shared queue's sizes (``work_left``: and its drained rounds not confirmed); None
        once the scheduler has closed (a feed or a phase check still running while the worker
        shuts down)."""
        scheduler = self.scheduler
        queue = scheduler.queue if isinstance(scheduler, RoundScheduler) else None
        if queue is None:
            return None
        return queue.work_left() if work_left else queue.sizes()

    def _remove_keys(self) -> None:
        """The task is done and its queue idle everywhere: its Redis keys go, [redis]
        remove_finished (cnkispider/scheduling/queue.py, remove_namespace). Each worker that
        sees it so does it (the second finds nothing); not at recrawl -> done, which
        ``[crawl] recrawl = false`` takes without asking whether the queue is idle."""
        queue = self.scheduler.queue if isinstance(self.scheduler, RoundScheduler) else None
        if queue is not None and self.crawler.settings.getbool("REDIS_REMOVE_FINISHED"):
            queue.remove()

    def _idle_in_redis(self, round_ids: list[int]) -> set[int]:
        """The claim's question to Redis (:func:`idle_in_redis`), on this worker's queue."""
        return idle_in_redis(self.scheduler.queue, round_ids)

    async def _flushed(self) -> None:
        """Wait until what this worker enqueued is written to Redis."""
        await maybe_deferred_to_future(self.scheduler.flush())

    # -- completion --------------------------------------------------------------------------

    async def round_drained(self, round_id, spider=None, epoch=None, seeding=None):
        """This worker acknowledged the round's last request: the round is closed if it was
        seeded under the epoch it drained in (else it is replayed); not seeded yet: asked again
        later. Closed means done when its ledger balances, else failed (re-opened while it has
        attempts left: tasks/flow.py ``close_round``). While the task is halted it is failed
        instead (note ``halted``), and ``task resume`` re-opens it. Every write names the
        drain's ``seeding`` (tasks/closing.py ``close_round``): a handler of an earlier seeding,
        late through a database outage, changes nothing of the round's later seeding."""
        if self.follows:  # a look's walk: what it did not show is no longer listed
            await in_thread(self.store.mark_unlisted, round_id, seeding)
        closed = await in_thread(self.store.close_round, round_id, epoch=epoch, seeding=seeding)
        if closed.moved is None:
            return cnki_signals.DRAIN_LATER
        if closed.moved:
            info = await in_thread(self.store.round_info, round_id)
            words = closed.verdict.words()
            if closed.state == RoundState.DONE:
                self.crawler.stats.inc_value("rounds/done")
                logger.debug(  # one a round: the progress line counts them once a minute
                    "round %s done: %s %s, %s",
                    round_id,
                    info.day,
                    round_label(info.category),
                    words,
                )
            else:
                self.crawler.stats.inc_value(f"rounds/{closed.state}")
                logger.warning(
                    "round %s (%s %s) does not balance: %s; %s",
                    round_id,
                    info.day,
                    round_label(info.category),
                    words,
                    f"crawled again once no new round is due (attempt {closed.attempts + 1} "
                    f"of {self.round_attempts})"
                    if closed.state == "again"
                    else f"failed after {closed.attempts} attempts (errorCode reason ledger)",
                )
        elif await in_thread(self.store.halt_of, self.task_id):
            if await in_thread(self.store.mark_halted, round_id, seeding):
                self.crawler.stats.inc_value("rounds/halted")
        self._kick()


def idle_in_redis(queue, round_ids: list[int]) -> set[int]:
    """Of these rounds (seeded under the queue's epoch), those Redis holds nothing of: no
    request queued or leased (their outstanding count), no drain waiting to be closed. Read in
    that order: the ack that drains a round adds its drain in the same step, and the drain goes
    only once the round is closed in the database (tasks/claims.py ``ClaimRounds._stuck``). Blocking
    (the claim's thread); ``queue``: the scheduler's :class:`~cnkispider.scheduling.queue.LeasedQueue`,
    None while it is not open (nothing can be told)."""
    if queue is None:
        return set()
    empty = [r for r in round_ids if queue.outstanding(r) == 0]
    if not empty:
        return set()
    draining = set(queue.rounds_at_zero())
    return {r for r in empty if str(r) not in draining}


def one_line(error: BaseException) -> str:
    """``Type: first line of the message`` (a database error's own message, not SQLAlchemy's
    wrapping of the statement and its parameters), masked."""
    from cnkispider.config.masking import mask_text

    cause = getattr(error, "orig", None) or error
    text = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
    return mask_text(f"{type(cause).__name__}: {text}" if text else type(cause).__name__)
