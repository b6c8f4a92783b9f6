"""Issue 47, points 1 and 2: every write of a drain is bound to the seeding it belongs to, and
what an errback yields is the child of its request's lease, driven by hand through the project's
own classes on the real services (the scheduler and its queue script on Redis, the task store on
SQLite and MariaDB, flow control's real drain handler).

A drain handler of an earlier seeding of a round may run late: its ``close_round`` is retried
through a database outage while the drain is reported again to another worker, which closes the
round; the round is then seeded again in the same Redis epoch (a look of a task that follows
today, or a retry of a round that failed). Each case below replays that late handler with the
drain it was told of (the seeding Redis reported with it) and checks that it changes nothing of
the later seeding. Both failed before the seeding was compared in the writes (the late handler
failed the retried round for good, or marked a look's rows no longer listed mid-walk).
"""

from __future__ import annotations

import datetime as dt

import scrapy
import sqlalchemy as sa
from twisted.python.failure import Failure

from cnkispider import signals
from cnkispider.clock import cnki_today
from cnkispider.exceptions import GaveUp
from cnkispider.scheduling.outcome import ROUND_SEEDING, errback_lineage
from cnkispider.store import ledger
from cnkispider.store.db import open_database
from cnkispider.store.schema import error_code, round_
from cnkispider.store.schema import ledger as ledger_rows
from tasks.feeder import RoundFeeder
from tasks.flow import TaskStore
from tests.fixtures.scheduling import HAND_DRIVEN, finish, in_loop, settle, take_all
from tests.fixtures.waiting import wait_until_async

W1 = "host:1:aaaaaa"
DAY = "2024-01-01"
A, B, C = "CJFQ/A", "CJFQ/B", "CJFQ/C"


class Worker:
    """A worker's scheduler whose drains go to flow control's real handler, and a record of
    every drain Redis reported (round, epoch, seeding): what each handler was told."""

    def __init__(self, make_scheduler, store: TaskStore, *, follows: bool = False):
        self.scheduler = make_scheduler(**HAND_DRIVEN, DATABASE_URL="sqlite://")
        crawler = self.scheduler.crawler
        self.feeder = RoundFeeder(crawler, crawler.settings)
        self.feeder.store = store
        self.feeder.follows = follows
        self.store = store
        self.drains: list[dict] = []
        crawler.signals.connect(self.feeder.round_drained, signal=signals.round_drained)
        crawler.signals.connect(self._told, signal=signals.round_drained)

    def _told(self, round_id, epoch=None, seeding=None):
        self.drains.append({"round_id": round_id, "epoch": epoch, "seeding": seeding})

    def seed(self, round_id: int, token: str) -> None:
        """What the feeder does: the round's first page, carrying its seeding, into Redis;
        then the round is marked seeded under that seeding."""
        self.scheduler.enqueue_request(
            scrapy.Request(
                f"https://x/list?round={round_id}&s={token}",
                meta={"round_id": round_id, ROUND_SEEDING: token},
                dont_filter=True,
            )
        )
        self.scheduler._kick()
        assert self.store.mark_seeded(round_id, W1, self.scheduler.epoch, token)

    async def drain(self) -> None:
        """Every request of this worker handled: the last ack drains the round."""
        for request in take_all(self.scheduler):
            finish(self.scheduler, request)
        await settle(self.scheduler)

    async def late_handler(self, drain: dict) -> None:
        """The handler of an earlier drain, its database call going through at last."""
        await self.scheduler.crawler.signals.send_catch_log_async(
            signals.round_drained, spider=self.scheduler.spider, **drain
        )


async def closed(store: TaskStore, round_id: int, state: str) -> None:
    await wait_until_async(
        lambda: store.round_info(round_id).state == state, 60, what=f"the round {state}"
    )


def error_rows(store: TaskStore) -> list:
    with store.engine.connect() as conn:
        return conn.execute(sa.select(error_code.c.reason)).all()


@in_loop
async def test_a_late_close_of_an_earlier_seeding_does_not_fail_a_retried_round(
    make_scheduler, db_url
):
    """Case (b): a round that failed on its ledger is crawled again; the late handler of its
    first seeding's drain does not fail the second attempt for good while it is being walked,
    and the second attempt closes done on its own drain, with no errorCode row."""
    store = TaskStore(open_database(db_url), round_lease=60, round_attempts=2)
    task, _ = store.register("t", "paper", DAY, DAY, "A")
    worker = Worker(make_scheduler, store)

    first = store.claim(task.id, W1, worker.scheduler.epoch)
    worker.seed(first.id, "seeding-1")
    store.set_total(first.id, 2)
    store.note_listed(first.id, [A, B], {})  # listed, never stored: the ledger does not balance
    await worker.drain()
    await closed(store, first.id, "failed")
    told = [d for d in worker.drains if d["round_id"] == first.id]
    assert told and told[0]["seeding"] == "seeding-1"  # Redis reported the drain's seeding

    again = store.claim(task.id, W1, worker.scheduler.epoch)
    assert (again.id, again.attempts) == (first.id, 2)  # its last attempt
    worker.seed(again.id, "seeding-2")
    store.set_total(again.id, 2)
    store.note_listed(again.id, [A, B], {})  # being walked: both rows pending

    await worker.late_handler(told[0])
    assert store.round_info(again.id).state == "seeded"  # the walk goes on
    assert error_rows(store) == []  # no permanent "ledger" row

    with store.engine.begin() as conn:
        ledger.note_stored(conn, [(again.id, A), (again.id, B)])
    await worker.drain()
    await closed(store, again.id, "done")
    row = store.round_info(again.id)
    assert (row.total, row.stored) == (2, 2)
    assert error_rows(store) == []
    store.engine.dispose()


@in_loop
async def test_a_late_drain_of_an_earlier_seeding_leaves_a_look_s_walk_alone(
    make_scheduler, db_url
):
    """Case (a): a task that follows today; a look re-opens a done round and walks it again.
    The late handler of the round's first drain neither marks the walk's rows no longer listed
    nor closes the round mid-walk; the walk's own drain closes it done, its ledger whole."""
    today = cnki_today().isoformat()
    store = TaskStore(open_database(db_url), round_lease=60, round_attempts=3)
    task, _ = store.register("f", "paper", today, "", "A", follow=True)
    worker = Worker(make_scheduler, store, follows=True)

    first = store.claim(task.id, W1, worker.scheduler.epoch)
    worker.seed(first.id, "seeding-1")
    store.set_total(first.id, 2)
    store.note_listed(first.id, [A, B], {})
    with store.engine.begin() as conn:
        ledger.note_stored(conn, [(first.id, A), (first.id, B)])
    await worker.drain()
    await closed(store, first.id, "done")
    told = [d for d in worker.drains if d["round_id"] == first.id][0]

    with store.engine.begin() as conn:  # counted a day ago: the next look re-opens it
        conn.execute(
            round_.update().values(
                updated_at=dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(days=1)
            )
        )
    look = store.claim_look(task.id, 1, 3600, store.database_now())
    assert look is not None and look.reopened == 1
    walk = store.claim(task.id, W1, worker.scheduler.epoch)
    assert walk is not None and walk.id == first.id
    worker.seed(walk.id, "seeding-2")
    store.set_total(walk.id, 3)  # the look's first page lists one more: walked again
    store.begin_walk(walk.id)

    await worker.late_handler(told)
    assert store.round_info(walk.id).state == "seeded"
    with store.engine.connect() as conn:
        unlisted = conn.execute(
            sa.select(ledger_rows.c.doc_key).where(ledger_rows.c.unlisted_since.is_not(None))
        ).all()
    assert unlisted == []  # the walk has not shown its rows yet: none is "no longer listed"

    store.look_page(walk.id, [A, B, C])
    store.note_listed(walk.id, [C], {})
    with store.engine.begin() as conn:
        ledger.note_stored(conn, [(walk.id, C)])
    await worker.drain()
    await closed(store, walk.id, "done")
    row = store.round_info(walk.id)
    assert (row.total, row.stored) == (3, 3)
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(ledger_rows)).scalar() == 3
        assert (
            conn.execute(
                sa.select(sa.func.count())
                .select_from(ledger_rows)
                .where(ledger_rows.c.unlisted_since.is_not(None))
            ).scalar()
            == 0
        )
    store.engine.dispose()


@in_loop
async def test_a_late_confirmation_leaves_a_later_seeding_s_drain_in_redis(
    make_scheduler, sqlite_url, redis_client, redis_namespace
):
    """The drain's confirmation names its seeding: an earlier seeding's late confirmation does
    not remove the drain of the round's next seeding from ``{ns}:drained`` (whose worker may
    still die before it closes the round: another is told of it then)."""
    store = TaskStore(open_database(sqlite_url), round_lease=60)
    task, _ = store.register("t", "paper", DAY, DAY, "A")
    worker = Worker(make_scheduler, store)
    queue = worker.scheduler.queue
    first = store.claim(task.id, W1, worker.scheduler.epoch)
    worker.seed(first.id, "seeding-1")
    redis_client.hset(f"{redis_namespace}:seedings", str(first.id), "seeding-2")  # seeded again
    redis_client.zadd(f"{redis_namespace}:drained", {str(first.id): 2**50})  # unclosed, not due
    worker.scheduler._writes.confirms.append(f"{first.id}\nseeding-1")
    worker.scheduler._kick()
    assert str(first.id) in queue.rounds_at_zero()
    worker.scheduler._writes.confirms.append(f"{first.id}\nseeding-2")
    worker.scheduler._kick()
    assert str(first.id) not in queue.rounds_at_zero()
    store.engine.dispose()


# -- point 2: an errback's requests carry their parent's lease ----------------------------------


class ErrbackSpider(scrapy.Spider):
    """A spider whose errback yields a request (as the crawler's refresh and relist do),
    marked as the failed request's child by the project's own lineage."""

    name = "errback"

    def parse(self, response):
        pass

    async def on_error(self, failure):
        async for out in errback_lineage(failure, self._refresh(failure)):
            yield out

    async def _refresh(self, failure):
        yield scrapy.Request(
            "https://x/refresh", meta={"round_id": failure.request.meta["round_id"]}
        )


async def errback_output(spider, request) -> list:
    failure = Failure(GaveUp("http-500", 3))
    failure.request = request
    return [out async for out in spider.on_error(failure)]


def outstanding(redis_client, namespace: str, round_id: int) -> int:
    return int(redis_client.get(f"{namespace}:round:{round_id}:outstanding") or 0)


@in_loop
async def test_an_errback_request_of_a_lapsed_holder_is_refused(
    make_scheduler, redis_client, redis_namespace
):
    """A slow holder whose lease ran out (its request handed to another worker, which finished
    the round): the request its errback yields is refused by Redis, the round stays drained, and
    no key of the round is made again. A current holder's errback request is queued."""
    slow = make_scheduler(
        ErrbackSpider, **HAND_DRIVEN, SCHEDULER_LEASE_SECONDS=1, DATABASE_URL="sqlite://"
    )
    other = make_scheduler(ErrbackSpider, **HAND_DRIVEN, DATABASE_URL="sqlite://")
    slow.enqueue_request(
        scrapy.Request("https://x/detail?d=1", meta={"round_id": 7}, dont_filter=True)
    )
    slow._kick()
    [held] = take_all(slow)  # the slow holder's hand-out
    # a current holder: its errback's request is queued (and counted for the round)
    [child] = await errback_output(slow.crawler.spider, held)
    assert slow.enqueue_request(child)
    slow._kick()
    assert outstanding(redis_client, redis_namespace, 7) == 2

    def taken_over() -> bool:
        got = take_all(other)
        for request in got:
            finish(other, request)
        return outstanding(redis_client, redis_namespace, 7) == 0

    await wait_until_async(taken_over, 30, what="the lease to run out and the round to drain")
    [late] = await errback_output(slow.crawler.spider, held)
    slow.enqueue_request(late)
    slow._kick()
    assert slow.crawler.stats.get_value("scheduler/refused", 0) >= 1
    assert outstanding(redis_client, redis_namespace, 7) == 0
    assert not redis_client.exists(f"{redis_namespace}:round:7:bloom")
    assert redis_client.zcard(f"{redis_namespace}:queue") == 0


@in_loop
async def test_a_late_drain_of_an_earlier_seeding_leaves_a_halted_task_s_round_alone(
    make_scheduler, db_url
):
    """The task halted while the round's second seeding is walked: the late handler of the
    first seeding's drain finds the task halted (no close) and would fail the round ``halted``
    (``mark_halted``); bound to its seeding, it leaves the second seeding's round seeded, whose
    own drain is the one that fails it for ``task resume``."""
    store = TaskStore(open_database(db_url), round_lease=60, round_attempts=3)
    task, _ = store.register("t", "paper", DAY, DAY, "A")
    worker = Worker(make_scheduler, store)
    worker.feeder.task_id = task.id  # its handler asks whether this task is halted

    first = store.claim(task.id, W1, worker.scheduler.epoch)
    worker.seed(first.id, "seeding-1")
    store.set_total(first.id, 1)
    store.note_listed(first.id, [A], {})  # never stored: failed, crawled again
    await worker.drain()
    await closed(store, first.id, "failed")
    told = [d for d in worker.drains if d["round_id"] == first.id][0]

    again = store.claim(task.id, W1, worker.scheduler.epoch)
    assert again.id == first.id
    worker.seed(again.id, "seeding-2")
    assert store.halt(task.id, "rejected")

    await worker.late_handler(told)
    row = store.round_info(again.id)
    assert (row.state, row.seeding) == ("seeded", "seeding-2")

    await worker.drain()  # the second seeding's own drain, the task still halted
    await closed(store, again.id, "failed")
    assert store.round_info(again.id).note == "halted"
    store.engine.dispose()


@in_loop
async def test_a_drain_reported_again_to_another_worker_names_the_seeding_it_drained_under(
    make_scheduler, redis_client, redis_namespace
):
    """The first worker's handler hangs (its database away); Redis reports the drain again to
    another worker once its confirmation is overdue, with the seeding it drained under, and
    the round's next seeding drains under its own. The first handler's late confirmation then
    leaves the next seeding's drain for its own worker."""
    import asyncio

    slow = make_scheduler(**HAND_DRIVEN, SCHEDULER_LEASE_SECONDS=0.5, DATABASE_URL="sqlite://")
    other = make_scheduler(**HAND_DRIVEN, SCHEDULER_LEASE_SECONDS=0.5, DATABASE_URL="sqlite://")
    away = asyncio.Event()
    told: dict[str, list] = {"slow": [], "other": []}

    async def slow_handler(round_id, epoch=None, seeding=None, **kwargs):
        told["slow"].append(seeding)
        await away.wait()  # its close retried through a database outage

    async def other_handler(round_id, epoch=None, seeding=None, **kwargs):
        told["other"].append(seeding)
        if seeding == "seeding-2":
            await away.wait()  # the next seeding's close: not confirmed yet

    slow.crawler.signals.connect(slow_handler, signal=signals.round_drained)
    other.crawler.signals.connect(other_handler, signal=signals.round_drained)

    def seed(scheduler, token: str) -> None:
        scheduler.enqueue_request(
            scrapy.Request(f"https://x/list?s={token}", meta={"round_id": 5, ROUND_SEEDING: token})
        )
        for request in take_all(scheduler):
            finish(scheduler, request)

    seed(slow, "seeding-1")
    await wait_until_async(lambda: slow._kick() or told["slow"], 30, what="the first drain")
    assert told["slow"] == ["seeding-1"]
    await wait_until_async(
        lambda: other._kick() or told["other"], 30, what="the drain reported again", every=0.05
    )
    assert told["other"][0] == "seeding-1"
    await wait_until_async(
        lambda: other._kick() or "5" not in other.queue.rounds_at_zero(),
        30,
        what="the other worker's confirmation",
        every=0.05,
    )

    seed(other, "seeding-2")  # the round seeded again: a look, a retry
    await wait_until_async(
        lambda: other._kick() or "seeding-2" in told["other"], 30, what="the next drain"
    )
    away.set()  # the slow handler's call goes through at last, and it confirms
    await settle(slow)
    assert "5" in slow.queue.rounds_at_zero()  # the next seeding's drain is still waiting
    await settle(other)
    assert "5" not in other.queue.rounds_at_zero()
