"""The round table's cases of issue 43 ("done" that cannot be fooled), each driven by hand through
the project's own classes on the real services: the scheduler and its queue script on Redis, the
task store on SQLite and MariaDB (the MySQL-only interleavings on MariaDB alone), the spider on a
real list page. Each failed on the code before its fix (docs/RELIABILITY.md, "The cases that once
fooled the ledger (issue 43)").

- case 2: a round seeded under the epoch Redis kept, whose requests Redis lost, is seeded again;
  ``task reopen`` re-opens a round in flight;
- case 3: a root first page handled twice sets the round's total once;
- case 4: "beyond" is what the overflow, pager-short and census rows say, by count;
- case 5: a claim whose reply was lost is handed to its worker, not held for ever;
- case 7 (MySQL): the cursor passing a failed round that another worker claims at that moment
  leaves it to that worker.
"""

from __future__ import annotations

import functools
import threading

import pymysql
import pytest
import scrapy
import sqlalchemy as sa

from cnkispider import signals
from cnkispider.store import ledger
from cnkispider.store.db import db_now, open_database
from cnkispider.store.schema import round_
from errors.recorder import ErrorRecorder
from tasks.feeder import RoundFeeder, idle_in_redis
from tasks.flow import TaskStore
from tests.fixtures.commands import cli, ini  # noqa: F401 - the fixture
from tests.fixtures.scheduling import HAND_DRIVEN, finish, in_loop, settle, take_all
from tests.fixtures.spiders import drain_outputs, patent_list_response, spider_on
from tests.fixtures.waiting import wait_until, wait_until_async

W1, W2 = "host:1:aaaaaa", "host:2:bbbbbb"
DAY = "2024-01-01"


def _task(url: str, *, lease: int = 60, attempts: int = 3, categories: str = "A") -> tuple:
    """A store of its own (a worker's: its own engine) and a task of one day, one category."""
    store = TaskStore(open_database(url), round_lease=lease, round_attempts=attempts)
    task, _ = store.register("t", "paper", DAY, DAY, categories)
    return store, task.id


def _worker(url: str, lease: int = 60) -> TaskStore:
    return TaskStore(open_database(url), round_lease=lease)


def _round(store: TaskStore, round_id: int):
    return store.round_info(round_id)


# -- case 2: a seeded round stuck for ever ------------------------------------------------------


@pytest.fixture
def make(make_scheduler):
    """A worker: a scheduler whose round_drained goes to flow control's real handler."""

    def make(store: TaskStore):
        scheduler = make_scheduler(**HAND_DRIVEN, DATABASE_URL="sqlite://")
        crawler = scheduler.crawler
        feeder = RoundFeeder(crawler, crawler.settings)
        feeder.store = store
        crawler.signals.connect(feeder.round_drained, signal=signals.round_drained)
        scheduler.feeder = feeder  # signals hold their receivers weakly
        return scheduler

    return make


def first_page(round_id: int) -> scrapy.Request:
    return scrapy.Request(
        f"https://x/list?round={round_id}", meta={"round_id": round_id}, dont_filter=True
    )


def seeded_longer_than_a_lease(store: TaskStore, round_id: int) -> bool:
    with store.engine.connect() as conn:
        row = conn.execute(sa.select(round_).where(round_.c.id == round_id)).first()
        return row.updated_at < db_now(conn) - store.round_lease


def lose_the_last_writes(redis_client, namespace: str) -> None:
    """What a Redis that fsyncs every second does when it dies a moment after a round was seeded
    (or an RDB restore, a promoted replica): the epoch key, older, survives; the round's request,
    its count and its filter, a second old, are gone."""
    keys = [k for k in redis_client.scan_iter(match=f"{namespace}:*") if not k.endswith(b":epoch")]
    redis_client.delete(*keys)


@in_loop
async def test_case2_a_seeded_round_whose_requests_redis_lost_with_its_epoch_is_seeded_again(
    make, redis_client, redis_namespace, sqlite_url
):
    store, task_id = _task(sqlite_url, lease=1)
    w1 = make(store)
    round_ = store.claim(task_id, W1, w1.epoch)
    w1.enqueue_request(first_page(round_.id))
    w1._kick()  # the first request is in Redis: then "seeded"
    assert store.mark_seeded(round_.id, W1, w1.epoch)

    other = _worker(sqlite_url, lease=1)
    w2 = make(other)
    idle = functools.partial(idle_in_redis, w2.queue)
    wait_until(lambda: seeded_longer_than_a_lease(store, round_.id), 30, what="a lease to pass")
    # its request still in Redis: nobody takes it over, however long it takes
    assert other.claim(task_id, W2, w2.epoch, idle) is None

    lose_the_last_writes(redis_client, redis_namespace)
    assert w2.queue.open() == w2.epoch == w1.epoch  # the same epoch: no take-over by epoch
    again = other.claim(task_id, W2, w2.epoch, idle)
    assert again is not None and (again.id, again.attempts) == (round_.id, 2)
    assert _round(other, round_.id).state == "claimed"

    # seeded again, it drains and balances like any round
    other.set_total(again.id, 1)
    w2.enqueue_request(first_page(again.id))
    w2._kick()
    assert other.mark_seeded(again.id, W2, w2.epoch)
    for request in take_all(w2):
        with other.engine.begin() as conn:
            ledger.note_stored(conn, [(again.id, "CJFQ/A")])
        finish(w2, request)
    await settle(w2)

    def done() -> bool:
        w2._kick()
        return _round(other, round_.id).state == "done"

    await wait_until_async(done, 60, what="the round seeded again done", every=0.1)


@in_loop
async def test_case2_a_round_that_drained_and_waits_for_its_close_is_not_taken_over(
    make, redis_client, redis_namespace, sqlite_url
):
    """The other side of the rule: a round whose last ack reported its drain holds nothing in
    Redis but its drain; until the drain is closed in the database it is not stuck."""
    store, task_id = _task(sqlite_url, lease=1)
    w1 = make(store)
    round_ = store.claim(task_id, W1, w1.epoch)
    w1.enqueue_request(first_page(round_.id))
    w1._kick()
    assert store.mark_seeded(round_.id, W1, w1.epoch)
    redis_client.zadd(f"{redis_namespace}:drained", {str(round_.id): 0})  # its drain, unclosed
    redis_client.delete(f"{redis_namespace}:round:{round_.id}:outstanding")
    other = _worker(sqlite_url, lease=1)
    idle = functools.partial(idle_in_redis, w1.queue)
    wait_until(lambda: seeded_longer_than_a_lease(store, round_.id), 30, what="a lease to pass")
    assert other.claim(task_id, W2, w1.epoch, idle) is None
    assert _round(other, round_.id).state == "seeded"


def test_case2_task_reopen_re_opens_a_round_in_flight(ini, db_url, capsys):  # noqa: F811
    store, task_id = _task(db_url)
    round_ = store.claim(task_id, W1, "e1")
    assert store.mark_seeded(round_.id, W1, "e1")
    other = _worker(db_url)
    assert other.claim(task_id, W2, "e1") is None  # seeded under the live epoch: nobody takes it

    assert cli(ini, "task", "reopen", "t", DAY, "--category", "A") == 0
    assert "1 round of 2024-01-01 A re-opened" in capsys.readouterr().out
    again = other.claim(task_id, W2, "e1")
    assert again is not None and again.id == round_.id
    assert cli(ini, "task", "reopen", "t", "2024-01-02") == 2  # no round that day: said so
    assert "no round of 2024-01-02" in capsys.readouterr().err


def test_case2_a_worker_seeding_a_round_the_operator_re_opened_stops(db_url):
    """``mark_seeded`` says False to the worker that no longer holds its round, and True again
    to the one that does (run again after its commit's reply was lost)."""
    store, task_id = _task(db_url)
    round_ = store.claim(task_id, W1, "e1")
    assert store.reopen_rounds("t", DAY) == 1  # while W1 seeds it
    assert store.mark_seeded(round_.id, W1, "e1") is False
    other = _worker(db_url)
    again = other.claim(task_id, W2, "e1")
    assert again.id == round_.id
    assert other.mark_seeded(again.id, W2, "e1") is True
    assert other.mark_seeded(again.id, W2, "e1") is True  # the same move, its reply lost


# -- case 3: add_total counts twice -------------------------------------------------------------


def test_case3_a_root_first_page_handled_twice_sets_the_total_once(db_url):
    """At least once delivery: the round's first page is handled again (a kill between the
    total's commit and the ack). The old "listed 2468, stored 1234" for a round of 1234."""
    spider, _ = spider_on(db_url)
    tasks = spider.context.tasks
    round_ = tasks.claim(spider.context.task_id, W1)
    [request] = spider.round_requests(round_)
    response = patent_list_response(request)
    for _ in range(2):
        out = drain_outputs(spider.parse_list(response))
        assert out  # its rows' detail requests and its next page
    assert tasks.round_info(round_.id).total == 1234
    verdict = tasks.close_round(round_.id).verdict
    assert verdict.listed == 1234


# -- case 4: "beyond reach" is whatever is missing ----------------------------------------------


def test_case4_beyond_is_what_the_pager_short_row_says_by_count_not_what_is_missing(db_url):
    """100 listed in 5 pages of 20, the pager showing 4 (20 rows beyond reach), page 3 lost
    without a trace: never ``done | listed 100, stored 60, beyond 40``."""
    store, task_id = _task(db_url, attempts=3)
    errors = ErrorRecorder(store.engine)
    search = {"doc_type": "paper", "day_start": DAY, "day_end": DAY, "category": "A"}
    meta = {"round_id": None, "search": search, "page": 1}
    pages = {n: [f"CJFQ/{n}-{i}" for i in range(20)] for n in (1, 2, 3, 4)}

    def attempt(pages_walked, *, count: int | None) -> object:
        r = store.claim(task_id, W1)
        store.set_total(r.id, 100)
        for n in pages_walked:
            store.note_listed(r.id, pages[n], {})
            with store.engine.begin() as conn:
                ledger.note_stored(conn, [(r.id, key) for key in pages[n]])
        for _ in range(2):  # the first page handled twice: its fact recorded twice
            kwargs = {} if count is None else {"unreachable": count}
            errors.record_failure(
                task_id,
                "paper",
                {**meta, "round_id": r.id},
                "",
                "pager-short",
                "100 listed but the pager shows 4 pages of 20: at least 20 unreachable",
                stage="list",
                permanent=True,
                **kwargs,
            )
        return store.close_round(r.id)

    # a row that gives no count puts nothing beyond reach
    first = attempt((1, 2, 4), count=None)
    assert first.state == "again", first.verdict.words()
    assert first.verdict.words() == "listed 100, stored 60, unaccounted 40"
    # its count, 20, once for the two handlings; page 3's rows stay unaccounted
    second = attempt((1, 2, 4), count=20)
    assert second.state == "again", second.verdict.words()
    assert second.verdict.words() == "listed 100, stored 60, beyond 20, unaccounted 20"
    # page 3 walked: done, with exactly the pager's 20 beyond
    last = attempt((1, 2, 3, 4), count=20)
    assert last.state == "done", last.verdict.words()
    assert last.verdict.words() == "listed 100, stored 80, beyond 20"


# -- case 5: a claim whose reply was lost -------------------------------------------------------


class LostReply:
    """The reply of the next COMMIT of a transaction that inserted or moved a round is lost on
    the line (error 2013), after MariaDB committed it: what a cut line does to a claim."""

    def __init__(self, engine):
        self.fired = False
        self.claiming: set[int] = set()

        @sa.event.listens_for(engine, "after_cursor_execute")
        def noted(conn, cursor, statement, *_):
            verb = statement.lstrip().upper()
            if verb.startswith(("INSERT INTO ROUND", "UPDATE ROUND")):
                self.claiming.add(id(conn.connection.dbapi_connection))

        @sa.event.listens_for(engine, "commit")
        def commit(conn):
            dbapi = conn.connection.dbapi_connection
            if self.fired or id(dbapi) not in self.claiming:
                return
            self.fired = True
            real = dbapi.commit

            def commit_then_cut():
                real()  # committed on the server
                del dbapi.commit
                dbapi._force_close()
                raise pymysql.err.OperationalError(
                    2013, "Lost connection to MySQL server during query"
                )

            dbapi.commit = commit_then_cut


def test_case5_a_claim_whose_reply_was_lost_hands_its_worker_that_round(mysql_url):
    store = TaskStore(open_database(mysql_url), round_lease=60)
    task, _ = store.register("t", "paper", DAY, "2024-01-03", "A")
    cut = LostReply(store.engine)
    got = store.claim(task.id, W1)
    assert cut.fired
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(round_.c.id, round_.c.state, round_.c.worker)).all()
    assert [(r.state, r.worker) for r in rows] == [("claimed", W1)]  # one claim, not two
    assert got is not None and got.id == rows[0].id
    assert store.held_rounds(W1) == {got.id}
    assert store.mark_seeded(got.id, W1, "e1")
    assert store.held_rounds(W1) == frozenset()


def test_case5_a_heartbeat_renews_only_the_rounds_its_worker_knows_it_holds(db_url):
    """The claim's commit landed, its reply never reached the worker (which got an exception
    and lives on): its heartbeat must not keep that round from the others."""
    store, task_id = _task(db_url, lease=1)
    store.register_worker(W1, task_id)
    where_the_reply_was_lost = _worker(db_url, lease=1)
    lost = where_the_reply_was_lost.claim(task_id, W1)  # in the database under W1's name
    other = _worker(db_url, lease=1)

    def taken_over():
        store.heartbeat(W1, task_id)  # W1 lives on, heart-beating
        return other.claim(task_id, W2)

    got = wait_until(taken_over, 30, what="another worker taking the round over", every=0.2)
    assert got.id == lost.id


# -- case 7 (MySQL): two workers hold one round --------------------------------------------------


def test_case7_the_cursor_passing_a_failed_round_another_worker_claims_leaves_it_to_that_worker(
    mysql_url,
):
    a, task_id = _task(mysql_url)
    failed = a.claim(task_id, W1)
    a.set_total(failed.id, 5)  # five listed, none accounted for: fails, attempts left
    assert a.close_round(failed.id).state == "again"
    a.move_cursor("t", DAY, None)  # the operator sends the cursor back over it
    b = _worker(mysql_url)
    b_got = []

    @sa.event.listens_for(a.engine, "before_cursor_execute")
    def between_read_and_move(conn, cursor, statement, *_):
        # A read the round failed and is about to re-open it: B, which found the cursor at its
        # end a moment before the operator moved it, claims the failed round again first
        # (A's SELECT read a snapshot; its UPDATE sees the row as B left it)
        if not b_got and statement.lstrip().upper().startswith("UPDATE ROUND"):
            worker = threading.Thread(target=lambda: b_got.append(b._claim_failed(task_id, W2)))
            worker.start()
            worker.join(60)
            assert b_got, "B's claim did not finish"

    a_got = a.claim(task_id, W1)
    assert b_got[0] is not None and b_got[0].id == failed.id
    assert a_got is None or a_got.id != failed.id, "two workers hold one round"
    assert _round(a, failed.id).worker == W2
