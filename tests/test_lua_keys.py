"""Every key a Lua script touches is passed in KEYS (issue 29): each script call below runs as a
Redis ACL user whose key patterns are exactly that call's KEYS, so a key the script builds
itself (a prefix plus an id read inside the script) is refused.

Redis 7 checks the user's key patterns on every command a script runs, so a derived key inside
the worker's prefix passes a ``~cnki:*`` user anyway; only exact patterns tell the two apart.
The scheduler's queue script and the dupefilter still derive keys (docs/WORKERS.md says why);
their keys stay under the namespace in KEYS[1], which the first test shows Redis enforcing.
"""

from __future__ import annotations

import re
import uuid

import pytest
import redis

from cnkispider.pace.store import Answer, Limit, SharedRateLimit
from cnkispider.sessions import SessionStore
from cnkispider.store.rights import redis_denial

COOKIES = [{"name": "SID_kns_new", "value": "v", "domain": "kns.cnki.net", "path": "/"}]


def _exactly(key) -> str:
    """The ACL key pattern that matches ``key`` and nothing else (glob characters escaped)."""
    text = key.decode() if isinstance(key, bytes) else str(key)
    return "~" + re.sub(r"([*?\[\]\\])", r"\\\1", text)


class ExactKeysUser:
    """A Redis ACL user of its own; :meth:`run` sets its key patterns to exactly the keys of
    one script call, then makes the call as that user (the script itself, on the real Redis)."""

    def __init__(self, redis_url: str):
        self.admin = redis.Redis.from_url(redis_url)
        self.name, password = f"lua{uuid.uuid4().hex[:10]}", uuid.uuid4().hex
        self.admin.execute_command(
            "ACL", "SETUSER", self.name, "reset", "on", f">{password}", "+@all", "resetkeys"
        )
        where = self.admin.connection_pool.connection_kwargs
        self.client = redis.Redis(
            host=where["host"],
            port=where.get("port", 6379),
            db=where.get("db", 0),
            username=self.name,
            password=password,
        )
        self.calls = 0

    def wrap(self, script):
        def run(keys=(), args=(), client=None):
            patterns = [_exactly(key) for key in keys if key]
            self.admin.execute_command("ACL", "SETUSER", self.name, "resetkeys", *patterns)
            self.calls += 1
            return script(keys=keys, args=args, client=self.client)

        return run

    def close(self) -> None:
        self.client.close()
        self.admin.execute_command("ACL", "DELUSER", self.name)
        self.admin.close()


@pytest.fixture
def exact_user(redis_url):
    user = ExactKeysUser(redis_url)
    yield user
    user.close()


def test_redis_checks_each_key_a_script_touches_against_the_users_patterns(
    exact_user, redis_namespace
):
    """What the worker's ~prefix* rights rest on: a key a script builds is checked too."""
    inside = f"{redis_namespace}:a"
    script = exact_user.admin.register_script(
        "redis.call('SET', KEYS[1], '1'); return redis.call('SET', KEYS[1] .. ':derived', '1')"
    )
    with pytest.raises(redis.exceptions.ResponseError) as refused:
        exact_user.wrap(script)(keys=[inside])
    assert "can't access at least one of the keys" in str(refused.value)
    assert redis_denial(refused.value) is not None  # a worker names it as a missing right
    exact_user.admin.execute_command(
        "ACL", "SETUSER", exact_user.name, "resetkeys", f"~{redis_namespace}:*"
    )
    assert script(keys=[inside], client=exact_user.client) == b"OK"


def test_session_pool_scripts_touch_only_the_keys_they_are_given(
    redis_url, redis_namespace, exact_user
):
    """Lease (a round gets a ready session, keeps it, another round gets the other one, a
    third shares one), use and release: before, the lease script built each session's key from
    a prefix argument and Redis refused it."""
    pool = SessionStore(redis.Redis.from_url(redis_url), redis_namespace, clock=lambda: 1000.0)
    for name in ("_lease_script", "_use_script", "_release_script"):
        setattr(pool, name, exact_user.wrap(getattr(pool, name)))
    first, second = pool.add(COOKIES, source="curl"), pool.add(COOKIES, source="curl")
    a = pool.lease("w1", "task:1", 1)
    assert a.session_id in (first.id, second.id)
    assert pool.lease("w1", "task:1", 1).session_id == a.session_id  # the round keeps it
    b = pool.lease("w2", "task:2", 2)
    assert {a.session_id, b.session_id} == {first.id, second.id}
    shared = pool.lease("w3", "task:3", 3)
    assert shared.session_id in (first.id, second.id) and shared.busy == 2
    state, _ = pool.use(a.session_id, "w1", "task:1", 1)
    assert state
    assert pool.release(a.session_id, "task:1")
    assert pool.lease("w4", "task:4", 4).session_id == a.session_id
    pool.remove(b.session_id)  # the other one: round 5 shares the one left
    assert pool.lease("w5", "task:5", 5).session_id == a.session_id
    assert exact_user.calls >= 8


def test_pace_script_touches_only_the_keys_it_is_given(redis_url, redis_namespace, exact_user):
    """The shared rate limit and learned pace: every key of a batch is one of KEYS."""
    store = SharedRateLimit(lambda: redis.Redis.from_url(redis_url), site_rate=5.0)
    store.reserve([])  # makes the client and registers the script
    store._script = exact_user.wrap(store._script)
    fixed = Limit(f"{redis_namespace}:site:a", False, 200_000.0, 0.0)
    pace = Limit(f"{redis_namespace}:session:s1", True, max_rate=2.0, ttl=60.0)
    reply = store.call([[fixed, pace], [fixed]])
    assert len(reply.waits) == 2 and reply.waits[1] > 0
    store.call([], [Answer(False, reply.now, (pace,), (1.0,))])
    assert exact_user.calls == 2
    store.close()
