"""The Lua script that keeps the shared limits and paces in Redis (:mod:`cnkispider.pace.store`
says what they are and which invariants the script keeps).

One call reports a batch of CNKI answers to the paces, then reserves send times for a batch of
requests, atomically, on the Redis server's clock (``TIME``).

ARGV[1] is a JSON batch: ``p`` the :class:`~cnkispider.pace.store.PaceRule`; ``m`` per KEYS
index ``[0, interval, tolerance]`` (a fixed limit, µs), ``[1, max rate, ttl ms]`` (a pace) or
``[2, 0, 0]`` (a window); ``f`` answers ``[0 clean|1 challenge|2 a 429, granted at µs, key
index, pace granted at, ...]``; ``w`` window answers ``[1 closed|0 clean, granted at µs,
Retry-After ms or -1, key index, ...]``; ``k`` the backoff ``{base, factor, max}``; ``c`` the
channel a close is published on; ``x`` the KEYS index of the windows' index; ``r`` reservations
(lists of key indexes).

It returns ``{now, waits, decreases, changes, rates, windows, closes}``: now (µs); per
reservation the µs to wait (negative: held, ask again then); per pace key ``[index, decreased
at]``; per decrease ``[index, old x1000, new x1000, cool-down s]``; per reservation its paces
(strings); per window key ``[index, closed at, open at, strikes]``; per window this call closed
``[index, ms, strikes]``.

State: a pace is a hash ``r c d k t n``, a fixed limit a string (its tat), a window a hash ``u a
n c`` (the fields and rules: docs/INTERNALS.md#cnkispiderpacestorepy). The script mirrors the
reference model of one pace in ``tests/fixtures/pace_model.py`` line by line, and the tests hold
the two to the same answers.

A Python string, not a ``.lua`` file, so that the one-file executable needs no data file.
"""

#: Seconds ahead a paced request may be granted its send time (or one interval, when that is
#: longer): a request beyond it is held and asks again, so that a change of pace acts on the
#: next second's requests, not on a queue booked at the old pace.
HORIZON = 1.0

#: Seconds a window's state is kept after it opened again: its strikes (the next backoff) and
#: its count of 429s for status, unless a clean answer resets the strikes first.
WINDOW_KEEP = 3600.0

#: The script, with ``HORIZON`` and ``WINDOW_KEEP`` written in (µs, ms).
RESERVE_LUA = r"""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local b = cjson.decode(ARGV[1])
local p, m = b.p, b.m
local fixed, paces, first = {}, {}, {}
local function cap(i, rate)
  local max = m[i][2]
  if max > 0 and rate > max then return max end
  return rate
end
local function pace(i)
  local key = KEYS[i]
  local s = paces[key]
  if s == nil then
    local v = redis.call('HMGET', key, 'r', 'c', 'd', 'k', 't', 'n')
    s = {r = tonumber(v[1]) or cap(i, p.start), c = tonumber(v[2]) or 0,
         d = tonumber(v[3]) or -1, k = tonumber(v[4]) or 0, t = tonumber(v[5]) or 0,
         n = tonumber(v[6]) or 0, i = i}
    paces[key] = s
    first[#first + 1] = key
  end
  return s
end
local function growth(s, rate)
  local band = s.c * p.ceiling
  if s.c > 0 and rate >= band then return (s.c - band) / p.probe_seconds end
  return p.step
end
local changes = {}
for _, e in ipairs(b.f) do
  local granted = e[2]
  for j = 3, #e, 2 do
    local i, rate = e[j], e[j + 1]
    local s = pace(i)
    if s.d < 0 or granted >= s.d then
      if e[1] >= 1 then
        if e[1] == 2 then
          s.k = 0
        elseif s.d >= 0 and s.n == 0 then
          s.k = math.min(p.cooldown_max, 2 * s.k)
        else
          s.k = p.cooldown
        end
        local old = s.r
        s.c = math.max(p.min_rate, rate / 2, rate - growth(s, rate) * p.window / 2)
        s.r = math.max(p.min_rate, s.c * p.decrease)
        s.d = now
        s.n = 0
        s.t = math.max(s.t, now) + s.k * 1000000
        changes[#changes + 1] = {i, math.floor(old * 1000), math.floor(s.r * 1000), math.floor(s.k)}
      else
        s.n = s.n + 1
        local grown = s.r + growth(s, s.r) / s.r
        local band = s.c * p.ceiling
        if s.c > 0 and s.r < band and grown > band then grown = band end
        s.r = cap(i, grown)
      end
    end
  end
end
local windows, wfirst, wdirty, closes = {}, {}, {}, {}
local function window(i)
  local key = KEYS[i]
  local w = windows[key]
  if w == nil then
    local v = redis.call('HMGET', key, 'u', 'a', 'n', 'c')
    w = {u = tonumber(v[1]) or 0, a = tonumber(v[2]) or -1, n = tonumber(v[3]) or 0,
         c = tonumber(v[4]) or 0, i = i}
    windows[key] = w
    wfirst[#wfirst + 1] = key
  end
  return w
end
local k = b.k or {base = 5, factor = 3, max = 300}
for _, e in ipairs(b.w or {}) do
  local granted, after = e[2], e[3]
  for j = 4, #e do
    local i = e[j]
    local w = window(i)
    local news = w.a < 0 or granted >= w.a
    if e[1] == 1 then
      w.c = w.c + 1
      wdirty[KEYS[i]] = true
      local ms = nil
      if news then
        w.n = w.n + 1
        if after >= 0 then
          ms = after
        else
          ms = math.min(k.max, k.base * k.factor ^ (w.n - 1)) * 1000
        end
        w.a = now
      elseif after >= 0 then
        ms = after
      end
      if ms ~= nil and now + ms * 1000 > w.u then
        w.u = now + ms * 1000
        closes[#closes + 1] = {i, math.floor(ms), w.n}
        -- told at once to every worker listening, so that requests they booked before it
        -- closed are not sent into it (they learn it from their next call otherwise)
        if b.c then
          redis.call('PUBLISH', b.c, KEYS[i] .. ' ' .. string.format('%.0f', w.a))
        end
        -- the index status reads (no SCAN): every window by when it opens again
        if b.x then
          redis.call('ZADD', KEYS[b.x], string.format('%.0f', w.u), KEYS[i])
          redis.call('ZREMRANGEBYSCORE', KEYS[b.x], '-inf', string.format('%.0f', now - WINDOW_KEEP * 1000))
          redis.call('PEXPIRE', KEYS[b.x], math.ceil((w.u - now) / 1000) + WINDOW_KEEP)
        end
      end
    elseif news and w.n > 0 then
      w.n = 0
      wdirty[KEYS[i]] = true
    end
  end
end
local waits, rates = {}, {}
for _, req in ipairs(b.r) do
  local start = now
  local closed = 0
  for _, i in ipairs(req) do
    if m[i][1] == 2 then
      local w = window(i)
      if w.u > now and w.u > closed then closed = w.u end
    end
  end
  for _, i in ipairs(req) do
    local earliest
    if m[i][1] == 2 then
      earliest = now
    elseif m[i][1] == 1 then
      earliest = pace(i).t
    else
      local key = KEYS[i]
      if fixed[key] == nil then fixed[key] = tonumber(redis.call('GET', key) or '0') end
      earliest = fixed[key] - m[i][3]
    end
    if earliest > start then start = earliest end
  end
  local horizon, tightest = nil, nil
  for _, i in ipairs(req) do
    if m[i][1] == 1 then
      local h = math.max(HORIZON, 1000000 / pace(i).r)
      if horizon == nil or h < horizon then horizon, tightest = h, pace(i) end
    end
  end
  if closed > 0 then
    -- held: a window of its own is closed (CNKI said when to come back); nothing is booked
    waits[#waits + 1] = -math.max(1000, closed - now)
  elseif horizon ~= nil and start - now > horizon then
    -- held: the k-th held request of this call asks again k intervals later, so that they
    -- come back one by one, not all at once
    tightest.h = (tightest.h or 0) + 1
    local again = start - horizon - now + (tightest.h - 1) * 1000000 / tightest.r
    waits[#waits + 1] = -math.max(1000, math.floor(again))
  else
    for _, i in ipairs(req) do
      if m[i][1] == 1 then
        local s = pace(i)
        s.t = math.max(s.t, start) + 1000000 / s.r
      elseif m[i][1] == 0 then
        local key = KEYS[i]
        fixed[key] = math.max(fixed[key], start) + m[i][2]
      end
    end
    waits[#waits + 1] = math.floor(start - now)
  end
  local granted = {}
  for _, i in ipairs(req) do
    if m[i][1] == 1 then granted[#granted + 1] = tostring(pace(i).r) end
  end
  rates[#rates + 1] = granted
end
for key, value in pairs(fixed) do
  redis.call('SET', key, string.format('%.0f', value), 'PX', math.ceil((value - now) / 1000) + 1000)
end
local decreases = {}
for _, key in ipairs(first) do
  local s = paces[key]
  redis.call('HSET', key, 'r', string.format('%.17g', s.r), 'c', string.format('%.17g', s.c),
             'd', string.format('%.0f', s.d), 'k', string.format('%.17g', s.k),
             't', string.format('%.0f', s.t), 'n', string.format('%d', s.n))
  redis.call('PEXPIRE', key, math.max(m[s.i][3], math.ceil((s.t - now) / 1000) + 1000))
  decreases[#decreases + 1] = {s.i, s.d}
end
local states = {}
for _, key in ipairs(wfirst) do
  local w = windows[key]
  if wdirty[key] then
    redis.call('HSET', key, 'u', string.format('%.0f', w.u), 'a', string.format('%.0f', w.a),
               'n', string.format('%d', w.n), 'c', string.format('%d', w.c))
    redis.call('PEXPIRE', key, math.ceil((math.max(w.u, now) - now) / 1000) + WINDOW_KEEP)
  end
  states[#states + 1] = {w.i, w.a, w.u, w.n}
end
return {now, waits, decreases, changes, rates, states, closes}
""".replace("HORIZON", repr(HORIZON * 1_000_000)).replace(
    "WINDOW_KEEP", repr(int(WINDOW_KEEP * 1000))
)
