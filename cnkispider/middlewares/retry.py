"""Retries for CNKI: on errors and on CNKI's ways of saying no, each time with a fresh session,
another proxy, and a growing pause; then :class:`~cnkispider.exceptions.GaveUp`.

Replaces Scrapy's RetryMiddleware (why it sits above RedirectMiddleware:
:mod:`cnkispider.middlewares`). A request is retried when ``refusals.classify`` names a reason
(a redirect is classified by its target, so ``302 -> /verify`` is caught before it is
followed), its status is in ``RETRY_HTTP_CODES``, or it failed with ``RETRY_EXCEPTIONS``.

Three kinds of no (``refusals.kind_of``), three answers: a **rejection** (CNKI refused the query
itself) is never retried, its errback halts the task; a **challenge** (verify, captcha, the soft
block, a JavaScript page) is retried on a fresh session through another proxy, and when
challenges persist across ``RETRY_CHALLENGE_SESSIONS`` fresh sessions the task pauses for
``RETRY_CHALLENGE_COOLDOWN`` seconds, shared through Redis; a **fault** is retried as usual.
A challenge on a session a person verified is never retried blindly: the session goes to
``needs-person`` and the page waits for the round's next verified session. Each retry waits a
jittered, doubling back-off on the event loop; after ``RETRY_TIMES`` it fails with ``GaveUp``.
A 429 (or 503 with ``Retry-After``) is an order to wait: sent again, no retry spent, held by
its window. What the operator sees: docs/SESSIONS.md#when-cnki-says-no.

Settings: ``RETRY_ENABLED``, ``RETRY_TIMES``, ``RETRY_HTTP_CODES``, ``RETRY_EXCEPTIONS``,
``RETRY_PRIORITY_ADJUST``, ``RETRY_GIVE_UP_LOG_LEVEL`` (Scrapy's), ``RETRY_BACKOFF_BASE`` (0.5 s),
``RETRY_BACKOFF_MAX`` (30 s), ``RETRY_CHALLENGE_SESSIONS`` (4), ``RETRY_CHALLENGE_COOLDOWN`` (300 s; 0: no
cool-down).

Stats: ``retry/count``, ``retry/reason_count/<reason>``, ``retry/max_reached`` (Scrapy's names),
``retry/backoff_seconds``, ``retry/gave_up/<reason>``, ``retry/rejected``, ``retry/cooldowns``,
``retry/cooldown_seconds``, ``retry/challenges`` (carried to the ``worker`` row), ``retry/window``,
``retry/window_seconds``.

The rest of this module's story: docs/INTERNALS.md#cnkispidermiddlewaresretrypy.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares.retry import get_retry_request
from scrapy.exceptions import NotConfigured
from scrapy.utils.asyncio import sleep as loop_sleep
from scrapy.utils.misc import load_object

from cnkispider import default_settings
from cnkispider.cnki.protocol import DOCUMENT_KINDS, SESSION_KINDS
from cnkispider.cnki.refusals import (
    CHALLENGE,
    REJECTION,
    SOFT_BLOCK,
    ZERO_CHECK,
    classify,
    kind_of,
    rejection_text,
    window_of,
)
from cnkispider.exceptions import GaveUp, HaltedRequest, RefusedPage, SessionLost
from cnkispider.middlewares import refusal_of
from cnkispider.middlewares.ratelimit import WINDOW_META
from cnkispider.runtime.context import context_of
from cnkispider.runtime.offload import in_thread
from cnkispider.scheduling.outcome import hold
from cnkispider.scheduling.scheduler import scheduler_cooldown
from cnkispider.sessions import COOLING, NEEDS_PERSON
from cnkispider.sessions.runtime import VerifiedSessions
from cnkispider.watch.halting import ChallengeWatch, Cooldown

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)


def backoff_delay(retry: int, base: float, cap: float, rng: random.Random) -> float:
    """Seconds to wait before retry number ``retry`` (1, 2, ...): exponential, capped, and
    jittered into [d/2, d] so that requests refused together do not come back together."""
    if base <= 0 or retry < 1:
        return 0.0
    delay = min(cap, base * 2 ** (retry - 1))
    return delay / 2 + rng.uniform(0, delay / 2)


#: detail links of one verified session refused in a row that mean CNKI checked the session
DETAIL_STRIKES = 2
COOLDOWN_STEP = 1.0  # seconds: how often a retry waiting out a pause looks whether to stop


def counts_toward_cooldown(request: Request) -> bool:
    """Whether a challenged answer to ``request`` is evidence that CNKI is wary of our sessions.

    A detail link refused again on a retry is most likely stale (its ``v=`` token expired: CNKI
    answers that with the verify page too), whatever session asks: the link itself is the cause,
    and it is refreshed by a title search once its retries are spent. Counting those retries would
    pause the whole task for a few stale links (4 retries from fresh sessions, no clean page in
    between, is one stale link and a bit of another). A list page, and a detail's first attempt,
    count."""
    return not (
        request.meta.get("cnki_kind") in DOCUMENT_KINDS and request.meta.get("retry_times", 0) >= 1
    )


class CnkiRetryMiddleware:
    """Retries with a fresh session, another proxy and backoff; see the module docstring."""

    crawler: Crawler

    def __init__(
        self,
        *,
        max_retry_times: int = default_settings.RETRY_TIMES,
        retry_http_codes: set[int] | frozenset[int] = frozenset(),
        exceptions: tuple[type[BaseException], ...] = (),
        priority_adjust: int = 0,
        give_up_log_level: int | str = "ERROR",
        backoff_base: float = default_settings.RETRY_BACKOFF_BASE,
        backoff_max: float = default_settings.RETRY_BACKOFF_MAX,
        classify: Callable[..., str | None] | None = classify,
        sleep: Callable[[float], Awaitable[None]] = loop_sleep,
        rng: random.Random | None = None,
        challenge_sessions: int = default_settings.RETRY_CHALLENGE_SESSIONS,
        challenge_cooldown: float = default_settings.RETRY_CHALLENGE_COOLDOWN,
        cooldown: Cooldown | Callable[[], Cooldown | None] | None = None,
        window_backoff: tuple[float, float] = default_settings.RATELIMIT_BACKOFF,
        max_backoff: float = default_settings.RATELIMIT_MAX_BACKOFF,
    ):
        self.max_retry_times = max_retry_times
        self.retry_http_codes = frozenset(retry_http_codes)
        self.exceptions = tuple(exceptions) + (RefusedPage,)
        self.priority_adjust = priority_adjust
        self.give_up_log_level = give_up_log_level
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.classify = classify
        self.sleep = sleep
        self.rng = rng or random.Random()
        self.watch = ChallengeWatch(challenge_sessions)
        self.challenge_cooldown = challenge_cooldown
        # The shared pause lives in the task's Redis namespace, known once the engine runs:
        # a Cooldown, or a callable that finds it (None: no sharing, e.g. plain Scrapy).
        self._cooldown = cooldown
        # This worker's own copy of a pause it started: set before the Redis write, so that its
        # other retries cannot slip out while that write is under way (monotonic time).
        self._paused_until = 0.0
        # verified session -> its detail links refused in a row (see _verified_challenged)
        self._detail_strikes: dict[str, int] = {}
        # "come back later" without a shared window: this worker's own backoff
        self.window_backoff = window_backoff
        self.max_backoff = max_backoff
        self._window_strikes = 0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> CnkiRetryMiddleware:
        s = crawler.settings
        if not s.getbool("RETRY_ENABLED"):
            raise NotConfigured
        o = cls(
            max_retry_times=s.getint("RETRY_TIMES"),
            retry_http_codes={int(x) for x in s.getlist("RETRY_HTTP_CODES")},
            exceptions=tuple(
                load_object(x) if isinstance(x, str) else x for x in s.getlist("RETRY_EXCEPTIONS")
            ),
            priority_adjust=s.getint("RETRY_PRIORITY_ADJUST"),
            give_up_log_level=s.get("RETRY_GIVE_UP_LOG_LEVEL"),
            backoff_base=s.getfloat("RETRY_BACKOFF_BASE"),
            backoff_max=s.getfloat("RETRY_BACKOFF_MAX"),
            challenge_sessions=s.getint("RETRY_CHALLENGE_SESSIONS"),
            challenge_cooldown=s.getfloat("RETRY_CHALLENGE_COOLDOWN"),
            cooldown=lambda: scheduler_cooldown(crawler),
            window_backoff=tuple(float(x) for x in s.getlist("RATELIMIT_BACKOFF")),
            max_backoff=s.getfloat("RATELIMIT_MAX_BACKOFF"),
        )
        o.crawler = crawler
        return o

    @property
    def cooldown(self) -> Cooldown | None:
        found = self._cooldown
        if callable(found) and not isinstance(found, Cooldown):
            found = found()
            if found is not None:
                self._cooldown = found
        return found if isinstance(found, Cooldown) else None

    def _inc_stat(self, key: str, count: float = 1) -> None:
        self.crawler.stats.inc_value(f"retry/{key}", count)

    async def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Request | Response:
        if request.meta.get("dont_retry"):
            return response
        if WINDOW_META in request.meta:
            return self._again_after_window(request)
        closes, seconds = window_of(response.status, response.headers)
        if closes:
            # no shared window (the rate-limit middleware is off): this worker waits itself
            self._window_strikes += 1
            if seconds is None:
                base, factor = self.window_backoff
                seconds = min(self.max_backoff, base * factor ** (self._window_strikes - 1))
            self._inc_stat("window_seconds", round(seconds, 3))
            await self.sleep(seconds)
            return self._again_after_window(request)
        if response.status < 400:
            self._window_strikes = 0
        reason = refusal_of(self.classify, request, response)
        if reason is None and response.status in self.retry_http_codes:
            reason = f"http-{response.status}"
        verified = VerifiedSessions.of(getattr(self, "crawler", None))
        if reason == SOFT_BLOCK and request.meta.get(ZERO_CHECK):
            return response  # a true zero or the soft block: the spider's canary tells (refusals)
        if kind_of(reason) == CHALLENGE:
            self._inc_stat("challenges")  # each one CNKI put up, whatever is done about it
        if reason is None:
            if request.meta.get("cnki_kind") in SESSION_KINDS:
                self.watch.clean()  # a page CNKI served (a warm-up page proves nothing)
                if request.meta.get("cnki_verified"):
                    self._detail_strikes.pop(request.meta.get("cnki_session"), None)
            elif verified is not None and request.meta.get("cnki_kind") == "home":
                verified.plain_warmup_clean()
            return response
        if verified is not None and kind_of(reason) == CHALLENGE:
            if request.meta.get("cnki_verified"):
                return await self._verified_challenged(request, reason, verified)
            if request.meta.get("cnki_kind") == "home" and verified.mode == "auto":
                verified.plain_warmup_checked(reason)
                raise RefusedPage(reason, "CNKI sent the warm-up page to its check")
        if kind_of(reason) == REJECTION:
            # CNKI refused the query itself: the same query on a fresh session is refused again.
            self._inc_stat("rejected")
            words = rejection_text(response.body) or ""
            raise GaveUp(reason, request.meta.get("retry_times", 0) + 1, detail=words)
        if counts_toward_cooldown(request) and self.watch.seen(
            reason, request.meta.get("cnki_session")
        ):
            await self._pause(reason)
        return await self._retry(request, reason)

    def _again_after_window(self, request: Request) -> Request:
        """The request again, as it was: CNKI asked it to wait, it did not fail (no retry spent,
        same session; the proxy middleware picks its proxy again, skipping cooling ones)."""
        self._stop_if_halted(request)
        self._inc_stat("window")
        again = request.replace(dont_filter=True)
        again.meta.pop(WINDOW_META, None)
        again.meta.pop("_auth_proxy", None)
        again.headers.pop(b"Proxy-Authorization", None)
        again.priority = request.priority + self.priority_adjust
        return again

    async def _verified_challenged(
        self, request: Request, reason: str, verified: VerifiedSessions
    ) -> Request:
        """CNKI challenged a request sent in a verified session (see the module docstring)."""
        meta = request.meta
        session_id = meta.get("cnki_session") or ""
        kind = meta.get("cnki_kind")
        store = verified.store
        if reason == "no-data-retry":
            cooldown = self.crawler.settings.getfloat("PACE_COOLDOWN")
            await in_thread(
                store.mark,
                session_id,
                COOLING,
                f"soft block at request {meta.get('_session_request', '?')}",
                until=store.clock() + cooldown,
                unless_dead=True,
            )
            self._inc_stat("verified/soft_block")
            return await self._retry(request, reason)
        if kind in DOCUMENT_KINDS:
            self._inc_stat("verified/detail_refused")
            # One refused link may be stale (its token expired); two in a row with no page
            # served between are the session checked again: every detail request still queued
            # for it would otherwise be sent and refused too (dozens of a pass's requests).
            strikes = self._detail_strikes[session_id] = self._detail_strikes.get(session_id, 0) + 1
            if strikes >= DETAIL_STRIKES:
                note = (
                    f"checked by CNKI at request {meta.get('_session_request', '?')} ({reason} "
                    f"on {strikes} detail links in a row, round {meta.get('round_id', '?')})"
                )
                if await in_thread(store.mark, session_id, NEEDS_PERSON, note, unless_dead=True):
                    self._needs_person(verified, session_id, note)
            raise SessionLost(session_id, f"{reason} on its detail link")
        note = (
            f"checked by CNKI at request {meta.get('_session_request', '?')} ({reason} on list "
            f"page {meta.get('page', '?')} of round {meta.get('round_id', '?')})"
        )
        verified.died(session_id)
        if await in_thread(store.mark, session_id, NEEDS_PERSON, note, unless_dead=True):
            self._needs_person(verified, session_id, note)
        self._stop_if_halted(request)
        again = request.replace(dont_filter=True, cookies=[])
        for key in (
            "cnki_session",
            "cnki_verified",
            "cookiejar",
            "_session_request",
            "cnki_user_agent",
        ):
            again.meta.pop(key, None)
        again.headers.pop(b"Cookie", None)
        return again

    def _needs_person(self, verified: VerifiedSessions, session_id: str, note: str) -> None:
        verified.died(session_id)
        self._inc_stat("verified/needs_person")
        verified.crawler.stats.inc_value("sessions/needs_person")
        logger.warning(
            "verified session %s needs a person again: %s; its round goes on in another",
            session_id,
            note,
        )

    async def _pause(self, reason: str) -> None:
        """Challenges persist across fresh sessions: pause the whole task (once, shared)."""
        cooldown = self.cooldown
        if cooldown is None or self.challenge_cooldown <= 0:
            return
        self._paused_until = max(self._paused_until, time.monotonic() + self.challenge_cooldown)
        try:
            started = await in_thread(cooldown.start, self.challenge_cooldown, reason)
        except Exception as exc:  # Redis trouble: the scheduler reports it; retries go on
            logger.debug("cannot start the cool-down: %s", exc)
            return
        if started:
            self._inc_stat("cooldowns")
            logger.warning(
                "CNKI challenged %d fresh sessions in a row (last: %s): every worker of this task "
                "pauses for %.0f s",
                self.watch.sessions,
                reason,
                self.challenge_cooldown,
            )

    async def _wait_for_cooldown(self) -> None:
        cooldown = self.cooldown
        if cooldown is None:
            return
        try:
            left = await in_thread(cooldown.remaining)
        except Exception:
            left = 0.0
        # the pause this worker is starting, before its Redis key exists (a `task resume` that
        # clears the key mid-pause is seen by the others at once, here within this pause)
        left = max(left, self._paused_until - time.monotonic())
        if left > 0:
            self._inc_stat("cooldown_seconds", round(left, 3))
            # in steps, so that a stop (Ctrl-C, SIGTERM) does not wait out a 5-minute pause:
            # the retry is then handed back and queued in Redis, nothing is lost
            end = time.monotonic() + left
            while (now := time.monotonic()) < end and self._crawling():
                await self.sleep(min(COOLDOWN_STEP, end - now))

    def _crawling(self) -> bool:
        """False once the crawler was asked to stop (Scrapy's Crawler.stop)."""
        return bool(getattr(getattr(self, "crawler", None), "crawling", True))

    async def process_exception(
        self, request: Request, exception: Exception, spider: Spider | None = None
    ) -> Request | None:
        if request.meta.get("dont_retry") or not isinstance(exception, self.exceptions):
            return None
        if isinstance(exception, RefusedPage):
            reason = exception.reason
        else:
            reason = type(exception).__name__
        return await self._retry(request, reason)

    def _stop_if_halted(self, request: Request) -> None:
        """The task halted (the crawl context's ``halted``): no more retries. The request is held,
        never acked, so its lease brings it back after ``task resume``; its errback records nothing."""
        context = context_of(self.crawler)
        halted = context.halted if context is not None else None
        if halted:
            hold(self.crawler, request)
            self._inc_stat("halted")
            raise HaltedRequest(halted)

    async def _retry(self, request: Request, reason: str) -> Request:
        self._stop_if_halted(request)
        meta = request.meta
        retry = get_retry_request(
            request,
            spider=self.crawler.spider,
            reason=reason,
            max_retry_times=meta.get("max_retry_times", self.max_retry_times),
            priority_adjust=meta.get("priority_adjust", self.priority_adjust),
            give_up_log_level=meta.get("give_up_log_level", self.give_up_log_level),
            logger=logger,
        )
        if retry is None:
            self._inc_stat(f"gave_up/{reason}")
            raise GaveUp(reason, meta.get("retry_times", 0) + 1)
        retry.meta["cnki_renew_session"] = True
        # The copy must not carry the old proxy's credentials anywhere (it may be queued in
        # Redis); the proxy middleware assigns the next proxy and HttpProxyMiddleware its header.
        retry.headers.pop(b"Proxy-Authorization", None)
        retry.meta.pop("_auth_proxy", None)
        delay = backoff_delay(
            retry.meta["retry_times"], self.backoff_base, self.backoff_max, self.rng
        )
        if delay > 0:
            self._inc_stat("backoff_seconds", round(delay, 3))
            await self.sleep(delay)
        await self._wait_for_cooldown()
        self._stop_if_halted(request)
        return retry
