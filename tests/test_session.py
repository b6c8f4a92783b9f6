"""CNKI sessions: the pool (pure, with injected time), and the warm-up with its Ecp_ClientId in
real Scrapy crawls against a small local site."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
import scrapy
from scrapy.utils.test import get_crawler

from cnkispider.cnki.protocol import CLIENT_ID_PATH, GRID_PATH, HOME_PATH, Protocol
from cnkispider.cnki.search import Search
from cnkispider.cnki.session import SessionPool
from cnkispider.runtime.addon import ADDONS
from cnkispider.settings import DOWNLOADER_MIDDLEWARES

CNKI_TURN_LIMIT = 15  # CNKI stops a session after this many page turns


class Clock:
    def __init__(self, now: float = 0.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_pool(**kw):
    ids = (f"s{i}" for i in itertools.count(1))
    retired = []
    kw.setdefault("clock", Clock())
    pool = SessionPool(
        new_id=lambda: next(ids), on_retire=lambda s, r: retired.append((s.id, r)), **kw
    )
    return pool, retired


def walk(pool, pages, kind="list"):
    """The session each of `pages` list requests gets, each following the previous one."""
    sessions, current = [], None
    for _ in range(pages):
        session, _ = pool.acquire(kind, current)
        sessions.append(session)
        current = session.id
    return sessions


def test_a_session_is_renewed_before_cnkis_turn_limit():
    """With the default limit (14) a session serves 15 grid requests (14 turns), then a new one
    takes over: CNKI's 15th turn is never asked for."""
    pool, retired = make_pool(turn_limit=14)
    sessions = walk(pool, 40)
    ids = [s.id for s in sessions]
    assert ids == ["s1"] * 15 + ["s2"] * 15 + ["s3"] * 10
    assert max(s.turns for s in sessions) == 14 < CNKI_TURN_LIMIT
    assert retired == [("s1", "turn-limit"), ("s2", "turn-limit")]


def test_a_retired_session_is_never_handed_out_again():
    pool, _ = make_pool()
    first, _ = pool.acquire("list")
    assert pool.retire(first.id, "renewed") and first.retired
    again, created = pool.acquire("list", first.id)
    assert again is not first and created
    assert pool.get(first.id) is None and not pool.retire(first.id, "renewed")


def test_detail_requests_use_a_session_without_spending_turns():
    pool, _ = make_pool(turn_limit=2)
    session = walk(pool, 1)[0]
    for _ in range(50):
        assert pool.acquire("detail", session.id)[0] is session
    assert session.turns == 0 and session.requests == 51


def test_sessions_older_than_max_age_are_retired():
    clock = Clock()
    pool, retired = make_pool(max_age=600, clock=clock)
    old, _ = pool.acquire("list")
    clock.now = 599
    assert pool.acquire("list", old.id)[0] is old
    clock.now = 600
    new, created = pool.acquire("list", old.id)
    assert created and new is not old and old.retired
    assert retired == [("s1", "max-age")]


def test_at_most_size_sessions_are_live_and_the_least_used_is_shared():
    pool, _ = make_pool(size=2)
    a, created_a = pool.acquire("list")
    b, created_b = pool.acquire("list")
    c, created_c = pool.acquire("list")
    d, _ = pool.acquire("list")
    assert (created_a, created_b, created_c) == (True, True, False)
    assert len(pool) == 2 and c is a and d is b


def test_a_session_retired_on_its_last_turn_still_records_its_warm_up():
    """The request that took the last turn may still warm the session up and use it."""
    pool, _ = make_pool(turn_limit=0)
    session, created = pool.acquire("list")
    assert created and session.retired
    assert pool.mark_warmed(session, user_agent="UA", proxy="1.2.3.4:80") is False
    assert session.warmed and session.proxy == "1.2.3.4:80"


def test_random_ids_by_default_are_unique():
    pool = SessionPool(size=1000)
    ids = {pool.acquire("list")[0].id for _ in range(1000)}
    assert len(ids) == 1000


@pytest.mark.parametrize("kw", [{"turn_limit": -1}, {"size": 0}])
def test_bad_limits_are_refused(kw):
    with pytest.raises(ValueError):
        SessionPool(**kw)


# -- the warm-up and Ecp_ClientId, in real Scrapy crawls against a small local site ----------------
#
# The site is this file's own: a threading http.server on 127.0.0.1 (port 0) whose grid answers as
# CNKI does in 2026 (CONTRACT-2026 point 2): a POST without an Ecp_ClientId it issued gets
# 403 {"code":-403,...}. The client id is asked of "localhost" (the same server under another host
# name), as the crawler asks CNKI's recsys host, so the tests also see which host gets which cookie.
# The crawls run without a Twisted reactor, each in its own asyncio.run (as tests/test_middlewares.py).


LIST_PAGE = (
    '<div id="briefBox"><span class="pagerTitleCell">共找到 <em>1</em> 条结果</span>'
    '<span class="countPageMark" data-pagenum="1">1/1</span><table class="result-table-list">'
    '<tbody><tr><td class="seq">1</td><td class="name"><a class="fz14" href="/kcms2/x?v=1">T</a>'
    '</td><td class="operat"><a class="icon-collect" data-dbname="SCPD" data-filename="CN1A">'
    "</a></td></tr></tbody></table></div>"
).encode()
HOME_PAGE = "<html><head><title>检索-中国知网</title></head><body>ok</body></html>".encode()
JSON_403 = (
    b'{"code":-403,"message":"http://127.0.0.1/verify/home?captchaType=blockPuzzle&ident=ab'
    b'&captchaId=cd&returnUrl=x"}'
)


class CnkiLike:
    """Home, client id and grid; ``client_id_answers`` overrides the first client-id answers."""

    def __init__(self):
        self.hits: list[dict] = []
        self.issued: set[str] = set()
        self.lock = threading.Lock()
        self.client_id_answers: list[tuple[int, bytes]] = []
        self._n = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.site = self
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        port = self.server.server_port
        self.base_url = f"http://127.0.0.1:{port}"
        self.client_id_url = f"http://localhost:{port}{CLIENT_ID_PATH}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def on(self, path: str) -> list[dict]:
        return [h for h in self.hits if h["path"] == path]

    def answer(self, hit: dict) -> tuple[int, dict, bytes]:
        self._n += 1
        if hit["path"] == HOME_PATH:
            sid = f"sid{self._n}"
            hit["set_sid"] = sid
            return 200, {"Set-Cookie": f"SID_kns_new={sid}; path=/"}, HOME_PAGE
        if hit["path"] == CLIENT_ID_PATH:
            if self.client_id_answers:
                status, body = self.client_id_answers.pop(0)
                return status, {"Content-Type": "application/json"}, body
            cid = f"cid{self._n:04d}"
            self.issued.add(cid)
            hit["issued"] = cid
            body = json.dumps({"Success": True, "Data": cid}).encode()
            return 200, {"Content-Type": "application/json"}, body
        if hit["path"] == GRID_PATH:
            if hit["cookies"].get("Ecp_ClientId") not in self.issued:
                return 403, {"Content-Type": "application/json"}, JSON_403
            return 200, {}, LIST_PAGE
        return 404, {}, b"not here"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        site = self.server.site
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        cookie = self.headers.get("Cookie") or ""
        hit = {
            "path": urlsplit(self.path).path,
            "host": (self.headers.get("Host") or "").split(":")[0],
            "cookies": dict(c.strip().split("=", 1) for c in cookie.split(";") if "=" in c),
            "ua": self.headers.get("User-Agent"),
            "form": {k: v[0] for k, v in parse_qs(body.decode()).items()},
        }
        with site.lock:
            site.hits.append(hit)
            status, headers, out = site.answer(hit)
        self.send_response(status)
        for name, value in {"Content-Type": "text/html; charset=utf-8", **headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_POST = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture
def cnki_like():
    site = CnkiLike()
    yield site
    site.close()


class GridSpider(scrapy.Spider):
    """Sends real grid POSTs (Protocol.grid_form) as list requests; keeps what comes back."""

    name = "grid"

    def __init__(self, pages=1, **kw):
        super().__init__(**kw)
        self.pages = pages
        self.responses, self.failures = [], []

    async def start(self):
        protocol = Protocol(self.settings["CNKI_BASE_URL"])
        search = Search.for_day("patent", "2024-03-01", "G06")
        for page in range(1, self.pages + 1):
            yield scrapy.FormRequest(
                protocol.grid_url,
                formdata=protocol.grid_form(search, page, None, new_search=True),
                headers=protocol.grid_headers(),
                meta={"cnki_kind": "list", "doc_type": "patent"},
                callback=self.parse,
                errback=self.failed,
                dont_filter=True,
            )

    def parse(self, response):
        self.responses.append(response)

    def failed(self, failure):
        self.failures.append(failure.value)


def crawl_grid(site: CnkiLike, pages: int = 1, **settings):
    base = {
        "ADDONS": ADDONS,
        "DOWNLOADER_MIDDLEWARES": DOWNLOADER_MIDDLEWARES,
        "RATELIMIT_ENABLED": False,  # the shared limit has tests of its own (test_ratelimit.py)
        "CNKI_BASE_URL": site.base_url,
        "CNKI_CLIENT_ID_URL": site.client_id_url,
        "RETRY_BACKOFF_BASE": 0,
        "DOWNLOAD_TIMEOUT": 5,
        "COOKIES_ENABLED": True,
    }
    crawler = get_crawler(GridSpider, {**base, **settings})
    asyncio.run(crawler.crawl_async(pages=pages))
    return crawler


def test_grid_posts_of_a_warmed_session_carry_the_ecp_clientid_it_was_issued(cnki_like):
    """Old mistake: no Ecp_ClientId, and CNKI answers every grid POST with the -403 JSON."""
    crawler = crawl_grid(
        cnki_like, pages=6, SESSION_POOL_SIZE=1, SESSION_TURN_LIMIT=1, CONCURRENT_REQUESTS=1
    )
    grids = cnki_like.on(GRID_PATH)
    assert len(crawler.spider.responses) == 6 and not crawler.spider.failures
    assert all(r.status == 200 for r in crawler.spider.responses)
    # each grid POST carries the id issued to its own session (known by its SID_kns_new); one
    # request at a time, so each warm-up page is followed by its own client-id call
    issued_after = {}
    for home, cid in zip(cnki_like.on(HOME_PATH), cnki_like.on(CLIENT_ID_PATH), strict=True):
        assert home["ua"] == cid["ua"]  # one browser per session
        issued_after[home["set_sid"]] = cid["issued"]
    assert len(issued_after) >= 3  # the sessions were renewed on the way
    assert all(
        h["cookies"]["Ecp_ClientId"] == issued_after[h["cookies"]["SID_kns_new"]] for h in grids
    )
    assert crawler.stats.get_value("session/warmed") == len(issued_after)


def test_the_client_id_cookie_stays_on_the_kns_host(cnki_like):
    """The id is asked of another host and sent only to the site's own (path /)."""
    crawl_grid(cnki_like, pages=2, SESSION_POOL_SIZE=1)
    assert {h["host"] for h in cnki_like.on(CLIENT_ID_PATH)} == {"localhost"}
    assert all("Ecp_ClientId" not in h["cookies"] for h in cnki_like.on(CLIENT_ID_PATH))
    assert all("Ecp_ClientId" not in h["cookies"] for h in cnki_like.on(HOME_PATH))
    assert all(h["cookies"].get("Ecp_ClientId") for h in cnki_like.on(GRID_PATH))


def test_a_failed_client_id_retires_the_session_and_the_request_gets_a_fresh_one(cnki_like):
    """Success false is a failed warm-up: never a grid POST without the cookie."""
    cnki_like.client_id_answers = [(200, b'{"Success":false,"Data":null}')]
    crawler = crawl_grid(cnki_like, pages=1, SESSION_POOL_SIZE=1)
    assert len(crawler.spider.responses) == 1 and not crawler.spider.failures
    assert [
        h["cookies"].get("Ecp_ClientId") in cnki_like.issued for h in cnki_like.on(GRID_PATH)
    ] == [True]
    assert len(cnki_like.on(HOME_PATH)) == 2  # the first session's warm-up failed: a second one
    stats = crawler.stats
    assert stats.get_value("session/client_id/failed") == 1
    assert stats.get_value("session/retired/warmup-failed") == 1
    assert stats.get_value("retry/reason_count/client-id") == 1


def test_a_client_id_endpoint_that_always_fails_fails_the_request_without_any_grid_post(cnki_like):
    cnki_like.client_id_answers = [(200, b"<html>maintenance</html>")] * 10
    crawler = crawl_grid(cnki_like, pages=1, RETRY_TIMES=2)
    (error,) = crawler.spider.failures
    assert getattr(error, "reason", None) == "client-id"
    assert cnki_like.on(GRID_PATH) == []
    assert crawler.stats.get_value("session/client_id/failed") == 3


def test_a_challenged_client_id_call_is_a_challenge_of_the_warm_up(cnki_like):
    """The -403 JSON from the issuing host is a challenge (verify), retried like any other."""
    cnki_like.client_id_answers = [(403, JSON_403)]
    crawler = crawl_grid(cnki_like, pages=1)
    assert len(crawler.spider.responses) == 1
    assert crawler.stats.get_value("retry/reason_count/verify") == 1
    assert all(
        h["cookies"].get("Ecp_ClientId") in cnki_like.issued for h in cnki_like.on(GRID_PATH)
    )


# -- retired sessions' cookie jars are freed ---------------------------------------------------------


def test_retired_sessions_cookie_jars_are_freed_after_the_grace_only():
    """Scrapy keeps a jar per cookiejar key forever; the session middleware drops those of
    sessions retired more than jar_grace ago (also one a straggler re-created), never a live
    session's nor the default jar (key None)."""
    from cnkispider.middlewares.session import SessionMiddleware

    clock = Clock()
    pool, _ = make_pool(turn_limit=0, size=4, clock=clock)
    jars: dict = {None: "default"}
    middleware = SessionMiddleware(
        pool,
        "http://x/home",
        download=None,
        client_id_url="http://x/cid",
        cookie_jars=lambda: jars,
        jar_grace=10,
        clock=clock,
    )
    first, _ = pool.acquire("list")  # its only turn: retired at once (t=0)
    jars[first.id] = "jar1"
    clock.now = 5
    live, _ = pool.acquire("detail")
    jars[live.id] = "jar2"
    middleware._sweep_jars()
    assert set(jars) == {None, first.id, live.id}  # within the grace
    clock.now = 10.5
    middleware._sweep_jars()
    assert set(jars) == {None, live.id}
    jars[first.id] = "re-created by a late response"
    clock.now = 11  # sweeps are at most one every jar_grace / 10 seconds
    middleware._sweep_jars()
    assert first.id in jars
    clock.now = 11.6
    middleware._sweep_jars()
    assert set(jars) == {None, live.id}


def test_the_session_middleware_finds_the_crawls_cookie_jars(cnki_like):
    from scrapy.downloadermiddlewares.cookies import CookiesMiddleware

    from cnkispider.middlewares.session import SessionMiddleware

    crawler = crawl_grid(cnki_like, pages=2, SESSION_POOL_SIZE=1)
    middlewares = crawler.engine.downloader.middleware.middlewares
    (session_mw,) = [m for m in middlewares if isinstance(m, SessionMiddleware)]
    (cookies_mw,) = [m for m in middlewares if isinstance(m, CookiesMiddleware)]
    jars = session_mw.cookie_jars()
    assert jars is cookies_mw.jars
    assert {s.id for s in session_mw.pool.live()} <= set(jars)
