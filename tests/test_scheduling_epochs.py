"""Issue 43, the Redis side: "done" that a Redis restart, a stale lease holder or a slow one
cannot fool. Each case drives the real queue script on the real Redis, through the real
``LeasedQueue`` (time injected: leases run out without waiting) or the real ``LeasedScheduler``
(calls inline), into the scenario the issue reproduced on main.

- case 1: old leases outlive Redis's data (restarted empty, or restored from an older snapshot);
- case 8: an abandoned request's new holder shares the token of the slow first holder;
- case 9: a holder whose lease ran out writes children after the round drained;
- case 10: ``{ns}:unreadable`` never trimmed, a finished task's keys kept.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import scrapy
from scrapy.http import HtmlResponse

from cnkispider import signals
from cnkispider.scheduling.outcome import LeaseLineage
from cnkispider.scheduling.queue import (
    Burial,
    Enqueue,
    Held,
    LeasedQueue,
    SyncBatch,
    remove_namespace,
)
from tests.fixtures.scheduling import HAND_DRIVEN, in_loop
from tests.fixtures.waiting import wait_until_async

T0 = 1_700_000_000_000  # ms
LEASE_MS = 1000


@pytest.fixture
def make_queue(redis_client, redis_namespace):
    """A worker's view of the namespace: each call, another worker."""

    def make(**options) -> LeasedQueue:
        options.setdefault("lease_seconds", LEASE_MS / 1000)
        queue = LeasedQueue(redis_client, redis_namespace, **options)
        queue.open()
        return queue

    return make


def new(name: str, round_id: str | None = None, parent: Held | None = None) -> Enqueue:
    fp = hashlib.sha1(name.encode()).digest()
    return Enqueue(json.dumps({"n": name}).encode(), 0, fp, round_id, parent)


def names(popped) -> list[str]:
    return [json.loads(p.data)["n"] for p in popped]


def lose_redis(redis_client, namespace: str) -> None:
    """A Redis restart without persistence: every key of the namespace is gone."""
    keys = list(redis_client.scan_iter(match=f"{namespace}:*", count=1000))
    if keys:
        redis_client.delete(*keys)


def snapshot(redis_client, namespace: str) -> dict:
    """What an RDB snapshot holds of the namespace now (DUMP of each key)."""
    keys = redis_client.scan_iter(match=f"{namespace}:*", count=1000)
    return {key: redis_client.dump(key) for key in keys}


def restore(redis_client, namespace: str, saved: dict) -> None:
    """Redis restarted from that older snapshot: the namespace as it was then."""
    lose_redis(redis_client, namespace)
    for key, value in saved.items():
        redis_client.restore(key, 0, value)


# --- case 1: leases and ids bound to their epoch -------------------------------------------


def test_case1_an_old_ack_after_redis_restarted_empty_deletes_no_new_request(
    make_queue, redis_client, redis_namespace
):
    """Worker A holds ids of round 7; Redis restarts empty; worker B (new, it saw no id) pops the
    new requests of round 8, whose ids start again; A acks: nothing of B's goes, and round 8 is
    not reported drained to A."""
    a = make_queue()
    a.sync(SyncBatch(enqueues=[new("a1", "7"), new("a2", "7")]), now_ms=T0)
    held_by_a = [p.held for p in a.sync(SyncBatch(pop=2), now_ms=T0).popped]
    lose_redis(redis_client, redis_namespace)
    b = make_queue()
    b.sync(SyncBatch(enqueues=[new("b1", "8"), new("b2", "8")]), now_ms=T0)
    popped_by_b = b.sync(SyncBatch(pop=2), now_ms=T0).popped
    assert names(popped_by_b) == ["b1", "b2"]

    result = a.sync(SyncBatch(acks=held_by_a), now_ms=T0)
    assert (result.acked, result.stale, result.drained) == (0, 2, [])
    assert b.outstanding("8") == 2
    assert redis_client.zcard(f"{redis_namespace}:leases") == 2


def test_case1_an_old_renewal_takes_no_lapsed_new_request_into_its_leases(
    make_queue, redis_client, redis_namespace
):
    """A's routine renewal after the restart: a new request with one of A's old ids, whose lease
    ran out, stays in the queue for anyone to pop (on main A's renewal took it, where nobody
    else could pop it and A's ack deleted it)."""
    a = make_queue()
    a.sync(SyncBatch(enqueues=[new("a1", "7")]), now_ms=T0)
    held_by_a = [p.held for p in a.sync(SyncBatch(pop=1), now_ms=T0).popped]
    lose_redis(redis_client, redis_namespace)
    b = make_queue()
    b.sync(SyncBatch(enqueues=[new("b1", "8")]), now_ms=T0)
    b.sync(SyncBatch(pop=1), now_ms=T0)  # then B dies: its lease runs out
    b.sync(SyncBatch(), now_ms=T0 + LEASE_MS + 1)  # any call puts it back in line

    a.sync(SyncBatch(renewals=held_by_a), now_ms=T0 + LEASE_MS + 2)
    c = make_queue()
    assert names(c.sync(SyncBatch(pop=1), now_ms=T0 + LEASE_MS + 3).popped) == ["b1"]


def test_case1_ids_never_repeat_what_a_live_worker_holds_and_it_learns_the_new_epoch(
    make_queue, redis_client, redis_namespace
):
    """A worker that saw ids before Redis lost them makes the sequence resume above them."""
    a = make_queue()
    a.sync(SyncBatch(enqueues=[new("a1", "7"), new("a2", "7")]), now_ms=T0)
    before = {p.lease_id for p in a.sync(SyncBatch(pop=2), now_ms=T0).popped}
    old_epoch = a.epoch
    lose_redis(redis_client, redis_namespace)
    result = a.sync(SyncBatch(enqueues=[new("a3", "7"), new("a4", "7")], pop=2), now_ms=T0)
    assert result.epoch != old_epoch
    assert not before & {p.lease_id for p in result.popped}


def test_case1_redis_restored_from_an_older_snapshot_is_a_new_epoch(
    make_queue, redis_client, redis_namespace
):
    """Redis comes back from a snapshot taken before A's last pops and enqueues: the epoch is
    the snapshot's and ``seq`` went back. B pops requests whose ids A holds for other requests;
    A's ack deletes none of them, and A's call (it saw a higher ``seq``) starts a new epoch, so
    flow control replays what was written after the snapshot."""
    a = make_queue()
    a.sync(SyncBatch(enqueues=[new("x", "7")]), now_ms=T0)
    saved = snapshot(redis_client, redis_namespace)
    epoch = a.epoch
    a.sync(SyncBatch(enqueues=[new("y", "7")]), now_ms=T0 + 1)
    held_by_a = [p.held for p in a.sync(SyncBatch(pop=2), now_ms=T0 + 2).popped]
    restore(redis_client, redis_namespace, saved)
    b = make_queue()
    assert b.epoch == epoch  # nothing in Redis tells it went back
    b.sync(SyncBatch(enqueues=[new("z", "8")]), now_ms=T0 + 3)  # seq is back where A saw it
    popped_by_b = b.sync(SyncBatch(pop=2), now_ms=T0 + 4).popped
    assert sorted(names(popped_by_b)) == ["x", "z"]
    assert {p.lease_id for p in popped_by_b} == {h.lease_id for h in held_by_a}  # same ids

    result = a.sync(SyncBatch(acks=held_by_a), now_ms=T0 + 5)
    assert (result.acked, result.stale) == (0, 2)
    assert result.epoch != epoch
    assert redis_client.zcard(f"{redis_namespace}:leases") == 2
    assert b.outstanding("8") == 1 and b.outstanding("7") == 1


@pytest.mark.parametrize("loss", ["restarted empty", "older snapshot"])
def test_case1_one_loss_makes_one_new_epoch_whatever_the_number_of_workers(
    make_queue, redis_client, redis_namespace, loss
):
    """Each worker finds its own last call missing; only the first starts a new epoch, the
    others learn it (a new epoch per worker made every worker forget its leases again, and
    flow control replay every round again, until the rounds ran out of attempts)."""
    workers = [make_queue() for _ in range(3)]
    workers[0].sync(SyncBatch(enqueues=[new("x", "7")]), now_ms=T0)
    saved = snapshot(redis_client, redis_namespace)
    for n, w in enumerate(workers):
        w.sync(SyncBatch(enqueues=[new(f"y{n}", "7")]), now_ms=T0 + 1 + n)
    if loss == "restarted empty":
        lose_redis(redis_client, redis_namespace)
    else:
        restore(redis_client, redis_namespace, saved)
    old = workers[0].epoch
    epochs = {w.sync(SyncBatch(pop=1), now_ms=T0 + 10 + n).epoch for n, w in enumerate(workers)}
    assert len(epochs) == 1 and old not in epochs
    assert {w.sync(SyncBatch(), now_ms=T0 + 20).epoch for w in workers} == epochs


def test_case1_on_a_new_epoch_the_scheduler_forgets_its_old_leases(
    make_scheduler, redis_client, redis_namespace
):
    """The worker stops renewing and acknowledging the leases Redis lost, and what their
    requests make is not queued (their rounds are replayed in full by flow control)."""
    a = make_scheduler(**HAND_DRIVEN)
    a.enqueue_request(scrapy.Request("https://x/a1", meta={"round_id": 7, "doc_key": "A/1"}))
    a._kick()
    request = a.next_request()
    a.engine_inprogress.add(request)
    assert len(a.outcomes) == 1
    lose_redis(redis_client, redis_namespace)
    b = make_scheduler(**HAND_DRIVEN)
    b.enqueue_request(scrapy.Request("https://x/b1", meta={"round_id": 8, "doc_key": "B/1"}))
    b._kick()
    assert b.next_request() is not None  # B holds new id 1

    a._kick()  # A's next call: a new epoch
    assert len(a.outcomes) == 0 and a.stats.get_value("scheduler/leases_forgotten") == 1
    child = scrapy.Request("https://x/a2", meta={"round_id": 7, "doc_key": "A/2"})
    response = HtmlResponse(request.url, body=b"<html></html>", request=request)
    for out in LeaseLineage().process_spider_output(response, [child]):
        a.enqueue_request(out)
    a.engine_inprogress.discard(request)
    a._kick()
    assert redis_client.zcard(f"{redis_namespace}:queue") == 0  # the child of a lost lease
    assert redis_client.zcard(f"{redis_namespace}:leases") == 1  # B's, not acked by A
    assert redis_client.get(f"{redis_namespace}:round:8:outstanding") == b"1"


@in_loop
async def test_case1_a_drain_of_the_old_epoch_is_not_reported_again_in_the_new_one(
    make_scheduler, redis_client, redis_namespace
):
    """A drain flow control could not take yet (the round not marked seeded) is checked again
    later; if Redis lost its data meanwhile, the check must not report the round drained in the
    new epoch, where nothing of it is outstanding because nothing of it is there."""
    a = make_scheduler(**HAND_DRIVEN)
    told: list = []

    def drained(round_id, epoch, **kwargs):
        told.append(epoch)
        return signals.DRAIN_LATER

    a.crawler.signals.connect(drained, signal=signals.round_drained)
    a.enqueue_request(scrapy.Request("https://x/only", meta={"round_id": 4}, dont_filter=True))
    a._kick()
    request = a.next_request()
    await wait_until_async(lambda: a._kick() or told, 30, what="the drain", every=0.05)
    assert request is not None and told == [a.epoch]
    lose_redis(redis_client, redis_namespace)
    a._kick()  # the new epoch

    def checked() -> bool:
        a._kick()
        return bool(a.stats.get_value("scheduler/drains_dropped")) or len(told) > 1

    await wait_until_async(checked, 30, what="the drain checked again", every=0.05)
    a._kick()
    assert len(told) == 1, told


# --- case 8: a hand-out past a lapsed lease gets a new token ---------------------------------


def test_case8_the_slow_first_holder_of_an_abandoned_request_can_neither_renew_nor_ack_it(
    make_queue,
):
    """A holds the request at its last attempt and is slow; its lease runs out and B is handed
    the request as abandoned. A's renewal and ack are refused, so the round does not drain while
    B's handler runs; B's ack drains it, to B."""
    a, b = make_queue(max_attempts=1), make_queue(max_attempts=1)
    a.sync(SyncBatch(enqueues=[new("x", "5")]), now_ms=T0)
    first = a.sync(SyncBatch(pop=1), now_ms=T0).popped[0]
    abandoned = b.sync(SyncBatch(pop=1), now_ms=T0 + LEASE_MS + 1).abandoned
    assert names(abandoned) == ["x"] and abandoned[0].token != first.token

    a.sync(SyncBatch(renewals=[first.held]), now_ms=T0 + LEASE_MS + 2)
    result = a.sync(SyncBatch(acks=[first.held]), now_ms=T0 + LEASE_MS + 3)
    assert (result.acked, result.stale, result.drained) == (0, 1, [])
    assert a.outstanding("5") == 1  # B's handler still runs
    assert b.sync(SyncBatch(acks=[abandoned[0].held]), now_ms=T0 + LEASE_MS + 4).drained == ["5"]


def test_case8_a_released_request_handed_out_again_has_a_new_token(make_queue):
    """A release hands the attempt back: with tokens counted by attempts, the next hand-out had
    the released one's token, and the releaser could still ack it."""
    a, b = make_queue(), make_queue()
    a.sync(SyncBatch(enqueues=[new("x", "5")]), now_ms=T0)
    first = a.sync(SyncBatch(pop=1), now_ms=T0).popped[0]
    a.sync(SyncBatch(releases=[first.held]), now_ms=T0)
    again = b.sync(SyncBatch(pop=1), now_ms=T0).popped[0]
    assert again.attempts == first.attempts and again.token != first.token
    assert a.sync(SyncBatch(acks=[first.held]), now_ms=T0).stale == 1
    assert a.outstanding("5") == 1


# --- case 9: a stale holder's writes after the drain ----------------------------------------


@in_loop
async def test_case9_children_of_a_lease_that_ran_out_are_refused_after_the_round_drained(
    make_scheduler, redis_client, redis_namespace
):
    """A is handling page X when its lease runs out; B takes X, makes its child, and the round
    drains. A's late child would open the drained round again, its filter gone: a duplicate
    fetch and a second drain. Redis refuses it (its parent's hand-out is no longer A's)."""
    a = make_scheduler(**HAND_DRIVEN, SCHEDULER_LEASE_SECONDS=0.2)
    b = make_scheduler(**HAND_DRIVEN, SCHEDULER_LEASE_SECONDS=0.2)
    drains: list = []

    def drained(round_id, **kwargs):
        drains.append(round_id)

    for worker in (a, b):
        worker.crawler.signals.connect(drained, signal=signals.round_drained)
    a.enqueue_request(scrapy.Request("https://x/page", meta={"round_id": 9}, dont_filter=True))
    a._kick()
    x_at_a = a.next_request()
    a.engine_inprogress.add(x_at_a)  # A is slow, and makes no call (no renewal) for a while

    def lineage(request, *children):
        response = HtmlResponse(request.url, body=b"<html></html>", request=request)
        return list(LeaseLineage().process_spider_output(response, list(children)))

    taken: list = []

    def b_took_x() -> bool:
        b._kick()
        request = b.next_request()
        if request is not None:
            taken.append(request)
        return bool(taken)

    await wait_until_async(b_took_x, 30, what="the lapsed page handed to B", every=0.05)
    x_at_b = taken[0]
    for child in lineage(x_at_b, scrapy.Request("https://x/doc", meta={"round_id": 9})):
        b.enqueue_request(child)
    b._kick()  # the child, then X's ack (the engine is done with it: not in progress)
    doc = b.next_request()
    assert doc is not None
    await wait_until_async(
        lambda: b._kick() or drains, 30, what="the round drained at B", every=0.05
    )
    assert drains == [9]

    for child in lineage(x_at_a, scrapy.Request("https://x/doc", meta={"round_id": 9})):
        a.enqueue_request(child)
    a.engine_inprogress.discard(x_at_a)
    a._kick()
    assert a.stats.get_value("scheduler/refused") == 1
    assert redis_client.zcard(f"{redis_namespace}:queue") == 0
    assert redis_client.get(f"{redis_namespace}:round:9:outstanding") is None
    for worker in (a, b, a, b):
        worker._kick()
    assert drains == [9]  # no second drain


def test_case9_a_child_of_a_current_hand_out_is_queued(make_queue):
    """The refusal is of stale hand-outs only: a current holder's children are queued."""
    a = make_queue()
    a.sync(SyncBatch(enqueues=[new("x", "9")]), now_ms=T0)
    x = a.sync(SyncBatch(pop=1), now_ms=T0).popped[0]
    result = a.sync(SyncBatch(enqueues=[new("c", "9", parent=x.held)]), now_ms=T0)
    assert (result.enqueued, result.refused) == (1, 0)


# --- case 10 (Redis): retention --------------------------------------------------------------


def test_case10_unreadable_requests_are_trimmed_to_the_newest(
    make_queue, redis_client, redis_namespace
):
    q = make_queue(unreadable_kept=3)
    q.sync(SyncBatch(enqueues=[new(f"r{n}") for n in range(5)]), now_ms=T0)
    popped = q.sync(SyncBatch(pop=5), now_ms=T0).popped
    for n, p in enumerate(popped):  # one burial per call, in time order
        q.sync(SyncBatch(burials=[Burial(p.held, f"bad {n}")]), now_ms=T0 + n)
    kept = redis_client.hgetall(f"{redis_namespace}:unreadable")
    assert sorted(v.split(b"\n", 1)[0] for v in kept.values()) == [b"bad 2", b"bad 3", b"bad 4"]
    assert redis_client.zcard(f"{redis_namespace}:unreadable:order") == 3


def test_case10_a_finished_tasks_keys_are_removed_but_its_identity(
    make_queue, redis_client, redis_namespace
):
    """What the feeder calls when the task finishes (tasks/feeder.py): nothing of the task's
    queue stays in Redis but two small strings, so a worker still polling sees no new epoch."""
    q = make_queue()
    q.sync(SyncBatch(enqueues=[new("a", "1"), new("b")]), now_ms=T0)
    popped = q.sync(SyncBatch(pop=2), now_ms=T0).popped
    q.sync(SyncBatch(burials=[Burial(popped[0].held, "bad")]), now_ms=T0)
    q.sync(SyncBatch(acks=[popped[1].held]), now_ms=T0)
    assert remove_namespace(redis_client, redis_namespace) > 0
    left = sorted(k.decode() for k in redis_client.scan_iter(match=f"{redis_namespace}:*"))
    assert left == [f"{redis_namespace}:{k}" for k in ("epoch", "seq", "writers")]
    assert q.sync(SyncBatch(pop=1), now_ms=T0).epoch == q.epoch
