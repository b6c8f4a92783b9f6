"""Holds each request until the shared limits and paces of its site, proxy, session and IP let
it go, and tells the paces how CNKI answered (what they are, their keys and their invariants:
:mod:`cnkispider.pace.store`).

Sending on time. A request sleeps its wait on the event loop (never blocking the reactor) and
then goes, unless it woke more than ``RATELIMIT_LATE`` seconds after its time: then it reserves
again. A late reactor fires many timers at once, and the requests it woke would leave together,
a burst the schedule never granted (this once got two crawlers banned by a site whose limit they
respected on paper, under a busy machine). So on the wire, in any window of ``T`` seconds at most
``rate * (T + late) + burst`` requests leave for a key, whatever the number of workers. The
allowed lateness doubles with each new reservation of the same request, so that an overloaded
machine still makes progress. A request granted before a decrease of one of its paces reserves
again too (*revoked*), and so does one whose paces are booked beyond their horizon (*held*).

Batching. Requests waiting for a reservation, and answers waiting to be reported, are batched:
one script call carries all that arrived while the previous one was in flight, on a thread of its
own (the loop is :class:`cnkispider.offload.RedisCalls`, shared with the scheduler). If Redis
cannot be reached, requests wait and the call is retried with backoff: a request never goes
without its reservation.

Where it sits (``ORDER`` = 630 in ``DOWNLOADER_MIDDLEWARES``; ``process_request`` runs in
ascending order, ``process_response`` in descending order): after the session middleware (480,
which may await a warm-up, itself limited here as a request of its own) and the proxy middleware
(620, which sets ``meta["proxy"]``), so that both are known; what runs between here and the wire
(HttpCompression 640, Cookies 700, HttpProxy 750) never waits, so a reservation is spent when it
was granted. On the way back it sees the answer after HttpCompression has decompressed it and
before the proxy (620) and retry (610) middlewares act on a refusal. A retry or a redirect is a
new request through the chain and takes a new reservation: the site sees it.

Settings (defaults in :mod:`cnkispider.default_settings`; config.ini maps onto them in
``cnkispider.settings``):

- ``RATELIMIT_ENABLED``: off -> ``NotConfigured`` (paces too); also off while both rates are 0,
  ``PACE_ENABLED`` is False and no verified session can be used (``SESSIONS_MODE`` plain or
  ``SESSIONS_PACE_MAX`` 0).
- ``RATELIMIT_RATE``: requests per second to one site (``host:port``), all workers together;
  0 = no limit per site (``[crawl] rate_limit``).
- ``RATELIMIT_PROXY_RATE``: requests per second through one proxy, all workers together;
  0 = no limit per proxy (``[proxy] rate_limit``).
- ``RATELIMIT_BURST``: requests a fixed key lets go at once after a quiet spell; 1 spaces them
  evenly (``[crawl] rate_burst``).
- ``RATELIMIT_LATE``: seconds a request may wake after its time and still go.
- ``RATELIMIT_KEY_PREFIX``: the prefix of every key (:mod:`cnkispider.pace.store`).
- ``PACE_ENABLED``: learn a pace per session and per IP (``[crawl] pace``).
- ``PACE_START``: requests/s of a new session or IP (``[crawl] pace_start``).
- ``PACE_STEP``: requests/s gained per second of clean answers (``[crawl] pace_step``).
- ``PACE_DECREASE``: factor applied on a challenge.
- ``PACE_CEILING``: share of the last challenged pace where fast growth stops.
- ``PACE_PROBE_SECONDS``: clean seconds to grow from that share back to the ceiling.
- ``PACE_MIN``: the pace never goes below this.
- ``PACE_MAX``: the pace never goes above this; 0 = the site's fixed limit (``RATELIMIT_RATE``),
  or none when that is 0 too (``[crawl] pace_max``).
- ``PACE_COOLDOWN`` / ``PACE_COOLDOWN_MAX``: seconds a challenged session or IP stays quiet
  (``[crawl] pace_cooldown``).
- ``PACE_WINDOW``: seconds over which the site is assumed to count a pace; a pace challenged
  while it grew was too fast half a window before, and that is the ceiling kept.
- ``PACE_TTL``: seconds an IP's learned pace is kept after its last use.
- ``SESSIONS_PACE_MAX``: requests/s a session a person verified (meta ``cnki_verified``) never
  exceeds, all workers together, paces on or off; 0 = none (``[cnki] session_pace``).
- ``PACE_DIRECT_NAME``: the IP name of requests without a proxy; every worker on the Redis shares
  it (right when they leave through one address; give each machine its own name when they do
  not: ``[proxy] direct_name``).
- ``REDIS_URL``, ``CNKI_DATA_DIR``: the shared Redis (see :mod:`cnkispider.redisconn`).

Meta ``dont_ratelimit`` lets a request pass unlimited.

Stats (``ratelimit/...``): ``requests``, ``delayed`` (had to wait), ``wait_seconds`` (total),
``held``, ``late``, ``revoked`` (reserved again, see above), ``pace/clean``,
``pace/challenged``, ``pace/decreased``, ``redis/calls``, ``redis/errors``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from scrapy.exceptions import NotConfigured
from scrapy.utils.asyncio import sleep as loop_sleep
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred

from cnkispider import default_settings, redisconn
from cnkispider.cnki import refusals
from cnkispider.middlewares import Recent, refusal_of
from cnkispider.offload import RedisCalls
from cnkispider.pace.store import Answer, Limit, PaceRule, Reply, SharedRateLimit

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

#: Position in DOWNLOADER_MIDDLEWARES (see the module docstring for why).
ORDER = 630

#: Reservations carried by one script call at most (the rest wait for the next call).
MAX_PER_CALL = 500

#: Meta key of a request's pace reservation, read back by process_response.
_META = "_ratelimit_pace"


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
