"""Requests stored as plain JSON: round trips, refusals, and no pickle anywhere."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

import pytest
import scrapy
from scrapy.http import FormRequest, JsonRequest

from cnkispider.scheduling.serialize import (
    UnserializableRequest,
    request_from_json,
    request_to_json,
)

PACKAGE = Path(__file__).resolve().parents[1] / "cnkispider" / "scheduling"


class Spider(scrapy.Spider):
    name = "s"

    def parse_list(self, response):
        pass

    def parse_detail(self, response):
        pass

    def detail_failed(self, failure):
        pass


@pytest.fixture
def spider():
    return Spider()


def round_trip(request, spider):
    return request_from_json(request_to_json(request, spider), spider)


def test_round_trip_keeps_everything(spider):
    request = scrapy.Request(
        "https://kns.cnki.net/kcms2/article/abstract?v=abc&uniplatform=NZKPT",
        callback=spider.parse_detail,
        errback=spider.detail_failed,
        method="POST",
        headers={"X-Requested-With": "XMLHttpRequest", "Accept": ["a", "b"]},
        body=b"\x00\xffbinary body \xe4\xb8\xad",
        cookies={"SID_kns8s": "x1"},
        meta={"doc_key": "CJFQ/ABC2024", "round_id": 7, "search": {"day": "2024-01-02", "page": 3}},
        encoding="gbk",
        priority=-3,
        dont_filter=True,
        flags=["retried"],
        cb_kwargs={"doc_type": "paper", "ids": [1, 2]},
    )
    back = round_trip(request, spider)
    assert back.url == request.url
    assert back.callback == spider.parse_detail and back.errback == spider.detail_failed
    assert back.method == "POST"
    assert back.headers.getlist("Accept") == [b"a", b"b"]
    assert back.headers["X-Requested-With"] == b"XMLHttpRequest"
    assert back.body == request.body
    assert back.cookies == {}  # a CNKI session's cookies are set again at download, never stored
    assert back.meta == request.meta
    assert (back.encoding, back.priority, back.dont_filter) == ("gbk", -3, True)
    assert back.flags == ["retried"]
    assert back.cb_kwargs == request.cb_kwargs


def test_request_subclasses_come_back_as_themselves(spider):
    form = FormRequest("https://x/kns8s/brief/grid", formdata={"QueryJson": '{"a": "中文"}'})
    assert type(round_trip(form, spider)) is FormRequest
    assert round_trip(form, spider).body == form.body
    js = JsonRequest("https://x/api", data={"a": 1}, dumps_kwargs={"sort_keys": True})
    back = round_trip(js, spider)
    assert type(back) is JsonRequest and back.body == js.body


def test_stored_form_is_compact_json_without_defaults(spider):
    stored = json.loads(request_to_json(scrapy.Request("https://x/a"), spider))
    assert stored == {"url": "https://x/a"}


def test_lease_meta_is_not_stored(spider):
    request = scrapy.Request("https://x/a", meta={"lease_id": "12", "lease_attempts": 2, "k": 1})
    assert round_trip(request, spider).meta == {"k": 1}


@pytest.mark.parametrize(
    ("meta", "where"),
    [
        ({"search": {"day": datetime.date(2024, 1, 2)}}, "meta['search']['day']"),
        ({"ids": (1, 2)}, "meta['ids']"),
        ({"by_id": {1: "a"}}, "meta['by_id'][1]"),
        ({"ratio": float("nan")}, "meta['ratio']"),
        ({"obj": object()}, "meta['obj']"),
    ],
)
def test_meta_that_is_not_plain_json_is_refused_naming_the_key(spider, meta, where):
    with pytest.raises(UnserializableRequest) as info:
        request_to_json(scrapy.Request("https://x/a", meta=meta), spider)
    assert where in str(info.value)


def test_callback_that_is_not_a_spider_method_is_refused(spider):
    with pytest.raises(UnserializableRequest, match="callback"):
        request_to_json(scrapy.Request("https://x/a", callback=lambda r: None), spider)


@pytest.mark.parametrize(
    "stored",
    [
        {"url": "https://x/a", "_class": "os.system"},
        {"url": "https://x/a", "_class": "some.unimported.module.Request"},
        {"url": "https://x/a", "callback": "__init__"},
        {"url": "https://x/a", "callback": "_private"},
        {"url": "https://x/a", "callback": "name"},  # an attribute, not a method
    ],
)
def test_reading_refuses_what_could_run_code(spider, stored):
    with pytest.raises(ValueError):
        request_from_json(json.dumps(stored), spider)


def test_no_pickle_in_the_scheduling_package():
    """Nothing read from Redis is unpickled: the package does not even import pickle."""
    forbidden = re.compile(
        r"^\s*(import|from)\s+(c?pickle|_pickle|dill|shelve|marshal|scrapy_redis\.picklecompat)\b"
        r"|import_module\(\s*['\"](c?pickle|dill|shelve|marshal)",
        re.MULTILINE,
    )
    sources = sorted(PACKAGE.glob("*.py"))
    assert sources
    for path in sources:
        assert not forbidden.search(path.read_text()), path
