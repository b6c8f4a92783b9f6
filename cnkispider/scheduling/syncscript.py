"""The leased queue's one Lua script, :data:`SYNC_LUA`: every move of a request (enqueue, pop,
renew, release, ack, a lease that ran out, a drain confirmed) is one atomic step of it, one
round trip per batch. Its keys and the life of a request it keeps are written at the top of
:mod:`cnkispider.scheduling.queue`, which registers it and builds its arguments
(:meth:`~cnkispider.scheduling.queue.LeasedQueue.sync`). Its Bloom filter functions come
from :mod:`cnkispider.scheduling.dupefilter` (``BLOOM_LUA``).
"""

from __future__ import annotations

from cnkispider.scheduling.dupefilter import BLOOM_LUA

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
