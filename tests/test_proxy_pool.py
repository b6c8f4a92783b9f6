"""The proxy pool, its ban policy and the provider parsing: pure, with injected time."""

from __future__ import annotations

import asyncio
import random
import statistics

import pytest
from scrapy.exceptions import DownloadConnectionRefusedError, DownloadTimeoutError, NotConfigured
from scrapy.utils.test import get_crawler
from twisted.internet.error import ConnectionRefusedError as TxConnectionRefused

from cnkispider import default_settings
from cnkispider.exceptions import ConfigError, GaveUp
from cnkispider.middlewares.proxy import ProxyMiddleware
from cnkispider.runtime.addon import ADDONS
from proxy import BanPolicy, ProviderClient, ProviderError, Proxy, ProxyPool, mask, proxy_key
from proxy.provider import parse_json, parse_lines
from tests.fixtures.providers import BadProvider

# the crawler's defaults (the pool itself has none: cnkispider/default_settings.py is their home)
POOL = {
    "reuse": default_settings.PROXY_REUSE,
    "min_fetch_interval": default_settings.PROXY_FETCH_INTERVAL,
    "ban_time": default_settings.PROXY_BAN_TIME,
}


class Clock:
    """Injected time: advances only when told to, or when the pool sleeps."""

    def __init__(self, now: float = 1000.0):
        self.now = now
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def urls(*ports, user=""):
    auth = f"{user}@" if user else ""
    return [f"http://{auth}10.0.0.1:{p}" for p in ports]


def make_pool(clock, batches=(), **kw):
    calls = []
    batches = list(batches)

    async def fetch_batch():
        calls.append(clock())
        if not batches:
            return []
        batch = batches.pop(0)
        if isinstance(batch, Exception):
            raise batch
        return batch

    kw.setdefault("reuse_jitter", 0.0)
    kw = {**POOL, **kw}
    pool = ProxyPool(fetch_batch, clock=clock, rng=random.Random(7), **kw)
    return pool, calls


# -- reuse counting ---------------------------------------------------------------------------


def test_a_proxy_is_handed_out_reuse_times_then_retired():
    pool, _ = make_pool(Clock(), reuse=3)
    pool.add_batch(urls(8001))
    got = [pool.get() for _ in range(4)]
    assert [p.key if p else None for p in got] == ["10.0.0.1:8001"] * 3 + [None]
    assert got[0].state == "spent" and pool.need_fetch()


def test_reuse_is_an_average_with_jitter():
    """Budgets spread around PROXY_REUSE (so a batch does not run dry at one moment)."""
    pool = ProxyPool(**{**POOL, "reuse": 10}, reuse_jitter=0.5, rng=random.Random(1))
    pool.add_batch(urls(*range(9000, 11000)))
    budgets = [p.budget for p in pool.live()]
    assert min(budgets) == 5 and max(budgets) == 15
    assert abs(statistics.mean(budgets) - 10) < 0.3


def test_a_spent_proxy_still_serves_the_session_that_holds_it():
    pool, _ = make_pool(Clock(), reuse=1)
    pool.add_batch(urls(8001))
    held = pool.get()
    assert held.state == "spent" and pool.get() is None
    assert pool.use(held) and held.uses == 2


def test_release_counts_outcomes_and_in_flight():
    pool, _ = make_pool(Clock(), reuse=5)
    pool.add_batch(urls(8001))
    p = pool.get()
    pool.use(p)
    pool.release(p, ok=True)
    pool.release(p, ok=False)
    assert (p.in_flight, p.successes, p.failures) == (0, 1, 1)


def test_max_age_expires_live_proxies():
    clock = Clock()
    pool, _ = make_pool(clock, reuse=100, max_age=60)
    pool.add_batch(urls(8001))
    clock.now += 59
    assert pool.get() is not None
    clock.now += 1
    assert pool.get() is None and pool.need_fetch()


# -- eviction -----------------------------------------------------------------------------------


def test_an_evicted_proxy_is_never_used_again():
    pool, _ = make_pool(Clock(), reuse=100)
    pool.add_batch(urls(8001, 8002))
    bad = pool.get(exclude=["10.0.0.1:8002"])
    assert pool.evict(bad, "DownloadTimeoutError")
    assert not pool.evict(bad, "again")
    assert {pool.get().key for _ in range(20)} == {"10.0.0.1:8002"}
    assert not pool.use(bad)


def test_an_evicted_address_offered_again_is_refused_for_ban_time():
    clock = Clock()
    pool, _ = make_pool(clock, reuse=100, ban_time=300)
    pool.add_batch(urls(8001))
    pool.evict(pool.get(), "http-407")
    assert pool.add_batch(urls(8001)) == 0
    clock.now += 300
    assert pool.add_batch(urls(8001)) == 1


def test_add_batch_skips_addresses_already_live():
    pool, _ = make_pool(Clock())
    assert pool.add_batch(urls(8001, 8002)) == 2
    assert pool.add_batch(urls(8002, 8003, 8003)) == 1
    assert len(pool) == 3


# -- batch refetch under the provider's rate limit -------------------------------------------------


def test_refill_waits_out_the_provider_interval_with_one_sleep():
    """Waiting, not spinning: the second call sleeps exactly the rest of the interval, once."""
    clock = Clock()
    pool, calls = make_pool(clock, [urls(8001), urls(8002)], reuse=1, min_fetch_interval=5.0)
    assert pool.need_fetch() and pool.fetch_delay() == 0
    assert asyncio.run(pool.refill(clock.sleep)) == 1
    assert clock.sleeps == [] and calls == [1000.0]
    pool.get()
    assert pool.need_fetch() and pool.fetch_delay() == 5.0
    clock.now += 2
    assert pool.next_fetch_at() == 1005.0
    assert asyncio.run(pool.refill(clock.sleep)) == 1
    assert clock.sleeps == [3.0] and calls == [1000.0, 1005.0]


def test_a_failed_provider_call_still_counts_for_the_interval():
    clock = Clock()
    pool, calls = make_pool(clock, [ProviderError("ERROR too fast"), urls(8001)])
    with pytest.raises(ProviderError):
        asyncio.run(pool.refill(clock.sleep))
    assert asyncio.run(pool.refill(clock.sleep)) == 1
    assert calls == [1000.0, 1005.0] and clock.sleeps == [5.0]


def test_no_sleep_when_the_interval_has_passed():
    clock = Clock()
    pool, _ = make_pool(clock, [urls(8001), urls(8002)])
    asyncio.run(pool.refill(clock.sleep))
    clock.now += 30
    asyncio.run(pool.refill(clock.sleep))
    assert clock.sleeps == []


# -- random choice ---------------------------------------------------------------------------------


def test_get_hands_out_a_random_live_proxy():
    pool = ProxyPool(**{**POOL, "reuse": 1000}, rng=random.Random(3))
    pool.add_batch(urls(8001, 8002, 8003))
    seen = [pool.get().key for _ in range(300)]
    counts = {k: seen.count(k) for k in set(seen)}
    assert len(counts) == 3 and min(counts.values()) > 60


def test_get_honours_exclude():
    pool = ProxyPool(**{**POOL, "reuse": 1000}, rng=random.Random(3))
    pool.add_batch(urls(8001, 8002))
    assert {pool.get(exclude={"10.0.0.1:8001"}).key for _ in range(20)} == {"10.0.0.1:8002"}
    assert pool.get(exclude={"10.0.0.1:8001", "10.0.0.1:8002"}) is None


# -- masking -------------------------------------------------------------------------------------


def test_mask_hides_credentials_and_api_keys():
    assert mask("http://bob:s3cret@1.2.3.4:8080") == "http://***@1.2.3.4:8080"
    assert mask("1.2.3.4:8080") == "http://1.2.3.4:8080"
    assert mask("https://api.example.com/get?key=s3cret&num=5") == "https://api.example.com/get?***"
    assert proxy_key("http://bob:s3cret@1.2.3.4:8080") == "1.2.3.4:8080"


def test_proxy_repr_never_shows_credentials():
    p = Proxy("http://bob:s3cret@1.2.3.4:8080", budget=3, added_at=0.0)
    assert "s3cret" not in repr(p) and "bob" not in repr(p) and "1.2.3.4:8080" in repr(p)
    assert "s3cret" not in repr(ProviderClient("https://api.example.com/get?key=s3cret"))


# -- provider answers ------------------------------------------------------------------------------


def test_lines_format_with_and_without_credentials():
    text = "1.2.3.4:8080\r\nbob:pw@5.6.7.8:3128\n\nhttp://9.9.9.9:80\n"
    assert parse_lines(text, credentials="acc:key") == [
        "http://acc:key@1.2.3.4:8080",
        "http://bob:pw@5.6.7.8:3128",
        "http://acc:key@9.9.9.9:80",
    ]


@pytest.mark.parametrize(
    "text",
    ["ERROR 请2秒后再试", '{"code":111,"success":false,"msg":"请2秒后再试"}', "白名单未设置"],
)
def test_lines_format_refusals_raise(text):
    with pytest.raises(ProviderError):
        parse_lines(text)


def test_an_empty_answer_is_an_empty_batch():
    assert parse_lines("") == [] and parse_lines("\n\n") == []


def test_json_format_default_shape():
    text = '{"code":0,"success":true,"data":[{"ip":"1.2.3.4","port":8080},{"ip":"5.6.7.8","port":"3128"}]}'
    assert parse_json(text) == ["http://1.2.3.4:8080", "http://5.6.7.8:3128"]


def test_json_format_configurable_path_and_fields():
    text = '{"status":"ok","result":{"list":[{"host":"1.2.3.4","p":81},"5.6.7.8:82"]}}'
    got = parse_json(text, path="result.list", ip_field="host", port_field="p", credentials="u:p")
    assert got == ["http://u:p@1.2.3.4:81", "http://u:p@5.6.7.8:82"]


@pytest.mark.parametrize("text", ['{"code":121,"msg":"余额不足"}', "not json", '{"data": null}'])
def test_json_format_errors_raise(text):
    with pytest.raises(ProviderError):
        parse_json(text)


def test_static_list_client():
    client = ProviderClient(static="1.2.3.4:80, bob:pw@5.6.7.8:81")
    assert asyncio.run(client.fetch_batch()) == ["http://1.2.3.4:80", "http://bob:pw@5.6.7.8:81"]


# -- ban policy -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "exc",
    [
        DownloadConnectionRefusedError("x"),
        DownloadTimeoutError("x"),
        TxConnectionRefused(),
        ConnectionResetError(),
    ],
)
def test_transport_failures_are_the_proxys_fault(exc):
    assert BanPolicy().exception_ban(exc) == type(exc).__name__


def test_other_failures_are_not_the_proxys_fault():
    assert BanPolicy().exception_ban(ValueError("parser bug")) is None


def test_responses_that_ban_the_proxy():
    policy = BanPolicy()
    assert policy.response_ban(407) == "http-407"
    assert policy.response_ban(200, "captcha") == "captcha"
    assert policy.response_ban(302, "verify") is None  # the session's fault, not the address's
    assert policy.response_ban(503, "http-503") is None
    assert policy.response_ban(200) is None


# -- the global switch ---------------------------------------------------------------------------


def test_proxy_middleware_is_off_by_default():
    with pytest.raises(NotConfigured):
        ProxyMiddleware.from_crawler(get_crawler(settings_dict={"ADDONS": ADDONS}))


def test_proxy_middleware_is_built_when_switched_on():
    crawler = get_crawler(
        settings_dict={"ADDONS": ADDONS, "PROXY_ENABLED": True, "PROXY_STATIC": ["1.2.3.4:80"]}
    )
    assert isinstance(ProxyMiddleware.from_crawler(crawler), ProxyMiddleware)


def test_switched_on_without_a_source_is_a_config_error():
    with pytest.raises(ConfigError, match="PROXY_API_URL"):
        ProxyMiddleware.from_crawler(
            get_crawler(settings_dict={"ADDONS": ADDONS, "PROXY_ENABLED": True})
        )


def test_the_middleware_waits_for_proxies_without_spinning_then_gives_up():
    """A provider with nothing to sell: every try is a sleep, and after PROXY_WAIT_MAX the
    request fails with GaveUp("no-proxy")."""
    clock = Clock()
    pool, calls = make_pool(clock, min_fetch_interval=0.0)
    middleware = ProxyMiddleware(pool, clock=clock, sleep=clock.sleep, wait_max=10.0)
    with pytest.raises(GaveUp) as info:
        asyncio.run(middleware._acquire((), 0))
    assert info.value.reason == "no-proxy"
    assert len(calls) == len(clock.sleeps) == 10 and min(clock.sleeps) >= 1.0


# -- what is a proxy address ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("ERROR:10001", "not an IP address or a public host name"),
        ("localhost:6379", "not an IP address or a public host name"),
        ("proxy.localhost:8080", "local network"),
        ("printer.local:631", "local network"),
        ("1.2.3.4:0", "out of range"),
        ("1.2.3.4:70000", "out of range"),
        ("169.254.169.254:80", "not an address a proxy can have"),
        ("0.0.0.0:8080", "not an address a proxy can have"),
        ("224.0.0.1:8080", "not an address a proxy can have"),
        ("255.255.255.255:80", "broadcast"),
        ("1.2.3:8080", "not an IP address or a public host name"),
        ("请2秒后再试:80", "not host:port"),
        ("socks5://1.2.3.4:1080", "not http or https"),
    ],
)
def test_lines_that_are_not_proxy_addresses_are_refused_with_a_warning_naming_them(
    line, why, caplog
):
    with caplog.at_level("WARNING", logger="proxy.provider"):
        assert parse_lines(f"5.6.7.8:3128\n{line}\n") == ["http://5.6.7.8:3128"]
    warned = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(warned) == 1 and repr(line) in warned[0] and why in warned[0]


@pytest.mark.parametrize(
    "line",
    [
        "10.1.2.3:3128",
        "192.168.0.9:8080",
        "172.16.5.5:80",
        "127.0.0.1:7890",
        "proxy.example.com:8080",
        "[2001:db8::1]:8080",
        "u:p@gw.corp.example.cn:3128",
    ],
)
def test_public_names_and_ip_addresses_private_ones_included_are_accepted(line):
    assert len(parse_lines(line)) == 1


def test_an_answer_of_nothing_but_junk_is_one_refusal_not_a_warning_per_line(caplog):
    with (
        caplog.at_level("WARNING", logger="proxy.provider"),
        pytest.raises(ProviderError, match="ERROR:10001"),
    ):
        parse_lines("ERROR:10001\nlocalhost:6379\n" * 100)
    assert not caplog.records


def test_a_page_of_junk_around_proxies_names_the_first_lines_then_counts(caplog):
    with caplog.at_level("WARNING", logger="proxy.provider"):
        got = parse_lines("1.2.3.4:80\n" + "".join(f"junk{i}:1\n" for i in range(40)))
    assert got == ["http://1.2.3.4:80"]
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 6 and "35 more lines refused" in messages[-1]


def test_json_items_are_checked_the_same_way(caplog):
    text = '{"data":[{"ip":"1.2.3.4","port":80},{"ip":"localhost","port":6379},{"ip":"9.9.9.9","port":0}]}'
    with caplog.at_level("WARNING", logger="proxy.provider"):
        assert parse_json(text) == ["http://1.2.3.4:80"]
    assert len(caplog.records) == 2


def test_a_static_list_with_a_non_address_is_a_config_error_naming_it():
    with pytest.raises(ValueError, match=r"localhost:6379.*not an IP address"):
        ProviderClient(static="1.2.3.4:80,localhost:6379")


# -- a provider that drips or floods (a tiny HTTP server of the test's own) ---------------------


@pytest.fixture
def bad_provider():
    started = []

    def start(*args, **kw):
        started.append(BadProvider(*args, **kw))
        return started[-1]

    yield start
    for server in started:
        server.close()


@pytest.mark.timing  # asserts a wall-clock bound: `make test` runs it apart, after the parallel pass
@pytest.mark.parametrize("mode", ["drip", "drip-headers"])
def test_a_dripping_provider_fails_within_the_deadline(bad_provider, mode):
    """One byte every 0.5 s never trips a per-read timeout of 2 s; the call's one deadline does."""
    import time

    server = bad_provider(mode, every=0.5)
    client = ProviderClient(server.url, timeout=2.0)
    started = time.monotonic()
    with pytest.raises(ProviderError, match=r"no complete answer within 2 s") as info:
        asyncio.run(client.fetch_batch())
    assert time.monotonic() - started < 3.5
    assert "s3cret" not in str(info.value)


@pytest.mark.timing  # asserts a wall-clock bound: `make test` runs it apart, after the parallel pass
@pytest.mark.parametrize("mode", ["huge", "flood"])
def test_a_100_mb_answer_is_refused_without_growing_memory(bad_provider, mode):
    import resource
    import time

    server = bad_provider(mode, size=100 << 20)
    client = ProviderClient(server.url, timeout=30.0)
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KB on Linux
    started = time.monotonic()
    with pytest.raises(ProviderError, match="a batch of proxies is a few KB"):
        asyncio.run(client.fetch_batch())
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert grown < 8 * 1024, f"peak RSS grew by {grown} KB"
    assert time.monotonic() - started < 10


def test_a_well_behaved_provider_still_sells(bad_provider):
    client = ProviderClient(bad_provider("ok").url, timeout=5.0)
    assert asyncio.run(client.fetch_batch()) == ["http://1.2.3.4:8080"]


def test_a_request_waiting_for_a_proxy_gives_up_as_soon_as_the_crawler_stops():
    """SIGTERM: Scrapy waits for every request in flight; one waiting for a proxy must not hold
    the worker for PROXY_WAIT_MAX (it hung for more than 70 s)."""
    from types import SimpleNamespace

    clock = Clock()
    pool, calls = make_pool(clock, min_fetch_interval=0.0)
    middleware = ProxyMiddleware(pool, clock=clock, sleep=clock.sleep, wait_max=600.0)
    middleware.crawler = SimpleNamespace(crawling=True, engine=SimpleNamespace(running=True))

    async def stop_after_two_purchases(seconds):
        await clock.sleep(seconds)
        if len(calls) == 2:
            middleware.crawler.crawling = False

    middleware.sleep = stop_after_two_purchases
    with pytest.raises(GaveUp) as info:
        asyncio.run(middleware._acquire((), 0))
    assert info.value.reason == "no-proxy" and len(calls) == 2 and clock.now - 1000.0 < 10
