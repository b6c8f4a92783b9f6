"""One rate limit per site and one per proxy, shared by every worker through Redis.

Ten machines together must be as polite as one: the limit is not per worker but per site (and
per proxy) for the whole cluster, kept in the shared Redis.

How. Each limit is a key in Redis holding its *theoretical arrival time* (the generic cell rate
algorithm, a token bucket written as one number): a request may go at
``max(now, tat - (burst - 1) * interval)``, and going moves ``tat`` to
``max(tat, then) + interval``. A request is limited by its site's key and, when it goes through
a proxy, by that proxy's key too; it goes at the latest of the times they allow, and every key
it touched counts it. One Lua script (:data:`RESERVE_LUA`) does this atomically on the Redis
server's clock (``TIME``), so machines with skewed clocks still share one schedule. It answers
with the wait in microseconds; the request then sleeps that long on the event loop (never
blocking the reactor) and goes on. So in any window of ``T`` seconds at most
``rate * T + burst`` requests leave, whatever the number of workers, and there is no polling:
one reservation per request, always granted, in the order asked.

Requests waiting for a reservation are batched: one script call carries all that arrived while
the previous call was in flight, on a thread of its own (blocking Redis I/O stays off the
reactor thread). If Redis cannot be reached, requests wait and the call is retried with backoff:
a request never goes without its reservation.

Where it sits (``ORDER`` = 760 in ``DOWNLOADER_MIDDLEWARES``; ``process_request`` runs in
ascending order): after the session middleware (480, which may await a warm-up, itself limited
here as a request of its own), after the proxy middleware (620, which sets ``meta["proxy"]`` and
may await a purchase) so that the proxy is known, and after Scrapy's HttpProxyMiddleware (750);
nothing between here and the wire waits, so a reservation is spent when it was granted. A retry
or a redirect is a new request through the chain and takes a new reservation, as it should: the
site sees it.

Settings (defaults in :data:`DEFAULTS`; config.ini maps onto them in ``cnkispider.settings``):

- ``RATELIMIT_ENABLED`` (True): off, or both rates 0, -> ``NotConfigured``.
- ``RATELIMIT_RATE`` (0): requests per second to one site (``host:port``), all workers together;
  0 = no limit per site (``[crawl] rate_limit``).
- ``RATELIMIT_PROXY_RATE`` (0): requests per second through one proxy, all workers together;
  0 = no limit per proxy (``[proxy] rate_limit``).
- ``RATELIMIT_BURST`` (1): requests a key lets go at once after a quiet spell; 1 spaces them
  evenly (``[crawl] rate_burst``).
- ``RATELIMIT_KEY_PREFIX`` (``cnki:ratelimit``): keys ``{prefix}:site:{host:port}`` and
  ``{prefix}:proxy:{host:port}``, shared by every task on the Redis (politeness is per site,
  not per task); each expires a second after its schedule runs out.
- ``REDIS_URL``, ``CNKI_DATA_DIR``: the shared Redis (see :mod:`cnkispider.redisconn`).

Meta ``dont_ratelimit`` lets a request pass unlimited.

Stats (``ratelimit/...``): ``requests``, ``delayed`` (had to wait), ``wait_seconds`` (total),
``redis/calls``, ``redis/errors``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import NotConfigured
from scrapy.utils.asyncio import call_later
from scrapy.utils.asyncio import sleep as loop_sleep
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.defer import Deferred

from cnkispider import redisconn
from proxy.provider import proxy_key

if TYPE_CHECKING:
    import redis
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: Position in DOWNLOADER_MIDDLEWARES (see the module docstring for why).
ORDER = 760

DEFAULTS = {
    "RATELIMIT_ENABLED": True,
    "RATELIMIT_RATE": 0.0,
    "RATELIMIT_PROXY_RATE": 0.0,
    "RATELIMIT_BURST": 1,
    "RATELIMIT_KEY_PREFIX": "cnki:ratelimit",
}

#: Reservations carried by one script call at most (the rest wait for the next call).
MAX_PER_CALL = 500

#: KEYS: the limit keys of every request of the batch, request after request.
#: ARGV: per request its number of keys n, then n pairs (interval, tolerance) in microseconds.
#: Returns per request the microseconds it must wait (0: go now).
RESERVE_LUA = r"""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat, out = {}, {}
local k, a = 1, 1
while a <= #ARGV do
  local n = tonumber(ARGV[a])
  a = a + 1
  local start = now
  for j = 0, n - 1 do
    local key = KEYS[k + j]
    if tat[key] == nil then tat[key] = tonumber(redis.call('GET', key) or '0') end
    local earliest = tat[key] - tonumber(ARGV[a + 2 * j + 1])
    if earliest > start then start = earliest end
  end
  for j = 0, n - 1 do
    local key = KEYS[k + j]
    local base = tat[key]
    if base < start then base = start end
    tat[key] = base + tonumber(ARGV[a + 2 * j])
  end
  out[#out + 1] = math.floor(start - now)
  k = k + n
  a = a + 2 * n
end
for key, value in pairs(tat) do
  redis.call('SET', key, string.format('%.0f', value), 'PX', math.ceil((value - now) / 1000) + 1000)
end
return out
"""

#: One limit on one request: (Redis key, interval between requests, tolerance), in microseconds.
Limit = tuple[str, float, float]


def _setting(settings, name: str, getter: str = "get"):
    return getattr(settings, getter)(name, DEFAULTS[name])


class SharedRateLimit:
    """The limits of a cluster in one Redis: which keys a request counts against, and the
    blocking call that reserves send times for a batch of requests."""

    def __init__(
        self,
        client_factory: Callable[[], redis.Redis],
        *,
        site_rate: float = 0.0,
        proxy_rate: float = 0.0,
        burst: int = 1,
        prefix: str = DEFAULTS["RATELIMIT_KEY_PREFIX"],
    ):
        if site_rate < 0 or proxy_rate < 0:
            raise ValueError("rate limits must be 0 (none) or positive")
        if burst < 1:
            raise ValueError(f"RATELIMIT_BURST must be at least 1, got {burst}")
        self.site_rate, self.proxy_rate, self.burst = site_rate, proxy_rate, burst
        self.prefix = prefix
        self._client_factory = client_factory
        self._client: redis.Redis | None = None
        self._script: Any = None

    @property
    def active(self) -> bool:
        return self.site_rate > 0 or self.proxy_rate > 0

    def _limit(self, kind: str, name: str, rate: float) -> Limit:
        interval = 1_000_000 / rate
        return f"{self.prefix}:{kind}:{name}", interval, (self.burst - 1) * interval

    def limits(self, request: Request) -> list[Limit]:
        """The limits ``request`` counts against (none for a non-HTTP URL or ``dont_ratelimit``)."""
        if request.meta.get("dont_ratelimit"):
            return []
        parsed = urlparse_cached(request)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            return []
        out = []
        if self.site_rate > 0:
            site = parsed.hostname.lower() + (f":{parsed.port}" if parsed.port else "")
            out.append(self._limit("site", site, self.site_rate))
        proxy = proxy_key(request.meta.get("proxy"))
        if self.proxy_rate > 0 and proxy:
            out.append(self._limit("proxy", proxy, self.proxy_rate))
        return out

    def reserve(self, batch: list[list[Limit]]) -> list[float]:
        """Send times for a batch of requests, in order: the seconds each must wait. Blocking:
        one script call (the client is made on first use, on the calling thread)."""
        if self._client is None:
            self._client = self._client_factory()
            self._script = self._client.register_script(RESERVE_LUA)
        keys: list[str] = []
        args: list[Any] = []
        for limits in batch:
            args.append(len(limits))
            for key, interval, tolerance in limits:
                keys.append(key)
                args += [repr(interval), repr(tolerance)]
        waits = self._script(keys=keys, args=args)
        return [w / 1_000_000 for w in waits]

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class RateLimitMiddleware:
    """Holds each request until the shared limits of its site and its proxy let it go."""

    def __init__(
        self,
        limiter: SharedRateLimit,
        *,
        stats: Any = None,
        io: Any = None,
        sleep: Callable[[float], Awaitable[None]] = loop_sleep,
    ):
        self.limiter = limiter
        self.stats = stats
        self.sleep = sleep
        self._io = io
        self._pending: list[tuple[list[Limit], Deferred]] = []
        self._busy = False
        self._failures = 0
        self._retry_at = 0.0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RateLimitMiddleware:
        s = crawler.settings
        if not _setting(s, "RATELIMIT_ENABLED", "getbool"):
            raise NotConfigured
        url = s.get("REDIS_URL") or ""
        data_dir = s.get("CNKI_DATA_DIR") or "data"
        limiter = SharedRateLimit(
            lambda: redisconn.connect(url, data_dir),
            site_rate=_setting(s, "RATELIMIT_RATE", "getfloat"),
            proxy_rate=_setting(s, "RATELIMIT_PROXY_RATE", "getfloat"),
            burst=_setting(s, "RATELIMIT_BURST", "getint"),
            prefix=_setting(s, "RATELIMIT_KEY_PREFIX"),
        )
        if not limiter.active:
            raise NotConfigured
        middleware = cls(limiter, stats=crawler.stats)
        from scrapy import signals

        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        logger.info(
            "Shared rate limit (all workers together): %(site)s requests/s per site, "
            "%(proxy)s per proxy, burst %(burst)d; keys %(prefix)s:*",
            {
                "site": limiter.site_rate or "no limit",
                "proxy": limiter.proxy_rate or "no limit",
                "burst": limiter.burst,
                "prefix": limiter.prefix,
            },
        )
        return middleware

    def _inc_stat(self, key: str, count: float = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(f"ratelimit/{key}", count)

    async def process_request(self, request: Request, spider: Spider | None = None) -> None:
        limits = self.limiter.limits(request)
        if not limits:
            return
        waiter: Deferred = Deferred()
        self._pending.append((limits, waiter))
        self._send()
        wait = await maybe_deferred_to_future(waiter)
        self._inc_stat("requests")
        if wait > 0:
            self._inc_stat("delayed")
            self._inc_stat("wait_seconds", wait)
            await self.sleep(wait)

    # -- the Redis calls: one at a time, each carrying every request waiting -------------------

    def _send(self) -> None:
        if self._busy or not self._pending or time.monotonic() < self._retry_at:
            return
        if self._io is None:
            from cnkispider.scheduling.scheduler import ThreadIO

            self._io = ThreadIO()
        batch, self._pending = self._pending[:MAX_PER_CALL], self._pending[MAX_PER_CALL:]
        self._busy = True
        d = self._io.run(self.limiter.reserve, [limits for limits, _ in batch])
        d.addCallbacks(self._reserved, self._failed, callbackArgs=(batch,), errbackArgs=(batch,))

    def _reserved(self, waits: list[float], batch: list) -> None:
        self._busy = False
        self._failures = 0
        self._inc_stat("redis/calls")
        for (_, waiter), wait in zip(batch, waits, strict=True):
            waiter.callback(wait)
        self._send()

    def _failed(self, failure: Any, batch: list) -> None:
        self._busy = False
        self._failures += 1
        self._inc_stat("redis/errors")
        self._pending = batch + self._pending  # same order, nobody goes unreserved
        delay = min(5.0, 0.1 * 2 ** min(self._failures, 6))
        self._retry_at = time.monotonic() + delay
        logger.error(
            "Rate limit reservation in Redis failed (%(n)d in a row), %(waiting)d requests "
            "wait; retrying in %(d).1f s: %(e)s",
            {"n": self._failures, "waiting": len(self._pending), "d": delay,
             "e": failure.getErrorMessage()},
        )
        call_later(delay, self._send)

    def spider_closed(self, spider: Spider | None = None) -> None:
        if self._io is not None:
            self._io.run(self.limiter.close)
            self._io.shutdown()
