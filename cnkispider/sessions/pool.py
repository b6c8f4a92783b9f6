"""The shared pool of CNKI sessions a person verified, kept in Redis for every worker.

CNKI (2026, PROTOCOL.md "2026 evidence" points 3 and 11) answers a plain HTTP session only with
its slider check; the pass is bound to the session's cookies, not to the address. A person passes
the check in a browser (``cnkispider session login``, or ``session add --from-curl`` of a browser's
request), the cookies go into this pool, and every worker on every machine crawls with them.

Keys under ``<ns>`` (:func:`namespace_for` the site: a session is the site's, not a task's):
``sessions:ids``, ``sessions:s:<id>``, ``sessions:round:<round_key>``, ``sessions:waiting``,
``sessions:checked:<scope>`` (the table: docs/INTERNALS.md).

States of a session and who moves it (one Lua script per move, so two workers never both win):

    ready --lease(worker, round)--> leased --release(round) | lease ran out--> ready
    ready|leased --mark("cooling", until)--> cooling --until passed--> ready
    any --mark("needs-person")--> needs-person     (CNKI checked it again: only a person cures it)
    any --mark("expired") | its Redis key expired--> expired / gone

Invariants: a round uses ONE session at a time (a detail link opens only in the session that
listed it); a session is leased to at most one round, a lease that lapsed counts as ready
(nobody has to clean up); ``needs-person`` and ``expired`` are never left by the crawler, only
``session check`` or ``session remove`` moves them; cookie values live only in the session hash,
never in a log, a stat, status or an error.

The rest of this module's story: docs/INTERNALS.md#cnkispidersessionspoolpy.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cnkispider import default_settings
from cnkispider.exceptions import InputError
from cnkispider.words.i18n import N_, _

if TYPE_CHECKING:
    import redis

Cookie = dict  # {"name": str, "value": str, "domain": str, "path": str}

READY = "ready"
LEASED = "leased"
COOLING = "cooling"
NEEDS_PERSON = "needs-person"
EXPIRED = "expired"
STATES = (READY, LEASED, COOLING, NEEDS_PERSON, EXPIRED)
#: States only a person (or ``session remove``) moves a session out of.
DEAD = (NEEDS_PERSON, EXPIRED)

#: A session's Redis key lives this long (CNKI forgets a pass long before).
DEFAULT_TTL = 12 * 3600.0
#: Seconds a lease lasts without a request of its round.
DEFAULT_LEASE = 120.0

WAITING_MESSAGE = N_("CNKI wants a person to pass its check (cnkispider session login)")


def namespace_for(base_url: str, prefix: str = default_settings.REDIS_KEY_PREFIX) -> str:
    """The pool's Redis namespace for the site at ``base_url`` (``<prefix><host[:port]>``;
    ``prefix``: ``[redis] prefix``, ``cnki:``)."""
    from urllib.parse import urlsplit

    return f"{prefix}{urlsplit(base_url).netloc.lower() or 'kns.cnki.net'}"


@dataclass
class VerifiedSession:
    id: str
    source: str
    cookies: list[Cookie] = field(repr=False)
    user_agent: str = ""
    egress: str = ""
    created_at: float = 0.0
    requests: int = 0
    state: str = READY
    worker: str | None = None
    round_id: int | None = None
    note: str = ""
    leased_until: float = 0.0
    cooling_until: float = 0.0

    def __repr__(self) -> str:  # never a cookie value
        names = ",".join(sorted({str(c.get("name", "")) for c in self.cookies}))
        return (
            f"VerifiedSession(id={self.id!r}, source={self.source!r}, cookies=[{names}], "
            f"state={self.state!r}, requests={self.requests}, worker={self.worker!r}, "
            f"round_id={self.round_id!r}, note={self.note!r})"
        )

    def cookie_names(self) -> list[str]:
        return sorted({str(c.get("name", "")) for c in self.cookies})


@dataclass(frozen=True)
class Lease:
    """What :meth:`SessionStore.lease` found: a session for the round, or why there is none."""

    session_id: str | None
    #: sessions that will come back by themselves (leased to other rounds, cooling)
    busy: int = 0

    @property
    def needs_person(self) -> bool:
        """No session now and none coming back: only a person can help."""
        return self.session_id is None and self.busy == 0


# KEYS[1] ids zset, KEYS[2] round key, KEYS[3..] the hash of each session in the pool (read
# just before: every key the script touches is passed in KEYS, which Redis ACLs check); ARGV
# worker, round_id, round_key, now, lease, share, then the id of each KEYS[3..] hash, in order
_LEASE_LUA = """
local worker, round_id, round_key = ARGV[1], ARGV[2], ARGV[3]
local now, lease = tonumber(ARGV[4]), tonumber(ARGV[5])
local hash = {}
for j = 3, #KEYS do hash[ARGV[j + 4]] = KEYS[j] end
local function usable(h, own)
  local f = redis.call('HMGET', h, 'state', 'leased_until', 'cooling_until', 'round_key')
  local state = f[1]
  if not state then return false end
  if state == 'ready' then return true end
  if state == 'leased' then
    return f[4] == own or tonumber(f[2] or '0') < now
  end
  if state == 'cooling' then return tonumber(f[3] or '0') < now end
  return false
end
local function take(id)
  redis.call('HSET', hash[id], 'state', 'leased', 'worker', worker, 'round_id', round_id,
             'round_key', round_key, 'leased_until', tostring(now + lease))
  redis.call('SET', KEYS[2], id, 'PX', math.floor(lease * 1000))
  return id
end
local current = redis.call('GET', KEYS[2])
if current and hash[current] and usable(hash[current], round_key) then
  return {take(current), 0}
end
local busy = 0
local chosen = nil
local shared = nil
for j = 3, #KEYS do
  local id, h = ARGV[j + 4], KEYS[j]
  if not redis.call('ZSCORE', KEYS[1], id) then
    -- left the pool since the caller read it: not a candidate
  elseif redis.call('EXISTS', h) == 0 then
    redis.call('ZREM', KEYS[1], id)
  elseif usable(h, round_key) then
    if not chosen then chosen = id end
  else
    local state = redis.call('HGET', h, 'state')
    if state == 'leased' then
      busy = busy + 1
      if not shared then shared = id end
    elseif state == 'cooling' then
      busy = busy + 1
    end
  end
end
if chosen then return {take(chosen), busy} end
if shared and ARGV[6] == '1' then
  -- every session is another round's: this round shares one rather than waiting for it (a
  -- waiting round would hold the worker's download slots that the other round needs)
  redis.call('SET', KEYS[2], shared, 'PX', math.floor(lease * 1000))
  return {shared, busy}
end
return {'', busy}
"""

# KEYS[1] session hash, KEYS[2] round key (may be ''); ARGV worker, round_id, round_key, now,
# lease, session id, own ("1": answer 'shared' uncounted if another round holds the session)
_USE_LUA = """
local h = KEYS[1]
local f = redis.call('HMGET', h, 'state', 'leased_until', 'cooling_until', 'round_key')
local state = f[1]
if not state then return {'missing', '0'} end
local now, lease = tonumber(ARGV[4]), tonumber(ARGV[5])
if state == 'needs-person' or state == 'expired' then
  return {state, redis.call('HGET', h, 'requests') or '0'}
end
if state == 'cooling' and tonumber(f[3] or '0') >= now then
  return {'cooling', f[3]}
end
local free = state == 'ready' or state == 'cooling' or tonumber(f[2] or '0') < now
if ARGV[7] == '1' and not free and f[4] ~= ARGV[3] then
  return {'shared', '0'}
end
if (free or f[4] == ARGV[3]) and ARGV[3] ~= '' then
  redis.call('HSET', h, 'state', 'leased', 'worker', ARGV[1], 'round_id', ARGV[2],
             'round_key', ARGV[3], 'leased_until', tostring(now + lease))
  redis.call('SET', KEYS[2], ARGV[6], 'PX', math.floor(lease * 1000))
end
local n = redis.call('HINCRBY', h, 'requests', 1)
return {'ok', tostring(n)}
"""

# KEYS[1] session hash, KEYS[2] round key; ARGV round_key, session id
_RELEASE_LUA = """
local f = redis.call('HMGET', KEYS[1], 'state', 'round_key')
if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
if f[1] == 'leased' and f[2] == ARGV[1] then
  redis.call('HSET', KEYS[1], 'state', 'ready', 'leased_until', '0')
  redis.call('HDEL', KEYS[1], 'worker', 'round_id', 'round_key')
  return 1
end
return 0
"""


class SessionStore:
    """The verified sessions of every worker, in Redis; see the module docstring."""

    def __init__(
        self,
        client: redis.Redis,
        namespace: str = "cnki:kns.cnki.net",
        *,
        ttl: float = DEFAULT_TTL,
        lease: float = DEFAULT_LEASE,
        clock: Callable[[], float] = time.time,
    ):
        self.client = client
        self.namespace = namespace
        self.ttl = float(ttl)
        self.lease_seconds = float(lease)
        self.clock = clock
        self._prefix = f"{namespace}:sessions:"
        self._lease_script = client.register_script(_LEASE_LUA)
        self._use_script = client.register_script(_USE_LUA)
        self._release_script = client.register_script(_RELEASE_LUA)

    @classmethod
    def from_config(cls, config, **kwargs) -> SessionStore:
        """The pool of ``config``'s Redis (through :func:`cnkispider.store.redisconn.connect`)."""
        from cnkispider.store import redisconn

        client = redisconn.connect(config.redis_url, config.data_dir)
        kwargs.setdefault("namespace", namespace_for(config.cnki["base_url"], config.redis_prefix))
        return cls(client, **kwargs)

    @classmethod
    def from_settings(cls, settings, client=None) -> SessionStore:
        """The pool a crawler uses (``SESSIONS_*`` settings, the crawler's Redis)."""
        from cnkispider.store import redisconn

        if client is None:
            client = redisconn.connect(settings.get("REDIS_URL"), settings.get("CNKI_DATA_DIR"))
        return cls(
            client,
            settings.get("SESSIONS_NAMESPACE")
            or namespace_for(settings.get("CNKI_BASE_URL"), settings.get("REDIS_KEY_PREFIX")),
            ttl=settings.getfloat("SESSIONS_TTL"),
            lease=settings.getfloat("SESSIONS_LEASE"),
        )

    # -- keys ---------------------------------------------------------------------------------

    def _key(self, session_id: str) -> str:
        return f"{self._prefix}s:{session_id}"

    def _round_key(self, round_key: str) -> str:
        return f"{self._prefix}round:{round_key}"

    @property
    def _ids(self) -> str:
        return f"{self._prefix}ids"

    # -- the contract (section 2) ---------------------------------------------------------------

    def add(
        self, cookies: list[Cookie], *, source: str, user_agent: str = "", egress: str = ""
    ) -> VerifiedSession:
        """Put a session a person passed into the pool, ``ready``."""
        if not cookies:
            raise InputError(_("a session needs at least one cookie"))
        cleaned = [
            {
                "name": str(c["name"]),
                "value": str(c["value"]),
                "domain": str(c.get("domain") or ""),
                "path": str(c.get("path") or "/"),
            }
            for c in cookies
        ]
        session = VerifiedSession(
            id=f"s-{secrets.token_hex(3)}",
            source=source,
            cookies=cleaned,
            user_agent=user_agent,
            egress=egress,
            created_at=self.clock(),
        )
        key = self._key(session.id)
        pipe = self.client.pipeline()
        pipe.hset(
            key,
            mapping={
                "id": session.id,
                "source": source,
                "cookies": json.dumps(cleaned, ensure_ascii=False),
                "user_agent": user_agent,
                "egress": egress,
                "created_at": repr(session.created_at),
                "requests": 0,
                "state": READY,
                "note": "",
            },
        )
        pipe.expire(key, max(1, int(self.ttl)))
        pipe.zadd(self._ids, {session.id: session.created_at})
        pipe.execute()
        return session

    def list(self) -> list[VerifiedSession]:
        """Every session still in Redis, oldest first (states as of now: a lease or a cool-down
        that ran out reads ``ready``)."""
        out = []
        for raw in self.client.zrange(self._ids, 0, -1):
            found = self._load(_text(raw))
            if found is None:
                self.client.zrem(self._ids, raw)
            else:
                out.append(found)
        return out

    def get(self, session_id: str) -> VerifiedSession | None:
        """The session with this id, or the one whose id starts with it (None if none or many)."""
        found = self._load(session_id)
        if found is not None:
            return found
        matches = [s for s in self.list() if s.id.startswith(session_id)]
        return matches[0] if len(matches) == 1 else None

    def remove(self, session_id: str) -> bool:
        found = self.get(session_id)
        if found is None:
            return False
        pipe = self.client.pipeline()
        pipe.delete(self._key(found.id))
        pipe.zrem(self._ids, found.id)
        pipe.execute()
        return True

    def mark(
        self,
        session_id: str,
        state: str,
        note: str = "",
        *,
        until: float = 0.0,
        unless_dead: bool = False,
    ) -> bool:
        """Move a session to ``state`` (with why). ``cooling`` lasts until ``until`` (unix time).
        A dead state (needs-person, expired) ends its lease. False if there is no such session,
        or (``unless_dead``: the crawler's marks) if it is dead already: the first note stays."""
        if state not in STATES:
            raise ValueError(f"unknown session state {state!r}; one of {', '.join(STATES)}")
        found = self.get(session_id)
        if found is None or (unless_dead and found.state in DEAD):
            return False
        key = self._key(found.id)
        mapping = {"state": state, "note": note}
        if state == COOLING:
            mapping["cooling_until"] = repr(float(until))
        pipe = self.client.pipeline()
        pipe.hset(key, mapping=mapping)
        if state != LEASED:
            pipe.hdel(key, "worker", "round_id", "round_key")
            pipe.hset(key, "leased_until", "0")
        pipe.execute()
        return True

    # -- leases -------------------------------------------------------------------------------

    def lease(
        self, worker: str, round_key: str, round_id: int | None = None, *, share: bool = True
    ) -> Lease:
        """The session of round ``round_key`` (any stable name of one round, e.g. ``task:7``):
        the one it holds if still usable, else a ready one leased to it now, else (``share``)
        one another round holds, used by both, else none."""
        # the pool's sessions, read first: the script touches only the keys it is given
        ids = [_text(i) for i in self.client.zrange(self._ids, 0, -1)]
        session_id, busy = self._lease_script(
            keys=[self._ids, self._round_key(round_key), *map(self._key, ids)],
            args=[
                worker,
                "" if round_id is None else str(round_id),
                round_key,
                repr(self.clock()),
                repr(self.lease_seconds),
                "1" if share else "0",
                *ids,
            ],
        )
        session_id = _text(session_id)
        return Lease(session_id or None, int(busy))

    def use(
        self,
        session_id: str,
        worker: str,
        round_key: str = "",
        round_id: int | None = None,
        *,
        own: bool = False,
    ) -> tuple[str, float]:
        """Count one request of ``session_id`` for round ``round_key`` and renew the round's lease.

        Returns ``("ok", requests served so far)``, ``("cooling", until)``, the session's dead
        state (``needs-person``, ``expired``, ``missing``) with its requests, or (``own``: the
        caller would rather take a free session) ``("shared", 0)``, nothing counted, when another
        round holds it."""
        state, value = self._use_script(
            keys=[self._key(session_id), self._round_key(round_key) if round_key else ""],
            args=[
                worker,
                "" if round_id is None else str(round_id),
                round_key,
                repr(self.clock()),
                repr(self.lease_seconds),
                session_id,
                "1" if own else "0",
            ],
        )
        return _text(state), float(_text(value) or 0)

    def release(self, session_id: str, round_key: str) -> bool:
        """Round ``round_key`` is over: its session is ``ready`` for the next round."""
        return bool(
            self._release_script(
                keys=[self._key(session_id), self._round_key(round_key)],
                args=[round_key, session_id],
            )
        )

    def session_of(self, round_key: str) -> str | None:
        """The session round ``round_key`` holds (lease not run out), if any."""
        return _text(self.client.get(self._round_key(round_key))) or None

    def counts(self) -> dict[str, int]:
        """How many sessions are in each state now."""
        out = dict.fromkeys(STATES, 0)
        for session in self.list():
            out[session.state] = out.get(session.state, 0) + 1
        return out

    # -- waiting for a person ----------------------------------------------------------------

    @property
    def _waiting(self) -> str:
        return f"{self._prefix}waiting"

    def set_waiting(
        self, worker: str, task: str, *, for_seconds: float, message: str = WAITING_MESSAGE
    ) -> None:
        """Worker ``worker`` of ``task`` waits for a person; said again at least every
        ``for_seconds`` while it lasts (an entry not renewed is ignored: its worker died)."""
        now = self.clock()
        current = self.client.hget(self._waiting, worker)
        since = now
        if current:
            try:
                since = float(json.loads(current).get("since", now))
            except (ValueError, TypeError):
                since = now
        value = {"task": task, "since": since, "until": now + for_seconds, "message": message}
        self.client.hset(self._waiting, worker, json.dumps(value, ensure_ascii=False))

    def clear_waiting(self, worker: str) -> None:
        self.client.hdel(self._waiting, worker)

    def waiting(self, task: str | None = None) -> list[dict]:
        """The workers waiting for a person now (of ``task`` if given): dicts with ``worker``,
        ``task``, ``since``, ``message``."""
        now = self.clock()
        out = []
        for worker, raw in self.client.hgetall(self._waiting).items():
            try:
                value = json.loads(raw)
            except ValueError:
                continue
            if value.get("until", 0) < now or (task is not None and value.get("task") != task):
                continue
            out.append({"worker": _text(worker), **value})
        return sorted(out, key=lambda v: v["since"])

    # -- [cnki] sessions = auto ----------------------------------------------------------------

    def checked(self, scope: str) -> bool:
        """Whether CNKI checked a plain session of ``scope`` (a task): auto mode then uses
        verified sessions only."""
        return bool(self.client.exists(f"{self._prefix}checked:{scope}"))

    def set_checked(self, scope: str) -> bool:
        """Record that CNKI checks plain sessions of ``scope``; True the first time."""
        return bool(
            self.client.set(f"{self._prefix}checked:{scope}", "1", nx=True, ex=7 * 24 * 3600)
        )

    # -- reading ------------------------------------------------------------------------------

    def _load(self, session_id: str) -> VerifiedSession | None:
        if not session_id:
            return None
        raw = self.client.hgetall(self._key(session_id))
        if not raw:
            return None
        f = {_text(k): _text(v) for k, v in raw.items()}
        now = self.clock()
        state = f.get("state", READY)
        leased_until = float(f.get("leased_until") or 0)
        cooling_until = float(f.get("cooling_until") or 0)
        round_id = f.get("round_id") or None
        worker = f.get("worker") or None
        if (state == LEASED and leased_until < now) or (state == COOLING and cooling_until < now):
            state, worker, round_id = READY, None, None
        return VerifiedSession(
            id=f.get("id", session_id),
            source=f.get("source", ""),
            cookies=json.loads(f.get("cookies") or "[]"),
            user_agent=f.get("user_agent", ""),
            egress=f.get("egress", ""),
            created_at=float(f.get("created_at") or 0),
            requests=int(f.get("requests") or 0),
            state=state,
            worker=worker,
            round_id=int(round_id) if round_id and round_id.isdigit() else None,
            note=f.get("note", ""),
            leased_until=leased_until,
            cooling_until=cooling_until,
        )


def _text(value) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)
