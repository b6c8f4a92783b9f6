"""CNKI sessions for list and detail requests, so that spiders never manage them.

For each request with meta ``cnki_kind`` ``list`` or ``detail`` the middleware picks a session
from :class:`~cnkispider.cnki.session.SessionPool` (the one named by meta ``cnki_session`` while
it may still serve, so that the pages of one search stay together), and sets meta
``cnki_session`` and ``cookiejar`` (Scrapy's CookiesMiddleware keeps one cookie jar per session).
A session that is not warmed yet is warmed first: its warm-up page (``Protocol.home_url``, meta
``cnki_kind`` ``home``, same cookie jar, hence the same User-Agent and proxy) is downloaded
through the engine, with every downloader middleware (retries included), and only then does the
request go on. Requests that share a session being warmed wait for that one warm-up.

Meta ``cnki_renew_session`` (set by the retry middleware on every retry) retires the request's
old session and gives it a fresh one, whose warm-up avoids the proxy the request failed through
(private meta ``_proxy_avoid``, read by the proxy middleware). ``home`` requests, requests with another kind or none, and
requests with meta ``dont_cnki_session`` pass untouched: the warm-up request is one of them,
which is what keeps this middleware from recursing into itself.

Settings:
- ``SESSION_ENABLED`` (True): off -> NotConfigured.
- ``SESSION_TURN_LIMIT`` (14): grid requests a session serves after its first (CNKI allows 15).
- ``SESSION_MAX_AGE`` (600 s; 0 = none): a session older than this is retired.
- ``SESSION_POOL_SIZE`` (4): sessions live at once.
- ``CNKI_BASE_URL`` (the site protocol's): where the warm-up page is.

Stats (``session/...``): ``opened``, ``warmed``, ``warmup_failed``, ``retired/<reason>``
(``turn-limit``, ``max-age``, ``renewed``, ``warmup-failed``), ``requests/<kind>``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from scrapy import Request
from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred

from cnkispider.cnki.session import Session, SessionPool
from cnkispider.exceptions import RefusedPage
from cnkispider.middlewares import DEFAULTS, cnki_protocol
from proxy.provider import proxy_key

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

KINDS = ("list", "detail")


class SessionMiddleware:
    """Assigns, warms up and renews CNKI sessions; see the module docstring."""

    def __init__(
        self,
        pool: SessionPool,
        home_url: str,
        download: Callable[[Request], Awaitable[Response]],
        stats: StatsCollector | None = None,
    ):
        self.pool = pool
        self.home_url = home_url
        self.download = download  # the engine's: through every downloader middleware
        self.stats = stats
        self._warming: dict[str, list[Deferred]] = {}
        pool.on_retire = self._retired

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SessionMiddleware:
        settings = crawler.settings
        if not settings.getbool("SESSION_ENABLED", DEFAULTS["SESSION_ENABLED"]):
            raise NotConfigured
        pool = SessionPool(
            turn_limit=settings.getint("SESSION_TURN_LIMIT", DEFAULTS["SESSION_TURN_LIMIT"]),
            max_age=settings.getfloat("SESSION_MAX_AGE", DEFAULTS["SESSION_MAX_AGE"]),
            size=settings.getint("SESSION_POOL_SIZE", DEFAULTS["SESSION_POOL_SIZE"]),
        )
        # crawler.engine does not exist yet while the downloader builds its middlewares.
        return cls(
            pool,
            cnki_protocol(settings).home_url,
            lambda request: crawler.engine.download_async(request),
            crawler.stats,
        )

    def _inc_stat(self, key: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(f"session/{key}", count)

    def _retired(self, session: Session, reason: str) -> None:
        self._inc_stat(f"retired/{reason}")
        logger.debug(
            "CNKI session %s retired (%s) after %d turns", session.id, reason, session.turns
        )

    async def process_request(self, request: Request, spider: Spider | None = None) -> None:
        meta = request.meta
        kind = meta.get("cnki_kind")
        if kind not in KINDS or meta.get("dont_cnki_session"):
            return
        avoid = None
        if meta.pop("cnki_renew_session", False):
            old = meta.pop("cnki_session", None)
            if old is not None:
                self.pool.retire(old, "renewed")
            # The proxy this request failed through: the fresh session must not be opened
            # through it either (it stays on the proxy its warm-up used).
            avoid = meta.get("proxy")
        while True:
            session, created = self.pool.acquire(kind, meta.get("cnki_session"))
            if created:
                self._inc_stat("opened")
            meta["cnki_session"] = meta["cookiejar"] = session.id
            if not session.warmed:
                await self._warm_up(session, avoid)
            if session.warmed:
                break
            # Its warm-up (someone else's, awaited) failed and retired it: take another.
            meta.pop("cnki_session", None)
        self._inc_stat(f"requests/{kind}")

    async def _warm_up(self, session: Session, avoid_proxy: str | None = None) -> None:
        """Download the warm-up page once per session; concurrent callers wait for that one."""
        waiters = self._warming.get(session.id)
        if waiters is not None:
            waiter: Deferred = Deferred()
            waiters.append(waiter)
            await maybe_deferred_to_future(waiter)
            return
        self._warming[session.id] = []
        try:
            meta = {"cnki_kind": "home", "cnki_session": session.id, "cookiejar": session.id}
            if avoid_proxy:
                meta["_proxy_avoid"] = proxy_key(avoid_proxy)
            request = Request(self.home_url, meta=meta, dont_filter=True)
            response = await self.download(request)
            if response.status >= 400:
                raise RefusedPage("warm-up", f"HTTP {response.status} from the warm-up page")
            final = response.request or request
            self.pool.mark_warmed(
                session,
                user_agent=(final.headers.get("User-Agent") or b"").decode("latin-1"),
                proxy=proxy_key(final.meta.get("proxy")),  # host:port, never credentials
            )
            self._inc_stat("warmed")
        except BaseException:
            self._inc_stat("warmup_failed")
            self.pool.retire(session.id, "warmup-failed")
            raise
        finally:
            for waiter in self._warming.pop(session.id):
                waiter.callback(None)
