"""Silent-loss paths of issue 13 on the scheduler and flow control, driven by hand: the real
``LeasedScheduler`` on real Redis (calls inline), the real ``TaskStore`` on SQLite and the real
``RoundFeeder.round_drained`` handler.

Path 1 (a Redis crash mid-round) and path 3 (a dedupe filter that outlives what it describes):
each test counts the documents of a round that are never handed out again, which is what a
crawl loses, and asserts there are none.
"""

from __future__ import annotations

import pytest
import redis
import scrapy

from cnkispider import signals
from cnkispider.scheduling.scheduler import LeasedScheduler
from cnkispider.store import ledger
from cnkispider.store.db import open_database
from tasks.feeder import RoundFeeder
from tasks.flow import TaskStore
from tests.fixtures.scheduling import HAND_DRIVEN, finish, in_loop, settle, take_all
from tests.fixtures.waiting import wait_until_async

W1, W2 = "host:1:aaaaaa", "host:2:bbbbbb"


@pytest.fixture
def make(make_scheduler):
    """A worker: a scheduler whose round_drained goes to flow control's real handler."""

    def make(store: TaskStore) -> LeasedScheduler:
        scheduler = make_scheduler(**HAND_DRIVEN, DATABASE_URL="sqlite://")
        crawler = scheduler.crawler
        feeder = RoundFeeder(crawler, crawler.settings)
        feeder.store = store  # no task_id: its _kick() after a drain does nothing here
        crawler.signals.connect(feeder.round_drained, signal=signals.round_drained)
        scheduler.feeder = feeder  # signals hold their receivers weakly
        return scheduler

    return make


def detail(doc: str, round_id: int) -> scrapy.Request:
    return scrapy.Request(
        f"https://x/abstract?v={doc}", meta={"doc_key": f"CJFQ/{doc}", "round_id": round_id}
    )


def lose_redis(redis_client: redis.Redis, namespace: str) -> None:
    """What a Redis restart without persistence does to the namespace: every key is gone."""
    keys = list(redis_client.scan_iter(match=f"{namespace}:*", count=1000))
    redis_client.delete(*keys)


def listed_and_stored(store: TaskStore, round_id: int, docs: str) -> None:
    """What the round's list page and the pipeline write for these documents (its listed total,
    each document ``stored`` in the ledger), so that the round balances when it drains: these
    tests are about the drain, and a round whose list never answered is failed (tasks/ledger.py)."""
    store.set_total(round_id, len(docs))
    with store.engine.begin() as conn:
        ledger.note_stored(conn, [(round_id, f"CJFQ/{doc}") for doc in docs])


def new_store(url: str) -> tuple[TaskStore, int]:
    store = TaskStore(open_database(url))
    task, _ = store.register("t", "paper", "2024-01-01", "2024-01-01", "A")
    return store, task.id


@in_loop
async def test_a_round_seeded_before_redis_lost_its_data_is_replayed_not_marked_done(
    make, redis_client, redis_namespace, sqlite_url
):
    """Path 1: five documents queued under the old epoch, one in flight when Redis lost them. The
    in-flight one's follow-up is counted again in the new, empty Redis; when it drains, the round
    must not be done (the four others exist nowhere any more): it is replayed in full."""
    store, task_id = new_store(sqlite_url)
    scheduler = make(store)
    scheduler.batch_size = 1  # pop one at a time: most of the round waits in Redis
    round_ = store.claim(task_id, W1, scheduler.epoch)
    for doc in "ABCDE":
        scheduler.enqueue_request(detail(doc, round_.id))
    scheduler._kick()
    old_epoch = scheduler.epoch
    assert store.mark_seeded(round_.id, W1, old_epoch)
    in_flight = scheduler.next_request()
    scheduler.engine_inprogress.add(in_flight)
    crawled = {in_flight.meta["doc_key"]}

    lose_redis(redis_client, redis_namespace)
    retry = in_flight.replace(url=in_flight.url + "&retry=1")  # a continuation, same round
    scheduler.enqueue_request(retry)
    finish(scheduler, in_flight)
    assert scheduler.epoch != old_epoch
    for request in take_all(scheduler):  # the retry, and what this worker had popped already
        crawled.add(request.meta["doc_key"])
        finish(scheduler, request)
    await settle(scheduler)

    replay = store.claim(task_id, W2, scheduler.epoch)
    if replay is not None and replay.id == round_.id:  # the replay seeds the whole round again
        crawled.update(f"CJFQ/{doc}" for doc in "ABCDE")
    lost = {f"CJFQ/{doc}" for doc in "ABCDE"} - crawled
    assert not lost, (
        f"{len(lost)} documents of round {round_.id} lost; round {store.round_info(round_.id).state}"
    )


@in_loop
async def test_a_round_drained_before_it_is_marked_seeded_is_done_once_it_is(make, sqlite_url):
    """A tiny round can drain before its seeder writes "seeded": it is done all the same (the
    drain is checked again), and under the epoch it was seeded in."""
    store, task_id = new_store(sqlite_url)
    scheduler = make(store)
    round_ = store.claim(task_id, W1, scheduler.epoch)
    listed_and_stored(store, round_.id, "A")
    scheduler.enqueue_request(detail("A", round_.id))
    for request in take_all(scheduler):
        finish(scheduler, request)
    await settle(scheduler)
    assert store.round_info(round_.id).state == "claimed"  # not done before it is seeded
    assert store.mark_seeded(round_.id, W1, scheduler.epoch)

    def done() -> bool:
        scheduler._kick()
        return store.round_info(round_.id).state == "done"

    await wait_until_async(done, 60, what="the round done", every=0.1)


@in_loop
async def test_task_move_back_crawls_a_done_round_again_for_real(
    make, redis_client, redis_namespace, sqlite_url
):
    """Path 3: `task move` back over a done round (after its documents were deleted) must hand its
    documents out again; the dedupe filter of the first crawl must not hide them."""
    store, task_id = new_store(sqlite_url)
    scheduler = make(store)
    round_ = store.claim(task_id, W1, scheduler.epoch)
    listed_and_stored(store, round_.id, "ABC")
    for doc in "ABC":
        scheduler.enqueue_request(detail(doc, round_.id))
    scheduler._kick()
    store.mark_seeded(round_.id, W1, scheduler.epoch)
    for request in take_all(scheduler):
        finish(scheduler, request)
    await settle(scheduler)
    assert store.round_info(round_.id).state == "done"

    store.move_cursor(task_id, "2024-01-01", None)  # the operator re-crawls that day
    again = store.claim(task_id, W1, scheduler.epoch)
    assert again.id == round_.id
    for doc in "ABC":
        scheduler.enqueue_request(detail(doc, again.id))
    scheduler._kick()
    store.mark_seeded(again.id, W1, scheduler.epoch)
    crawled = take_all(scheduler)
    lost = 3 - len(crawled)
    assert lost == 0, f"{lost} of 3 documents never crawled again after `task move`"


@in_loop
async def test_a_fresh_database_on_the_same_redis_and_task_name_crawls_everything(
    make, tmp_path, sqlite_url
):
    store, task_id = new_store(sqlite_url)
    scheduler = make(store)
    round_ = store.claim(task_id, W1, scheduler.epoch)
    for doc in "ABC":
        scheduler.enqueue_request(detail(doc, round_.id))
    scheduler._kick()
    store.mark_seeded(round_.id, W1, scheduler.epoch)
    for request in take_all(scheduler):
        finish(scheduler, request)
    await settle(scheduler)

    fresh, fresh_task = new_store(f"sqlite:///{tmp_path / 'fresh.db'}")
    worker = make(fresh)
    first = fresh.claim(fresh_task, W2, worker.epoch)
    for doc in "ABC":
        worker.enqueue_request(detail(doc, first.id))
    worker._kick()
    fresh.mark_seeded(first.id, W2, worker.epoch)
    lost = 3 - len(take_all(worker))
    assert lost == 0, f"{lost} of 3 documents never crawled into the fresh database"


@in_loop
async def test_within_one_round_a_replayed_list_page_queues_no_document_twice(make, sqlite_url):
    """What dedupe is for: a list page crawled twice (its lease ran out after it queued its
    documents) must not queue them again while the round is being crawled."""
    store, task_id = new_store(sqlite_url)
    scheduler = make(store)
    round_ = store.claim(task_id, W1, scheduler.epoch)
    keep = scrapy.Request("https://x/list", meta={"round_id": round_.id}, dont_filter=True)
    scheduler.enqueue_request(keep)
    for doc in "ABC":
        scheduler.enqueue_request(detail(doc, round_.id))
    for doc in "ABC":  # the same documents, from the replayed page, under new links
        scheduler.enqueue_request(
            detail(doc, round_.id).replace(url=f"https://x/abstract?v={doc}2")
        )
    crawled = take_all(scheduler)
    assert sorted(r.meta.get("doc_key", "") for r in crawled) == ["", "CJFQ/A", "CJFQ/B", "CJFQ/C"]
    assert scheduler.stats.get_value("dupefilter/filtered") == 3


@in_loop
async def test_a_drained_round_leaves_no_outstanding_key_in_redis(
    make, redis_client, redis_namespace, sqlite_url
):
    store, task_id = new_store(sqlite_url)
    scheduler = make(store)
    round_ = store.claim(task_id, W1, scheduler.epoch)
    listed_and_stored(store, round_.id, "A")
    scheduler.enqueue_request(detail("A", round_.id))
    scheduler._kick()
    store.mark_seeded(round_.id, W1, scheduler.epoch)
    for request in take_all(scheduler):
        finish(scheduler, request)
    await settle(scheduler)
    assert store.round_info(round_.id).state == "done"
    assert redis_client.get(f"{redis_namespace}:round:{round_.id}:outstanding") is None
    assert not list(redis_client.scan_iter(match=f"{redis_namespace}:round:*"))  # nor its filter
