"""The shared rate limit (cnkispider/middlewares/ratelimit.py): reservations in the real Redis,
the keys a request counts against, the config.ini mapping, two worker processes that together
stay within one limit as the site's own clock sees it, and the real crawler kept under the
stand-in's own per-IP ban limit."""

from __future__ import annotations

import collections
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from scrapy import Request
from scrapy.exceptions import NotConfigured
from scrapy.utils.test import get_crawler

from cnkispider.config import load_config
from cnkispider.middlewares.ratelimit import ORDER, RateLimitMiddleware, SharedRateLimit
from cnkispider.settings import crawler_settings
from tests.crawl_harness import CrawlSetup, compare
from tests.fixtures.tiny_site import TinySite, read_lines

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def limiter(redis_url, redis_namespace):
    made = []

    def make(**options) -> SharedRateLimit:
        options.setdefault("prefix", f"{redis_namespace}:rl")
        made.append(SharedRateLimit(lambda: redis.Redis.from_url(redis_url), **options))
        return made[-1]

    yield make
    for one in made:
        one.close()


def planned(limiter: SharedRateLimit, requests: list[Request]) -> list[float]:
    """When each request may go, on this machine's clock (one reservation call each)."""
    times = []
    for request in requests:
        asked = time.monotonic()
        (wait,) = limiter.reserve([limiter.limits(request)])
        times.append(asked + wait)
    return times


def test_two_clients_share_one_schedule_at_the_rate(limiter):
    """Two workers' reservations interleave into one schedule, 1/rate apart."""
    a, b = limiter(site_rate=50), limiter(site_rate=50)
    request = Request("http://cnki.example:8080/kcms2/article/abstract?v=1")
    times = sorted(planned(a, [request]) + planned(b, [request]) + planned(a, [request] * 4)
                   + planned(b, [request] * 4))
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    assert min(gaps) == pytest.approx(0.02, abs=0.004)
    assert times[-1] - times[0] == pytest.approx(9 * 0.02, abs=0.01)


def test_a_burst_goes_at_once_then_the_rate_holds(limiter):
    one = limiter(site_rate=10, burst=3)
    waits = one.reserve([one.limits(Request("http://cnki.example/a"))] * 5)
    assert waits[:3] == [0, 0, 0]
    assert waits[3] == pytest.approx(0.1, abs=0.01)
    assert waits[4] == pytest.approx(0.2, abs=0.01)


def test_each_proxy_has_its_own_limit_and_the_site_limit_counts_them_all(limiter):
    one = limiter(site_rate=40, proxy_rate=5)
    via_a = Request("http://cnki.example/x", meta={"proxy": "http://user:secret@10.0.0.1:8000"})
    via_b = Request("http://cnki.example/x", meta={"proxy": "http://10.0.0.2:8000"})
    waits = one.reserve([one.limits(r) for r in (via_a, via_b, via_a, via_b, via_a)])
    a1, b1, a2, b2, a3 = waits
    assert a1 == 0
    assert b1 == pytest.approx(0.025, abs=0.005)  # another proxy, but the same site
    assert a2 == pytest.approx(0.2, abs=0.005)  # the proxy's own 1/5 s
    assert b2 == pytest.approx(0.225, abs=0.005)
    assert a3 == pytest.approx(0.4, abs=0.005)


def test_the_keys_a_request_counts_against(limiter):
    one = limiter(site_rate=1, proxy_rate=1, prefix="p")
    through = Request("https://KNS.cnki.net/x", meta={"proxy": "http://u:pw@1.2.3.4:99"})
    assert [key for key, _, _ in one.limits(through)] == ["p:site:kns.cnki.net", "p:proxy:1.2.3.4:99"]
    assert one.limits(Request("http://127.0.0.1:8800/", meta={"dont_ratelimit": True})) == []
    assert one.limits(Request("data:,hello")) == []
    site_only = limiter(site_rate=1, prefix="p")
    assert [key for key, _, _ in site_only.limits(through)] == ["p:site:kns.cnki.net"]


@pytest.mark.parametrize(
    "settings",
    [{}, {"RATELIMIT_RATE": 5, "RATELIMIT_ENABLED": False}],
    ids=["no rate set", "switched off"],
)
def test_the_middleware_is_off_unless_a_rate_is_set(settings):
    with pytest.raises(NotConfigured):
        RateLimitMiddleware.from_crawler(get_crawler(settings_dict=settings))


def test_config_ini_maps_onto_the_settings_and_the_middleware_follows_the_proxy(tmp_path):
    ini = tmp_path / "config.ini"
    ini.write_text("[crawl]\nrate_limit = 4\nrate_burst = 2\n[proxy]\nrate_limit = 0.5\n")
    settings = crawler_settings(load_config(ini))
    assert (settings["RATELIMIT_RATE"], settings["RATELIMIT_BURST"]) == (4.0, 2)
    assert settings["RATELIMIT_PROXY_RATE"] == 0.5
    order = settings["DOWNLOADER_MIDDLEWARES"]
    assert order["cnkispider.middlewares.ratelimit.RateLimitMiddleware"] == ORDER
    assert ORDER > order["cnkispider.middlewares.session.SessionMiddleware"]
    assert ORDER > order["cnkispider.middlewares.proxy.ProxyMiddleware"]


# -- two workers, one limit ---------------------------------------------------------------

RATE, BURST, PAGES = 10, 2, 60

#: A tiny-site worker (tests/fixtures/tiny_site.py) with the rate-limit middleware switched on.
WORKER = r"""
import sys
from tests.fixtures import tiny_site
plain = tiny_site.crawl_settings
def limited(args):
    settings = plain(args)
    settings["DOWNLOADER_MIDDLEWARES"] = {
        "cnkispider.middlewares.ratelimit.RateLimitMiddleware": 760}
    settings.update(RATELIMIT_RATE=float(sys.argv[1]), RATELIMIT_BURST=int(sys.argv[2]),
                    RATELIMIT_KEY_PREFIX=sys.argv[3], REDIS_URL=sys.argv[4])
    return settings
tiny_site.crawl_settings = limited
tiny_site.main(sys.argv[5:])
"""


def stamped_site(pages: int) -> tuple[TinySite, list[float]]:
    """A tiny site that also notes the time of every page request, on its own clock."""
    site = TinySite(pages=pages, fanout=4)
    stamps: list[float] = []
    served = site.server.RequestHandlerClass

    class Stamped(served):
        def do_GET(self):
            if self.path.startswith("/p/"):
                stamps.append(time.monotonic())
            super().do_GET()

    site.server.RequestHandlerClass = Stamped
    return site.start(), stamps


@pytest.mark.slow
def test_two_workers_under_a_shared_limit_stay_within_it(tmp_path, redis_url, redis_namespace):
    """N requests per second for both workers together: no second of the site's clock sees more
    than N + burst, and the crawl takes about pages / N seconds."""
    site, stamps = stamped_site(PAGES)
    items = tmp_path / "items.jsonl"
    workers = []
    try:
        for name in ("a", "b"):
            log = open(tmp_path / f"log-{name}.txt", "w")
            workers.append(subprocess.Popen(
                [sys.executable, "-c", WORKER, str(RATE), str(BURST), f"{redis_namespace}:rl",
                 redis_url, "--start", site.url, "--namespace", redis_namespace,
                 "--items", str(items), "--redis-url", redis_url,
                 "--data-dir", str(tmp_path / "data"), "--concurrency", "4", "--batch", "4"],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
            ))
        codes = [w.wait(timeout=60) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
        site.stop()
    logs = "\n".join((tmp_path / f"log-{n}.txt").read_text()[-2000:] for n in "ab")
    assert codes == [0, 0], logs

    pages = [r for r in read_lines(items) if "page" in r]
    assert sorted(r["page"] for r in pages) == list(range(PAGES))
    assert len(collections.Counter(r["pid"] for r in pages)) == 2, "both workers crawled"
    assert len(stamps) == PAGES

    stamps.sort()
    busiest = max(sum(1 for t in stamps[i:] if t < start + 1.0) for i, start in enumerate(stamps))
    took = stamps[-1] - stamps[0]
    print(f"{PAGES} pages in {took:.2f} s; busiest second {busiest} requests (limit {RATE}, "
          f"burst {BURST})")
    assert busiest <= RATE + BURST
    assert (PAGES - BURST) / RATE - 0.1 <= took <= PAGES / RATE * 1.3 + 1


@pytest.mark.slow
def test_two_crawlers_under_the_sites_own_per_ip_limit_are_never_banned(
    tmp_path, cnki_site, mysql_url
):
    """The real crawler (`cnkispider run --processes 2`, [crawl] rate_limit just under the
    stand-in's own per-IP limit, which bans an address that goes faster): no ban, full data."""
    site = cnki_site(seed=3, latency="0.01", rate_limit=20, burst=5, ban_seconds=30)
    setup = CrawlSetup(
        tmp_path, site, mysql_url, "patent", "2024-03-01", "2024-03-01", "A,B,E,F",
        crawl={"concurrent_requests": 16, "rate_limit": 18, "rate_burst": 3, "lease_seconds": 20},
    )
    try:
        result = setup.run("run", "--processes", "2", timeout=120)
    finally:
        setup.cleanup_redis()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    stats = site.stats()
    assert (stats["banned_responses"], stats["bans"]) == (0, 0)
    assert compare(setup.stored(), setup.truth(), "patent") == {
        "missing": [], "extra": [], "differing": {}}
