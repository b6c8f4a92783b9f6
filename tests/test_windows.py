"""CNKI's "come back later" (HTTP 429, PROTOCOL.md 2026 point 18): a window shared by every
worker through Redis (cnkispider/pace/), honoured by the rate-limit middleware and the retry
middleware, a proxy cooled for its window (proxy/pool.py), and the stand-in that answers 429
(standin/limits.py ``Throttle``); crawls against it equal the truth and send at most 5% of their
429s' count into windows."""

from __future__ import annotations

import uuid
from email.utils import formatdate

import pytest
import redis
from scrapy import Request

from cnkispider.cnki.refusals import retry_after, window_of
from cnkispider.pace.store import Closed, SharedRateLimit, Window
from proxy.pool import COOL_STRIKES, ProxyPool
from standin.limits import Throttle
from tests.fixtures.clock import Clock
from tests.fixtures.windows import assert_equal_to_the_truth_without_errors, cnki


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


def windows_of(one: SharedRateLimit, request: Request) -> tuple:
    return tuple(limit for limit in one.limits(request) if limit.window)


def close(one: SharedRateLimit, request: Request, seconds=None, granted=None) -> float:
    """Report a 429 to ``request`` (granted now unless said), then reserve for it: the seconds
    it is held (0: it may go)."""
    now = one.call([]).now if granted is None else granted
    reply = one.call(
        [one.limits(request)], closes=[Closed(True, now, windows_of(one, request), seconds)]
    )
    return max(0.0, -reply.waits[0])


# -- Retry-After ------------------------------------------------------------------------------


def test_retry_after_is_read_as_seconds_or_as_a_date_against_the_answers_own_date():
    assert retry_after("120") == 120.0
    date = formatdate(1_800_000_000, usegmt=True)
    later = formatdate(1_800_000_045, usegmt=True)
    # the site's clock, not the worker's: a worker a day fast still waits 45 s
    assert retry_after(later, date) == 45.0
    assert retry_after(later, now=1_800_000_040) == 5.0
    assert retry_after(formatdate(1_799_999_000, usegmt=True), date) == 0.0
    assert retry_after("soon") is None and retry_after(None) is None


def test_a_429_closes_a_window_and_a_503_only_when_it_says_for_how_long():
    assert window_of(429, {"Retry-After": b"3"}) == (True, 3.0)
    assert window_of(429, {}) == (True, None)  # the caller backs off
    assert window_of(503, {"Retry-After": "7"}) == (True, 7.0)
    assert window_of(503, {}) == (False, None)  # a fault like any 5xx
    assert window_of(200, {"Retry-After": "7"}) == (False, None)


# -- the window in Redis ----------------------------------------------------------------------


def test_a_window_holds_every_request_to_its_address_until_the_time_cnki_named(limiter):
    one, other_worker = limiter(), limiter()
    assert close(one, cnki(), seconds=3) == pytest.approx(3, abs=0.1)
    # another worker, another session, the same address: held, nothing booked
    held = other_worker.call([other_worker.limits(cnki(cnki_session="s2"))])
    assert -held.waits[0] == pytest.approx(3, abs=0.1)
    # the same site through a proxy is another address: it goes
    through = other_worker.call([other_worker.limits(cnki("http://10.0.0.9:8000"))])
    assert through.waits == [0]


def test_without_retry_after_the_backoff_is_5_15_45_capped_and_a_clean_answer_resets_it(limiter):
    one = limiter(max_backoff=100)
    assert [close(one, cnki()) for _ in range(4)] == pytest.approx([5, 15, 45, 100], abs=0.1)
    reply = one.call([])
    one.call([], closes=[Closed(False, reply.now, windows_of(one, cnki()))])
    assert one.call([one.limits(cnki())]).windows[windows_of(one, cnki())[0].key].strikes == 0
    # the window still open is kept (a clean answer of a request sent before it says nothing
    # of it); the next one starts again at 5 s
    assert close(one, cnki()) == pytest.approx(100, abs=0.5)
    assert one.call([]).closes == []
    key = windows_of(one, cnki())[0].key
    assert one.call([one.limits(cnki())]).windows[key].strikes == 1


def test_the_429s_of_requests_in_flight_when_the_window_closed_are_one_strike(limiter):
    """Judged by the window's own end and strikes in Redis, not by the seconds left: those
    shrink by the wall-clock time the calls take (ten calls took over 0.1 s on a loaded
    machine, and the test failed on it)."""
    one = limiter()
    granted = one.call([]).now
    windows = windows_of(one, cnki())
    key = windows[0].key

    def a_429() -> Window:
        reply = one.call([one.limits(cnki())], closes=[Closed(True, granted, windows)])
        return reply.windows[key]

    first = a_429()
    assert (first.until - first.closed_at, first.strikes) == (5_000_000, 1)  # 5 s, µs
    # a dozen answers of requests granted before it closed: the same window, one strike
    assert {a_429() for _ in range(10)} == {first}


def test_a_session_a_person_passed_has_its_own_window(limiter):
    one = limiter()
    verified = cnki(cnki_verified=True, cnki_session="p1")
    assert [w.key.rsplit(":", 2)[-2:] for w in windows_of(one, verified)] == [
        ["ip", "direct"],
        ["session", "p1"],
    ]


# -- a proxy's 429 ----------------------------------------------------------------------------


def test_a_429_cools_only_that_proxy_and_windows_again_and_again_evict_it():
    clock = Clock()
    pool = ProxyPool(reuse=1000, min_fetch_interval=0, ban_time=60, clock=clock)
    pool.add_batch(["http://10.0.0.1:1", "http://10.0.0.2:1", "http://10.0.0.3:1"])
    cooled = pool.get()
    pool.release(cooled, ok=False)
    assert pool.cool(cooled, 3) is False
    handed = {pool.get().key for _ in range(60)}
    assert cooled.key not in handed and len(handed) == 2  # the crawl goes on through the others
    assert pool.cool(cooled, 3) is False  # an answer in flight: the same window
    clock.now += 3.1
    assert cooled.key in {pool.get().key for _ in range(60)}
    for _ in range(COOL_STRIKES - 1):  # windows again and again, no clean answer between
        clock.now += 3.1
        evicted = pool.cool(cooled, 3)
    assert evicted and cooled.state == "evicted"
    assert len(pool) == 2


def test_a_clean_answer_between_windows_keeps_the_proxy():
    clock = Clock()
    pool = ProxyPool(reuse=1000, min_fetch_interval=0, ban_time=60, clock=clock)
    pool.add_batch(["http://10.0.0.1:1"])
    proxy = pool.get()
    for _ in range(COOL_STRIKES * 2):
        assert pool.cool(proxy, 1) is False
        clock.now += 1.1
        pool.release(proxy, ok=True)
    assert proxy.state == "live"


# -- the stand-in -----------------------------------------------------------------------------


def test_the_stand_in_answers_429_past_its_rate_and_again_inside_the_window():
    throttle = Throttle(rate=3, seconds=2)
    assert [throttle.hit("ip", 0.1 * i) for i in range(3)] == [None] * 3
    assert throttle.hit("ip", 0.35) == 2  # the 4th in a second closes the window
    assert throttle.hit("other", 0.4) is None  # per address
    assert throttle.hit("ip", 1.35) == pytest.approx(1)
    assert (throttle.closed, throttle.inside, throttle.told) == (1, 1, 1)
    assert throttle.hit("ip", 2.4) is None  # open again


# -- crawls -----------------------------------------------------------------------------------

#: A stand-in that answers 429 past 15 requests/s per address, as the issue's measurement did.
THROTTLED = {"seed": 7, "scale": 0.3, "latency": "0.005", "throttle": 15, "throttle_seconds": 3}
#: A pace that starts fast (the 429s come in the first seconds), as config.ini turns it on.
PACED = {"pace": "true", "pace_start": 8, "pace_step": 2, "pace_cooldown": 5}


def throttled_crawl(crawl_setup, site, **kw):
    kw.setdefault("redis", {"prefix": f"t{uuid.uuid4().hex[:8]}:"})  # its windows and paces go
    kw["crawl"] = {**PACED, "log_file": "crawl.log", **kw.get("crawl", {})}
    return crawl_setup("patent", "A,B,C,D", "mysql", "2024-03-01", "2024-03-01", site=site, **kw)


def throttled(site) -> dict:
    """The stand-in's 429s: total, closed (windows), inside (requests that came into a window),
    told (of them, sent after their client had its 429), and the figure the issue asks for."""
    counts = dict(site.stats()["throttled"])
    counts["inside_share"] = round(counts["inside"] / max(1, counts["total"]), 4)
    print("stand-in 429s:", counts)
    return counts


@pytest.mark.timing  # the stand-in's rate is in wall-clock time
def test_one_worker_through_proxies_honours_retry_after_and_equals_the_truth(
    crawl_setup, cnki_site
):
    """Three addresses, each with its own pace and window: each 429 cools its proxy only."""
    site = cnki_site(**{**THROTTLED, "throttle": 6}, proxies=3)
    static = ",".join(site.proxy_urls)
    setup = throttled_crawl(crawl_setup, site, proxy={"enabled": "true", "static": static})
    setup.run_ok(timeout=300)
    counts = throttled(site)
    assert counts["closed"] >= 1, "the crawl met the stand-in's limit"
    assert counts["inside"] <= 0.05 * counts["total"]
    assert_equal_to_the_truth_without_errors(setup)
    assert "Evicted proxy" not in setup.log()  # cooled, not banned for the rest of the run
    assert "retry/reason_count/http-429" not in setup.log()  # no retry spent on a 429


@pytest.mark.timing
def test_two_workers_honour_one_window_and_equal_the_truth(crawl_setup, cnki_site):
    """Two processes, three proxies (an address and a window each), Retry-After as a date."""
    site = cnki_site(**{**THROTTLED, "throttle": 6}, proxies=3, throttle_date=True)
    static = ",".join(site.proxy_urls)
    setup = throttled_crawl(
        crawl_setup, site, crawl={"log_file": ""}, proxy={"enabled": "true", "static": static}
    )
    workers = [setup.spawn(), setup.spawn()]
    logs = [w.communicate(timeout=600)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], "\n".join(log[-2000:] for log in logs)
    counts = throttled(site)
    assert counts["closed"] >= 1
    # Every request sent after a worker could know of the window waits it out. Two processes
    # race: a request on the wire, or leaving in the milliseconds before the other worker hears
    # of the close (the Redis channel), arrives inside it (measured: 3 of 9, all within
    # Throttle.TOLD_AFTER of the close); the 5% holds for the requests sent after.
    assert counts["told"] <= 0.05 * counts["total"]
    assert_equal_to_the_truth_without_errors(setup)


@pytest.mark.timing
def test_without_a_pace_no_request_goes_into_a_window_after_its_429(crawl_setup, cnki_site):
    """The pace off, 16 requests in flight: the requests already on the wire when CNKI closed
    the window arrive inside it (nothing calls them back); none sent after the 429 does."""
    site = cnki_site(**THROTTLED)
    setup = throttled_crawl(crawl_setup, site, crawl={"pace": "false"})
    setup.run_ok(timeout=300)
    counts = throttled(site)
    assert counts["closed"] >= 3
    assert counts["told"] <= 0.05 * counts["total"]
    assert_equal_to_the_truth_without_errors(setup)


@pytest.mark.timing
def test_without_retry_after_the_crawl_backs_off_and_equals_the_truth(crawl_setup, cnki_site):
    """The stand-in closes for 1 s and says nothing; the crawler waits min(5, max_backoff)."""
    site = cnki_site(**{**THROTTLED, "throttle_seconds": 1}, throttle_silent=True)
    setup = throttled_crawl(crawl_setup, site, crawl={"max_backoff": 2})
    setup.run_ok(timeout=300)
    counts = throttled(site)
    assert counts["closed"] >= 1
    assert counts["inside"] <= 0.05 * counts["total"]
    assert_equal_to_the_truth_without_errors(setup)


# -- what the operator sees -------------------------------------------------------------------


def test_status_json_metrics_and_the_web_page_show_a_closed_window_and_the_429s(
    limiter, redis_url, redis_namespace, sqlite_url
):
    from jinja2 import Environment, PackageLoader

    from cnkispider.status.collecting import collect
    from cnkispider.status.rendering import render
    from cnkispider.store.db import open_database
    from cnkispider.web.metrics import metrics_text

    one = limiter(prefix=f"{redis_namespace}:ratelimit")
    close(one, cnki("http://u:pw@10.0.0.7:8000"), seconds=120)
    close(one, cnki(cnki_verified=True, cnki_session="p1"))  # the address and the session
    client = redis.Redis.from_url(redis_url)
    engine = open_database(sqlite_url)
    try:
        report = collect(engine, client, key_prefix=f"{redis_namespace}:")
    finally:
        engine.dispose()
        client.close()
    windows = report["windows"]
    assert windows["answers"] == 2  # one per 429, whatever it closed
    closed = {(w["what"], w["name"]): w for w in windows["closed"]}
    assert set(closed) == {("ip", "10.0.0.7:8000"), ("ip", "direct"), ("session", "p1")}
    assert closed["ip", "10.0.0.7:8000"]["seconds_left"] == pytest.approx(120, abs=2)
    assert closed["session", "p1"]["site"] == "kns.cnki.net"
    text = render(report)
    assert "CNKI said to come back later 2 times" in text
    assert "address 10.0.0.7:8000 at kns.cnki.net closed for" in text
    assert "pw" not in text  # a proxy's credentials never reach a window's name
    metrics = metrics_text(report).decode()
    assert 'cnkispider_windows_closed{what="ip"} 2.0' in metrics
    assert "cnkispider_too_many_total 2.0" in metrics
    env = Environment(loader=PackageLoader("cnkispider.web", "templates"), autoescape=True)
    env.filters["duration"] = str
    html = env.get_template("_windows.html").render(report=report, _=lambda s: s)
    assert html.count('class="window"') == 3 and "CNKI said to come back later" in html


def test_the_runs_summary_counts_its_429s():
    from cnkispider.status.rendering import _too_many

    stats = {"ratelimit/window/429": 7, "ratelimit/window/held": 40, "retry/window": 7}
    [line] = _too_many(stats)
    assert "CNKI said to come back later 7 times; 40 waits held, 7 sent again" in line
    assert _too_many({}) == []


def test_the_request_that_drew_a_429_is_sent_again_with_no_retry_spent_in_its_session():
    import asyncio

    from scrapy.http import Response
    from scrapy.utils.test import get_crawler

    from cnkispider.middlewares.ratelimit import WINDOW_META
    from cnkispider.middlewares.retry import CnkiRetryMiddleware

    crawler = get_crawler()
    crawler.spider = None
    retry = CnkiRetryMiddleware.from_crawler(crawler)
    request = cnki(cnki_verified=True, retry_times=2, cookiejar="s1")
    request.meta[WINDOW_META] = 3.0
    response = Response(request.url, status=429, headers={"Retry-After": "3"}, request=request)
    again = asyncio.run(retry.process_response(request, response))
    assert again.meta["retry_times"] == 2  # no retry spent
    assert again.dont_filter and WINDOW_META not in again.meta
    assert (again.meta["cnki_session"], again.meta["cnki_verified"]) == ("s1", True)
    assert "cnki_renew_session" not in again.meta  # the session a person passed is kept
    assert crawler.stats.get_value("retry/window") == 1
    assert crawler.stats.get_value("retry/count") is None


def test_a_429_slows_the_pace_as_a_challenge_does_without_a_cooldown_of_its_own(limiter, redis_url):
    """The script and the reference model (tests/fixtures/pace_model.py) agree."""
    from cnkispider.pace.store import Answer, PaceRule
    from tests.fixtures.pace_model import Pace
    from tests.fixtures.pace_store import stored

    rule = PaceRule(start=2.0, step=0.5, cooldown=7.0, cooldown_max=20.0)
    one = limiter(pace=rule)
    request = cnki()
    paces = tuple(limit for limit in one.limits(request) if limit.pace)
    events = "oooooooooo4ooooo"
    for event in events:
        reply = one.call([one.limits(request)])
        code = 2 if event == "4" else 0
        one.call([], [Answer(code, reply.now, paces, reply.rates[0])])
    model = Pace(rule, clock=Clock())
    for event in events:
        granted_rate = model.rate
        granted, _ = model.reserve()
        if event == "o":
            model.clean(granted)
        else:
            model.challenged(granted, granted_rate, quiet=False)
    state = stored(redis_url, paces[0].key)
    assert state["r"] == pytest.approx(model.rate, rel=0.01) and state["r"] < 4.5
    assert state["c"] == pytest.approx(model.ceiling, rel=0.01)
    assert state["k"] == model.cooldown == 0


def test_max_backoff_maps_onto_the_setting_and_a_bad_value_is_named(tmp_path):
    from cnkispider.config import load_config
    from cnkispider.exceptions import ConfigError
    from cnkispider.launch.crawlsettings import crawler_settings

    ini = tmp_path / "config.ini"
    ini.write_text("[crawl]\nmax_backoff = 90\n", encoding="utf-8")
    assert crawler_settings(load_config(ini, environ={}))["RATELIMIT_MAX_BACKOFF"] == 90.0
    ini.write_text("[crawl]\nmax_backoff = 0\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\[crawl\] max_backoff"):
        load_config(ini, environ={})
