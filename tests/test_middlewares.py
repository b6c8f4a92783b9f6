"""The downloader middlewares in whole crawls against a tiny local site and local proxies.

The site is a few routes on a threading http.server (127.0.0.1, port 0); each "proxy" is another
such server that serves the same site when asked for an absolute URL, so a hit records which
address it came through. The crawls run without a Twisted reactor (``get_crawler()`` picks
Scrapy's reactorless mode when none is installed), each in its own ``asyncio.run``.
"""

from __future__ import annotations

import base64
import itertools
import logging
import time

import pytest
import scrapy
from scrapy.utils.test import get_crawler

from cnkispider.cnki.protocol import HOME_PATH, Protocol
from cnkispider.exceptions import GaveUp
from cnkispider.middlewares.useragent import UserAgentMiddleware
from cnkispider.runtime.addon import ADDONS
from tests.fixtures.middleware_site import (
    GRID,
    Site,
    crawl,
)

# -- the local site --------------------------------------------------------------------------------


@pytest.fixture
def site():
    sites = []

    def make(**kw):
        sites.append(Site(**kw))
        return sites[-1]

    yield make
    for s in sites:
        s.close()


# -- running a crawl -----------------------------------------------------------------------------


def grid(doc_type="patent", **meta):
    return scrapy.Request(
        "http://placeholder/",  # replaced with the site's in list_requests()
        meta={"cnki_kind": "list", "doc_type": doc_type, **meta},
        dont_filter=True,
    )


def list_requests(site: Site, n: int, doc_type="patent", **meta) -> list[scrapy.Request]:
    return [grid(doc_type, **meta).replace(url=f"{site.base_url}{GRID}?n={i}") for i in range(n)]


# -- User-Agent and Referer -----------------------------------------------------------------------


def test_one_user_agent_per_session(site):
    """Warm-up and grid requests of one session share a UA; sessions are renewed on the way."""
    s = site()
    crawl(s, list_requests(s, 12), SESSION_TURN_LIMIT=2, SESSION_POOL_SIZE=2)
    ua_by_sid: dict[str, set] = {}
    for hit in s.hits:
        sid = hit.get("set_sid") or hit["sid"]
        ua_by_sid.setdefault(sid, set()).add(hit["ua"])
    assert len(s.on(HOME_PATH)) >= 4  # 12 grid requests, at most 3 per session
    assert all(len(uas) == 1 for uas in ua_by_sid.values())
    assert all("Scrapy" not in ua for uas in ua_by_sid.values() for ua in uas)


def test_requests_without_a_session_get_a_random_user_agent():
    middleware = UserAgentMiddleware.from_crawler(get_crawler(settings_dict={"ADDONS": ADDONS}))
    assert len({middleware.user_agent_for(None) for _ in range(50)}) > 1
    assert len({middleware.user_agent_for("s1") for _ in range(50)}) == 1


@pytest.mark.slow  # over a second alone: a Scrapy crawl of two types' list pages
def test_referer_per_document_type(site):
    s = site()
    requests = list_requests(s, 1, "patent") + [
        r.replace(url=r.url + "&paper") for r in list_requests(s, 1, "paper")
    ]
    crawl(s, requests)
    protocol = Protocol(s.base_url)
    referers = {h["referer"] for h in s.on(GRID)}
    assert referers == {protocol.referer("patent"), protocol.referer("paper")}
    assert protocol.referer("patent") != protocol.referer("paper")


# -- sessions ---------------------------------------------------------------------------------------


def test_warm_up_once_per_session_and_its_cookies_flow(site):
    """Concurrent list requests share one session: one warm-up, then all carry its cookie."""
    s = site()
    crawler = crawl(s, list_requests(s, 6), SESSION_POOL_SIZE=1)
    homes, grids = s.on(HOME_PATH), s.on(GRID)
    assert len(homes) == 1 and len(grids) == 6
    assert {h["sid"] for h in grids} == {homes[0]["set_sid"]}
    assert homes[0]["time"] < min(h["time"] for h in grids)
    assert crawler.stats.get_value("session/warmed") == 1


def test_sessions_are_renewed_before_the_turn_limit(site):
    s = site()
    crawl(s, list_requests(s, 6), SESSION_TURN_LIMIT=1, SESSION_POOL_SIZE=1, CONCURRENT_REQUESTS=1)
    per_session = [
        sum(1 for h in s.on(GRID) if h["sid"] == home["set_sid"]) for home in s.on(HOME_PATH)
    ]
    assert per_session == [2, 2, 2]


# -- retries ---------------------------------------------------------------------------------------


def test_verify_twice_then_ok_retries_with_fresh_sessions_and_other_proxies(site):
    s = site(proxies=3)
    answers = iter([s.verify, s.verify])
    s.routes[GRID] = lambda hit: next(answers, s.ok)(hit)
    crawler = crawl(s, list_requests(s, 1), RETRY_TIMES=5)
    spider = crawler.spider
    grids = s.on(GRID)
    assert len(spider.responses) == 1 and spider.responses[0][1].status == 200
    assert not spider.failures
    assert len(grids) == 3 and crawler.stats.get_value("retry/count") == 2
    assert crawler.stats.get_value("retry/reason_count/verify") == 2
    assert len({h["sid"] for h in grids}) == 3  # a fresh session each time
    vias = [h["via"] for h in grids]
    assert None not in vias and vias[0] != vias[1] != vias[2]
    # each session stayed on the proxy its warm-up went through
    home_via = {h["set_sid"]: h["via"] for h in s.on(HOME_PATH)}
    assert all(home_via[h["sid"]] == h["via"] for h in grids)


def test_always_refused_ends_in_gave_up_with_every_attempt(site):
    s = site(proxies=2)
    s.routes[GRID] = s.verify
    crawler = crawl(s, list_requests(s, 1), RETRY_TIMES=3)
    spider = crawler.spider
    assert not spider.responses and len(spider.failures) == 1
    error = spider.failures[0][1]
    assert isinstance(error, GaveUp)
    assert (error.reason, error.attempts) == ("verify", 4)
    assert len(s.on(GRID)) == 4
    assert crawler.stats.get_value("retry/max_reached") == 1


REJECTION_PAGE = (
    '<div id="briefBox"><p class="no-content" value="查询对象结构错误, 没有指定检索分类！">'
    "抱歉，暂无数据，请稍后重试。</p></div>"
).encode()


def test_a_rejection_is_never_retried_and_gives_up_with_cnki_words(site):
    s = site(proxies=2)
    s.routes[GRID] = lambda hit: (200, {}, REJECTION_PAGE)
    crawler = crawl(s, list_requests(s, 1), RETRY_TIMES=5)
    spider = crawler.spider
    assert not spider.responses and len(spider.failures) == 1
    error = spider.failures[0][1]
    assert isinstance(error, GaveUp)
    assert (error.reason, error.attempts, error.detail) == (
        "rejected",
        1,
        "查询对象结构错误, 没有指定检索分类！",
    )
    assert len(s.on(GRID)) == 1  # one request, no retry, no fresh session
    assert crawler.stats.get_value("retry/rejected") == 1
    assert not crawler.stats.get_value("retry/count")


@pytest.mark.timing  # measures wall-clock gaps: `make test` runs it alone, after the parallel pass
def test_backoff_does_not_block_other_requests(site):
    """One request backs off for about a second; the others (and the direct connection: the
    proxy switch is off) go on meanwhile."""
    s = site()
    s.routes["/busy"] = s.unavailable
    start = time.monotonic()
    requests = [scrapy.Request(f"{s.base_url}/busy", dont_filter=True)] + [
        scrapy.Request(f"{s.base_url}{GRID}?n={i}", dont_filter=True) for i in range(5)
    ]
    crawler = crawl(s, requests, RETRY_TIMES=1, RETRY_BACKOFF_BASE=1.0)
    spider = crawler.spider
    ((gave_up_at, error),) = spider.failures
    assert isinstance(error, GaveUp) and error.reason == "http-503"
    assert gave_up_at - start >= 0.5
    assert len(spider.responses) == 5
    # all five answered while the busy one was still backing off, not after it; timed
    # from its giving up, not from before the crawler started (a loaded machine starts slowly)
    assert max(t for t, _ in spider.responses) < gave_up_at - 0.25  # back-off: 0.5 to 1 s
    assert all(h["via"] is None for h in s.hits)


# -- proxy credentials -----------------------------------------------------------------------------


def test_proxy_credentials_never_reach_the_logs(site, caplog):
    """Through authenticated proxies, with a dead one evicted and a retry on the way."""
    s = site(proxies=2, proxy_auth="bob:s3cret-pw")
    dead = "bob:s3cret-pw@127.0.0.1:9"  # nothing listens on the discard port
    answers = iter([s.verify])
    s.routes[GRID] = lambda hit: next(answers, s.ok)(hit)
    caplog.set_level(logging.DEBUG)
    crawler = crawl(s, list_requests(s, 3), PROXY_STATIC=[dead, *s.proxies()])
    assert len(crawler.spider.responses) == 3
    assert all(h["via"] for h in s.hits)
    text = caplog.text
    assert "127.0.0.1" in text  # the proxies were logged, masked
    for secret in ("s3cret-pw", base64.b64encode(b"bob:s3cret-pw").decode()):
        assert secret not in text


# -- the provider API -------------------------------------------------------------------------------


@pytest.mark.timing  # gaps between calls as the site saw them: a busy machine shortens one
def test_a_dry_pool_buys_batches_no_faster_than_the_provider_allows(site, caplog):
    """PROXY_REUSE=1: every request needs a new proxy. The provider (JSON, one proxy a call, a
    refusal first) is called once per interval, by one request while the others wait."""
    s = site(proxies=2)
    ports = itertools.cycle(p.server_port for p in s.proxy_servers)
    answers = iter([b'{"code":111,"msg":"too fast"}'])

    def api(hit):
        body = next(answers, None)
        if body is None:
            body = f'{{"code":0,"data":[{{"ip":"127.0.0.1","port":{next(ports)}}}]}}'.encode()
        return 200, {"Content-Type": "application/json"}, body

    s.routes["/api"] = api
    requests = [scrapy.Request(f"{s.base_url}/page?n={i}", dont_filter=True) for i in range(3)]
    s.routes["/page"] = s.ok
    caplog.set_level(logging.INFO)
    crawler = crawl(
        s,
        requests,
        PROXY_STATIC=[],
        PROXY_API_URL=f"{s.base_url}/api?key=k3y",
        PROXY_API_FORMAT="json",
        PROXY_REUSE=1,
        PROXY_FETCH_INTERVAL=0.2,
    )
    calls = [h["time"] for h in s.on("/api")]
    assert len(crawler.spider.responses) == 3
    assert len(calls) == 4  # the refusal, then one proxy per request
    assert min(b - a for a, b in itertools.pairwise(calls)) >= 0.19
    assert all(h["via"] for h in s.on("/page"))
    assert crawler.stats.get_value("proxy/fetch/error") == 1
    assert "/api?***" in caplog.text and "k3y" not in caplog.text
