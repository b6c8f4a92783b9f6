"""The shared Redis is a trust boundary: entries written into it by someone else are never run.

Each test writes one hostile entry straight into the namespace, as anyone who can reach the Redis
server could, next to a request of the crawler's own; a worker must hand out only the latter and
move the former to ``{ns}:unreadable`` with the reason.
"""

from __future__ import annotations

import base64
import json

import pytest
import redis
import scrapy

from cnkispider.scheduling.scheduler import LeasedScheduler
from cnkispider.scheduling.serialize import ReadPolicy, request_from_json, request_to_json
from tests.fixtures.scheduling import in_loop

BASE = "https://kns.cnki.net"


class Spider(scrapy.Spider):
    name = "cnki"
    queue_callbacks = ("parse_list", "parse_detail", "on_error")

    def parse_list(self, response):
        pass

    def parse_detail(self, response):
        pass

    def on_error(self, failure):
        pass

    async def item_error(self, item, response, spider=None, failure=None):
        pass  # would write an errorLink row


@pytest.fixture
def scheduler(make_scheduler):
    return make_scheduler(
        Spider,
        DUPEFILTER_CLASS="cnkispider.scheduling.dupefilter.BloomDupeFilter",
        CNKI_BASE_URL=BASE,
    )


def plant(redis_client: redis.Redis, namespace: str, entry: dict, round_id: str = "") -> str:
    """Write a request into the namespace as an attacker would (no script, no dedupe)."""
    request_id = str(10**9 + len(entry))
    redis_client.hset(f"{namespace}:requests", request_id, f"{round_id}\n{json.dumps(entry)}")
    redis_client.zadd(f"{namespace}:queue", {request_id: -1})  # ahead of everything
    return request_id


def run_queue(scheduler: LeasedScheduler) -> list[scrapy.Request]:
    own = scrapy.Request(f"{BASE}/kns8s/brief/grid", callback=scheduler.spider.parse_list)
    scheduler.enqueue_request(own)
    handed = []
    for _ in range(3):
        scheduler._kick()
        while (request := scheduler.next_request()) is not None:
            handed.append(request)
    scheduler._kick()  # writes the burial
    return handed


HOSTILE = {
    "a local file": (
        {"url": "file:///etc/passwd", "callback": "parse_detail"},
        "URL scheme 'file'",
    ),
    "an internal host": (
        {"url": "http://10.0.0.5:8080/admin", "callback": "parse_detail"},
        "host 10.0.0.5:8080 is not one of the configured CNKI hosts",
    ),
    "the Redis server itself": (
        {
            "url": "http://127.0.0.1:6379/",
            "method": "POST",
            "body": base64.b64encode(b"FLUSHALL\r\n").decode(),
        },
        "host 127.0.0.1:6379",
    ),
    "a CNKI host on another port": (
        {"url": "https://kns.cnki.net:8443/x"},
        "host kns.cnki.net:8443",
    ),
    "a POST with forged headers": (
        {
            "url": f"{BASE}/kns8s/brief/grid",
            "method": "POST",
            "headers": {"Cookie": ["SID=stolen"], "X-Forwarded-For": ["10.0.0.1"]},
            "callback": "parse_list",
        },
        "header 'Cookie' is not one the spiders set",
    ),
    "a proxy of the attacker's": (
        {
            "url": f"{BASE}/kcms2/article/abstract?v=1",
            "meta": {"proxy": "http://evil.example:3128"},
        },
        "meta 'proxy' steers Scrapy's download",
    ),
    "an item_error callback": (
        {"url": f"{BASE}/kcms2/article/abstract?v=1", "callback": "item_error"},
        "callback 'item_error' is not in the spider's queue_callbacks",
    ),
    "an item_error errback": (
        {
            "url": f"{BASE}/kcms2/article/abstract?v=1",
            "callback": "parse_detail",
            "errback": "item_error",
        },
        "errback 'item_error'",
    ),
    "a cookie jar of another session": (
        {"url": f"{BASE}/kcms2/article/abstract?v=1", "meta": {"cookiejar": 7}},
        "meta 'cookiejar'",
    ),
    "Scrapy's download controls": (
        {"url": f"{BASE}/x", "meta": {"download_timeout": 10**6}},
        "meta 'download_timeout'",
    ),
    "accepting any status": (
        {"url": f"{BASE}/x", "meta": {"handle_httpstatus_all": True}},
        "handle_httpstatus_all",
    ),
    "robots.txt ignored": (
        {"url": f"{BASE}/x", "meta": {"dont_obey_robotstxt": True}},
        "dont_obey_robotstxt",
    ),
    "a method of its own": ({"url": f"{BASE}/x", "method": "DELETE"}, "method 'DELETE'"),
    "cookies of its own": ({"url": f"{BASE}/x", "cookies": {"SID": "x"}}, "it carries cookies"),
    "a private method": ({"url": f"{BASE}/x", "callback": "_close"}, "not a public spider method"),
}


@pytest.mark.parametrize("form", list(HOSTILE))
@in_loop
async def test_a_hostile_entry_is_never_run_and_is_set_aside_with_the_reason(
    form, scheduler, redis_client, redis_namespace
):
    entry, reason = HOSTILE[form]
    request_id = plant(redis_client, redis_namespace, entry)
    handed = run_queue(scheduler)
    assert [r.url for r in handed] == [f"{BASE}/kns8s/brief/grid"]  # only the crawler's own
    stored = redis_client.hget(f"{redis_namespace}:unreadable", request_id)
    assert stored is not None, "not set aside"
    assert reason in stored.decode().split("\n", 1)[0], stored
    assert redis_client.hget(f"{redis_namespace}:requests", request_id) is None
    assert scheduler.stats.get_value("scheduler/unreadable") == 1


@in_loop
async def test_a_hostile_entry_in_a_round_does_not_keep_the_round_open(
    scheduler, redis_client, redis_namespace
):
    redis_client.set(f"{redis_namespace}:round:4:outstanding", 1)
    plant(redis_client, redis_namespace, {"url": "file:///etc/passwd"}, round_id="4")
    run_queue(scheduler)
    assert redis_client.get(f"{redis_namespace}:round:4:outstanding") is None


def test_the_crawlers_own_retry_reads_back_without_its_proxy_or_credentials():
    """What writing drops, reading would refuse: a retry through a proxy (with its cookie and
    proxy headers, Scrapy's download meta) is stored without them and reads back fine, avoiding
    the proxy it failed through."""
    spider = Spider()
    request = scrapy.FormRequest(
        f"{BASE}/kns8s/brief/grid",
        formdata={"QueryJson": "{}"},
        headers={
            "X-Requested-With": "XMLHttpRequest",
            "Cookie": "SID=1",
            "Proxy-Authorization": "Basic eA==",
        },
        meta={
            "proxy": "http://user:secret@10.1.2.3:8080",
            "download_slot": "kns.cnki.net",
            "download_latency": 0.2,
            "cookiejar": 3,
            "cnki_session": 3,
            "retry_times": 1,
            "dont_proxy": False,
            "round_id": 9,
        },
        callback=spider.parse_list,
        errback=spider.on_error,
    )
    stored = request_to_json(request, spider)
    assert b"secret" not in stored and b"SID=1" not in stored
    back = request_from_json(stored, spider, ReadPolicy.for_urls(BASE))
    assert back.meta["_proxy_avoid"] == "10.1.2.3:8080"
    assert back.meta["retry_times"] == 1 and back.meta["round_id"] == 9
    assert "proxy" not in back.meta and "cookiejar" not in back.meta
    assert back.headers.get("X-Requested-With") == b"XMLHttpRequest"
    assert back.callback == spider.parse_list and back.body == request.body


def test_the_client_id_host_and_https_defaults_are_allowed():
    policy = ReadPolicy.for_urls(
        BASE, "https://recsys.cnki.net/RCDService/api/UtilityOpenApi/GenerateClientID"
    )
    spider = Spider()
    for url in (f"{BASE}/a", "http://kns.cnki.net/a", "https://recsys.cnki.net/RCDService/x"):
        request_from_json(json.dumps({"url": url}), spider, policy)
    with pytest.raises(ValueError, match="not one of the configured CNKI hosts"):
        request_from_json(
            json.dumps({"url": "https://kns.cnki.net.evil.example/a"}), spider, policy
        )
