"""The shared pool of verified sessions (cnkispider.sessions.pool) against the real Redis."""

from __future__ import annotations

import redis

from cnkispider.sessions import NEEDS_PERSON, READY, SessionStore

COOKIES = [
    {"name": "SID_kns_new", "value": "secret-sid-value", "domain": "kns.cnki.net", "path": "/"},
    {"name": "Ecp_ClientId", "value": "secret-client-id", "domain": ".cnki.net", "path": "/"},
]


class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def store(redis_url, namespace, clock=None, **kwargs) -> SessionStore:
    return SessionStore(
        redis.Redis.from_url(redis_url), namespace, clock=clock or Clock(), **kwargs
    )


def test_add_list_get_remove_round_trip(redis_url, redis_namespace):
    pool = store(redis_url, redis_namespace)
    added = pool.add(COOKIES, source="curl", user_agent="UA/1", egress="")
    assert added.id.startswith("s-") and added.state == READY
    [listed] = pool.list()
    assert listed.id == added.id and listed.cookies[0]["value"] == "secret-sid-value"
    assert listed.source == "curl" and listed.user_agent == "UA/1"
    assert pool.get(added.id[:4]).id == added.id  # a unique prefix
    assert pool.remove(added.id[:5]) is True
    assert pool.list() == [] and pool.get(added.id) is None


def test_repr_never_shows_a_cookie_value(redis_url, redis_namespace):
    pool = store(redis_url, redis_namespace)
    session = pool.add(COOKIES, source="standin")
    text = repr(session) + repr(pool.get(session.id)) + repr(pool.list())
    assert "secret" not in text and "SID_kns_new" in text


def test_a_session_key_expires(redis_url, redis_namespace):
    pool = store(redis_url, redis_namespace, ttl=3600)
    session = pool.add(COOKIES, source="curl")
    ttl = pool.client.ttl(f"{redis_namespace}:sessions:s:{session.id}")
    assert 3500 < ttl <= 3600


def test_one_round_keeps_its_session_and_two_rounds_get_two(redis_url, redis_namespace):
    pool = store(redis_url, redis_namespace)
    first, second = pool.add(COOKIES, source="curl"), pool.add(COOKIES, source="curl")
    a = pool.lease("w1", "t:1", 1)
    assert pool.lease("w1", "t:1", 1).session_id == a.session_id
    b = pool.lease("w2", "t:2", 2)
    assert {a.session_id, b.session_id} == {first.id, second.id}
    third = pool.lease("w2", "t:3", 3, share=False)
    assert third.session_id is None and third.busy == 2 and not third.needs_person
    shared = pool.lease("w2", "t:3", 3)  # rather than wait: shares one
    assert shared.session_id in {first.id, second.id}
    assert pool.session_of("t:3") == shared.session_id
    assert pool.get(shared.session_id).round_id in (1, 2)  # still leased to its own round
    leased = pool.get(a.session_id)
    assert leased.state == "leased" and leased.worker == "w1" and leased.round_id == 1


def test_a_released_session_serves_the_next_round(redis_url, redis_namespace):
    pool = store(redis_url, redis_namespace)
    session = pool.add(COOKIES, source="curl")
    assert pool.lease("w1", "t:1", 1).session_id == session.id
    assert pool.release(session.id, "t:1") is True
    assert pool.get(session.id).state == READY
    assert pool.session_of("t:1") is None
    assert pool.lease("w1", "t:2", 2).session_id == session.id


def test_a_dead_workers_lease_ends_within_one_lease_period(redis_url, redis_namespace):
    clock = Clock()
    pool = store(redis_url, redis_namespace, clock=clock, lease=60)
    session = pool.add(COOKIES, source="curl")
    assert pool.lease("dead", "t:1", 1).session_id == session.id
    clock.now += 59
    assert pool.lease("w2", "t:2", 2, share=False).session_id is None
    clock.now += 2
    assert pool.get(session.id).state == READY
    assert pool.lease("w2", "t:2", 2).session_id == session.id


def test_use_renews_the_lease_and_counts_requests(redis_url, redis_namespace):
    clock = Clock()
    pool = store(redis_url, redis_namespace, clock=clock, lease=60)
    session = pool.add(COOKIES, source="curl")
    pool.lease("w1", "t:1", 1)
    for _ in range(3):
        clock.now += 50
        assert pool.use(session.id, "w1", "t:1", 1)[0] == "ok"
    assert pool.get(session.id).requests == 3
    assert pool.lease("w2", "t:2", 2, share=False).session_id is None  # still the round's


def test_needs_person_is_never_leased_again(redis_url, redis_namespace):
    pool = store(redis_url, redis_namespace)
    session = pool.add(COOKIES, source="curl")
    pool.lease("w1", "t:1", 1)
    assert pool.mark(session.id, NEEDS_PERSON, "checked by CNKI at request 12") is True
    state, requests = pool.use(session.id, "w1", "t:1", 1)
    assert state == NEEDS_PERSON
    lease = pool.lease("w1", "t:1", 1)
    assert lease.session_id is None and lease.needs_person
    assert pool.get(session.id).note == "checked by CNKI at request 12"


def test_a_round_moves_to_another_session_when_its_own_is_checked(redis_url, redis_namespace):
    pool = store(redis_url, redis_namespace)
    first, second = pool.add(COOKIES, source="curl"), pool.add(COOKIES, source="curl")
    held = pool.lease("w1", "t:1", 1).session_id
    pool.mark(held, NEEDS_PERSON, "checked")
    assert pool.lease("w1", "t:1", 1).session_id == ({first.id, second.id} - {held}).pop()


def test_cooling_comes_back_by_itself(redis_url, redis_namespace):
    clock = Clock()
    pool = store(redis_url, redis_namespace, clock=clock)
    session = pool.add(COOKIES, source="curl")
    pool.mark(session.id, "cooling", "soft block", until=clock.now + 30)
    lease = pool.lease("w1", "t:1", 1)
    assert lease.session_id is None and lease.busy == 1 and not lease.needs_person
    assert pool.use(session.id, "w1", "t:1", 1)[0] == "cooling"
    clock.now += 31
    assert pool.lease("w1", "t:1", 1).session_id == session.id


def test_waiting_is_shared_and_ends_with_its_worker(redis_url, redis_namespace):
    clock = Clock()
    pool = store(redis_url, redis_namespace, clock=clock)
    other = store(redis_url, redis_namespace, clock=clock)
    pool.set_waiting("w1", "demo", for_seconds=10)
    [entry] = other.waiting("demo")
    assert entry["worker"] == "w1" and "session login" in entry["message"]
    assert other.waiting("another task") == []
    clock.now += 11  # not renewed: its worker is gone
    assert other.waiting() == []
    pool.set_waiting("w1", "demo", for_seconds=10)
    pool.clear_waiting("w1")
    assert other.waiting() == []


def test_auto_mode_switch_is_shared(redis_url, redis_namespace):
    pool = store(redis_url, redis_namespace)
    assert not pool.checked("task-a")
    assert pool.set_checked("task-a") is True
    assert pool.set_checked("task-a") is False
    assert store(redis_url, redis_namespace).checked("task-a")
    assert not pool.checked("task-b")


def test_a_round_that_shares_a_session_learns_it_and_may_take_a_free_one(
    redis_url, redis_namespace
):
    pool = store(redis_url, redis_namespace)
    first = pool.add(COOKIES, source="curl")
    assert pool.lease("w1", "t:1", 1).session_id == first.id
    assert pool.lease("w2", "t:2", 2).session_id == first.id  # shared
    assert pool.use(first.id, "w2", "t:2", 2, own=True) == ("shared", 0.0)
    assert pool.get(first.id).requests == 0  # not counted
    assert pool.use(first.id, "w2", "t:2", 2)[0] == "ok"
    second = pool.add(COOKIES, source="curl")
    assert pool.lease("w2", "t:2", 2, share=False).session_id == second.id
    assert pool.use(second.id, "w2", "t:2", 2, own=True)[0] == "ok"
