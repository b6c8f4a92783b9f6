"""``LeasedScheduler``: Scrapy's scheduler on the leased Redis queue of :mod:`.queue`.

Enable with::

    SCHEDULER = "cnkispider.scheduling.scheduler.LeasedScheduler"
    DUPEFILTER_CLASS = "cnkispider.scheduling.dupefilter.BloomDupeFilter"
    REQUEST_FINGERPRINTER_CLASS = "cnkispider.scheduling.fingerprint.DocKeyFingerprinter"

Why: every request lives in Redis from the moment it is made until its outcome is written, so
a worker killed at any moment loses nothing (a popped request is leased, acknowledged only when
its outcome is written: :mod:`.outcome`), and the engine never waits for Redis: every Redis call
is one run of the queue's script (new requests with their dedupe, acks, renewals, the next pops)
on a thread of its own (:class:`cnkispider.runtime.offload.RedisCalls`), and the engine takes requests
from a local buffer. Calls never overlap, so writes land in the order they were made, and a
request's children are written before the ack of the request that produced them.

A request read from Redis is checked (:class:`.serialize.ReadPolicy`); one that fails is never
run and moves to ``{ns}:unreadable``. Whether an idle spider closes is flow control's decision;
the scheduler never decides that a crawl is over by a timeout. ``scheduler.epoch`` changes when
Redis lost the namespace (flow control then replays the rounds whose state is gone).
Signals sent: ``request_abandoned``, ``round_drained`` (:mod:`cnkispider.signals`; sent and
their answers handled in :mod:`.reports`).

Settings: ``SCHEDULER_NAMESPACE``, ``SCHEDULER_LEASE_SECONDS``, ``SCHEDULER_MAX_ATTEMPTS``,
``SCHEDULER_BATCH_SIZE``, ``SCHEDULER_FLUSH_INTERVAL``, ``SCHEDULER_IDLE_POLL``,
``SCHEDULER_ALLOWED_HOSTS`` (URLs or ``host[:port]`` a request read from Redis may go to, besides
``CNKI_BASE_URL`` and ``CNKI_CLIENT_ID_URL``), ``REDIS_URL``, ``CNKI_DATA_DIR``,
``DUPEFILTER_CLASS`` (and the dupefilter's own).

The rest of this module's story: docs/INTERNALS.md#cnkispiderschedulingschedulerpy.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from scrapy.core.scheduler import BaseScheduler
from scrapy.dupefilters import BaseDupeFilter
from scrapy.utils.asyncio import call_later, create_looping_call
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy.utils.misc import build_from_crawler, load_object
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from cnkispider import default_settings, signals
from cnkispider.exceptions import SchedulerClosed
from cnkispider.runtime import engineslot
from cnkispider.runtime.offload import InlineIO, RedisCalls, ThreadIO
from cnkispider.scheduling import defaults
from cnkispider.scheduling.dupefilter import BloomDupeFilter
from cnkispider.scheduling.outcome import (
    BUFFERED,
    LEASE_PARENT,
    ROUND_SEEDING,
    OutcomeTracker,
    round_scheduler,
)
from cnkispider.scheduling.queue import Burial, Enqueue, Held, LeasedQueue, SyncBatch, SyncResult
from cnkispider.scheduling.reports import DrainsAndAbandons
from cnkispider.scheduling.serialize import ReadPolicy, request_from_json, request_to_json
from cnkispider.store import redisconn
from cnkispider.watch.halting import Cooldown
from cnkispider.words.i18n import ngettext

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


def scheduler_cooldown(crawler: Crawler) -> Cooldown | None:
    """The task's shared cool-down, in the Redis of the crawl's leased scheduler (None without
    one, or before it opened)."""
    scheduler = round_scheduler(crawler)
    return scheduler.cooldown() if scheduler is not None else None


class LeasedScheduler(DrainsAndAbandons, BaseScheduler):
    @classmethod
    def from_crawler(cls, crawler: Crawler) -> LeasedScheduler:
        settings = crawler.settings
        dupefilter = build_from_crawler(load_object(settings["DUPEFILTER_CLASS"]), crawler)
        if type(dupefilter) is BaseDupeFilter:
            dupefilter = None  # explicitly no dedupe
        elif not isinstance(dupefilter, BloomDupeFilter):
            raise ValueError(
                f"LeasedScheduler dedupes inside its Redis script: set DUPEFILTER_CLASS to "
                f"cnkispider.scheduling.dupefilter.BloomDupeFilter (or "
                f"scrapy.dupefilters.BaseDupeFilter for none), not {settings['DUPEFILTER_CLASS']}"
            )
        return cls(
            crawler,
            dupefilter=dupefilter,
            namespace=settings.get("SCHEDULER_NAMESPACE"),
            lease_seconds=settings.getfloat("SCHEDULER_LEASE_SECONDS"),
            max_attempts=settings.getint("SCHEDULER_MAX_ATTEMPTS"),
            batch_size=settings.getint("SCHEDULER_BATCH_SIZE"),
            flush_interval=settings.getfloat("SCHEDULER_FLUSH_INTERVAL"),
            idle_poll=settings.getfloat("SCHEDULER_IDLE_POLL"),
            redis_url=settings.get("REDIS_URL") or "",
            data_dir=settings.get("CNKI_DATA_DIR"),
            unreadable_kept=settings.getint("REDIS_UNREADABLE_KEPT"),
            policy=ReadPolicy.for_urls(
                # empty (config.ini's `base_url =`) is the default, as in protocol_from_settings
                settings.get("CNKI_BASE_URL") or default_settings.CNKI_BASE_URL,
                settings.get("CNKI_CLIENT_ID_URL") or default_settings.CNKI_CLIENT_ID_URL,
                *settings.getlist("SCHEDULER_ALLOWED_HOSTS"),
            ),
        )

    def __init__(
        self,
        crawler: Crawler,
        *,
        dupefilter: BloomDupeFilter | None,
        namespace: str = default_settings.SCHEDULER_NAMESPACE,
        lease_seconds: float = default_settings.SCHEDULER_LEASE_SECONDS,
        max_attempts: int = default_settings.SCHEDULER_MAX_ATTEMPTS,
        batch_size: int = default_settings.SCHEDULER_BATCH_SIZE,
        flush_interval: float = default_settings.SCHEDULER_FLUSH_INTERVAL,
        idle_poll: float = default_settings.SCHEDULER_IDLE_POLL,
        redis_url: str = "",
        data_dir: str = default_settings.CNKI_DATA_DIR,
        io: ThreadIO | InlineIO | None = None,
        client: Any = None,
        policy: ReadPolicy | None = None,
        unreadable_kept: int = default_settings.REDIS_UNREADABLE_KEPT,
    ):
        if lease_seconds <= 0 or max_attempts < 1 or batch_size < 1 or flush_interval <= 0:
            raise ValueError(
                "SCHEDULER_LEASE_SECONDS and SCHEDULER_FLUSH_INTERVAL must be positive, "
                "SCHEDULER_MAX_ATTEMPTS and SCHEDULER_BATCH_SIZE at least 1"
            )
        self.crawler = crawler
        self.stats = crawler.stats
        self.df = dupefilter
        self.namespace = namespace
        self.lease_seconds, self.max_attempts = lease_seconds, max_attempts
        self.batch_size, self.flush_interval, self.idle_poll = batch_size, flush_interval, idle_poll
        self.redis_url, self.data_dir = redis_url, data_dir
        self.unreadable_kept = unreadable_kept
        self.policy = policy or ReadPolicy.for_urls(
            default_settings.CNKI_BASE_URL, default_settings.CNKI_CLIENT_ID_URL
        )
        self.outcomes = OutcomeTracker()
        self.epoch: str | None = None
        self.queue: LeasedQueue | None = None
        self.spider: Spider | None = None
        self._io = io
        self._client = client
        self._buffer: deque[Request] = deque()
        self._writes = SyncBatch()
        # one call to Redis in flight at a time, with backoff (see cnkispider.runtime.offload)
        self._calls = RedisCalls(
            self._next_batch, self._sync, self._synced, self._sync_failed, owner="Scheduler"
        )
        self._closing = False
        self._timer: Any = None
        self._view_queued: int | None = None  # None until the first call answered
        self._view_others = 0  # leases held by other workers at the last call
        self._last_poll = self._last_renew = time.monotonic()
        self._handlers_running = 0
        self._recheck_delay: dict[str, float] = {}
        # for flow control's "is the task's queue idle" (unfinished_here): the calls carrying
        # enqueues that have ended, and whether the one in flight carries any
        self.enqueue_calls = 0
        self._enqueues_in_flight = False

    # --- Scrapy's scheduler interface -----------------------------------------------------

    def open(self, spider: Spider) -> Deferred:
        self.spider = spider
        if self._io is None:
            self._io = ThreadIO()
        self._calls.io = self._io
        if self.df is not None:
            self.df.open()
        return self._io.run(self._connect).addCallback(self._opened)

    def _connect(self) -> tuple[LeasedQueue, str]:
        client = self._client or redisconn.connect(self.redis_url, self.data_dir)
        queue = LeasedQueue(
            client,
            self.namespace,
            lease_seconds=self.lease_seconds,
            max_attempts=self.max_attempts,
            # a worker told a round drained and cut off before it told flow control is replaced
            # like a lease holder: within two leases (120 s with the default 60 s lease)
            drained_confirm_seconds=min(defaults.DRAINED_CONFIRM_SECONDS, 2 * self.lease_seconds),
            bloom_args=self.df.script_args() if self.df is not None else None,
            round_capacity=(
                self.df.round_capacity
                if self.df is not None
                else default_settings.DUPEFILTER_ROUND_CAPACITY
            ),
            unreadable_kept=self.unreadable_kept,
        )
        return queue, queue.open()

    def _opened(self, opened: tuple[LeasedQueue, str]) -> None:
        self.queue, self.epoch = opened
        logger.info(
            "Leased Redis scheduler on namespace %(ns)s (epoch %(epoch)s)",
            {"ns": self.namespace, "epoch": self.epoch},
        )
        if isinstance(self._io, ThreadIO):
            self._timer = create_looping_call(self._tick)
            self._timer.start(self.flush_interval, now=False)
        self._kick()

    def cooldown(self) -> Cooldown | None:
        """The task's shared challenge cool-down (cnkispider.watch.halting), a key in this scheduler's
        Redis and namespace; None before the scheduler opened (no client yet)."""
        if self.queue is None or not self.namespace:
            return None
        return Cooldown(self.queue.client, self.namespace)

    def close(self, reason: str) -> Deferred:
        self._closing = True
        self._calls.close()
        if self._timer is not None and self._timer.running:
            self._timer.stop()
        return deferred_from_coro(self._close(reason))

    async def _close(self, reason: str) -> None:
        # A call in flight finishes first (it takes milliseconds); holds and signal handlers get
        # a bounded wait, after which their leases are left to run out and return.
        while self._calls.busy:
            await maybe_deferred_to_future(_sleep(0.01))
        deadline = time.monotonic() + min(10.0, self.lease_seconds / 3)
        while (self._handlers_running or self.outcomes.holding()) and time.monotonic() < deadline:
            await maybe_deferred_to_future(_sleep(0.02))
        if self.queue is not None:
            self._writes.acks.extend(self.outcomes.finished(()))
            released = self.outcomes.take_buffered()
            self._writes.releases.extend(released)
            self._buffer.clear()
            self._inc("scheduler/released", len(released))
            while self._writes.ops():
                batch = self._take_batch(pop=0)
                try:
                    result = await maybe_deferred_to_future(self._io.run(self.queue.sync, batch))
                except Exception:
                    logger.exception(
                        "Final Redis write of the scheduler failed; leases will expire"
                    )
                    break
                finally:
                    self._call_ended(batch)
                self._apply(result, batch)
            unacked = len(self.outcomes)
            if unacked:
                logger.warning(
                    "Closing with %(n)d leases not acknowledged (held or still being handled); "
                    "they return to the queue after %(s)s s",
                    {"n": unacked, "s": self.lease_seconds},
                )
        if self.queue is not None and self._client is None:
            self.queue.client.close()  # ours: built in open()
        if self._io is not None:
            self._io.shutdown()
        if self.df is not None:
            self.df.close(reason)

    def flush(self) -> Deferred:
        """A Deferred that fires once every write made so far (enqueues, acks, ...) is in Redis.

        For flow control, which must not mark a round seeded before its first request is in the
        shared queue. A failing Redis keeps it waiting: the writes are kept and retried. Once the
        scheduler closes it fails (:class:`SchedulerClosed`): a request enqueued while the worker
        stops (a round being seeded when SIGTERM came) may land after the final writes, and
        is then never written; a round marked seeded on it would never drain."""
        return deferred_from_coro(self._flush())

    async def _flush(self) -> None:
        while (
            (self._writes.ops() or self._calls.busy)
            and self.queue is not None
            and not self._closing
        ):
            if not self._calls.busy:
                self._kick()
            await maybe_deferred_to_future(_sleep(0.01))
        if self._closing or self.queue is None:
            raise SchedulerClosed(
                "the scheduler closed before its writes were known to be in Redis"
            )

    def has_pending_requests(self) -> bool:
        return bool(
            self._buffer
            or self._writes.ops()
            or self._calls.busy
            or len(self.outcomes)
            or self._handlers_running
            or self._view_queued is None
            or self._view_queued > 0
            or self._view_others > 0
        )

    def unfinished_here(self) -> bool:
        """This worker's part of the task that the queue's sizes in Redis may not show: requests
        buffered or in the engine's hands, writes not sent, enqueues in flight, drain handlers
        running. Unlike :meth:`has_pending_requests`, a call in flight that carries no enqueue
        does not count: sizes read after it began show what it carries (an acked lease is still
        leased, or its children are queued; a popped request is still queued, or leased). An
        enqueue in flight may land after such a read: it counts, and so does one that ended
        since (``enqueue_calls`` grew), which the caller checks (tasks/feeder.py)."""
        return bool(
            self._buffer
            or self._writes.ops()
            or len(self.outcomes)
            or self._handlers_running
            or self._enqueues_in_flight
        )

    def enqueue_request(self, request: Request) -> bool:
        # The hand-out it was made from: a callback's (LeaseLineage), or for a redirect or retry
        # the one Scrapy copied with the meta. Not held here (any more), it was made for a lease
        # this worker forgot when Redis lost it (its round is replayed): it is not queued.
        parent = request.meta.pop(LEASE_PARENT, None)
        if parent is None and request.meta.get("lease_id") is not None:
            parent = (request.meta["lease_id"], request.meta.get("lease_token"))
        if parent is not None:
            parent = Held(str(parent[0]), str(parent[1]))
            if self.outcomes.held_of(parent.lease_id) != parent:
                self._inc("scheduler/refused")
                logger.debug(
                    "Not queued: %(request)s, made from lease %(id)s, no longer held here",
                    {"request": request, "id": parent.lease_id},
                )
                return False
        fingerprint = None
        if self.df is not None and not request.dont_filter:
            fingerprint = self.df.fingerprint(request)
            of = self.outcomes.request_of(request.meta.get("lease_id"))
            if of is not None and self.df.fingerprint(of) == fingerprint:
                fingerprint = None  # a redirect or retry of the same document
        round_id = request.meta.get("round_id")
        round_id = None if round_id is None else str(round_id)
        if round_id is not None and ("\n" in round_id or not round_id):
            raise ValueError(f"{request}: meta round_id {round_id!r} cannot be a round id")
        priority = max(
            -defaults.PRIORITY_LIMIT + 1, min(defaults.PRIORITY_LIMIT - 1, request.priority)
        )
        # a round's seed names the seeding it starts (flow control's round.seeding): the round's
        # drain is reported with it, so that only this seeding's handlers may close it
        seeding = request.meta.pop(ROUND_SEEDING, None)
        data = request_to_json(request, self.spider)  # may refuse it: then nothing is recorded
        self._writes.enqueues.append(
            Enqueue(
                data,
                priority,
                fingerprint,
                round_id,
                parent,
                None if seeding is None else str(seeding),
            )
        )
        self._inc("scheduler/enqueued")
        self._inc("scheduler/enqueued/redis")
        if len(self._writes.enqueues) >= defaults.MAX_OPS_PER_SYNC:
            self._kick()
        return True

    def next_request(self) -> Request | None:
        if not self._buffer:
            if self._view_queued or self._writes.enqueues:
                self._kick()
            return None
        request = self._buffer.popleft()
        if len(self._buffer) <= self.batch_size // 2 and (
            self._view_queued or self._writes.enqueues
        ):
            self._kick()
        # Only now: a call started above must not see this request as handed out, because
        # the engine adds it to its in-progress set after this method returns.
        self.outcomes.handed_out(request)
        self._inc("scheduler/dequeued")
        self._inc("scheduler/dequeued/redis")
        return request

    def __len__(self) -> int:
        return len(self._buffer) + (self._view_queued or 0)

    # --- the Redis calls --------------------------------------------------------------------

    def _tick(self) -> None:
        """Every SCHEDULER_FLUSH_INTERVAL: make a call if anything is due."""
        if self._calls.busy or self.queue is None or self._closing:
            return
        now = time.monotonic()
        if now < self._calls.retry_at:
            return
        low = len(self._buffer) <= self.batch_size // 2
        if (
            self._writes.ops()
            or self.outcomes.finished_any(self._inprogress())
            or (now - self._last_renew >= self.lease_seconds / 3 and len(self.outcomes))
            or (low and (self._view_queued or now - self._last_poll >= self.idle_poll))
        ):
            self._kick()

    def _kick(self) -> None:
        """Make a call now (or right after the one in flight)."""
        if self.queue is not None:
            self._calls.kick()

    def _next_batch(self) -> SyncBatch:
        pop = 0 if self._closing else max(0, self.batch_size - len(self._buffer))
        return self._take_batch(pop)

    def _call_ended(self, batch: SyncBatch) -> None:
        if batch.enqueues:
            self.enqueue_calls += 1
        self._enqueues_in_flight = False

    def _sync(self, batch: SyncBatch) -> SyncResult:
        return self.queue.sync(batch)  # on the I/O thread

    def _take_batch(self, pop: int) -> SyncBatch:
        now = time.monotonic()
        finished = self.outcomes.finished(self._inprogress())
        if finished and logger.isEnabledFor(logging.DEBUG):
            logger.debug("Acknowledging %(ids)s", {"ids": [h.lease_id for h in finished]})
        self._writes.acks.extend(finished)
        pending, batch = self._writes, SyncBatch(pop=pop)
        room = defaults.MAX_OPS_PER_SYNC
        batch.enqueues, pending.enqueues = pending.enqueues[:room], pending.enqueues[room:]
        if not pending.enqueues:  # acks only once every child before them is in the batch
            for name in ("acks", "burials", "releases", "confirms", "rechecks"):
                setattr(batch, name, getattr(pending, name))
                setattr(pending, name, [])
        if now - self._last_renew >= self.lease_seconds / 3:
            batch.renewals = self.outcomes.held()
            self._last_renew = now
        if pop:
            self._last_poll = now
        self._enqueues_in_flight = bool(batch.enqueues)  # every batch taken is sent at once
        return batch

    def _synced(self, result: SyncResult, batch: SyncBatch) -> None:
        self._call_ended(batch)
        self._apply(result, batch)
        if not self._closing:
            self._wake_engine()
            if self._calls.again or len(self._writes.enqueues) >= defaults.MAX_OPS_PER_SYNC:
                self._kick()

    def _apply(self, result: SyncResult, batch: SyncBatch) -> None:
        self._inc("scheduler/redis/calls")
        if result.epoch != self.epoch:
            logger.error(
                "Redis namespace %(ns)s has a new epoch (%(old)s -> %(new)s): Redis lost its "
                "state; rounds whose requests were there must be replayed",
                {"ns": self.namespace, "old": self.epoch, "new": result.epoch},
            )
            self.epoch = result.epoch
            self._forget_epoch()
        self._inc("scheduler/refused", result.refused)
        self._inc("dupefilter/filtered", result.duplicates)
        self._inc("scheduler/acked", result.acked)
        self._inc("scheduler/acked/stale", result.stale)
        for popped in result.popped:
            request = self._read(popped)
            if request is not None:
                self.outcomes.leased(popped.held, request, BUFFERED)
                self._buffer.append(request)
        for popped in result.abandoned:
            request = self._read(popped)
            if request is not None:
                self._abandon(request, popped)
        for round_id in result.drained:
            self._drained(round_id, result.epoch, result.seedings.get(round_id) or None)
        self._view_queued = result.queued
        self._view_others = max(0, result.leased - len(self.outcomes))

    def _forget_epoch(self) -> None:
        """Redis has a new epoch: every lease this worker held is gone there (its ids may name
        other requests now), so it stops renewing and acknowledging them, and drops the lease
        writes not sent yet; Redis refuses them anyway. Flow control replays the rounds those
        requests belonged to, so nothing is lost; the engine finishes what it holds, but what
        those requests make is not queued (their parent is no longer held). New requests not
        sent yet (seeds) are kept."""
        forgotten = self.outcomes.forget_all()
        self._buffer.clear()
        for name in SyncBatch.WRITES:
            if name != "enqueues":
                setattr(self._writes, name, [])
        self._recheck_delay.clear()
        self._inc("scheduler/leases_forgotten", forgotten)
        if forgotten:
            logger.warning(
                ngettext(
                    "Forgot %(n)d lease of the old epoch; its round is replayed",
                    "Forgot %(n)d leases of the old epoch; their rounds are replayed",
                    forgotten,
                ),
                {"n": forgotten},
            )

    def _sync_failed(self, failure: Failure, batch: SyncBatch, delay: float) -> None:
        """Keep the writes for the next call (same order); the pop is simply not made."""
        self._call_ended(batch)
        pending = self._writes
        for name in SyncBatch.WRITES:
            if name != "renewals":  # renewals are recomputed
                setattr(pending, name, getattr(batch, name) + getattr(pending, name))
        self._inc("scheduler/redis/errors")
        logger.error(
            "Redis call of the scheduler failed (%(n)d in a row), retrying in %(d).1f s: %(e)s",
            {"n": self._calls.failures, "d": delay, "e": failure.getErrorMessage()},
        )

    def _read(self, popped: Any) -> Request | None:
        try:
            request = request_from_json(popped.data, self.spider, self.policy)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"[:500]
            logger.error(
                "Request %(id)s in Redis is not run (%(e)s); moved to %(ns)s:unreadable",
                {"id": popped.lease_id, "e": reason, "ns": self.namespace},
            )
            self._writes.burials.append(Burial(popped.held, reason))
            self._inc("scheduler/unreadable")
            self.crawler.signals.send_catch_log(
                signals.request_unreadable, reason=reason, spider=self.spider
            )
            return None
        request.meta["lease_id"] = popped.lease_id
        request.meta["lease_attempts"] = popped.attempts
        request.meta["lease_token"] = popped.token
        return request

    # --- the engine -----------------------------------------------------------------------

    def _inprogress(self) -> Collection[Request]:
        """The requests the engine is working on (downloading or scraping)."""
        return engineslot.in_progress(self.crawler)

    def _wake_engine(self) -> None:
        """Have the engine ask for requests again now, not at its next 5 s heartbeat."""
        engineslot.wake(self.crawler)

    def _inc(self, key: str, count: int = 1) -> None:
        if count and self.stats is not None:
            self.stats.inc_value(key, count)


def _sleep(seconds: float) -> Deferred:
    d: Deferred = Deferred()
    call_later(seconds, d.callback, None)
    return d
