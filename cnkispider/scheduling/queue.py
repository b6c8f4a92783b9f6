"""The leased request queue of one task namespace: Redis structures and the one script that moves them.

Why: a request popped from a shared queue must not be lost with the worker that popped it, nor
run twice by two workers, and exactly one worker must learn that a round is finished. So a pop
is a lease, not a delete, and every move is one atomic step of :data:`SYNC_LUA`. The keys under
``{ns}`` (``SCHEDULER_NAMESPACE``): ``queue``, ``requests``, ``leases``, ``attempts``,
``tokens``, ``seq``, ``writers``, ``round:{r}:outstanding``, ``round:{r}:bloom[:i]``, ``bloom``,
``drained``, ``seedings``, ``epoch``, ``unreadable``, ``unreadable:order`` (the table:
docs/INTERNALS.md). A request's id is its score (``-priority * 2**33 + seq``): priority first,
first-in first-out within one. One server (or a primary with replicas): the script builds key names, not Cluster.

Life of a request (the invariants; every move is one atomic step of :data:`SYNC_LUA`)::

    enqueue ──> queued ──pop──> leased ──ack──> gone (its outcome is written)
                  ^               │ │
                  └──lease ran out┘ └──lease ran out with attempts >= max──> abandoned
                  └────release────┘                 (handed to one worker, acked after
                                                     request_abandoned has been handled)

- *enqueue* drops a fingerprint its round's Bloom filter has seen, in the same step; a new
  request is queued and its round's count goes up, once. One made from a lease names that
  hand-out, and is refused unless the hand-out is still current (a late holder's children).
- *pop* leases up to N ids until ``now + lease``, each hand-out (abandoned ones too) with a
  random token: only that hand-out may renew, release or acknowledge it.
- *epoch*: lease writes of another epoch are stale; an older snapshot gets a new epoch.
- *ack* deletes the request; the ack that brings the round's count to 0 reports the round
  drained to that one worker (``{ns}:drained`` until confirmed); children are written first.
- *lease ran out*: back to the queue, or *abandoned* after ``SCHEDULER_MAX_ATTEMPTS``.

The rest of this module's story: docs/INTERNALS.md#cnkispiderschedulingqueuepy.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cnkispider import default_settings
from cnkispider.exceptions import RedisUnavailable
from cnkispider.i18n import _
from cnkispider.scheduling import defaults
from cnkispider.scheduling.dupefilter import BLOOM_LUA

if TYPE_CHECKING:
    import redis

logger = logging.getLogger(__name__)

#: The one script: writes (new requests, acks, renewals, releases, confirmations) first, in that
#: order, then expired leases, then the pop. One call = one round trip, atomic.
SYNC_LUA = (
    BLOOM_LUA
    + r"""
local P = KEYS[1]
local Q, R, L, A = P .. ':queue', P .. ':requests', P .. ':leases', P .. ':attempts'
local SEQ, DRAINED, EPOCH, UNREAD = P .. ':seq', P .. ':drained', P .. ':epoch', P .. ':unreadable'
local TOKENS, UNREAD_ORDER = P .. ':tokens', P .. ':unreadable:order'
-- the seeding each round id was last seeded under (flow control's ``round.seeding``): a drain
-- is reported with it, so the handler of an earlier seeding's drain changes nothing of a later
local SEEDINGS = P .. ':seedings'

local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local lease_ms, max_attempts = tonumber(ARGV[2]), tonumber(ARGV[3])
local pop_n, max_expired, confirm_ms = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local n_enq, n_ack, n_bury = tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])
local n_renew, n_rel, n_conf = tonumber(ARGV[15]), tonumber(ARGV[16]), tonumber(ARGV[17])
local round_capacity, n_recheck = ARGV[18], tonumber(ARGV[19])
local writer_epoch, seq_floor, unread_kept = ARGV[20], tonumber(ARGV[21]), tonumber(ARGV[22])
local writer, writer_last = ARGV[23], tonumber(ARGV[24])
-- ARGV[7]: random, fresh for every call: the epoch if a new one starts, and the token of every
-- hand-out this call makes (an id is handed out at most once per call)
local nonce = ARGV[7]
local i = 25
local WRITERS = P .. ':writers'

local epoch = redis.call('GET', EPOCH)
local new_epoch = not epoch
if new_epoch then
  epoch = nonce
  redis.call('SET', EPOCH, epoch)
end
-- Did Redis go back in time? Restarted empty, that is a new epoch (above). Restored from an
-- older snapshot, the epoch is the snapshot's, but what was written since is gone (requests,
-- seeds of rounds flow control counts as seeded), so the epoch must change: flow control then
-- replays the rounds of the old one. Two signs, each exact for the caller that sees it: the
-- time of the caller's own last call is not there ({ns}:writers: only its own calls write its
-- entry, so nothing another worker does since hides it), or `seq` is below an id it has seen.
local mark = tonumber(redis.call('ZSCORE', WRITERS, writer) or '0')
local went_back = writer_last > 0 and mark < writer_last
-- Either way the sequence resumes above every id a worker may still hold.
if tonumber(redis.call('GET', SEQ) or '0') < seq_floor then
  redis.call('SET', SEQ, seq_floor)
  went_back = true
end
-- Only a caller whose epoch is still the current one starts a new epoch: one that saw another
-- epoch learns of the new one now (started by whoever came first after the loss: one bump per
-- loss, not one per worker, each of which would have every worker forget its leases again).
if went_back and not new_epoch and writer_epoch == epoch then
  epoch = nonce
  redis.call('SET', EPOCH, epoch)
end
-- never backwards, even if the server's clock is set back: the caller keeps the mark it gets
if now > mark then mark = now end
if writer ~= '' then
  redis.call('ZADD', WRITERS, mark, writer)
  -- a worker silent for an hour is gone (a live one calls every SCHEDULER_IDLE_POLL at least)
  redis.call('ZREMRANGEBYSCORE', WRITERS, '-inf', now - 3600000)
end
-- Lease writes (acks, renewals, releases, confirmations) of another epoch are stale: that
-- Redis's leases are gone, and its ids may name other requests now.
local current = writer_epoch == epoch

local function round_of(value)
  local nl = string.find(value, '\n', 1, true)
  if nl == nil or nl == 1 then return nil end
  return string.sub(value, 1, nl - 1)
end

local function outstanding_key(rid) return P .. ':round:' .. rid .. ':outstanding' end
local function filter_key(rid)
  if rid == '' then return P .. ':bloom' end
  return P .. ':round:' .. rid .. ':bloom'
end

-- A filter lives as long as what it describes: a round's, until the round drains; the filter of
-- requests without a round, until the namespace holds no request at all.
local function drop_filter(key)
  local layers = tonumber(redis.call('HGET', key, 'layers') or '0')
  for l = 0, layers - 1 do redis.call('DEL', key .. ':' .. l) end
  redis.call('DEL', key)
end

local function outstanding(rid)
  return tonumber(redis.call('GET', outstanding_key(rid)) or '0')
end

-- 1. new requests: dedupe (in the filter of the request's round), queue, count once. One made
--    from a leased request is refused unless that hand-out is current (its token still there).
local enqueued, dups, refused, filters = 0, 0, 0, {}
for _ = 1, n_enq do
  local prio, fp, rid = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2]
  local parent, parent_token, data = ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  local seeding = ARGV[i + 6]
  i = i + 7
  if parent ~= '' and (not current or redis.call('HGET', TOKENS, parent) ~= parent_token) then
    refused = refused + 1
  else
    if seeding ~= '' and rid ~= '' then redis.call('HSET', SEEDINGS, rid, seeding) end
    local dup = false
    if fp ~= '' then
      local B = filters[rid]
      if B == nil then
        local capacity = rid == '' and ARGV[8] or round_capacity
        B = bloom_open(filter_key(rid), capacity, ARGV[9], ARGV[10], ARGV[11])
        filters[rid] = B
      end
      dup = bloom_check_and_add(B, fp)
    end
    if dup then
      dups = dups + 1
    else
      local seq = redis.call('INCR', SEQ)
      local id = string.format('%.0f', -prio * 8589934592 + seq)
      redis.call('ZADD', Q, id, id)
      redis.call('HSET', R, id, rid .. '\n' .. data)
      if rid ~= '' then redis.call('INCR', outstanding_key(rid)) end
      enqueued = enqueued + 1
    end
  end
end
for _, B in pairs(filters) do bloom_close(B) end

-- 2. acknowledgements (and burials of unreadable requests, with the reason), by the current
--    holder only: its hand-out's token, in this epoch. The ack that drains a round deletes its
--    count and its filter: a round crawled again later (`task move`, a new database) starts
--    both afresh.
local function holds(id, token)
  return current and redis.call('HGET', TOKENS, id) == token
end

local acked, stale, drained = 0, 0, {}
for n = 1, n_ack + n_bury do
  local id, token, reason = ARGV[i], ARGV[i + 1], nil
  i = i + 2
  if n > n_ack then
    reason = ARGV[i]
    i = i + 1
  end
  local removed = 0
  if holds(id, token) then
    removed = redis.call('ZREM', L, id)
    if removed == 0 then removed = redis.call('ZREM', Q, id) end
  end
  if removed == 1 then
    local value = redis.call('HGET', R, id) or ''
    if reason then
      -- kept for a person to read, the newest unread_kept of them (a flood of bad requests
      -- must not fill Redis)
      redis.call('HSET', UNREAD, id, reason .. '\n' .. value)
      redis.call('ZADD', UNREAD_ORDER, now, id)
      local over = redis.call('ZCARD', UNREAD_ORDER) - unread_kept
      if over > 0 then
        for _, old in ipairs(redis.call('ZRANGE', UNREAD_ORDER, 0, over - 1)) do
          redis.call('HDEL', UNREAD, old)
        end
        redis.call('ZREMRANGEBYRANK', UNREAD_ORDER, 0, over - 1)
      end
    end
    redis.call('HDEL', R, id)
    redis.call('HDEL', A, id)
    redis.call('HDEL', TOKENS, id)
    acked = acked + 1
    local rid = round_of(value)
    if rid and redis.call('DECR', outstanding_key(rid)) <= 0 then
      redis.call('DEL', outstanding_key(rid))
      drop_filter(filter_key(rid))
      redis.call('ZADD', DRAINED, now + confirm_ms, rid)
      drained[#drained + 1] = rid
    end
  else
    stale = stale + 1
  end
end

-- 3. renewals
for _ = 1, n_renew do
  local id, token = ARGV[i], ARGV[i + 1]
  i = i + 2
  if holds(id, token) then
    if redis.call('ZSCORE', L, id) then
      redis.call('ZADD', L, now + lease_ms, id)
    elseif redis.call('ZREM', Q, id) == 1 then
      redis.call('ZADD', L, now + lease_ms, id)
    end
  end
end

-- 4. releases: handed back unstarted, the attempt does not count (and the token is void: the
--    next hand-out is another one)
for _ = 1, n_rel do
  local id, token = ARGV[i], ARGV[i + 1]
  i = i + 2
  if holds(id, token) and redis.call('ZREM', L, id) == 1 then
    if redis.call('HINCRBY', A, id, -1) <= 0 then redis.call('HDEL', A, id) end
    redis.call('HDEL', TOKENS, id)
    redis.call('ZADD', Q, id, id)
  end
end

-- 5. drained rounds whose worker has told flow control (of this epoch only: another epoch's
--    drain of the same round id is not this one), each as ``rid`` or ``rid\nseeding``: a
--    confirmation of an earlier seeding's drain leaves a later seeding's drain alone
for _ = 1, n_conf do
  local rid, seeding = ARGV[i], ''
  local nl = string.find(rid, '\n', 1, true)
  if nl then rid, seeding = string.sub(rid, 1, nl - 1), string.sub(rid, nl + 1) end
  if current and (seeding == '' or seeding == (redis.call('HGET', SEEDINGS, rid) or '')) then
    redis.call('ZREM', DRAINED, rid)
  end
  i = i + 1
end

-- 5b. drains flow control could not take yet (the round was not marked seeded): reported
--     again to this caller if the round still has nothing outstanding, forgotten if it has
--     (it was seeded again: its own drain will come)
for _ = 1, n_recheck do
  local rid = ARGV[i]
  i = i + 1
  if not current then
    -- that drain was in another epoch: flow control replays the round
  elseif outstanding(rid) == 0 then
    redis.call('ZADD', DRAINED, now + confirm_ms, rid)
    drained[#drained + 1] = rid
  else
    redis.call('ZREM', DRAINED, rid)
  end
end

-- 6. leases that ran out: back in line, or abandoned to this caller after too many hand-outs
--    (a hand-out like a pop: a new token, so the holder whose lease ran out can no longer
--    renew or acknowledge it while this caller's handlers run)
local abandoned = {}
local expired = redis.call('ZRANGEBYSCORE', L, '-inf', now, 'LIMIT', 0, max_expired)
for _, id in ipairs(expired) do
  local att = tonumber(redis.call('HGET', A, id) or '0')
  if att < max_attempts then
    redis.call('ZREM', L, id)
    redis.call('ZADD', Q, id, id)
  elseif pop_n > 0 then
    redis.call('ZADD', L, now + lease_ms, id)
    redis.call('HSET', TOKENS, id, nonce)
    abandoned[#abandoned + 1] = id
    abandoned[#abandoned + 1] = att
    abandoned[#abandoned + 1] = nonce
    abandoned[#abandoned + 1] = redis.call('HGET', R, id) or ''
  end
end

-- 7. drained rounds nobody confirmed in time: report them again (to this caller only), unless
--    the round has requests again (seeded again since: its own drain will be reported)
if pop_n > 0 then
  for _, rid in ipairs(redis.call('ZRANGEBYSCORE', DRAINED, '-inf', now, 'LIMIT', 0, 10)) do
    if outstanding(rid) == 0 then
      redis.call('ZADD', DRAINED, now + confirm_ms, rid)
      drained[#drained + 1] = rid
    else
      redis.call('ZREM', DRAINED, rid)
    end
  end
end

-- 8. the pop
local popped = {}
if pop_n > 0 then
  local got = redis.call('ZPOPMIN', Q, pop_n)
  for j = 1, #got, 2 do
    local id = got[j]
    local data = redis.call('HGET', R, id)
    if data then
      popped[#popped + 1] = id
      popped[#popped + 1] = redis.call('HINCRBY', A, id, 1)
      popped[#popped + 1] = nonce
      popped[#popped + 1] = data
      redis.call('HSET', TOKENS, id, nonce)
      redis.call('ZADD', L, now + lease_ms, id)
    else
      redis.call('HDEL', A, id)
      redis.call('HDEL', TOKENS, id)
    end
  end
end

local queued, leased = redis.call('ZCARD', Q), redis.call('ZCARD', L)
if queued == 0 and leased == 0 and acked > 0 then drop_filter(filter_key('')) end
local seq = redis.call('GET', SEQ) or '0'
-- each drained round's seeding, read now (a drain reported again reads it again: a round is
-- seeded again only once its earlier drain was closed, tasks/rounds.py)
local seedings = {}
for n, rid in ipairs(drained) do seedings[n] = redis.call('HGET', SEEDINGS, rid) or '' end
return {
  epoch, queued, leased, enqueued, dups, acked, stale, popped, abandoned, drained, refused, seq, mark,
  seedings
}
"""
)


@dataclass(frozen=True)
class Enqueue:
    """A new request: ``fingerprint`` is ``None`` to skip the dupefilter (``dont_filter``);
    ``parent`` is the lease it was made from (None: a seed, made from no leased request), and
    the request is refused unless that hand-out is still current."""

    data: bytes
    priority: int = 0
    fingerprint: bytes | None = None
    round_id: str | None = None
    parent: Held | None = None
    seeding: str | None = None  # a round's seed: the seeding it starts (``{ns}:seedings``)


@dataclass(frozen=True)
class Held:
    """A lease as its holder knows it: the request id and the token of the hand-out (of the
    queue's epoch: :attr:`LeasedQueue.epoch`)."""

    lease_id: str
    token: str


@dataclass(frozen=True)
class Burial:
    """A popped request no worker may run: moved to ``{ns}:unreadable`` with the reason."""

    held: Held
    reason: str


def server_version(client: redis.Redis) -> str:
    """The server's version from HELLO (Redis 6+), which a worker's ACL user may run; INFO is
    @dangerous and refused to it. Redis 5 has no HELLO (and no ACL): INFO then."""
    import redis as redis_module

    try:
        reply = client.execute_command("HELLO")
    except redis_module.ResponseError:
        return str(client.info("server").get("redis_version", "0"))
    if isinstance(reply, dict):
        fields = reply
    else:  # RESP2: a flat list of name, value pairs
        fields = dict(zip(reply[::2], reply[1::2], strict=False))
    version = fields.get(b"version", fields.get("version", b"0"))
    return version.decode() if isinstance(version, bytes) else str(version)


@dataclass
class SyncBatch:
    """Everything one call writes (in this order) and how many requests it pops."""

    enqueues: list[Enqueue] = field(default_factory=list)
    acks: list[Held] = field(default_factory=list)
    burials: list[Burial] = field(default_factory=list)
    renewals: list[Held] = field(default_factory=list)
    releases: list[Held] = field(default_factory=list)
    confirms: list[str] = field(default_factory=list)
    rechecks: list[str] = field(default_factory=list)
    pop: int = 0

    #: The write lists, in the order the script applies them.
    WRITES = ("enqueues", "acks", "burials", "renewals", "releases", "confirms", "rechecks")

    def ops(self) -> int:
        return sum(len(getattr(self, name)) for name in self.WRITES)


@dataclass(frozen=True)
class Popped:
    lease_id: str
    attempts: int
    token: str  # of this hand-out
    round_id: str | None
    data: bytes

    @property
    def held(self) -> Held:
        return Held(self.lease_id, self.token)


@dataclass
class SyncResult:
    epoch: str
    queued: int
    leased: int
    enqueued: int
    duplicates: int
    acked: int
    stale: int  # acks and burials that no longer held their lease
    popped: list[Popped]
    abandoned: list[Popped]
    drained: list[str]
    refused: int = 0  # new requests made from a hand-out no longer current
    seq: int = 0  # the namespace's sequence after the call
    #: drained round id -> the seeding it drained under ('' where none was recorded)
    seedings: dict[str, str] = field(default_factory=dict)


class LeasedQueue:
    """Blocking access to one namespace's queue; the scheduler runs it off the reactor thread."""

    def __init__(
        self,
        client: redis.Redis,
        namespace: str,
        *,
        lease_seconds: float = default_settings.SCHEDULER_LEASE_SECONDS,
        max_attempts: int = default_settings.SCHEDULER_MAX_ATTEMPTS,
        bloom_args: list | None = None,
        round_capacity: int = default_settings.DUPEFILTER_ROUND_CAPACITY,
        drained_confirm_seconds: float = defaults.DRAINED_CONFIRM_SECONDS,
        max_expired: int = defaults.MAX_EXPIRED_PER_SYNC,
        unreadable_kept: int = default_settings.REDIS_UNREADABLE_KEPT,
    ):
        self.client = client
        self.namespace = namespace
        self.lease_ms = max(1, round(lease_seconds * 1000))
        self.max_attempts = max_attempts
        self.bloom_args = bloom_args or [
            default_settings.DUPEFILTER_CAPACITY,
            repr(default_settings.DUPEFILTER_ERROR_RATE),
            default_settings.DUPEFILTER_GROWTH,
            defaults.DUPEFILTER_TIGHTENING,
        ]
        self.round_capacity = round_capacity
        self.confirm_ms = round(drained_confirm_seconds * 1000)
        self.max_expired = max_expired
        self.unreadable_kept = unreadable_kept
        # This worker's view of the namespace, sent with every call: the epoch its leases belong
        # to (None before the first answer) and the highest sequence number it has seen.
        self.epoch: str | None = None
        self.seq_seen = 0
        # ... and who it is in {ns}:writers, with the mark of its last call there (the server
        # time, never going back)
        self.writer = secrets.token_hex(6)
        self.last_call_ms = 0
        self._sync = client.register_script(SYNC_LUA)

    def key(self, name: str) -> str:
        return f"{self.namespace}:{name}"

    def round_key(self, round_id: str | int) -> str:
        return f"{self.namespace}:round:{round_id}:outstanding"

    def open(self) -> str:
        """Check the server can run the script and return the namespace's epoch (created if new)."""
        version = server_version(self.client)
        if tuple(int(x) for x in str(version).split(".")[:2]) < (5, 0):
            raise RedisUnavailable(
                _("Redis %(version)s is too old: the scheduler needs 5.0 or newer")
                % {"version": version}
            )
        self.client.set(self.key("epoch"), secrets.token_hex(8), nx=True)
        self.epoch = self.client.get(self.key("epoch")).decode()
        return self.epoch

    def sync(self, batch: SyncBatch, *, now_ms: int | None = None) -> SyncResult:
        """Apply ``batch`` and pop, in one atomic script call (one round trip)."""
        args: list = [
            now_ms or 0,
            self.lease_ms,
            self.max_attempts,
            batch.pop,
            self.max_expired,
            self.confirm_ms,
            secrets.token_hex(8),
            *self.bloom_args,
            len(batch.enqueues),
            len(batch.acks),
            len(batch.burials),
            len(batch.renewals),
            len(batch.releases),
            len(batch.confirms),
            self.round_capacity,
            len(batch.rechecks),
            self.epoch or "",
            self.seq_seen,
            self.unreadable_kept,
            self.writer,
            self.last_call_ms,
        ]
        for e in batch.enqueues:
            parent = e.parent or Held("", "")
            args += [
                e.priority,
                e.fingerprint or b"",
                e.round_id or "",
                parent.lease_id,
                parent.token,
                e.data,
                e.seeding or "",
            ]
        for held in batch.acks:
            args += [held.lease_id, held.token]
        for burial in batch.burials:
            args += [burial.held.lease_id, burial.held.token, burial.reason]
        for held in (*batch.renewals, *batch.releases):
            args += [held.lease_id, held.token]
        args += batch.confirms
        args += batch.rechecks
        raw = self._sync(keys=[self.namespace], args=args)
        epoch, queued, leased, enqueued, dups, acked, stale, popped, abandoned, drained = raw[:10]
        refused, seq = raw[10], int(raw[11])
        self.epoch = epoch.decode()
        self.seq_seen = max(self.seq_seen, seq)
        self.last_call_ms = int(raw[12])
        drained_ids = [r.decode() for r in drained]
        seedings = [s.decode() for s in raw[13]] if len(raw) > 13 else []
        return SyncResult(
            epoch=self.epoch,
            queued=queued,
            leased=leased,
            enqueued=enqueued,
            duplicates=dups,
            acked=acked,
            stale=stale,
            popped=_popped(popped),
            abandoned=_popped(abandoned),
            drained=drained_ids,
            refused=refused,
            seq=seq,
            seedings=dict(zip(drained_ids, seedings, strict=False)),
        )

    def remove(self) -> int:
        """Delete the namespace's keys (its task finished): :func:`remove_namespace`."""
        return remove_namespace(self.client, self.namespace)

    # --- reads for flow control, tools and tests --------------------------------------------

    def outstanding(self, round_id: str | int) -> int:
        """The round's count of queued and leased requests (0: none, or the round is unknown)."""
        value = self.client.get(self.round_key(round_id))
        return 0 if value is None else int(value)

    def rounds_at_zero(self) -> list[str]:
        """Rounds that drained and whose drain flow control has not confirmed yet."""
        return sorted(r.decode() for r in self.client.zrange(self.key("drained"), 0, -1))

    def sizes(self) -> dict[str, int]:
        """Requests queued and leased, read at one moment (MULTI): a request moving between
        the two (a pop, a release, a lease run out) is counted in one, never in neither."""
        return dict(zip(("queued", "leased"), self._cards("queue", "leases"), strict=True))

    def work_left(self) -> dict[str, int]:
        """:meth:`sizes` and the rounds drained whose drain flow control has not confirmed
        (the round is closed in the database, then confirmed): the task's work left in Redis.
        The ack that drains a round adds it in the same script, so a round's end is never in
        neither."""
        names = ("queued", "leased", "drained")
        return dict(zip(names, self._cards("queue", "leases", "drained"), strict=True))

    def _cards(self, *keys: str) -> list[int]:
        pipe = self.client.pipeline(transaction=True)
        for key in keys:
            pipe.zcard(self.key(key))
        return pipe.execute()


def _popped(flat: list) -> list[Popped]:
    out = []
    for j in range(0, len(flat), 4):
        lease_id, attempts, token = flat[j].decode(), int(flat[j + 1]), flat[j + 2].decode()
        round_id, _, data = flat[j + 3].partition(b"\n")
        out.append(Popped(lease_id, attempts, token, round_id.decode() or None, data))
    return out


#: The namespace's keys that are not a round's: deleted by name when a task is done, so that a
#: worker whose Redis user may not SCAN (least rights: docs/WORKERS.md) still removes them.
TASK_KEYS = (
    "queue",
    "requests",
    "leases",
    "attempts",
    "tokens",
    "bloom",
    "drained",
    "unreadable",
    "unreadable:order",
    "seedings",
)


def remove_namespace(client: redis.Redis, namespace: str) -> int:
    """Delete the keys of a finished task's namespace (its queue, requests, filters, drains,
    unreadable requests, ...) but ``epoch``, ``seq`` and ``writers``: the number deleted. These
    three small keys (the last trimmed to the workers of the last hour) keep the namespace's
    identity, so a worker still polling sees no new epoch (no false "Redis lost its state")
    and a later crawl of the task goes on with new ids. The task's own keys go by name
    (:data:`TASK_KEYS`); a round's keys go when it drains, and any a round left behind are
    found with SCAN, not KEYS (which blocks the server), where the Redis user may run it: a
    worker's user may not (its ACL refuses SCAN), and then they stay for the administrator's
    sweep rather than stopping the worker. UNLINK frees the memory off the server's main
    thread."""
    from redis.exceptions import NoPermissionError

    keep = {f"{namespace}:{name}".encode() for name in ("epoch", "seq", "writers")}
    removed = client.unlink(*(f"{namespace}:{name}" for name in TASK_KEYS))
    batch: list = []
    try:
        for key in client.scan_iter(match=_glob_escape(namespace) + ":*", count=500):
            if key in keep:
                continue
            batch.append(key)
            if len(batch) >= 500:
                removed += client.unlink(*batch)
                batch = []
    except NoPermissionError:
        logger.info(
            "%s: this Redis user may not SCAN; the task's keys are gone, any a round left "
            "behind stay",
            namespace,
        )
    if batch:
        removed += client.unlink(*batch)
    return removed


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
