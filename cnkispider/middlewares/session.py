"""CNKI sessions for list and detail requests, so that spiders never manage them.

For each request with meta ``cnki_kind`` ``list``, ``detail``, ``export`` or ``references`` the middleware picks a session
from :class:`~cnkispider.cnki.session.SessionPool` (the one named by meta ``cnki_session`` while
it may still serve, so that the pages of one search stay together), and sets meta
``cnki_session`` and ``cookiejar`` (Scrapy's CookiesMiddleware keeps one cookie jar per session).

Why: CNKI serves a search only in a session it knows (cookies from its home page, an
``Ecp_ClientId`` from its client-id endpoint, at most 15 grid requests), and a detail link opens
only in the session that listed it. So a plain session is warmed up first through the engine
(every middleware applies: retries, proxy, the shared rate limit); a warm-up that fails retires
the session and the request is retried with a fresh one, never sent on in a session CNKI will
refuse. ``Ecp_ClientId`` rides in ``Request.cookies`` (Scrapy's public API), scoped to the kns
host. A retry (meta ``cnki_renew_session``) gets a fresh session that avoids the failed proxy.
With verified sessions (:mod:`cnkispider.sessions`), a round's requests use the one session a
person passed that its lease names; a detail link whose session CNKI checked again fails with
``SessionLost`` and its page is listed again; with no session ready the request waits for a
person without spending a retry.

Settings: ``SESSION_ENABLED``, ``SESSION_TURN_LIMIT`` (14), ``SESSION_MAX_AGE`` (600 s),
``SESSION_POOL_SIZE`` (4), ``SESSION_JAR_GRACE`` (660 s), ``CNKI_BASE_URL``,
``CNKI_CLIENT_ID_URL``.

Stats (``session/...``): ``opened``, ``warmed``, ``warmup_failed``, ``client_id/failed``,
``retired/<reason>`` (``turn-limit``, ``max-age``, ``renewed``, ``warmup-failed``),
``requests/<kind>``, ``jars_freed``.

The rest of this module's story: docs/INTERNALS.md#cnkispidermiddlewaressessionpy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from scrapy import Request
from scrapy.downloadermiddlewares.cookies import CookiesMiddleware
from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred

from cnkispider import default_settings
from cnkispider.cnki.protocol import (
    CLIENT_ID_COOKIE,
    DOCUMENT_KINDS,
    SESSION_KINDS,
    parse_client_id,
    protocol_from_settings,
)
from cnkispider.cnki.session import Session, SessionPool
from cnkispider.exceptions import HaltedRequest, RefusedPage, SessionLost
from cnkispider.runtime.offload import in_thread
from cnkispider.scheduling.outcome import hold
from cnkispider.sessions.runtime import VerifiedSessions
from proxy.provider import proxy_key

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

KINDS = SESSION_KINDS  # export: GetExport, any session of the round


class SessionMiddleware:
    """Assigns, warms up and renews CNKI sessions; see the module docstring."""

    def __init__(
        self,
        pool: SessionPool,
        home_url: str,
        download: Callable[[Request], Awaitable[Response]],
        stats: StatsCollector | None = None,
        client_id_url: str = "",
        cookie_jars: Callable[[], dict | None] | None = None,
        jar_grace: float = default_settings.SESSION_JAR_GRACE,
        clock: Callable[[], float] = time.monotonic,
        verified: VerifiedSessions | Callable[[], VerifiedSessions | None] | None = None,
    ):
        if not client_id_url:
            raise ValueError("client_id_url: a session cannot be warmed up without one")
        self.pool = pool
        self.home_url = home_url
        self.client_id_url = client_id_url
        self.download = download  # the engine's: through every downloader middleware
        self.stats = stats
        self._warming: dict[str, list[Deferred]] = {}
        pool.on_retire = self._retired
        # Freeing retired sessions' cookie jars. Scrapy's CookiesMiddleware keeps one jar per
        # meta["cookiejar"] key forever (about 2.8 KB a session, 1.3 GB per 10 million pages at
        # an 18% fault rate). Invariants:
        # - every cookiejar key other than None is the id of a session of this pool (this
        #   middleware sets meta["cookiejar"] on every request with a session, and the warm-up
        #   requests use their session's id);
        # - a jar is kept while its session is live, and for `jar_grace` seconds after it was
        #   retired: a request that got the session before it retired may still be waiting for
        #   a proxy or on the wire, and its cookies are written into the jar and read from it;
        # - any other jar is dropped at the next sweep (at most one every `jar_grace / 10`
        #   seconds, on a request), including one a straggler re-created after a sweep.
        # `_retired_at` holds retirements in order, only those younger than `jar_grace`.
        self.cookie_jars = cookie_jars or (lambda: None)
        self.jar_grace = float(jar_grace)
        self.clock = clock
        self._retired_at: dict[str, float] = {}
        self._next_sweep = 0.0
        self._verified = verified
        self._client_ids: dict[str, str] = {}  # verified session -> the Ecp_ClientId fetched for it
        self._verified_used: set[str] = set()  # verified sessions this worker sent requests in

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SessionMiddleware:
        settings = crawler.settings
        if not settings.getbool("SESSION_ENABLED"):
            raise NotConfigured
        pool = SessionPool(
            turn_limit=settings.getint("SESSION_TURN_LIMIT"),
            max_age=settings.getfloat("SESSION_MAX_AGE"),
            size=settings.getint("SESSION_POOL_SIZE"),
        )
        protocol = protocol_from_settings(settings)
        # crawler.engine does not exist yet while the downloader builds its middlewares.
        return cls(
            pool,
            protocol.home_url,
            lambda request: crawler.engine.download_async(request),
            crawler.stats,
            client_id_url=protocol.client_id_url,
            cookie_jars=_CookieJars(crawler),
            jar_grace=settings.getfloat("SESSION_JAR_GRACE"),
            verified=lambda: VerifiedSessions.of(crawler),
        )

    def _inc_stat(self, key: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(f"session/{key}", count)

    def _retired(self, session: Session, reason: str) -> None:
        self._inc_stat(f"retired/{reason}")
        self._retired_at[session.id] = self.clock()
        logger.debug(
            "CNKI session %s retired (%s) after %d turns", session.id, reason, session.turns
        )

    def _sweep_jars(self) -> None:
        """Drop the cookie jars of sessions retired more than ``jar_grace`` seconds ago."""
        now = self.clock()
        if now < self._next_sweep:
            return
        self._next_sweep = now + self.jar_grace / 10
        jars = self.cookie_jars()
        if jars is None:
            return
        cutoff = now - self.jar_grace
        for session_id, retired_at in list(self._retired_at.items()):
            if retired_at > cutoff:
                break  # in retirement order: the rest are younger
            del self._retired_at[session_id]
        live = {s.id for s in self.pool.live()}
        stale = [k for k in jars if k is not None and k not in live and k not in self._retired_at]
        for key in stale:
            del jars[key]
        if stale:
            self._inc_stat("jars_freed", len(stale))

    @property
    def verified(self) -> VerifiedSessions | None:
        found = self._verified
        if callable(found) and not isinstance(found, VerifiedSessions):
            found = found()
            if found is not None:
                self._verified = found
        return found if isinstance(found, VerifiedSessions) else None

    async def process_request(self, request: Request, spider: Spider | None = None) -> None:
        meta = request.meta
        kind = meta.get("cnki_kind")
        if kind not in KINDS or meta.get("dont_cnki_session"):
            return
        verified = self.verified
        if verified is not None and (meta.get("cnki_verified") or verified.verified()):
            await self._use_verified(request, verified)
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
                try:
                    await self._warm_up(session, avoid)
                except RefusedPage:
                    if verified is not None and verified.verified():
                        # auto mode: that was CNKI checking for a person; this request goes on
                        # in a verified session, its retries unspent
                        meta.pop("cnki_session", None)
                        meta.pop("cookiejar", None)
                        await self._use_verified(request, verified)
                        return
                    raise
            if session.warmed:
                break
            # Its warm-up (someone else's, awaited) failed and retired it: take another.
            meta.pop("cnki_session", None)
        _set_cookie(request, CLIENT_ID_COOKIE, session.client_id)
        self._inc_stat(f"requests/{kind}")
        self._sweep_jars()

    async def _use_verified(self, request: Request, verified: VerifiedSessions) -> None:
        """Send ``request`` in its round's verified session (see the module docstring)."""
        meta = request.meta
        kind = meta["cnki_kind"]
        meta.pop("cnki_renew_session", None)  # a verified session is never swapped for a fault
        round_id = meta.get("round_id")
        round_key = verified.round_key(round_id)
        worker = verified.worker
        store = verified.store
        session_id = meta.get("cnki_session") if meta.get("cnki_verified") else None
        if kind in DOCUMENT_KINDS and session_id is None:
            # listed in a plain session (before auto mode moved on): that link is dead
            raise SessionLost(str(meta.get("cnki_session") or "plain"), "listed in a plain session")
        while True:
            if verified.stopping:
                # held, never acknowledged: its lease hands it to a worker that has a session
                hold(verified.crawler, request)
                raise HaltedRequest("the worker stopped while it waited for a person")
            if session_id is not None:
                # a list page may leave a session it shares for a free one (its detail links
                # stay with the session that lists them); a detail request may not
                state, value = await in_thread(
                    store.use,
                    session_id,
                    worker,
                    round_key,
                    round_id,
                    own=kind in ("list", "export"),
                )
                if state == "shared":
                    free = await in_thread(store.lease, worker, round_key, round_id, share=False)
                    if free.session_id is not None:
                        session_id = free.session_id
                    state, value = await in_thread(
                        store.use, session_id, worker, round_key, round_id
                    )
                if state == "ok":
                    verified.resumed()
                    await self._send_in(request, verified, session_id, int(value))
                    return
                if state == "cooling":
                    await verified.sleep(max(0.0, min(value - store.clock(), verified.poll)))
                    continue
                # needs-person, expired, gone: never retried in it
                verified.died(session_id)
                if kind in DOCUMENT_KINDS:
                    raise SessionLost(session_id, state)
                self._inc_stat(f"verified/lost/{state}")
                session_id = None
                meta.pop("cnki_session", None)
                meta.pop("cnki_verified", None)
            lease = await in_thread(store.lease, worker, round_key, round_id)
            if lease.session_id is not None:
                session_id = lease.session_id
                continue
            if lease.needs_person:
                await verified.wait_for_person()
            else:  # every session is busy with another round (or cooling): it comes back
                await verified.sleep(verified.poll)

    async def _send_in(
        self, request: Request, verified: VerifiedSessions, session_id: str, served: int
    ) -> None:
        """Put the verified session's cookies (never logged) and User-Agent on ``request``."""
        meta = request.meta
        meta["cnki_session"] = meta["cookiejar"] = session_id
        meta["cnki_verified"] = True
        meta["_session_request"] = served  # its number in the session, for the needs-person note
        session = await in_thread(verified.store.get, session_id)
        if session is None:
            raise SessionLost(session_id, "removed from the pool")
        for cookie in session.cookies:
            _set_cookie(request, cookie["name"], cookie["value"])
        if not any(c["name"] == CLIENT_ID_COOKIE for c in session.cookies):
            client_id = self._client_ids.get(session_id)
            if client_id is None:
                holder = Session(id=session_id, created_at=self.clock())
                client_id = self._client_ids[session_id] = await self._client_id(holder)
            _set_cookie(request, CLIENT_ID_COOKIE, client_id)
        if session.user_agent:  # the user-agent middleware (after this one) sends it
            meta["cnki_user_agent"] = session.user_agent
        self._inc_stat(f"verified/requests/{meta['cnki_kind']}")
        if session_id not in self._verified_used:
            self._verified_used.add(session_id)
            self._inc_stat("verified/used")

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
            client_id = await self._client_id(session)
            self.pool.mark_warmed(
                session,
                user_agent=(final.headers.get("User-Agent") or b"").decode("latin-1"),
                proxy=proxy_key(final.meta.get("proxy")),  # host:port, never credentials
                client_id=client_id,
            )
            self._inc_stat("warmed")
        except BaseException:
            self._inc_stat("warmup_failed")
            self.pool.retire(session.id, "warmup-failed")
            raise
        finally:
            for waiter in self._warming.pop(session.id):
                waiter.callback(None)

    async def _client_id(self, session: Session) -> str:
        """Step 2 of a warm-up: the session's Ecp_ClientId from CNKI's issuing endpoint."""
        request = Request(
            self.client_id_url,
            # same jar, hence the same User-Agent and proxy as the warm-up page
            meta={"cnki_kind": "home", "cnki_session": session.id, "cookiejar": session.id},
            headers={
                "Accept": "application/json, text/javascript, */*; q=0.01",
                "Referer": self.home_url,
            },
            dont_filter=True,
        )
        try:
            response = await self.download(request)
            if response.status >= 400:
                raise RefusedPage("client-id", f"HTTP {response.status} from {self.client_id_url}")
            try:
                return parse_client_id(response.body)
            except ValueError as exc:
                raise RefusedPage("client-id", str(exc)) from None
        except BaseException:
            self._inc_stat("client_id/failed")
            raise


class _CookieJars:
    """The ``jars`` of the crawler's CookiesMiddleware (one per meta ``cookiejar`` key), found
    once the downloader exists; None when cookies are off or another middleware handles them.
    Scrapy has no API to drop a jar: its ``jars`` mapping is the documented per-key store."""

    def __init__(self, crawler: Crawler):
        self.crawler = crawler
        self.jars: dict | None = None
        self.looked = False

    def __call__(self) -> dict | None:
        if not self.looked and self.crawler.engine is not None:
            self.looked = True
            middleware = self.crawler.get_downloader_middleware(CookiesMiddleware)
            self.jars = middleware.jars if middleware is not None else None
        return self.jars


def _set_cookie(request: Request, name: str, value: str) -> None:
    """Put ``name=value`` (path /) into ``request.cookies``, replacing an older value: Scrapy's
    CookiesMiddleware stores it in the request's cookie jar for the request's host."""
    cookies = request.cookies
    if isinstance(cookies, dict):
        cookies = [{"name": k, "value": v} for k, v in cookies.items()]
    kept = [c for c in (cookies or []) if c.get("name") != name]
    kept.append({"name": name, "value": value, "path": "/"})
    request.cookies = kept
