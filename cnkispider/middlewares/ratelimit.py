"""One rate limit per site and per proxy, and one learned pace per CNKI session and per IP,
shared by every worker through Redis.

Ten machines together must be as polite as one: the limits are not per worker but per site,
per proxy, per session and per IP for the whole cluster, kept in the shared Redis.

Fixed limits. Each is a key in Redis holding its *theoretical arrival time* (the generic cell
rate algorithm, a token bucket written as one number): a request may go at
``max(now, tat - (burst - 1) * interval)``, and going moves ``tat`` to
``max(tat, then) + interval``. A request is limited by its site's key and, when it goes through
a proxy, by that proxy's key too; it goes at the latest of the times they allow, and every key
it touched counts it.

Paces (``PACE_*``, for CNKI pages: requests with meta ``cnki_kind``). CNKI in 2026 challenges a
session or an address that goes faster than a threshold it does not publish (PROTOCOL.md, 2026
evidence). So each CNKI session and each IP (the proxy in use, or ``direct``) has a pace of its
own, learned by AIMD (:class:`Pace` is the rule, on an injected clock): it starts polite
(``PACE_START``), grows by ``PACE_STEP`` requests/s for every second of clean answers, and on a
*challenge* (``refusals.kind_of(reason) == "challenge"``: verify, captcha, the soft block) it
halves (``PACE_DECREASE``), remembers the pace that was too fast (the *ceiling*: the pace the
challenged request was granted at, less what the site's window, ``PACE_WINDOW``, lagged behind
a growing pace), and goes quiet for a cool-down (``PACE_COOLDOWN``, doubled when the next
challenge comes before any clean answer, up to ``PACE_COOLDOWN_MAX``): an address CNKI has
flagged stays flagged while it keeps asking. After
that it grows fast again up to ``PACE_CEILING`` x the ceiling, then covers the rest of the way
in ``PACE_PROBE_SECONDS`` (the threshold may have moved; probing it slowly keeps challenges
rare: each costs a cool-down). A pace is a GCRA key like the fixed ones, with an even spacing
of ``1 / pace`` (no burst), never above the site's (and the proxy's) fixed limit, and booked at
most a second (or one interval) ahead (:data:`HORIZON`): a request beyond it is *held* and asks
again, so that a change of pace acts on the next second's requests, not on a queue booked at
the old one. An IP's pace lives ``PACE_TTL`` seconds after its last use, so a
restarted crawler starts at the pace it had learned, not from scratch; a session's lives an
hour (a session lives ten minutes at most).

Invariants, kept by one Lua script (:data:`RESERVE_LUA`) that does everything atomically on the
Redis server's clock (``TIME``), so that machines with skewed clocks share one schedule:

- a pace changes only through an answer to a request *granted after its last decrease*: the
  dozen answers already in flight when CNKI said no halve it once, not a dozen times, and the
  clean answers of those requests do not grow it back during the cool-down;
- a cool-down starts after the last send time already granted (``max(tat, now)``), so the
  address is quiet for the whole cool-down even though those sends were promised earlier;
- each process learns a key's last decrease from every script call that touches the key; a
  request granted before it is not sent but takes a new reservation (*revoked*).

Sending on time. A request sleeps its wait on the event loop (never blocking the reactor) and
then goes, unless it woke more than ``RATELIMIT_LATE`` seconds after its time: then it takes a
new reservation instead. A late reactor fires many timers at once, and the requests it woke
would leave together, a burst the schedule never granted (this is what once got two crawlers
banned by a site whose limit they respected on paper, under a busy machine). So on the wire, in
any window of ``T`` seconds at most ``rate * (T + late) + burst`` requests leave for a key,
whatever the number of workers. The allowed lateness doubles with each new reservation of the
same request, so an overloaded machine still makes progress.

Batching. Requests waiting for a reservation, and answers waiting to be reported, are batched:
one script call carries all that arrived while the previous call was in flight, on a thread of
its own (blocking Redis I/O stays off the reactor thread; the loop is
:class:`cnkispider.offload.RedisCalls`, shared with the scheduler). If Redis cannot be reached,
requests wait and the call is retried with backoff: a request never goes without its reservation.

Where it sits (``ORDER`` = 630 in ``DOWNLOADER_MIDDLEWARES``; ``process_request`` runs in
ascending order, ``process_response`` in descending order): after the session middleware (480,
which may await a warm-up, itself limited here as a request of its own) and the proxy
middleware (620, which sets ``meta["proxy"]``), so that both are known; what runs between here
and the wire (HttpCompression 640, Cookies 700, HttpProxy 750) never waits, so a reservation is
spent when it was granted. On the way back it sees the answer after HttpCompression (640) has
decompressed it and before the proxy (620) and retry (610) middlewares act on a refusal. A retry
or a redirect is a new request through the chain and takes a new reservation: the site sees it.

Settings (defaults in :mod:`cnkispider.default_settings`; config.ini maps onto them in
``cnkispider.settings``):

- ``RATELIMIT_ENABLED``: off -> ``NotConfigured`` (paces too); also off while both
  rates are 0, ``PACE_ENABLED`` is False and no verified session can be used
  (``SESSIONS_MODE`` plain or ``SESSIONS_PACE_MAX`` 0).
- ``RATELIMIT_RATE``: requests per second to one site (``host:port``), all workers together;
  0 = no limit per site (``[crawl] rate_limit``).
- ``RATELIMIT_PROXY_RATE``: requests per second through one proxy, all workers together;
  0 = no limit per proxy (``[proxy] rate_limit``).
- ``RATELIMIT_BURST``: requests a fixed key lets go at once after a quiet spell; 1 spaces
  them evenly (``[crawl] rate_burst``).
- ``RATELIMIT_LATE``: seconds a request may wake after its time and still go.
- ``RATELIMIT_KEY_PREFIX``: keys ``{prefix}:site:{host:port}``,
  ``{prefix}:proxy:{host:port}``, ``{prefix}:pace:{site}:ip:{proxy host:port or direct}`` and
  ``{prefix}:pace:{site}:session:{id}``, shared by every task on the Redis (politeness is per
  site, not per task); a fixed key expires a second after its schedule runs out.
- ``PACE_ENABLED``: learn a pace per session and per IP (``[crawl] pace``).
- ``PACE_START``: requests/s of a new session or IP (``[crawl] pace_start``).
- ``PACE_STEP``: requests/s gained per second of clean answers (``[crawl] pace_step``).
- ``PACE_DECREASE``: factor applied on a challenge.
- ``PACE_CEILING``: share of the last challenged pace where fast growth stops.
- ``PACE_PROBE_SECONDS``: clean seconds to grow from that share back to the ceiling.
- ``PACE_MIN``: the pace never goes below this.
- ``PACE_MAX``: the pace never goes above this; 0 = the site's fixed limit
  (``RATELIMIT_RATE``), or none when that is 0 too (``[crawl] pace_max``).
- ``PACE_COOLDOWN`` / ``PACE_COOLDOWN_MAX``: seconds a challenged session or IP stays
  quiet (``[crawl] pace_cooldown``).
- ``PACE_WINDOW``: seconds over which the site is assumed to count a pace; a pace
  challenged while it grew was too fast half a window before, and that is the ceiling kept.
- ``PACE_TTL``: seconds an IP's learned pace is kept after its last use.
- ``SESSIONS_PACE_MAX``: requests/s a session a person verified (meta ``cnki_verified``) never
  exceeds, all workers together, paces on or off (key ``{prefix}:verified:{id}``); 0 = none
  (``[cnki] session_pace``).
- ``PACE_DIRECT_NAME``: the IP name of requests without a proxy; every worker on
  the Redis shares it (right when they leave through one address; give each machine its own
  name when they do not: ``[proxy] direct_name``).
- ``REDIS_URL``, ``CNKI_DATA_DIR``: the shared Redis (see :mod:`cnkispider.redisconn`).

Meta ``dont_ratelimit`` lets a request pass unlimited.

Stats (``ratelimit/...``): ``requests``, ``delayed`` (had to wait), ``wait_seconds`` (total),
``held`` (asked again: paces booked a second ahead), ``late`` (woke late, reserved again),
``revoked`` (granted before a decrease, reserved again),
``pace/clean``, ``pace/challenged``, ``pace/decreased``, ``redis/calls``, ``redis/errors``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from scrapy.exceptions import NotConfigured
from scrapy.utils.asyncio import sleep as loop_sleep
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.defer import Deferred

from cnkispider import default_settings, redisconn
from cnkispider.cnki import refusals
from cnkispider.middlewares import Recent, refusal_of
from cnkispider.offload import RedisCalls
from proxy.provider import proxy_key

if TYPE_CHECKING:
    import redis
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

#: Position in DOWNLOADER_MIDDLEWARES (see the module docstring for why).
ORDER = 630

#: Reservations carried by one script call at most (the rest wait for the next call).
MAX_PER_CALL = 500

#: A session's pace outlives the session (10 minutes at most) by a margin; then it is garbage.
SESSION_PACE_TTL = 3600.0

#: Seconds ahead a paced request may be granted its send time (see :meth:`Pace.horizon`).
HORIZON = 1.0

#: Meta key of a request's pace reservation, read back by process_response.
_META = "_ratelimit_pace"


# -- the AIMD rule -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PaceRule:
    """The parameters of AIMD (see the module docstring); the same for every pace."""

    start: float = default_settings.PACE_START
    step: float = default_settings.PACE_STEP
    decrease: float = default_settings.PACE_DECREASE
    ceiling: float = default_settings.PACE_CEILING
    probe_seconds: float = default_settings.PACE_PROBE_SECONDS
    min_rate: float = default_settings.PACE_MIN
    cooldown: float = default_settings.PACE_COOLDOWN
    cooldown_max: float = default_settings.PACE_COOLDOWN_MAX
    window: float = default_settings.PACE_WINDOW

    def __post_init__(self) -> None:
        if not 0 < self.min_rate <= self.start:
            raise ValueError("PACE_MIN must be positive and at most PACE_START")
        if self.step <= 0 or self.probe_seconds <= 0:
            raise ValueError("PACE_STEP and PACE_PROBE_SECONDS must be positive")
        if not 0 < self.decrease < 1:
            raise ValueError("PACE_DECREASE must be between 0 and 1")
        if not 0 < self.ceiling <= 1:
            raise ValueError("PACE_CEILING must be in (0, 1]")
        if self.window < 0:
            raise ValueError("PACE_WINDOW must be at least 0")
        if self.cooldown < 0 or self.cooldown_max < self.cooldown:
            raise ValueError("PACE_COOLDOWN must be at least 0 and at most PACE_COOLDOWN_MAX")

    def as_json(self) -> dict[str, float]:
        return dataclasses.asdict(self)


class Pace:
    """One pace (a session's or an IP's) on an injected clock: the rule :data:`RESERVE_LUA`
    applies to the shared state in Redis, written plainly so it can be read and tested.

    State: ``rate`` (requests/s), ``ceiling`` (the rate last challenged at, 0 = never),
    ``decreased_at`` (clock time of the last decrease, None = never), ``cooldown`` (seconds of
    the last quiet spell) and ``tat`` (when the next request may go, GCRA with no burst).
    """

    def __init__(
        self, rule: PaceRule, max_rate: float = 0.0, clock: Callable[[], float] = time.monotonic
    ):
        self.rule, self.max_rate, self.clock = rule, max_rate, clock
        self.rate = self._capped(rule.start)
        self.ceiling = 0.0
        self.decreased_at: float | None = None
        self.cooldown = 0.0
        self.clean_since = 0  # clean answers since the last decrease
        self.tat = 0.0

    def _capped(self, rate: float) -> float:
        return min(rate, self.max_rate) if self.max_rate > 0 else rate

    def horizon(self) -> float:
        """How far ahead a send time may be granted: no further than ``HORIZON`` or one
        interval, so that a pace's changes act on the next second's requests, not on those of
        a queue booked far ahead at the old pace."""
        return max(HORIZON, 1.0 / self.rate)

    def reserve(self) -> tuple[float, float | None]:
        """(granted at, send at) for one request; its answer reports ``granted at``. Send at
        is None when the pace is booked beyond its horizon: ask again at :meth:`free_at`."""
        now = self.clock()
        send = max(now, self.tat)
        if send - now > self.horizon() + 1e-9:  # (the float error of asking at free_at)
            return now, None
        self.tat = send + 1.0 / self.rate
        return now, send

    def free_at(self) -> float:
        return self.tat - self.horizon()

    def _stale(self, granted_at: float) -> bool:
        return self.decreased_at is not None and granted_at < self.decreased_at

    def _growth(self, rate: float | None = None) -> float:
        """Requests/s gained per second of clean answers at ``rate`` (this pace's): ``step`` up
        to ``ceiling`` x the last challenged pace, then the rest of the way in
        ``probe_seconds``."""
        rate = self.rate if rate is None else rate
        band = self.ceiling * self.rule.ceiling
        if self.ceiling and rate >= band:
            return (self.ceiling - band) / self.rule.probe_seconds
        return self.rule.step

    def clean(self, granted_at: float) -> None:
        """A usable answer: grow by ``growth / rate`` (so by ``growth`` per second at this
        pace), never past the band in one step."""
        if self._stale(granted_at):
            return
        self.clean_since += 1
        grown = self.rate + self._growth() / self.rate
        band = self.ceiling * self.rule.ceiling
        if self.ceiling and self.rate < band:
            grown = min(grown, band)
        self.rate = self._capped(grown)

    def challenged(self, granted_at: float, granted_rate: float) -> bool:
        """A challenge to a request granted at ``granted_rate``: remember the pace that was too
        fast (the *ceiling*), halve it, go quiet. False when the request was granted before the
        last decrease (already answered for).

        The site counts over a window (``window`` seconds): while the pace grew, what it
        counted was the pace of half a window earlier, so that is the ceiling (never less than
        half the granted pace)."""
        if self._stale(granted_at):
            return False
        now = self.clock()
        if self.decreased_at is not None and not self.clean_since:
            # not one clean answer since the last cool-down: it was too short
            self.cooldown = min(self.rule.cooldown_max, 2 * self.cooldown)
        else:
            self.cooldown = self.rule.cooldown
        lag = self._growth(granted_rate) * self.rule.window / 2
        self.ceiling = max(self.rule.min_rate, granted_rate / 2, granted_rate - lag)
        self.rate = max(self.rule.min_rate, self.ceiling * self.rule.decrease)
        self.decreased_at = now
        self.clean_since = 0
        self.tat = max(self.tat, now) + self.cooldown
        return True


# -- the shared state in Redis -----------------------------------------------------------------

#: ARGV[1]: a JSON batch:
#:   ``p``: the :class:`PaceRule` (``as_json``);
#:   ``m``: per KEYS index, ``[0, interval, tolerance]`` (a fixed limit, microseconds) or
#:          ``[1, max rate (0 = none), ttl ms]`` (a pace);
#:   ``f``: answers, ``[challenge 0|1, granted at (µs, Redis clock), key index, pace it was
#:          granted at, key index, pace, ...]``;
#:   ``r``: reservations, each a list of key indexes.
#: Returns ``{now, waits, decreases, changes, rates}``: now (µs), per reservation the µs to wait (a
#: negative number: not booked, its paces are booked beyond their horizon; ask again then), per
#: pace key loaded ``[index, decreased at µs]``, per decrease ``[index, old rate x1000,
#: new rate x1000, cool-down s]``, per reservation the paces it was granted at (strings: a
#: script's numbers come back as integers). Pace state: a hash ``r c d k t n`` (rate, ceiling,
#: decreased at, cool-down, tat, clean answers since); times in µs. Mirrors :class:`Pace` line by line.
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
      if e[1] == 1 then
        if s.d >= 0 and s.n == 0 then
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
local waits, rates = {}, {}
for _, req in ipairs(b.r) do
  local start = now
  for _, i in ipairs(req) do
    local earliest
    if m[i][1] == 1 then
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
  if horizon ~= nil and start - now > horizon then
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
      else
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
return {now, waits, decreases, changes, rates}
""".replace("HORIZON", repr(HORIZON * 1_000_000))


class Limit(NamedTuple):
    """One limit on one request: a fixed rate (``interval``, ``tolerance`` in µs) or a pace
    (``max_rate`` requests/s, 0 = none, and the key's ``ttl`` in seconds)."""

    key: str
    pace: bool
    interval: float = 0.0
    tolerance: float = 0.0
    max_rate: float = 0.0
    ttl: float = 0.0


class Answer(NamedTuple):
    """A CNKI answer to report: a challenge or a clean page, for the paces of its request."""

    challenge: bool
    granted: int  # µs, Redis clock
    limits: tuple[Limit, ...]  # the request's paces
    rates: tuple[float, ...]  # the pace of each when the request was granted


class Reply(NamedTuple):
    """What one script call answered."""

    now: int  # µs, Redis clock
    waits: list[float]  # seconds, per reservation
    decreased_at: dict[str, int]  # µs, per pace key touched (-1: never)
    decreases: list[tuple[str, float, float, float]]  # key, old rate, new rate, cool-down s
    returned: float  # time.monotonic() when the call returned, on the calling thread
    rates: list[tuple[float, ...]]  # per reservation, the paces of its pace keys


class SharedRateLimit:
    """The limits and paces of a cluster in one Redis: which keys a request counts against, and
    the blocking call that reports answers and reserves send times for a batch of requests."""

    def __init__(
        self,
        client_factory: Callable[[], redis.Redis],
        *,
        site_rate: float = 0.0,
        proxy_rate: float = 0.0,
        burst: int = 1,
        prefix: str = default_settings.RATELIMIT_KEY_PREFIX,
        pace: PaceRule | None = None,
        pace_max: float = 0.0,
        pace_ttl: float = default_settings.PACE_TTL,
        direct_name: str = default_settings.PACE_DIRECT_NAME,
        verified_rate: float = 0.0,
    ):
        if site_rate < 0 or proxy_rate < 0 or pace_max < 0:
            raise ValueError("rate limits must be 0 (none) or positive")
        if burst < 1:
            raise ValueError(f"RATELIMIT_BURST must be at least 1, got {burst}")
        self.site_rate, self.proxy_rate, self.burst = site_rate, proxy_rate, burst
        self.prefix = prefix
        self.pace = pace
        # "bounded by the site's limit": a pace that outgrew what may be sent would be a lie
        self.pace_max = pace_max or site_rate
        self.pace_ttl = pace_ttl
        self.direct_name = direct_name
        # A session a person passed is checked again past a pace CNKI does not publish, and a
        # check costs a person's slider, not a cool-down: it never goes faster than this
        # (requests/s, every worker together), whether or not paces are learned.
        self.verified_rate = verified_rate
        self._client_factory = client_factory
        self._client: redis.Redis | None = None
        self._script: Any = None

    @property
    def active(self) -> bool:
        return (
            self.site_rate > 0
            or self.proxy_rate > 0
            or self.pace is not None
            or self.verified_rate > 0
        )

    def _limit(self, kind: str, name: str, rate: float) -> Limit:
        interval = 1_000_000 / rate
        return Limit(f"{self.prefix}:{kind}:{name}", False, interval, (self.burst - 1) * interval)

    def limits(self, request: Request) -> list[Limit]:
        """The limits ``request`` counts against (none for a non-HTTP URL or ``dont_ratelimit``)."""
        if request.meta.get("dont_ratelimit"):
            return []
        parsed = urlparse_cached(request)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            return []
        out = []
        site = parsed.hostname.lower() + (f":{parsed.port}" if parsed.port else "")
        if self.site_rate > 0:
            out.append(self._limit("site", site, self.site_rate))
        proxy = proxy_key(request.meta.get("proxy"))
        if self.proxy_rate > 0 and proxy:
            out.append(self._limit("proxy", proxy, self.proxy_rate))
        verified = request.meta.get("cnki_verified") and request.meta.get("cnki_session")
        if verified and self.verified_rate > 0:
            interval = 1_000_000 / self.verified_rate
            out.append(Limit(f"{self.prefix}:verified:{verified}", False, interval, 0.0))
        if self.pace is not None and request.meta.get("cnki_kind"):
            base = f"{self.prefix}:pace:{site}"
            ip_max = self.pace_max
            if proxy and self.proxy_rate > 0:
                ip_max = min(ip_max, self.proxy_rate) if ip_max else self.proxy_rate
            out.append(
                Limit(
                    f"{base}:ip:{proxy or self.direct_name}",
                    True,
                    max_rate=ip_max,
                    ttl=self.pace_ttl,
                )
            )
            session = request.meta.get("cnki_session")
            if session:
                out.append(
                    Limit(f"{base}:session:{session}", True, max_rate=ip_max, ttl=SESSION_PACE_TTL)
                )
        return out

    def call(self, batch: list[list[Limit]], answers: Iterable[Answer] = ()) -> Reply:
        """Report ``answers``, then reserve send times for ``batch``, in order. Blocking: one
        script call (the client is made on first use, on the calling thread)."""
        if self._client is None:
            self._client = self._client_factory()
            self._script = self._client.register_script(RESERVE_LUA)
        keys: list[str] = []
        meta: list[list[float]] = []
        index: dict[str, int] = {}

        def key_index(limit: Limit) -> int:
            # Each key once in KEYS: the script keeps state per key name anyway.
            if limit.key not in index:
                keys.append(limit.key)
                if limit.pace:
                    meta.append([1, limit.max_rate, int(limit.ttl * 1000)])
                else:
                    meta.append([0, limit.interval, limit.tolerance])
                index[limit.key] = len(keys)  # Lua counts from 1
            return index[limit.key]

        requests = [[key_index(limit) for limit in limits] for limits in batch]
        feedback = []
        for answer in answers:
            event: list[Any] = [int(answer.challenge), answer.granted]
            for limit, rate in zip(answer.limits, answer.rates, strict=True):
                event += [key_index(limit), rate]
            feedback.append(event)
        document = {
            "p": self.pace.as_json() if self.pace else PaceRule().as_json(),
            "m": meta,
            "f": feedback,
            "r": requests,
        }
        now, waits, decreases, changes, rates = self._script(keys=keys, args=[json.dumps(document)])
        returned = time.monotonic()
        return Reply(
            now=now,
            waits=[w / 1_000_000 for w in waits],
            decreased_at={keys[i - 1]: d for i, d in decreases},
            decreases=[
                (keys[i - 1], old / 1000, new / 1000, cool) for i, old, new, cool in changes
            ],
            returned=returned,
            rates=[tuple(float(r) for r in granted) for granted in rates],
        )

    def reserve(self, batch: list[list[Limit]]) -> list[float]:
        """The seconds each request of ``batch`` must wait (see :meth:`call`)."""
        return self.call(batch).waits

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class _Waiting(NamedTuple):
    limits: list[Limit]
    waiter: Deferred


class _Call(NamedTuple):
    """One script call: the requests it reserves for and the answers it reports."""

    waiting: list[_Waiting]
    limits: list[list[Limit]]
    answers: list[Answer]


class RateLimitMiddleware:
    """Holds each request until the shared limits and paces of its site, proxy, session and IP
    let it go, and tells the paces how CNKI answered."""

    def __init__(
        self,
        limiter: SharedRateLimit,
        *,
        stats: Any = None,
        io: Any = None,
        sleep: Callable[[float], Awaitable[None]] = loop_sleep,
        late: float = default_settings.RATELIMIT_LATE,
        classify: Callable[..., str | None] | None = refusals.classify,
    ):
        self.limiter = limiter
        self.stats = stats
        self.sleep = sleep
        self.late = late
        self.classify = classify
        self._pending: list[_Waiting] = []
        self._answers: list[Answer] = []
        # one call to Redis in flight at a time, with backoff (see cnkispider.offload)
        self._calls = RedisCalls(
            self._next_call, self._call, self._reserved, self._failed, io=io, owner="Rate limit"
        )
        # the last decrease of each pace key this process has heard of (Redis clock, µs)
        self._decreased_at: Recent = Recent(maxsize=8192)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RateLimitMiddleware:
        s = crawler.settings
        if not s.getbool("RATELIMIT_ENABLED"):
            raise NotConfigured
        pace = None
        if s.getbool("PACE_ENABLED"):
            pace = PaceRule(
                start=s.getfloat("PACE_START"),
                step=s.getfloat("PACE_STEP"),
                decrease=s.getfloat("PACE_DECREASE"),
                ceiling=s.getfloat("PACE_CEILING"),
                probe_seconds=s.getfloat("PACE_PROBE_SECONDS"),
                min_rate=s.getfloat("PACE_MIN"),
                cooldown=s.getfloat("PACE_COOLDOWN"),
                cooldown_max=s.getfloat("PACE_COOLDOWN_MAX"),
                window=s.getfloat("PACE_WINDOW"),
            )
        url = s.get("REDIS_URL")
        data_dir = s.get("CNKI_DATA_DIR")
        limiter = SharedRateLimit(
            lambda: redisconn.connect(url, data_dir),
            site_rate=s.getfloat("RATELIMIT_RATE"),
            proxy_rate=s.getfloat("RATELIMIT_PROXY_RATE"),
            burst=s.getint("RATELIMIT_BURST"),
            prefix=s.get("RATELIMIT_KEY_PREFIX"),
            pace=pace,
            pace_max=s.getfloat("PACE_MAX"),
            pace_ttl=s.getfloat("PACE_TTL"),
            direct_name=s.get("PACE_DIRECT_NAME"),
            # sessions a person passed are used unless [cnki] sessions = plain
            verified_rate=0.0
            if s.get("SESSIONS_MODE") == "plain"
            else s.getfloat("SESSIONS_PACE_MAX"),
        )
        if not limiter.active:
            raise NotConfigured
        middleware = cls(limiter, stats=crawler.stats, late=s.getfloat("RATELIMIT_LATE"))
        middleware.crawler = crawler
        from scrapy import signals

        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        logger.info(
            "Shared rate limit (all workers together): %(site)s requests/s per site, "
            "%(proxy)s per proxy, burst %(burst)d; pace per CNKI session and IP: %(pace)s; "
            "keys %(prefix)s:*",
            {
                "site": limiter.site_rate or "no limit",
                "proxy": limiter.proxy_rate or "no limit",
                "burst": limiter.burst,
                "pace": (
                    f"from {pace.start} requests/s, +{pace.step} per clean second, "
                    f"x{pace.decrease} on a challenge, up to {limiter.pace_max or 'no limit'}"
                )
                if pace
                else "off",
                "prefix": limiter.prefix,
            },
        )
        return middleware

    def _inc_stat(self, key: str, count: float = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(f"ratelimit/{key}", count)

    async def process_request(self, request: Request, spider: Spider | None = None) -> None:
        request.meta.pop(_META, None)  # a redirect or retry copies the old request's meta
        limits = self.limiter.limits(request)
        if not limits:
            return
        paced = tuple(limit for limit in limits if limit.pace)
        attempt = 0
        while True:
            waiter: Deferred = Deferred()
            self._pending.append(_Waiting(limits, waiter))
            self._send()
            wait, due, granted, rates = await maybe_deferred_to_future(waiter)
            if wait < 0:
                # Its paces are booked a second ahead already: ask again when they are not.
                self._inc_stat("held")
                await self.sleep(-wait)
                continue
            if wait > 0:
                await self.sleep(wait)
            if any(self._decreased_at.get(limit.key, -1) > granted for limit in paced):
                # A pace this slot was granted under has since been halved by a challenge.
                self._inc_stat("revoked")
            elif time.monotonic() - due > self.late * 2**attempt:
                # Woken late: the slot has passed, and so may have the slots of requests
                # woken with this one; going now would send them together.
                self._inc_stat("late")
            else:
                break
            attempt += 1
        if (
            wait > 0
            and request.meta.get("cnki_verified")
            and request.meta.get("cnki_kind") == "detail"
        ):
            # Its session a person passed may have been checked again while it waited: a detail
            # link sent in it now would only be refused (one of the dozens queued for it); the
            # spider lists its page again (a list page goes: its refusal moves its round on)
            from cnkispider.exceptions import SessionLost
            from cnkispider.sessions.runtime import VerifiedSessions

            runtime = VerifiedSessions.of(getattr(self, "crawler", None))
            session_id = request.meta.get("cnki_session")
            if runtime is not None and runtime.is_dead(session_id):
                self._inc_stat("verified/dead_unsent")
                raise SessionLost(session_id, "checked again while this request waited")
        self._inc_stat("requests")
        if wait > 0:
            self._inc_stat("delayed")
            self._inc_stat("wait_seconds", wait)
        if paced:
            request.meta[_META] = (granted, paced, rates)

    def process_response(self, request: Request, response: Response, spider: Spider | None = None):
        reserved = request.meta.pop(_META, None)
        if reserved is not None:
            kind = refusals.kind_of(refusal_of(self.classify, request, response))
            if kind in (None, refusals.CHALLENGE):
                challenge = kind == refusals.CHALLENGE
                self._inc_stat("pace/challenged" if challenge else "pace/clean")
                self._answers.append(Answer(challenge, *reserved))
                self._send()
        return response

    def process_exception(
        self, request: Request, exception: BaseException, spider: Spider | None = None
    ):
        request.meta.pop(_META, None)  # a fault says nothing about the pace

    # -- the Redis calls: one at a time, each carrying every request and answer waiting ------

    def _send(self) -> None:
        self._calls.kick()

    def _next_call(self) -> _Call | None:
        if not (self._pending or self._answers):
            return None
        batch, self._pending = self._pending[:MAX_PER_CALL], self._pending[MAX_PER_CALL:]
        answers, self._answers = self._answers, []
        return _Call(batch, [w.limits for w in batch], answers)

    def _call(self, call: _Call) -> Reply:
        return self.limiter.call(call.limits, call.answers)  # on the I/O thread

    def _reserved(self, reply: Reply, call: _Call) -> None:
        self._inc_stat("redis/calls")
        for key, at in reply.decreased_at.items():
            if at > self._decreased_at.get(key, -1):
                self._decreased_at[key] = at
        for key, old, new, cool in reply.decreases:
            self._inc_stat("pace/decreased")
            logger.warning(
                "CNKI challenged %(key)s at %(old).2f requests/s: pace %(new).2f, quiet for %(cool)d s",
                {
                    "key": key.removeprefix(self.limiter.prefix + ":"),
                    "old": old,
                    "new": new,
                    "cool": cool,
                },
            )
        for waiting, wait, rates in zip(call.waiting, reply.waits, reply.rates, strict=True):
            waiting.waiter.callback((wait, reply.returned + wait, reply.now, rates))
        self._send()

    def _failed(self, failure: Any, call: _Call, delay: float) -> None:
        self._inc_stat("redis/errors")
        self._pending = call.waiting + self._pending  # same order, nobody goes unreserved
        self._answers = call.answers + self._answers
        logger.error(
            "Rate limit reservation in Redis failed (%(n)d in a row), %(waiting)d requests "
            "wait; retrying in %(d).1f s: %(e)s",
            {
                "n": self._calls.failures,
                "waiting": len(self._pending),
                "d": delay,
                "e": failure.getErrorMessage(),
            },
        )

    def spider_closed(self, spider: Spider | None = None) -> None:
        io = self._calls.io
        if io is not None:
            io.run(self.limiter.close)
            io.shutdown()
