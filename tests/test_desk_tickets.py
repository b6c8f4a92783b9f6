"""Issue 48.5: a notification's desk ticket (cnkispider/sessions/tickets.py) on the real Redis:
single-use, short-lived, and what it becomes (a desk pass) expires too."""

from __future__ import annotations

import redis

from cnkispider.sessions import tickets
from cnkispider.sessions.pool import SessionStore
from tests.fixtures.waiting import wait_until


def test_a_ticket_is_good_once(redis_url, redis_namespace):
    client = redis.Redis.from_url(redis_url)
    store = SessionStore(client, redis_namespace)
    try:
        ticket = tickets.issue(store)
        assert client.ttl(f"{redis_namespace}:sessions:desk-ticket:{ticket}") > 0
        assert tickets.redeem(store, ticket) is True
        assert tickets.redeem(store, ticket) is False  # single-use
        assert tickets.redeem(store, "no-such-ticket") is False
        assert tickets.redeem(store, "*") is False  # no pattern, no odd key
        assert tickets.redeem(store, None) is False
    finally:
        client.close()


def test_a_ticket_not_used_in_time_is_gone(redis_url, redis_namespace):
    client = redis.Redis.from_url(redis_url)
    store = SessionStore(client, redis_namespace)
    try:
        ticket = tickets.issue(store, seconds=1)
        key = f"{redis_namespace}:sessions:desk-ticket:{ticket}"
        wait_until(lambda: not client.exists(key), 10, what="the ticket to expire")
        assert tickets.redeem(store, ticket) is False
    finally:
        client.close()


def test_a_desk_pass_opens_the_desk_for_its_time_only():
    now = [0.0]
    passes = tickets.DeskPasses(clock=lambda: now[0], seconds=60)
    given = passes.give()
    assert passes.ok(given) and not passes.ok("guess") and not passes.ok(None)
    now[0] = 61.0
    assert not passes.ok(given)
