"""Each kind of list request names its own callback, and keeps it through the Redis queue; a
request an older worker queued names ``parse_list`` with its kind's meta, and still reaches its
kind's callback (cnkispider/spiders/base.py ``_older_list_callback``)."""

from __future__ import annotations

import json

from cnkispider.cnki.search import Search
from cnkispider.scheduling.serialize import ReadPolicy, request_from_json, request_to_json
from tests.fixtures.spiders import drain_outputs, patent_list_response, spider_on

SEARCH = {
    "doc_type": "patent",
    "day_start": "2024-01-30",
    "day_end": "2024-01-30",
    "category": "B23",
}
STALE = {"doc_key": "SCPD/CN999", "listing": {"title": "一种电弧增材制造"}, "round_id": 3}
POLICY = ReadPolicy.for_urls("http://127.0.0.1:9")


def through_redis(spider, request, callback: str | None = None):
    """``request`` as the scheduler stores and reads it; ``callback`` as an older worker named it."""
    stored = json.loads(request_to_json(request, spider))
    if callback is not None:
        stored["callback"] = callback
    return request_from_json(json.dumps(stored), spider, POLICY)


def test_each_kind_of_list_request_names_its_own_callback_through_redis(db_url):
    spider, _ = spider_on(db_url)
    made = {
        "page": spider.search_request(Search.from_dict(SEARCH), 2, round_id=3),
        "replay": spider.replay_code(
            {"id": 1, "search": json.dumps(SEARCH), "page": 2, "round_id": 3}
        ),
        "canary": spider.canary_request({"search": SEARCH, "page": 1, "round_id": 3}, "2024-01-30"),
        "refresh": spider.refresh_request({**STALE, "search": SEARCH}, "http://127.0.0.1:9/x"),
    }
    read = {kind: through_redis(spider, r).callback for kind, r in made.items()}
    assert read == {
        "page": spider.parse_list,
        "replay": spider.parse_list,
        "canary": spider.parse_canary,
        "refresh": spider.parse_refresh,
    }
    # a title search's next page is the title search's too (the fixture is page 2 of 25)
    out = drain_outputs(made["refresh"].callback(patent_list_response(made["refresh"])))
    assert [(r.callback, r.meta["page"], r.meta["refresh_for"]) for r in out] == [
        (spider.parse_refresh, 2, "SCPD/CN999")
    ]


def test_a_title_search_an_older_worker_queued_for_parse_list_is_still_walked(db_url):
    spider, _ = spider_on(db_url)
    refresh = spider.refresh_request({**STALE, "search": SEARCH}, "http://127.0.0.1:9/x")
    older = through_redis(spider, refresh, callback="parse_list")
    assert older.callback == spider.parse_list
    out = drain_outputs(older.callback(patent_list_response(older)))
    assert [(r.callback, r.meta["page"], r.meta["refresh_for"]) for r in out] == [
        (spider.parse_refresh, 2, "SCPD/CN999")
    ]


def test_a_canary_an_older_worker_queued_for_parse_list_still_answers(db_url):
    """The canary lists rows: the page it stood for is a true zero, nothing is asked again."""
    spider, _ = spider_on(db_url)
    canary = spider.canary_request({"search": SEARCH, "page": 1}, "2024-01-30")
    older = through_redis(spider, canary, callback="parse_list")
    assert drain_outputs(older.callback(patent_list_response(older))) == []
    assert spider.crawler.stats.get_value("list/true-zero") == 1
