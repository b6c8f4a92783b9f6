"""The shared rate limit (cnkispider/middlewares/ratelimit.py, cnkispider/pace/): reservations
in the real Redis, the keys a request counts against, the config.ini mapping, two worker
processes that together stay within one limit as the site's own clock sees it, and the real
crawler kept under the stand-in's own per-IP ban limit."""

from __future__ import annotations

import asyncio
import collections
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from scrapy import Request
from scrapy.exceptions import NotConfigured
from scrapy.statscollectors import StatsCollector
from scrapy.utils.test import get_crawler

from cnkispider.config import load_config
from cnkispider.launch.crawlsettings import crawler_settings
from cnkispider.middlewares.ratelimit import RateLimitMiddleware
from cnkispider.pace.store import Answer, PaceRule, SharedRateLimit
from cnkispider.runtime.addon import ADDONS
from cnkispider.runtime.offload import ThreadIO
from tests.fixtures.clock import Clock
from tests.fixtures.crawl_harness import compare
from tests.fixtures.pace_model import Pace
from tests.fixtures.pace_store import stored
from tests.fixtures.tiny_site import TinySite, read_lines

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def limiter(redis_url, redis_namespace):
    made = []

    def make(**options) -> SharedRateLimit:
        options.setdefault("prefix", f"{redis_namespace}:rl")
        # the windows of CNKI's 429 have tests of their own (tests/test_windows.py)
        options.setdefault("windows", False)
        made.append(SharedRateLimit(lambda: redis.Redis.from_url(redis_url), **options))
        return made[-1]

    yield make
    for one in made:
        one.close()


def planned(limiter: SharedRateLimit, requests: list[Request]) -> list[float]:
    """When each request may go, on the Redis server's clock (one reservation call each), so
    that a slow call on a busy machine does not move it."""
    times = []
    for request in requests:
        reply = limiter.call([limiter.limits(request)])
        times.append(reply.now / 1e6 + reply.waits[0])
    return times


@pytest.mark.timing  # measures wall-clock gaps: `make test` runs it alone, after the parallel pass
def test_two_clients_share_one_schedule_at_the_rate(limiter):
    """Two workers' reservations interleave into one schedule, 1/rate apart."""
    a, b = limiter(site_rate=50), limiter(site_rate=50)
    request = Request("http://cnki.example:8080/kcms2/article/abstract?v=1")
    times = sorted(
        planned(a, [request])
        + planned(b, [request])
        + planned(a, [request] * 4)
        + planned(b, [request] * 4)
    )
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
    assert [limit.key for limit in one.limits(through)] == [
        "p:site:kns.cnki.net",
        "p:proxy:1.2.3.4:99",
    ]
    assert one.limits(Request("http://127.0.0.1:8800/", meta={"dont_ratelimit": True})) == []
    assert one.limits(Request("data:,hello")) == []
    site_only = limiter(site_rate=1, prefix="p")
    assert [limit.key for limit in site_only.limits(through)] == ["p:site:kns.cnki.net"]


# -- paces in Redis ------------------------------------------------------------------------


def cnki(url: str = "http://cnki.example:8080/kcms2/article/abstract?v=1", **meta) -> Request:
    return Request(url, meta={"cnki_kind": "detail", "cnki_session": "s1", **meta})


def test_a_cnki_page_counts_against_its_sessions_pace_and_its_ips(limiter):
    one = limiter(prefix="p", site_rate=8, pace=PaceRule())
    keys = [(limit.key, limit.pace, limit.max_rate) for limit in one.limits(cnki())]
    assert keys == [
        ("p:site:cnki.example:8080", False, 0.0),
        ("p:pace:cnki.example:8080:ip:direct", True, 8.0),
        ("p:pace:cnki.example:8080:session:s1", True, 8.0),
    ]
    through = cnki(proxy="http://u:pw@10.0.0.2:8000")
    assert [limit.key for limit in one.limits(through)][
        1
    ] == "p:pace:cnki.example:8080:ip:10.0.0.2:8000"
    not_cnki = Request("http://cnki.example:8080/other")  # no cnki_kind: no pace
    assert [limit.key for limit in one.limits(not_cnki)] == ["p:site:cnki.example:8080"]


def replay(one: SharedRateLimit, request: Request, events: str) -> None:
    """Reserve for ``request``, then answer each reservation: c(hallenge) or o(k)."""
    for event in events:
        reply = one.call([one.limits(request)])
        paces = tuple(limit for limit in one.limits(request) if limit.pace)
        one.call([], [Answer(event == "c", reply.now, paces, reply.rates[0])])


def test_the_shared_pace_follows_the_aimd_rule(limiter, redis_url):
    """The Lua script and :class:`Pace` agree: same answers, same pace, ceiling, cool-down."""
    rule = PaceRule(start=2.0, step=0.5, cooldown=7.0, cooldown_max=20.0)
    one = limiter(pace=rule)
    request = cnki()
    events = "oooooooooocoooooooco" + "o" * 30
    replay(one, request, events)
    clock = Clock()
    model = Pace(rule, clock=clock)
    for event in events:
        granted_rate = model.rate
        granted, _ = model.reserve()
        model.clean(granted) if event == "o" else model.challenged(granted, granted_rate)
    state = stored(redis_url, one.limits(request)[0].key)
    # the script's clock moved a few ms between grant and answer: the ceiling differs by that
    assert state["r"] == pytest.approx(model.rate, rel=0.01)
    assert state["c"] == pytest.approx(model.ceiling, rel=0.01)
    assert state["k"] == model.cooldown == 7.0
    assert state["n"] == 31  # clean answers since the last challenge


@pytest.mark.timing  # the quiet time is measured from the reply's "now": a loaded machine's
# late reply ate into it (1.998 s seen in the parallel pass); `make test` runs it alone
def test_a_challenge_quiets_the_ip_for_the_cooldown_and_other_sessions_with_it(limiter, redis_url):
    one = limiter(pace=PaceRule(start=5.0, cooldown=2.0))
    replay(one, cnki(), "oc")
    other_session = cnki(cnki_session="s2")
    reply = one.call([one.limits(other_session)])
    (wait,) = reply.waits
    assert wait < 0  # held: not even booked, its IP's next send time is beyond the horizon
    quiet_until = stored(redis_url, one.limits(other_session)[0].key)["t"]
    # two seconds after the last send already booked (the two answered ones, 1/5 s apart)
    assert 2.0 <= (quiet_until - reply.now) / 1e6 <= 2.0 + 2 / 5 + 0.05


@pytest.mark.timing  # measures wall-clock gaps: `make test` runs it alone, after the parallel pass
def test_a_restarted_crawler_resumes_at_the_learned_pace(limiter, redis_url):
    first = limiter(pace=PaceRule(start=1.0, step=1.0, cooldown=0.0))
    replay(first, cnki(), "o" * 40)
    ip_key = first.limits(cnki())[0].key
    learned = stored(redis_url, ip_key)["r"]
    assert learned > 5
    first.close()
    time.sleep(1.1)  # past the horizon the replay booked
    again = limiter(pace=PaceRule(start=1.0, step=1.0, cooldown=0.0))
    no_session = cnki(cnki_session=None)
    waits = again.reserve([again.limits(no_session)] * 3)
    gaps = [later - earlier for earlier, later in zip(waits, waits[1:], strict=False)]
    assert gaps == [pytest.approx(1 / learned, abs=0.01)] * 2
    ttl = redis.Redis.from_url(redis_url).ttl(ip_key)
    assert ttl > 6 * 24 * 3600


def test_the_pace_never_outgrows_the_site_limit(limiter, redis_url):
    one = limiter(site_rate=3.0, pace=PaceRule(start=1.0, step=5.0))
    replay(one, cnki(), "o" * 30)
    assert stored(redis_url, one.limits(cnki())[1].key)["r"] == 3.0


# -- the middleware on a late event loop ----------------------------------------------------


def sends_under_a_stalled_loop(
    redis_url: str, prefix: str, late: float
) -> tuple[list[float], dict]:
    """Eight requests at 20/s whose timers all fire late, at +0.3 s (a busy machine): when
    each one left, and the stats."""
    stats = StatsCollector(get_crawler())

    async def main() -> list[float]:
        limiter = SharedRateLimit(
            lambda: redis.Redis.from_url(redis_url), site_rate=20, prefix=prefix
        )
        io = ThreadIO()
        middleware = RateLimitMiddleware(limiter, stats=stats, io=io, late=late)
        start = time.monotonic()

        async def stalled(wait: float) -> None:
            await asyncio.sleep(max(wait, start + 0.3 - time.monotonic()))

        middleware.sleep = stalled
        sent = []

        async def one(i: int) -> None:
            await middleware.process_request(Request(f"http://cnki.example/{i}"))
            sent.append(time.monotonic())

        await asyncio.gather(*(one(i) for i in range(8)))
        await asyncio.to_thread(limiter.close)
        io.shutdown()
        return sorted(sent)

    return asyncio.run(main()), stats.get_stats()


def busiest(sends: list[float], window: float) -> int:
    return max(sum(1 for t in sends[i:] if t <= start + window) for i, start in enumerate(sends))


@pytest.mark.timing  # measures wall-clock gaps: `make test` runs it alone, after the parallel pass
def test_requests_woken_late_take_new_reservations_instead_of_leaving_together(
    redis_url, redis_namespace
):
    """Why two crawlers were once banned under load: a late event loop fired the timers of
    several reservations at once and they left together. Late, they now reserve again."""
    sends, stats = sends_under_a_stalled_loop(redis_url, f"{redis_namespace}:late", late=0.05)
    assert stats["ratelimit/late"] >= 3
    # at most rate * (window + late) + burst in any window
    assert busiest(sends, 0.1) <= 20 * (0.1 + 0.05) + 1
    unchecked, _ = sends_under_a_stalled_loop(redis_url, f"{redis_namespace}:unchecked", late=1e9)
    assert busiest(unchecked, 0.1) >= 6  # the burst the check prevents


@pytest.mark.parametrize(
    "settings",
    [
        {"SESSIONS_MODE": "plain", "RATELIMIT_WINDOWS": False},
        {"SESSIONS_PACE_MAX": 0, "RATELIMIT_WINDOWS": False},
        {"RATELIMIT_RATE": 5, "RATELIMIT_ENABLED": False},
    ],
    ids=["no rate set", "no cap on verified sessions", "switched off"],
)
def test_the_middleware_is_off_unless_a_rate_or_windows_are_set(settings):
    with pytest.raises(NotConfigured):
        RateLimitMiddleware.from_crawler(get_crawler(settings_dict={"ADDONS": ADDONS, **settings}))


def test_a_verified_session_never_exceeds_its_cap_and_a_plain_one_has_none():
    """The defaults (sessions = auto) cap a session a person passed at SESSIONS_PACE_MAX, every
    worker together (one fixed key per session); a plain session's request gets no such key."""
    from scrapy import Request

    middleware = RateLimitMiddleware.from_crawler(get_crawler(settings_dict={"ADDONS": ADDONS}))
    verified = Request(
        "https://kns.cnki.net/kns8s/brief/grid",
        meta={"cnki_kind": "list", "cnki_session": "s-abc123", "cnki_verified": True},
    )
    [limit] = [lim for lim in middleware.limiter.limits(verified) if not lim.window]
    assert limit.key.endswith(":verified:s-abc123") and not limit.pace
    assert limit.interval == pytest.approx(1_000_000 / 0.5) and limit.tolerance == 0
    plain = Request(
        "https://kns.cnki.net/kns8s/brief/grid", meta={"cnki_kind": "list", "cnki_session": "x"}
    )
    assert [lim for lim in middleware.limiter.limits(plain) if not lim.window] == []


def test_config_ini_maps_onto_the_settings_and_the_middleware_follows_the_proxy(tmp_path):
    ini = tmp_path / "config.ini"
    ini.write_text(
        "[crawl]\nrate_limit = 4\nrate_burst = 2\npace = true\npace_start = 0.25\n"
        "pace_step = 0.1\npace_max = 3\npace_cooldown = 60\n"
        "[proxy]\nrate_limit = 0.5\ndirect_name = office\n"
    )
    settings = crawler_settings(load_config(ini))
    assert (settings["RATELIMIT_RATE"], settings["RATELIMIT_BURST"]) == (4.0, 2)
    assert settings["RATELIMIT_PROXY_RATE"] == 0.5
    assert (
        settings["PACE_ENABLED"],
        settings["PACE_START"],
        settings["PACE_STEP"],
        settings["PACE_MAX"],
        settings["PACE_COOLDOWN"],
        settings["PACE_DIRECT_NAME"],
    ) == (True, 0.25, 0.1, 3.0, 60.0, "office")
    order = settings["DOWNLOADER_MIDDLEWARES"]
    limit = order["cnkispider.middlewares.ratelimit.RateLimitMiddleware"]
    assert limit > order["cnkispider.middlewares.session.SessionMiddleware"]
    assert limit > order["cnkispider.middlewares.proxy.ProxyMiddleware"]
    # the body decompressed before it reads an answer (its module says why)
    assert limit < order["scrapy.downloadermiddlewares.httpcompression.HttpCompressionMiddleware"]


# -- two workers, one limit ---------------------------------------------------------------

RATE, BURST, PAGES = 10, 2, 60

#: A tiny-site worker (tests/fixtures/tiny_site.py) with the rate-limit middleware switched on.
WORKER = r"""
import sys
from cnkispider import default_settings
from tests.fixtures import tiny_site
plain = tiny_site.crawl_settings
def limited(args):
    settings = {**plain(args), **default_settings.starting_with("RATELIMIT_", "PACE_")}
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


@pytest.mark.timing  # measures wall-clock gaps: `make test` runs it alone, after the parallel pass
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
            workers.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        WORKER,
                        str(RATE),
                        str(BURST),
                        f"{redis_namespace}:rl",
                        redis_url,
                        "--start",
                        site.url,
                        "--namespace",
                        redis_namespace,
                        "--items",
                        str(items),
                        "--redis-url",
                        redis_url,
                        "--data-dir",
                        str(tmp_path / "data"),
                        "--concurrency",
                        "4",
                        "--batch",
                        "4",
                    ],
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
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
    print(
        f"{PAGES} pages in {took:.2f} s; busiest second {busiest} requests (limit {RATE}, "
        f"burst {BURST})"
    )
    assert busiest <= RATE + BURST
    assert (PAGES - BURST) / RATE - 0.1 <= took <= PAGES / RATE * 1.3 + 1


@pytest.mark.slow
@pytest.mark.timing  # 18 s alone; once past 120 s beside five other xdist workers (CI, 2026-11-24)
def test_two_crawlers_under_the_sites_own_per_ip_limit_are_never_banned(crawl_setup, cnki_site):
    """The real crawler (`cnkispider run --processes 2`, [crawl] rate_limit just under the
    stand-in's own per-IP limit, which bans an address that goes faster): no ban, full data."""
    site = cnki_site(seed=3, latency="0.01", rate_limit=20, burst=5, ban_seconds=30)
    setup = crawl_setup(
        "patent",
        "A,B,E,F",
        "mysql",
        "2024-03-01",
        "2024-03-01",
        site=site,
        crawl={"concurrent_requests": 16, "rate_limit": 18, "rate_burst": 3, "lease_seconds": 20},
    )
    result = setup.run("run", "--processes", "2", timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    stats = site.stats()
    assert (stats["banned_responses"], stats["bans"]) == (0, 0)
    assert compare(setup.stored(), setup.truth(), "patent") == {
        "missing": [],
        "extra": [],
        "differing": {},
    }
