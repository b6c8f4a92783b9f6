"""Proxies from a paid pool, behind one global switch.

Thin: the decisions are :class:`proxy.pool.ProxyPool` (which proxy, how often, when to buy) and
:class:`proxy.policy.BanPolicy` (whose fault a failure was). This middleware sets
``request.meta["proxy"]`` (Scrapy's HttpProxyMiddleware then moves the credentials into a
header), buys a batch when the pool is dry (waiting out the provider's interval on the event
loop, never spinning, one purchase at a time for all waiting requests), and on the way back
releases the proxy, or evicts it when the failure was its fault.

A CNKI session (meta ``cnki_session``) stays on the proxy it was opened through while that proxy
is not evicted. A retried request (meta ``retry_times`` grew since this middleware last saw it;
the retry middleware also renews its session) never gets the proxy it failed through again,
unless that is the only one left; neither does the warm-up of the fresh session that replaces
the failed one (private meta ``_proxy_avoid``, set by the session middleware). Meta
``dont_proxy`` sends a request directly.

Proxy credentials never reach a log line: only :func:`proxy.provider.mask` forms are logged.

Settings: ``PROXY_ENABLED`` (the global switch), ``PROXY_API_URL``, ``PROXY_API_FORMAT``,
``PROXY_API_JSON_PATH``, ``PROXY_API_JSON_IP``, ``PROXY_API_JSON_PORT``, ``PROXY_API_TIMEOUT``,
``PROXY_STATIC``, ``PROXY_CREDENTIALS``, ``PROXY_REUSE``, ``PROXY_MAX_AGE``,
``PROXY_FETCH_INTERVAL``, ``PROXY_BAN_STATUSES``, ``PROXY_BAN_REASONS``, ``PROXY_BAN_TIME``,
``PROXY_WAIT_MAX`` (defaults and meaning: docs/INTERNALS.md), ``RATELIMIT_BACKOFF``,
``RATELIMIT_MAX_BACKOFF``. A 429 cools its proxy for its window (:meth:`ProxyPool.cool`).

Stats (``proxy/...``): ``assigned``, ``session_kept``, ``fetch/count``, ``fetch/added``,
``fetch/empty``, ``fetch/error``, ``evicted/<reason>``, ``released/ok``, ``released/refused``, ``wait_gave_up``,
``cooled``.

The rest of this module's story: docs/INTERNALS.md#cnkispidermiddlewaresproxypy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from scrapy.exceptions import NotConfigured
from scrapy.utils.asyncio import sleep as loop_sleep
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred

from cnkispider import default_settings
from cnkispider.cnki.refusals import classify, window_of
from cnkispider.exceptions import ConfigError, GaveUp
from cnkispider.middlewares import Recent, refusal_of
from cnkispider.words.i18n import _
from proxy.policy import BanPolicy
from proxy.pool import Proxy, ProxyPool
from proxy.provider import ProviderClient, mask, proxy_key

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

EMPTY_BATCH_PAUSE = 1.0  # seconds, after a purchase that brought no usable proxy
DRY_WARNING_INTERVAL = 60.0  # seconds between warnings that the pool stays dry


class ProxyMiddleware:
    """Assigns pool proxies to requests and reports their fate back to the pool."""

    def __init__(
        self,
        pool: ProxyPool,
        policy: BanPolicy | None = None,
        *,
        stats: StatsCollector | None = None,
        wait_max: float = default_settings.PROXY_WAIT_MAX,
        classify: Callable[..., str | None] | None = classify,
        sleep: Callable[[float], Awaitable[None]] = loop_sleep,
        clock: Callable[[], float] = time.monotonic,
        source: str = "",
        window_backoff: tuple[float, float] = default_settings.RATELIMIT_BACKOFF,
        max_backoff: float = default_settings.RATELIMIT_MAX_BACKOFF,
    ):
        self.pool = pool
        self.policy = policy or BanPolicy()
        self.stats = stats
        self.wait_max = wait_max
        self.classify = classify
        self.sleep = sleep
        self.clock = clock
        self.source = source  # masked description of where proxies come from, for logs
        self.window_backoff = window_backoff
        self.max_backoff = max_backoff
        self._by_key: Recent = Recent(16384)  # host:port -> the Proxy last assigned there
        self._by_session: Recent = Recent(4096)  # cnki_session -> its Proxy
        self._refilling = False
        self._refill_waiters: list[Deferred] = []
        self._dry_warned_at = float("-inf")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ProxyMiddleware:
        s = crawler.settings
        if not s.getbool("PROXY_ENABLED"):
            raise NotConfigured
        api_url = s.get("PROXY_API_URL") or ""
        static = s.getlist("PROXY_STATIC")
        if not api_url and not static:
            raise ConfigError(
                "settings",
                "proxy",
                "PROXY_API_URL",
                _("proxies are enabled but neither an API URL nor a static list is given"),
            )
        try:
            client = ProviderClient(
                api_url,
                s.get("PROXY_API_FORMAT"),
                json_path=s.get("PROXY_API_JSON_PATH"),
                ip_field=s.get("PROXY_API_JSON_IP"),
                port_field=s.get("PROXY_API_JSON_PORT"),
                credentials=s.get("PROXY_CREDENTIALS") or "",
                timeout=s.getfloat("PROXY_API_TIMEOUT"),
                static=static,
            )
        except ValueError as exc:
            raise ConfigError(
                "settings", "proxy", "PROXY_API_FORMAT/PROXY_STATIC", str(exc)
            ) from None
        pool = ProxyPool(
            client.fetch_batch,
            reuse=s.getint("PROXY_REUSE"),
            min_fetch_interval=s.getfloat("PROXY_FETCH_INTERVAL"),
            max_age=s.getfloat("PROXY_MAX_AGE"),
            ban_time=s.getfloat("PROXY_BAN_TIME"),
        )
        policy = BanPolicy(
            [int(x) for x in s.getlist("PROXY_BAN_STATUSES")],
            s.getlist("PROXY_BAN_REASONS"),
        )
        middleware = cls(
            pool,
            policy,
            stats=crawler.stats,
            wait_max=s.getfloat("PROXY_WAIT_MAX"),
            source=repr(client),
            window_backoff=tuple(float(x) for x in s.getlist("RATELIMIT_BACKOFF")),
            max_backoff=s.getfloat("RATELIMIT_MAX_BACKOFF"),
        )
        middleware.crawler = crawler
        return middleware

    def _stopping(self) -> bool:
        """The crawler is shutting down (SIGTERM, Ctrl-C): Scrapy waits for every request in
        flight, so one waiting here for a proxy must give up now, not after PROXY_WAIT_MAX."""
        crawler = getattr(self, "crawler", None)
        if crawler is None:
            return False
        engine = crawler.engine
        return not crawler.crawling or (engine is not None and not engine.running)

    def _inc_stat(self, key: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(f"proxy/{key}", count)

    # -- way out -------------------------------------------------------------------------------

    async def process_request(self, request: Request, spider: Spider | None = None) -> None:
        meta = request.meta
        if meta.get("dont_proxy"):
            return
        attempt = meta.get("retry_times", 0)
        exclude: tuple[str, ...] = ()
        if meta.pop("_proxy_attempt", attempt) != attempt and meta.get("proxy"):
            exclude = (proxy_key(meta["proxy"]),)  # the one this request just failed through
        if meta.get("_proxy_avoid"):  # a fresh session's warm-up, after a failure through it
            exclude += (proxy_key(meta["_proxy_avoid"]),)
        session_id = meta.get("cnki_session")
        proxy = self._by_session.get(session_id) if session_id is not None else None
        if proxy is not None and proxy.key not in exclude and self.pool.use(proxy):
            self._inc_stat("session_kept")
        else:
            proxy = await self._acquire(exclude, attempt)
            if session_id is not None:
                self._by_session[session_id] = proxy
        self._by_key[proxy.key] = proxy
        self._inc_stat("assigned")
        meta["proxy"] = proxy.url
        meta["_proxy_attempt"] = attempt

    async def _acquire(self, exclude: tuple[str, ...], attempt: int) -> Proxy:
        deadline = self.clock() + self.wait_max
        while True:
            proxy = self.pool.get(exclude)
            if proxy is None and exclude:
                proxy = self.pool.get()  # the failed one, when it is all there is
            if proxy is not None:
                return proxy
            if self.clock() >= deadline or self._stopping():
                self._inc_stat("wait_gave_up")
                raise GaveUp("no-proxy", attempt + 1)
            await self._refill()

    async def _refill(self) -> None:
        """Buy one batch; callers arriving while a purchase runs wait for that one."""
        if self._refilling:
            waiter: Deferred = Deferred()
            self._refill_waiters.append(waiter)
            await maybe_deferred_to_future(waiter)
            return
        self._refilling = True
        try:
            self._inc_stat("fetch/count")
            error = None
            try:
                added = await self.pool.refill(self.sleep)
            except Exception as exc:  # the provider is down or refuses: try at the next slot
                added, error = 0, exc
                self._inc_stat("fetch/error")
            else:
                self._inc_stat("fetch/added", added)
            if added:
                logger.info(
                    "Bought %d new proxies from %s (%d live)", added, self.source, len(self.pool)
                )
            else:
                self._inc_stat("fetch/empty")
                self._log_dry(error)
                # Nothing new (an error, an empty batch, only banned addresses): pause even
                # when the provider allows calls back to back, so that nobody spins.
                await self.sleep(EMPTY_BATCH_PAUSE)
        finally:
            self._refilling = False
            waiters, self._refill_waiters = self._refill_waiters, []
            for waiter in waiters:
                waiter.callback(None)

    def _log_dry(self, error: Exception | None) -> None:
        """A purchase brought nothing: a warning at most every DRY_WARNING_INTERVAL (an outage
        of the provider would otherwise log every few seconds), debug otherwise."""
        now = self.clock()
        level = logging.DEBUG
        if now - self._dry_warned_at >= DRY_WARNING_INTERVAL:
            self._dry_warned_at, level = now, logging.WARNING
        logger.log(
            level,
            "No usable proxy from %s (%s); requests wait for the next purchase "
            "(evicted addresses are refused for PROXY_BAN_TIME; a request gives up after "
            "PROXY_WAIT_MAX)",
            self.source,
            error if error is not None else "empty batch or only evicted addresses",
        )

    # -- way back -------------------------------------------------------------------------------

    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Response:
        proxy = self._proxy_of(request)
        if proxy is None:
            return response
        refusal = refusal_of(self.classify, request, response)
        closes, seconds = window_of(response.status, response.headers)
        ban = self.policy.response_ban(response.status, refusal)
        if closes and ban is None:
            self.pool.release(proxy, ok=False)
            if seconds is None:  # the backoff the shared window keeps (ratelimit)
                base, factor = self.window_backoff
                seconds = min(self.max_backoff, base * factor**proxy.cools)
            self._inc_stat("cooled")
            if self.pool.cool(proxy, seconds):
                self._inc_stat("evicted/http-429")
                logger.info(
                    _("Evicted proxy %s: CNKI said to come back later %d times in a row; %d live"),
                    mask(proxy.url),
                    proxy.cools,
                    len(self.pool),
                )
        elif ban is not None:
            self._evict(proxy, ban)
        else:
            self.pool.release(proxy, ok=refusal is None)
            self._inc_stat("released/ok" if refusal is None else "released/refused")
        return response

    def process_exception(
        self, request: Request, exception: Exception, spider: Spider | None = None
    ) -> None:
        proxy = self._proxy_of(request)
        if proxy is None:
            return
        ban = self.policy.exception_ban(exception)
        if ban is not None:
            self._evict(proxy, ban)
        else:
            self.pool.release(proxy, ok=False)

    def _proxy_of(self, request: Request) -> Proxy | None:
        """The proxy this middleware gave this attempt of ``request`` (a retry copy carries the
        previous attempt's ``_proxy_attempt`` until process_request replaces it)."""
        meta = request.meta
        if meta.get("dont_proxy") or meta.get("_proxy_attempt") != meta.get("retry_times", 0):
            return None
        return self._by_key.get(proxy_key(meta.get("proxy")))

    def _evict(self, proxy: Proxy, reason: str) -> None:
        self.pool.release(proxy, ok=False)
        if self.pool.evict(proxy, reason):
            self._inc_stat(f"evicted/{reason}")
            logger.info(
                "Evicted proxy %s (%s) after %d uses; %d live",
                mask(proxy.url),
                reason,
                proxy.uses,
                len(self.pool),
            )
