"""Holds each request until the shared limits and paces of its site, proxy, session and IP let
it go, and tells the paces how CNKI answered (what they are, their keys and their invariants:
:mod:`cnkispider.pace.store`).

Why: ten machines together must be as polite as one, and a busy machine must not turn a
schedule into a burst. A request sleeps its wait on the event loop and goes, unless it woke more
than ``RATELIMIT_LATE`` seconds late: then it reserves again (a late reactor once let requests
leave together and got two crawlers banned by a site whose limit they kept on paper). Requests
and answers are batched into one script call at a time, off the reactor; without Redis a
request waits, it never goes without its reservation. It sits after the session and proxy
middlewares (their order: :mod:`cnkispider.settings`), so both are known when it reserves.

Settings (defaults in :mod:`cnkispider.default_settings`): ``RATELIMIT_ENABLED``,
``RATELIMIT_RATE``, ``RATELIMIT_PROXY_RATE``, ``RATELIMIT_BURST``, ``RATELIMIT_LATE``,
``RATELIMIT_KEY_PREFIX``, ``PACE_ENABLED``, ``PACE_START``, ``PACE_STEP``, ``PACE_DECREASE``,
``PACE_CEILING``, ``PACE_PROBE_SECONDS``, ``PACE_MIN``, ``PACE_MAX``, ``PACE_COOLDOWN``,
``PACE_COOLDOWN_MAX``, ``PACE_WINDOW``, ``PACE_TTL``, ``SESSIONS_PACE_MAX``,
``PACE_DIRECT_NAME``, ``REDIS_URL``, ``CNKI_DATA_DIR``. Meta ``dont_ratelimit`` passes unlimited.

A 429 (or a 503 with ``Retry-After``) closes the windows of its address and verified session
for every worker; the request goes on marked :data:`WINDOW_META`, for the retry middleware to
send again (``RATELIMIT_WINDOWS``, ``RATELIMIT_MAX_BACKOFF``, ``RATELIMIT_BACKOFF``). A request
that passed this middleware but waited in Scrapy's download slot is looked at again at the wire
(:meth:`RateLimitMiddleware.at_wire`, from :mod:`cnkispider.middlewares.wiregate`): if one of its
windows closed since its slot was granted, it is held there until the window opens.

Stats (``ratelimit/...``) and the rest of this module's story:
docs/INTERNALS.md#cnkispidermiddlewaresratelimitpy.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from scrapy.exceptions import NotConfigured
from scrapy.utils.asyncio import sleep as loop_sleep
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.reactor import is_reactor_installed
from twisted.internet.defer import Deferred

from cnkispider import default_settings
from cnkispider.cnki import refusals
from cnkispider.cnki.protocol import DOCUMENT_KINDS
from cnkispider.middlewares import Recent, refusal_of
from cnkispider.pace.store import Answer, Closed, Limit, PaceRule, Reply, SharedRateLimit
from cnkispider.runtime.offload import RedisCalls
from cnkispider.store import redisconn
from cnkispider.words.i18n import _

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

#: Seconds between looks, while a request waits out a closed window, at whether to stop.
WINDOW_STEP = 1.0

#: Reservations carried by one script call at most (the rest wait for the next call).
MAX_PER_CALL = 500

#: Meta key of a request's pace reservation, read back by process_response.
_META = "_ratelimit_pace"
#: Meta key of a request's windows and when it was granted, read back by process_response.
_WINDOWS = "_ratelimit_windows"
#: Meta key set on a request whose answer closed a window shared in Redis: the retry middleware
#: sends it again at once, and the window holds it (the seconds the answer asked for, or None).
WINDOW_META = "_window_closed"
#: µs added to this worker's own record of a window it closed: a reservation granted by a call
#: already in flight when the 429 came may be stamped a little later than the estimated close.
_CLOSE_MARGIN = 1_000_000


#: Each crawl's middleware, for the gate at the wire (a crawl gone, its entry goes).
_BY_CRAWLER: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class _Waiting(NamedTuple):
    limits: list[Limit]
    waiter: Deferred


class _Call(NamedTuple):
    """One script call: the requests it reserves for and the answers it reports."""

    waiting: list[_Waiting]
    limits: list[list[Limit]]
    answers: list[Answer]
    closes: list[Closed]


class HandBack(Exception):
    """Raised at the wire for a request held there while the crawl stops: it goes back to the
    queue (:meth:`RateLimitMiddleware.process_exception`), unsent."""

    def __init__(self, request: Request):
        super().__init__("held at the wire while the crawl stops")
        self.request = request


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
        self._closes: list[Closed] = []
        # per window key this process has heard of: when it was last closed (Redis clock, µs),
        # and its strikes (a clean answer is reported only for a window with strikes)
        self._closed_at: Recent = Recent(maxsize=8192)
        self._strikes: Recent = Recent(maxsize=8192)
        self._until: Recent = Recent(maxsize=8192)  # when each opens again (Redis clock, µs)
        # the Redis clock of the last reply, and time.monotonic() when it returned
        self._clock = (0, time.monotonic())
        # one call to Redis in flight at a time, with backoff (see cnkispider.runtime.offload)
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
            windows=s.getbool("RATELIMIT_WINDOWS"),
            max_backoff=s.getfloat("RATELIMIT_MAX_BACKOFF"),
            backoff=tuple(float(x) for x in s.getlist("RATELIMIT_BACKOFF")),
        )
        if not limiter.active:
            raise NotConfigured
        middleware = cls(limiter, stats=crawler.stats, late=s.getfloat("RATELIMIT_LATE"))
        middleware.crawler = crawler
        _BY_CRAWLER[crawler] = (
            middleware  # for the gate at the wire (cnkispider.middlewares.wiregate)
        )
        from scrapy import signals

        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        if limiter.windows:
            crawler.signals.connect(middleware.listen, signal=signals.spider_opened)
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

    def _crawling(self) -> bool:
        """False once the crawler was asked to stop (Scrapy's Crawler.stop)."""
        return bool(getattr(getattr(self, "crawler", None), "crawling", True))

    async def process_request(
        self, request: Request, spider: Spider | None = None
    ) -> Request | None:
        request.meta.pop(_META, None)  # a redirect or retry copies the old request's meta
        request.meta.pop(_WINDOWS, None)
        request.meta.pop(WINDOW_META, None)
        limits = self.limiter.limits(request)
        if not limits:
            return None
        paced = tuple(limit for limit in limits if limit.pace)
        windows = tuple(limit for limit in limits if limit.window)
        attempt = 0
        while True:
            waiter: Deferred = Deferred()
            self._pending.append(_Waiting(limits, waiter))
            self._send()
            wait, due, granted, rates = await maybe_deferred_to_future(waiter)
            if wait < 0:
                # Its paces are booked a second ahead already, or one of its windows is closed:
                # ask again when they are not.
                self._inc_stat("held")
                if any(self._until.get(w.key, 0) > granted for w in windows):
                    # a window may be minutes long: a worker asked to stop hands the request
                    # back to the queue in Redis rather than wait it out (nothing spent)
                    self._inc_stat("window/held")
                    end = time.monotonic() - wait
                    while (now := time.monotonic()) < end and self._crawling():
                        await self.sleep(min(WINDOW_STEP, end - now))
                    if not self._crawling():
                        return request.replace(dont_filter=True)
                    continue
                await self.sleep(-wait)
                continue
            if wait > 0:
                await self.sleep(wait)
            if any(self._closed_at.get(limit.key, -1) > granted for limit in windows):
                # CNKI said "come back later" to its address or session since this slot was
                # granted: sent now, it would go into the window.
                self._inc_stat("window/revoked")
            elif any(self._decreased_at.get(limit.key, -1) > granted for limit in paced):
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
            and request.meta.get("cnki_kind") in DOCUMENT_KINDS
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
        if windows:
            request.meta[_WINDOWS] = (granted, windows)

    @staticmethod
    def of(crawler: Crawler | None) -> RateLimitMiddleware | None:
        """The crawl's rate limit middleware, or None when it is off."""
        return _BY_CRAWLER.get(crawler) if crawler is not None else None

    def closed_since_granted(self, request: Request) -> bool:
        """Whether one of the request's windows was closed (a 429 this worker had, or one another
        worker had and Redis told of) after its slot was granted."""
        reserved = request.meta.get(_WINDOWS)
        if reserved is None:
            return False
        granted, windows = reserved
        return any(self._closed_at.get(w.key, -1) > granted for w in windows)

    async def at_wire(self, request: Request) -> Request | None:
        """Called just before the request goes on the wire. A request whose window closed while
        it waited in Scrapy's download slot (after this middleware let it go) is held here, not
        sent into the window: its windows and paces are reserved again, which waits until the
        window opens. None: send it now; a request: the crawl is stopping, hand it back."""
        if not self.closed_since_granted(request):
            return None
        self._inc_stat("window/held_at_wire")
        return await self.process_request(request)

    def process_response(self, request: Request, response: Response, spider: Spider | None = None):
        reserved = request.meta.pop(_META, None)
        closed = self._window(request, response)
        if reserved is not None:
            kind = refusals.kind_of(refusal_of(self.classify, request, response))
            if closed:
                # "too fast" in CNKI's plainest words: the pace falls as on a challenge; the
                # window, not a cool-down of the pace, keeps the address quiet
                self._inc_stat("pace/challenged")
                self._answers.append(Answer(2, *reserved))
                self._send()
            elif kind in (None, refusals.CHALLENGE):
                challenge = kind == refusals.CHALLENGE
                self._inc_stat("pace/challenged" if challenge else "pace/clean")
                self._answers.append(Answer(challenge, *reserved))
                self._send()
        return response

    def _window(self, request: Request, response: Response) -> bool:
        """Report a 429 (closing the request's windows) or a clean answer (resetting their
        backoff); True for a 429. The request is marked for the retry middleware."""
        reserved = request.meta.pop(_WINDOWS, None)
        if reserved is None:
            return False
        granted, windows = reserved
        closes, seconds = refusals.window_of(response.status, response.headers)
        if closes:
            self._inc_stat("window/429")
            # at once, for this worker's requests granted before Redis hears of it
            estimate = self._clock[0] + int((time.monotonic() - self._clock[1]) * 1_000_000)
            for window in windows:
                self._closed_at[window.key] = max(
                    self._closed_at.get(window.key, -1), estimate + _CLOSE_MARGIN
                )
            self._closes.append(Closed(True, granted, windows, seconds))
            self._send()
            request.meta[WINDOW_META] = seconds
            return True
        struck = tuple(w for w in windows if self._strikes.get(w.key, 0) > 0)
        if struck and response.status < 400:
            for window in struck:
                self._strikes[window.key] = 0
            self._inc_stat("window/reset")
            self._closes.append(Closed(False, granted, struck))
            self._send()
        return False

    def process_exception(
        self, request: Request, exception: BaseException, spider: Spider | None = None
    ):
        request.meta.pop(_META, None)  # a fault says nothing about the pace
        request.meta.pop(_WINDOWS, None)
        if isinstance(exception, HandBack):
            # held at the wire while the crawl was asked to stop: back to the queue in Redis,
            # as a request held in process_request goes (nothing was sent)
            return exception.request

    # -- the Redis calls: one at a time, each carrying every request and answer waiting ------

    def _send(self) -> None:
        self._calls.kick()

    def _next_call(self) -> _Call | None:
        if not (self._pending or self._answers or self._closes):
            return None
        batch, self._pending = self._pending[:MAX_PER_CALL], self._pending[MAX_PER_CALL:]
        answers, self._answers = self._answers, []
        closes, self._closes = self._closes, []
        return _Call(batch, [w.limits for w in batch], answers, closes)

    def _call(self, call: _Call) -> Reply:
        return self.limiter.call(call.limits, call.answers, call.closes)  # on the I/O thread

    def _reserved(self, reply: Reply, call: _Call) -> None:
        self._inc_stat("redis/calls")
        self._clock = (reply.now, reply.returned)
        for key, window in reply.windows.items():
            if window.closed_at > self._closed_at.get(key, -1):
                self._closed_at[key] = window.closed_at
            self._strikes[key] = window.strikes
            self._until[key] = window.until
        for key, seconds, strikes in reply.closes:
            self._inc_stat("window/closed")
            logger.warning(
                _(
                    "CNKI said to come back later to %(key)s (%(strikes)d in a row): every worker "
                    "waits %(seconds).1f s before it sends there again"
                ),
                {
                    "key": key.removeprefix(self.limiter.prefix + ":window:"),
                    "strikes": strikes,
                    "seconds": seconds,
                },
            )
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
        self._closes = call.closes + self._closes
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

    def listen(self, spider: Spider | None = None) -> None:
        """Hear at once of every window any worker closes (see SharedRateLimit.listen)."""
        # back on the crawl's thread as ThreadIO does it: the reactor's when one is installed,
        # else the running asyncio loop's (a crawl without a Twisted reactor); importing the
        # reactor here would install one under such a crawl
        if is_reactor_installed():
            from twisted.internet import reactor

            call_soon = reactor.callFromThread
        else:
            call_soon = asyncio.get_running_loop().call_soon_threadsafe

        def heard(key: str, closed_at: int) -> None:  # on the listening thread
            call_soon(self._heard, key, closed_at)

        self._stop_listening = self.limiter.listen(heard)

    def _heard(self, key: str, closed_at: int) -> None:
        if closed_at > self._closed_at.get(key, -1):
            self._closed_at[key] = closed_at

    def spider_closed(self, spider: Spider | None = None) -> None:
        stop = getattr(self, "_stop_listening", None)
        if stop is not None:
            stop()
        io = self._calls.io
        if io is not None:
            io.run(self.limiter.close)
            io.shutdown()
