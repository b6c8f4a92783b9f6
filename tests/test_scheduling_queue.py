"""The leased queue's script on real Redis: order, leases, acks, expiry, abandonment, round counts.

Time is injected (``now_ms``) so leases run out without waiting."""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from cnkispider.scheduling.queue import Burial, Enqueue, Held, LeasedQueue, SyncBatch

T0 = 1_700_000_000_000  # ms
LEASE_MS = 1000


@pytest.fixture
def make_queue(redis_client, redis_namespace):
    def make(**options) -> LeasedQueue:
        options.setdefault("lease_seconds", LEASE_MS / 1000)
        queue = LeasedQueue(redis_client, redis_namespace, **options)
        queue.open()
        return queue

    return make


def new(name: str, priority: int = 0, round_id: str | None = None, dedupe: bool = True) -> Enqueue:
    fp = hashlib.sha1(name.encode()).digest() if dedupe else None
    return Enqueue(json.dumps({"n": name}).encode(), priority, fp, round_id)


def names(popped) -> list[str]:
    return [json.loads(p.data)["n"] for p in popped]


def held(popped) -> list[Held]:
    return [p.held for p in popped]


def test_pops_by_priority_then_first_in_first_out(make_queue):
    q = make_queue()
    batch = [new("a"), new("b"), new("x", 5), new("c"), new("z", -1), new("y", 5)]
    q.sync(SyncBatch(enqueues=batch), now_ms=T0)
    result = q.sync(SyncBatch(pop=10), now_ms=T0)
    assert names(result.popped) == ["x", "y", "a", "b", "c", "z"]


def test_a_pop_leases_a_batch(make_queue, redis_client, redis_namespace):
    q = make_queue()
    q.sync(SyncBatch(enqueues=[new(str(i)) for i in range(5)]), now_ms=T0)
    result = q.sync(SyncBatch(pop=3), now_ms=T0)
    assert names(result.popped) == ["0", "1", "2"]
    assert [p.attempts for p in result.popped] == [1, 1, 1]
    assert (result.queued, result.leased) == (2, 3)
    leases = redis_client.zrange(f"{redis_namespace}:leases", 0, -1, withscores=True)
    assert {score for _, score in leases} == {T0 + LEASE_MS}


def test_an_ack_removes_the_request(make_queue, redis_client, redis_namespace):
    q = make_queue()
    q.sync(SyncBatch(enqueues=[new("a")]), now_ms=T0)
    popped = q.sync(SyncBatch(pop=1), now_ms=T0).popped
    result = q.sync(SyncBatch(acks=held(popped)), now_ms=T0)
    assert (result.acked, result.queued, result.leased) == (1, 0, 0)
    assert redis_client.hlen(f"{redis_namespace}:requests") == 0
    assert redis_client.hlen(f"{redis_namespace}:attempts") == 0


def test_an_expired_lease_returns_to_the_queue_for_any_worker_with_attempts_plus_one(make_queue):
    dead, alive = make_queue(), make_queue()
    dead.sync(SyncBatch(enqueues=[new("a"), new("b")]), now_ms=T0)
    assert names(dead.sync(SyncBatch(pop=1), now_ms=T0).popped) == ["a"]
    assert alive.sync(SyncBatch(pop=0), now_ms=T0 + LEASE_MS - 1).queued == 1  # not yet
    result = alive.sync(SyncBatch(pop=2), now_ms=T0 + LEASE_MS + 1)
    assert names(result.popped) == ["a", "b"]  # it kept its place in line
    assert [p.attempts for p in result.popped] == [2, 1]


def test_renewal_keeps_a_slow_request(make_queue):
    slow, other = make_queue(), make_queue()
    slow.sync(SyncBatch(enqueues=[new("a")]), now_ms=T0)
    popped = slow.sync(SyncBatch(pop=1), now_ms=T0).popped
    slow.sync(SyncBatch(renewals=held(popped)), now_ms=T0 + 900)
    assert other.sync(SyncBatch(pop=1), now_ms=T0 + 1500).popped == []
    slow.sync(SyncBatch(renewals=held(popped)), now_ms=T0 + 1800)
    assert other.sync(SyncBatch(pop=1), now_ms=T0 + 2700).popped == []
    assert slow.sync(SyncBatch(acks=held(popped)), now_ms=T0 + 2750).acked == 1


def test_a_late_renewal_takes_back_a_request_still_in_the_queue(make_queue):
    q, other = make_queue(), make_queue()
    q.sync(SyncBatch(enqueues=[new("a")]), now_ms=T0)
    popped = q.sync(SyncBatch(pop=1), now_ms=T0).popped
    other.sync(SyncBatch(), now_ms=T0 + 1500)  # requeues the expired lease
    q.sync(SyncBatch(renewals=held(popped)), now_ms=T0 + 1600)
    assert other.sync(SyncBatch(pop=1), now_ms=T0 + 1700).popped == []


def test_too_many_attempts_abandons_the_request_to_the_caller(
    make_queue, redis_client, redis_namespace
):
    q = make_queue(max_attempts=2)
    q.sync(SyncBatch(enqueues=[new("a", round_id="3")]), now_ms=T0)
    assert q.sync(SyncBatch(pop=1), now_ms=T0).popped[0].attempts == 1
    assert q.sync(SyncBatch(pop=1), now_ms=T0 + 1001).popped[0].attempts == 2
    result = q.sync(SyncBatch(pop=1), now_ms=T0 + 2002)
    assert result.popped == []
    assert names(result.abandoned) == ["a"] and result.abandoned[0].attempts == 2
    assert result.abandoned[0].round_id == "3"
    assert q.sync(SyncBatch(pop=1), now_ms=T0 + 2003).abandoned == []  # leased to the caller
    done = q.sync(SyncBatch(acks=held(result.abandoned)), now_ms=T0 + 2004)
    assert done.acked == 1 and done.drained == ["3"]
    assert redis_client.hlen(f"{redis_namespace}:requests") == 0


def test_only_the_current_holder_can_ack(make_queue):
    a, b = make_queue(), make_queue()
    a.sync(SyncBatch(enqueues=[new("x", round_id="1")]), now_ms=T0)
    first = a.sync(SyncBatch(pop=1), now_ms=T0).popped
    second = b.sync(SyncBatch(pop=1), now_ms=T0 + 1001).popped  # a's lease ran out
    late = a.sync(SyncBatch(acks=held(first)), now_ms=T0 + 1002)
    assert (late.acked, late.stale, late.leased, late.drained) == (0, 1, 1, [])
    assert b.sync(SyncBatch(acks=held(second)), now_ms=T0 + 1003).drained == ["1"]


def test_a_late_ack_of_a_request_not_yet_popped_again_still_counts(make_queue):
    a, b = make_queue(), make_queue()
    a.sync(SyncBatch(enqueues=[new("x", round_id="1")]), now_ms=T0)
    first = a.sync(SyncBatch(pop=1), now_ms=T0).popped
    assert b.sync(SyncBatch(), now_ms=T0 + 1500).queued == 1  # requeued
    late = a.sync(SyncBatch(acks=held(first)), now_ms=T0 + 1600)
    assert (late.acked, late.queued, late.drained) == (1, 0, ["1"])


def test_a_release_returns_the_request_without_counting_the_attempt(make_queue):
    q = make_queue()
    q.sync(SyncBatch(enqueues=[new("a"), new("b")]), now_ms=T0)
    popped = q.sync(SyncBatch(pop=2), now_ms=T0).popped
    q.sync(SyncBatch(releases=held(popped)), now_ms=T0)
    again = q.sync(SyncBatch(pop=2), now_ms=T0).popped
    assert names(again) == ["a", "b"] and [p.attempts for p in again] == [1, 1]


def test_duplicates_are_dropped_in_the_same_step_and_not_counted(make_queue):
    q = make_queue()
    result = q.sync(
        SyncBatch(
            enqueues=[new("a", round_id="1"), new("a", round_id="1"), new("b", dedupe=False)]
        ),
        now_ms=T0,
    )
    assert (result.enqueued, result.duplicates) == (2, 1)
    assert q.sync(SyncBatch(enqueues=[new("a", round_id="1")]), now_ms=T0).duplicates == 1
    assert q.outstanding("1") == 1


def test_children_land_before_their_parents_ack(make_queue):
    q = make_queue()
    q.sync(SyncBatch(enqueues=[new("root", round_id="9")]), now_ms=T0)
    root = q.sync(SyncBatch(pop=1), now_ms=T0).popped
    result = q.sync(
        SyncBatch(enqueues=[new("c1", round_id="9"), new("c2", round_id="9")], acks=held(root)),
        now_ms=T0,
    )
    assert result.drained == [] and q.outstanding("9") == 2
    children = q.sync(SyncBatch(pop=2), now_ms=T0).popped
    assert q.sync(SyncBatch(acks=held(children)), now_ms=T0).drained == ["9"]
    assert q.outstanding("9") == 0
    assert q.client.get(q.round_key("9")) is None  # no key left at 0


def test_a_drained_round_takes_its_filter_with_it_so_a_recrawl_queues_it_again(
    make_queue, redis_client, redis_namespace
):
    q = make_queue()
    q.sync(SyncBatch(enqueues=[new("a", round_id="3")]), now_ms=T0)
    assert redis_client.exists(f"{redis_namespace}:round:3:bloom")
    assert q.sync(SyncBatch(enqueues=[new("a", round_id="3")]), now_ms=T0).duplicates == 1
    popped = q.sync(SyncBatch(pop=1), now_ms=T0).popped
    q.sync(SyncBatch(acks=held(popped)), now_ms=T0)
    assert not list(redis_client.scan_iter(match=f"{redis_namespace}:round:*"))
    assert q.sync(SyncBatch(enqueues=[new("a", round_id="3")]), now_ms=T0).enqueued == 1


def test_rounds_dedupe_apart_and_the_roundless_filter_goes_when_the_namespace_is_empty(
    make_queue, redis_client, redis_namespace
):
    q = make_queue()
    result = q.sync(
        SyncBatch(enqueues=[new("a", round_id="1"), new("a", round_id="2"), new("a"), new("a")]),
        now_ms=T0,
    )
    assert (result.enqueued, result.duplicates) == (3, 1)
    popped = q.sync(SyncBatch(pop=3), now_ms=T0).popped
    q.sync(SyncBatch(acks=held(popped)), now_ms=T0)
    assert not list(redis_client.scan_iter(match=f"{redis_namespace}:*bloom*"))
    assert q.sync(SyncBatch(enqueues=[new("a")]), now_ms=T0).enqueued == 1


def test_a_recheck_reports_a_drain_again_only_while_the_round_has_nothing_outstanding(make_queue):
    q = make_queue()
    q.sync(SyncBatch(enqueues=[new("x", round_id="7")]), now_ms=T0)
    popped = q.sync(SyncBatch(pop=1), now_ms=T0).popped
    assert q.sync(SyncBatch(acks=held(popped)), now_ms=T0).drained == ["7"]
    assert q.sync(SyncBatch(rechecks=["7"]), now_ms=T0).drained == ["7"]
    q.sync(SyncBatch(enqueues=[new("y", round_id="7")]), now_ms=T0)  # seeded again meanwhile
    assert q.sync(SyncBatch(rechecks=["7"]), now_ms=T0).drained == []
    assert q.rounds_at_zero() == []  # forgotten: its own drain will come
    assert q.sync(SyncBatch(pop=1), now_ms=T0 + 10**6).drained == []


def test_an_unconfirmed_drain_of_a_round_seeded_again_is_not_reported_again(make_queue):
    a = make_queue(drained_confirm_seconds=5)
    a.sync(SyncBatch(enqueues=[new("x", round_id="8")]), now_ms=T0)
    popped = a.sync(SyncBatch(pop=1), now_ms=T0).popped
    assert a.sync(SyncBatch(acks=held(popped)), now_ms=T0).drained == ["8"]
    a.sync(SyncBatch(enqueues=[new("z", round_id="8")]), now_ms=T0)
    assert a.sync(SyncBatch(pop=0), now_ms=T0 + 6000).drained == []


def test_an_unconfirmed_drain_is_reported_again_by_another_worker(make_queue):
    a, b = make_queue(drained_confirm_seconds=5), make_queue(drained_confirm_seconds=5)
    a.sync(SyncBatch(enqueues=[new("x", round_id="4")]), now_ms=T0)
    popped = a.sync(SyncBatch(pop=1), now_ms=T0).popped
    assert a.sync(SyncBatch(acks=held(popped)), now_ms=T0).drained == ["4"]
    assert b.sync(SyncBatch(pop=1), now_ms=T0 + 4000).drained == []
    assert b.sync(SyncBatch(pop=1), now_ms=T0 + 5001).drained == ["4"]  # a died before confirming
    b.sync(SyncBatch(confirms=["4"]), now_ms=T0 + 5002)
    assert a.sync(SyncBatch(pop=1), now_ms=T0 + 20000).drained == []


def test_a_buried_request_is_kept_aside_and_no_longer_counted(
    make_queue, redis_client, redis_namespace
):
    q = make_queue()
    q.sync(SyncBatch(enqueues=[new("x", round_id="2")]), now_ms=T0)
    popped = q.sync(SyncBatch(pop=1), now_ms=T0).popped
    burials = [
        Burial(h, "host evil.example:80 is not one of the configured CNKI hosts")
        for h in held(popped)
    ]
    assert q.sync(SyncBatch(burials=burials), now_ms=T0).drained == ["2"]
    (value,) = redis_client.hvals(f"{redis_namespace}:unreadable")
    assert value.startswith(b"host evil.example:80 is not one of the configured CNKI hosts\n2\n")


def test_the_epoch_is_created_once_and_changes_when_redis_lost_the_namespace(
    make_queue, redis_client, redis_namespace
):
    q = make_queue()
    epoch = q.open()
    assert q.open() == epoch == q.sync(SyncBatch()).epoch
    redis_client.delete(f"{redis_namespace}:epoch")  # as after a Redis restart without persistence
    assert q.sync(SyncBatch()).epoch != epoch


def test_rounds_at_zero_lists_drained_rounds_not_yet_confirmed(make_queue):
    q = make_queue()
    q.sync(SyncBatch(enqueues=[new("x", round_id="5"), new("y", round_id="6")]), now_ms=T0)
    popped = q.sync(SyncBatch(pop=1), now_ms=T0).popped
    q.sync(SyncBatch(acks=held(popped)), now_ms=T0)
    assert q.rounds_at_zero() == ["5"]
    q.sync(SyncBatch(confirms=["5"]), now_ms=T0)
    assert q.rounds_at_zero() == []


def test_work_left_counts_a_request_and_its_rounds_end_in_one_place_at_every_step(make_queue):
    """Flow control's idle check (tasks/feeder.py) reads this: never all zero while a round's
    end is not recorded (its last ack drains it; only the confirm, after the database closed
    it, ends it)."""
    q = make_queue()
    assert q.work_left() == {"queued": 0, "leased": 0, "drained": 0}
    q.sync(SyncBatch(enqueues=[new("x", round_id="3")]), now_ms=T0)
    assert q.work_left() == {"queued": 1, "leased": 0, "drained": 0}
    popped = q.sync(SyncBatch(pop=1), now_ms=T0).popped
    assert q.work_left() == {"queued": 0, "leased": 1, "drained": 0}
    q.sync(SyncBatch(acks=held(popped)), now_ms=T0)
    assert q.work_left() == {"queued": 0, "leased": 0, "drained": 1}
    assert q.sizes() == {"queued": 0, "leased": 0}  # what status shows
    q.sync(SyncBatch(confirms=["3"]), now_ms=T0)
    assert q.work_left() == {"queued": 0, "leased": 0, "drained": 0}


# --- exactly one round_drained, whatever the interleaving ------------------------------------

PAGES = 60


def children(n: int) -> list[int]:
    return [c for c in (3 * n + 1, 3 * n + 2, 3 * n + 3) if c < PAGES]


class Worker:
    """A worker's local state: leases held, writes not yet sent (children before acks)."""

    def __init__(self, queue: LeasedQueue):
        self.queue, self.held, self.batch = queue, [], SyncBatch()
        self.drains, self.processed = [], []

    def sync(self, now: int, pop: int) -> None:
        batch, self.batch = self.batch, SyncBatch()
        batch.pop = pop
        batch.renewals = [p.held for p in self.held]
        result = self.queue.sync(batch, now_ms=now)
        self.held += result.popped + result.abandoned
        self.drains += result.drained
        self.queue_view = result.queued + result.leased

    def process_one(self, rng: random.Random) -> None:
        lease = self.held.pop(rng.randrange(len(self.held)))
        name = json.loads(lease.data)["n"]
        if name.isdigit():  # a page: its children, a duplicate link, maybe an undeduped extra
            n = int(name)
            self.processed.append(n)
            for c in children(n):
                self.batch.enqueues.append(new(str(c), round_id="1"))
            self.batch.enqueues.append(new(str(max(0, (n - 1) // 3)), round_id="1"))
            if rng.random() < 0.2:
                self.batch.enqueues.append(new(f"{n}-again", round_id="1", dedupe=False))
        self.batch.acks.append(lease.held)

    def die(self) -> None:
        self.held, self.batch = [], SyncBatch()


@pytest.mark.parametrize("seed", range(40))
def test_exactly_one_worker_is_told_the_round_drained(
    make_queue, redis_client, redis_namespace, seed
):
    """Two workers on one namespace, random pops, processing order, sync timing and deaths."""
    rng = random.Random(seed)
    for key in redis_client.scan_iter(match=f"{redis_namespace}*"):
        redis_client.delete(key)
    workers = [Worker(make_queue(max_attempts=50)), Worker(make_queue(max_attempts=50))]
    workers[0].queue.sync(SyncBatch(enqueues=[new("0", round_id="1")]), now_ms=T0)
    now = T0
    for _step in range(5000):
        now += rng.choice([1, 5, 50, 400])
        w = rng.choice(workers)
        action = rng.random()
        if action < 0.02:
            w.die()  # kill -9: its leases run out, its unsent writes are lost
        elif action < 0.5 and w.held:
            w.process_one(rng)
        else:
            w.sync(now, pop=rng.choice([0, 1, 3]))
        drains = workers[0].drains + workers[1].drains
        if drains:
            break
    else:
        pytest.fail("the round never drained")
    assert drains == ["1"]
    done = set(workers[0].processed) | set(workers[1].processed)
    assert done >= set(range(PAGES))  # nothing was left when it was reported
    for w in workers:  # and nobody is told again
        w.sync(now + 100_000, pop=3)
    assert workers[0].drains + workers[1].drains == ["1"]
