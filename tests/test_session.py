"""The CNKI session pool: pure, with injected time."""

from __future__ import annotations

import itertools

import pytest

from cnkispider.cnki.session import SessionPool

CNKI_TURN_LIMIT = 15  # CNKI stops a session after this many page turns


class Clock:
    def __init__(self, now: float = 0.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_pool(**kw):
    ids = (f"s{i}" for i in itertools.count(1))
    retired = []
    kw.setdefault("clock", Clock())
    pool = SessionPool(
        new_id=lambda: next(ids), on_retire=lambda s, r: retired.append((s.id, r)), **kw
    )
    return pool, retired


def walk(pool, pages, kind="list"):
    """The session each of `pages` list requests gets, each following the previous one."""
    sessions, current = [], None
    for _ in range(pages):
        session, _ = pool.acquire(kind, current)
        sessions.append(session)
        current = session.id
    return sessions


def test_a_session_is_renewed_before_cnkis_turn_limit():
    """With the default limit (14) a session serves 15 grid requests (14 turns), then a new one
    takes over: CNKI's 15th turn is never asked for."""
    pool, retired = make_pool(turn_limit=14)
    sessions = walk(pool, 40)
    ids = [s.id for s in sessions]
    assert ids == ["s1"] * 15 + ["s2"] * 15 + ["s3"] * 10
    assert max(s.turns for s in sessions) == 14 < CNKI_TURN_LIMIT
    assert retired == [("s1", "turn-limit"), ("s2", "turn-limit")]


def test_a_retired_session_is_never_handed_out_again():
    pool, _ = make_pool()
    first, _ = pool.acquire("list")
    assert pool.retire(first.id, "renewed") and first.retired
    again, created = pool.acquire("list", first.id)
    assert again is not first and created
    assert pool.get(first.id) is None and not pool.retire(first.id, "renewed")


def test_detail_requests_use_a_session_without_spending_turns():
    pool, _ = make_pool(turn_limit=2)
    session = walk(pool, 1)[0]
    for _ in range(50):
        assert pool.acquire("detail", session.id)[0] is session
    assert session.turns == 0 and session.requests == 51


def test_sessions_older_than_max_age_are_retired():
    clock = Clock()
    pool, retired = make_pool(max_age=600, clock=clock)
    old, _ = pool.acquire("list")
    clock.now = 599
    assert pool.acquire("list", old.id)[0] is old
    clock.now = 600
    new, created = pool.acquire("list", old.id)
    assert created and new is not old and old.retired
    assert retired == [("s1", "max-age")]


def test_at_most_size_sessions_are_live_and_the_least_used_is_shared():
    pool, _ = make_pool(size=2)
    a, created_a = pool.acquire("list")
    b, created_b = pool.acquire("list")
    c, created_c = pool.acquire("list")
    d, _ = pool.acquire("list")
    assert (created_a, created_b, created_c) == (True, True, False)
    assert len(pool) == 2 and c is a and d is b


def test_a_session_retired_on_its_last_turn_still_records_its_warm_up():
    """The request that took the last turn may still warm the session up and use it."""
    pool, _ = make_pool(turn_limit=0)
    session, created = pool.acquire("list")
    assert created and session.retired
    assert pool.mark_warmed(session, user_agent="UA", proxy="1.2.3.4:80") is False
    assert session.warmed and session.proxy == "1.2.3.4:80"


def test_random_ids_by_default_are_unique():
    pool = SessionPool(size=1000)
    ids = {pool.acquire("list")[0].id for _ in range(1000)}
    assert len(ids) == 1000


@pytest.mark.parametrize("kw", [{"turn_limit": -1}, {"size": 0}])
def test_bad_limits_are_refused(kw):
    with pytest.raises(ValueError):
        SessionPool(**kw)
