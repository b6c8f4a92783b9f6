"""The failure paths of a crawl (the spider's errback, errors.middleware) write the error tables
(real SQLite/MariaDB, no engine needed)."""

from __future__ import annotations

import asyncio

import scrapy
import sqlalchemy as sa

from cnkispider.cnki.search import Search
from cnkispider.store.schema import error_code, error_link
from errors.middleware import ErrorRecordingMiddleware
from tests.fixtures.spiders import drain_outputs, patent_list_response, spider_on


def abandoned(spider, request):
    middleware = ErrorRecordingMiddleware.from_crawler(spider.crawler)
    asyncio.run(middleware.request_abandoned(request, "lease-expired", 5))


def test_an_abandoned_detail_request_goes_to_error_link(db_url):
    spider, engine = spider_on(db_url)
    request = scrapy.Request(
        "http://127.0.0.1:9/kcms2/article/abstract?v=x",
        meta={
            "cnki_kind": "detail",
            "doc_key": "SCPD/CN2024A",
            "round_id": 3,
            "listing": {"title": "一种方法"},
            "search": {"day_start": "2024-01-01", "category": "H04"},
        },
    )
    abandoned(spider, request)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                error_link.c.dbname,
                error_link.c.filename,
                error_link.c.reason,
                error_link.c.title,
                error_link.c.detail,
            )
        ).all()
    assert [tuple(r) for r in rows] == [
        ("SCPD", "CN2024A", "lease-expired", "一种方法", "lease ran out 5 times")
    ]


def test_an_abandoned_list_request_goes_to_error_code_with_its_search_and_page(db_url):
    spider, engine = spider_on(db_url)
    search = {
        "doc_type": "patent",
        "day_start": "2024-01-02",
        "day_end": "2024-01-02",
        "category": "G06",
    }
    request = scrapy.Request(
        "http://127.0.0.1:9/kns8s/brief/grid",
        meta={"cnki_kind": "list", "search": search, "page": 7, "round_id": 4},
    )
    abandoned(spider, request)
    with engine.connect() as conn:
        row = conn.execute(sa.select(error_code)).one()
    assert (row.day, row.category, row.page, row.reason, row.state) == (
        "2024-01-02",
        "G06",
        7,
        "lease-expired",
        "open",
    )


def test_a_rejected_list_request_is_recorded_and_halts_the_task_at_once(db_url):
    from twisted.python.failure import Failure

    from cnkispider.exceptions import GaveUp, HaltedRequest

    spider, engine = spider_on(db_url)
    context = spider.context
    words = "查询对象结构错误, 没有指定检索分类！"
    search = {
        "doc_type": "patent",
        "day_start": "2024-01-01",
        "day_end": "2024-01-01",
        "category": "G06",
    }
    request = scrapy.Request(
        "http://127.0.0.1:9/kns8s/brief/grid",
        meta={"cnki_kind": "list", "search": search, "page": 1, "round_id": 1},
    )

    def fail(error):
        try:
            raise error
        except type(error):
            failure = Failure()
        failure.request = request
        return failure

    async def errback(error):
        return [out async for out in spider.on_error(fail(error))]

    assert asyncio.run(errback(GaveUp("rejected", 1, detail=words))) == []
    with engine.connect() as conn:
        row = conn.execute(sa.select(error_code)).one()
    assert (row.reason, row.page, row.state) == ("rejected", 1, "open")
    assert (
        context.tasks.get("t").halt_reason == f"rejected: {words}"
        and context.halted == f"rejected: {words}"
    )
    # a request held back by the halt is not a failure of its page: nothing more is recorded
    asyncio.run(errback(HaltedRequest(context.halted)))
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(error_code)).scalar() == 1


# -- issue 13: failures that used to be lost ----------------------------------------------------


def _failure(error, request):
    from twisted.python.failure import Failure

    try:
        raise error
    except type(error):
        failure = Failure()
    failure.request = request
    return failure


def _code_rows(engine):
    with engine.connect() as conn:
        return conn.execute(
            sa.select(error_code.c.page, error_code.c.state, error_code.c.attempts)
        ).all()


def test_a_replayed_page_that_fails_after_it_parsed_once_keeps_an_error_row(db_url):
    """Silent-loss path 2: the replay of an errorCode row parsed (its row resolved), its worker
    died before the ack, and the request, back from its lease, failed: that failure must land in
    errorCode. Before: an UPDATE of the deleted row, both error tables empty, the page lost."""
    from cnkispider.exceptions import GaveUp

    spider, engine = spider_on(db_url)
    search = {
        "doc_type": "patent",
        "day_start": "2024-01-30",
        "day_end": "2024-01-30",
        "category": "B23",
    }
    errors = spider.context.error_recorder
    errors.record_code(1, 5, "2024-01-30", "B23", search, 2, "http-500")
    row = errors.claim_codes(1, "w:1:x")[0]
    request = spider.replay_code(row)
    out = drain_outputs(spider.parse_list(patent_list_response(request)))
    assert len([r for r in out if r.meta.get("cnki_kind") == "detail"]) == 2
    assert _code_rows(engine) == []  # mended: the page parsed
    drain_outputs(
        spider.on_error(_failure(GaveUp("http-500", 3), request))
    )  # the same request, back
    assert [(r.page, r.state) for r in _code_rows(engine)] == [(2, "open")]


def test_a_replayed_page_is_resolved_only_after_its_requests_are_handed_out(db_url):
    spider, engine = spider_on(db_url)
    search = {
        "doc_type": "patent",
        "day_start": "2024-01-30",
        "day_end": "2024-01-30",
        "category": "B23",
    }
    errors = spider.context.error_recorder
    errors.record_code(1, 5, "2024-01-30", "B23", search, 2, "http-500")
    request = spider.replay_code(errors.claim_codes(1, "w:1:x")[0])
    seen = []

    async def run():
        async for out in spider.parse_list(patent_list_response(request)):
            seen.append((out.meta.get("cnki_kind"), len(_code_rows(engine))))

    asyncio.run(run())
    # every detail request and the next page came out while the row still existed
    assert seen and all(rows == 1 for _, rows in seen), seen
    assert _code_rows(engine) == []


def test_a_stale_link_is_refreshed_from_later_pages_of_its_title_search(db_url):
    """Silent-loss path 4: the document is not on this page of its title search: the next page
    is asked for (before: a permanent not-found-on-refresh with an empty detail)."""
    spider, engine = spider_on(db_url)
    meta = {
        "doc_key": "SCPD/CN999",
        "listing": {"title": "一种电弧增材制造"},
        "round_id": 3,
        "search": {
            "doc_type": "patent",
            "day_start": "2024-01-30",
            "day_end": "2024-01-30",
            "category": "B23",
        },
    }
    first = spider.refresh_request(meta, "http://127.0.0.1:9/kcms2/article/abstract?v=old")
    assert first.meta["page"] == 1
    # the fixture page is page 2 of 25 of such a search; the document is not on it
    second = spider.search_request(
        Search.from_dict(first.meta["search"]),
        2,
        **{k: first.meta[k] for k in ("refresh_for", "listing", "stale_url", "round_id")},
    )
    out = drain_outputs(spider.parse_list(patent_list_response(second)))
    assert [(r.meta["cnki_kind"], r.meta["page"], r.meta["refresh_for"]) for r in out] == [
        ("list", 3, "SCPD/CN999")
    ]
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(error_link)).scalar() == 0
    # a document on the page walked is refreshed from it
    second.meta["refresh_for"] = "SCPD/CN117884321A"
    out = drain_outputs(spider.parse_list(patent_list_response(second)))
    assert [(r.meta["cnki_kind"], r.meta["doc_key"], r.meta["refreshed"]) for r in out] == [
        ("detail", "SCPD/CN117884321A", True)
    ]
    # on the last page it is recorded, saying how far the search was walked
    last = spider.search_request(
        Search.from_dict(first.meta["search"]),
        25,
        **{k: first.meta[k] for k in ("refresh_for", "listing", "stale_url", "round_id")},
    )
    assert drain_outputs(spider.parse_list(patent_list_response(last))) == []
    with engine.connect() as conn:
        row = conn.execute(
            sa.select(error_link.c.filename, error_link.c.reason, error_link.c.detail)
        ).one()
    assert (row.filename, row.reason) == (
        "CN999",
        "not-found-on-refresh",
    ) and "25 of 25 pages" in row.detail


class _Engine:
    """The two things of Scrapy's engine a failure path touches: the scheduler's lease tracker
    and close_spider_async (recorded, not run: there is no crawl here)."""

    def __init__(self):
        from types import SimpleNamespace

        from cnkispider.scheduling.outcome import OutcomeTracker

        self.scheduler = SimpleNamespace(outcomes=OutcomeTracker())
        self.closed = []

    async def close_spider_async(self, reason):
        self.closed.append(reason)


def _leased(engine, request):
    from types import SimpleNamespace

    from cnkispider.scheduling.outcome import HANDED

    request.meta["lease_id"] = "lease-1"
    engine.scheduler.outcomes.leased(SimpleNamespace(lease_id="lease-1"), request, HANDED)
    return engine.scheduler.outcomes._leases["lease-1"]


def test_a_failure_that_cannot_be_recorded_holds_its_request_and_stops_the_worker(
    mysql_url, caplog
):
    """Recording a failure fails (here: a key longer than errorLink's column, a DataError;
    the same path as a database down past its outage time): the request is held, never acked,
    so its lease brings it back; the worker stops with one line. Before: the exception escaped
    the errback and the request was acked: the document was nowhere."""
    import logging

    from cnkispider.exceptions import GaveUp

    spider, _ = spider_on(mysql_url)
    spider.crawler.engine = engine = _Engine()
    request = scrapy.Request(
        "http://127.0.0.1:9/kcms2/article/abstract?v=x",
        meta={
            "cnki_kind": "detail",
            "doc_key": "SCPD/" + "N" * 300,
            "round_id": 3,
            "refreshed": True,
            "listing": {"title": "一种方法"},
            "search": {"day_start": "2024-01-01", "category": "H04"},
        },
    )
    lease = _leased(engine, request)
    with caplog.at_level(logging.CRITICAL):
        drain_outputs(spider.on_error(_failure(GaveUp("http-500", 3), request)))  # raises nothing
    assert lease.holds == 1  # never released: not acked
    assert engine.scheduler.outcomes.finished(()) == []
    assert engine.closed == ["database_error"]
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.CRITICAL]
    assert len(lines) == 1 and "nor record its failure" in lines[0] and "DataError" in lines[0]
    assert "\n" not in lines[0]


# -- issue 15: errors.middleware records on its own, for the crawl context's task --------------


def test_a_callback_exception_is_recorded_by_the_middleware_with_its_traceback(db_url):
    """The seed's global exception handler: the middleware writes the errorCode row itself
    (no call back into the spider), tells the circuit breaker, and swallows the exception."""
    from scrapy.http import HtmlResponse

    from cnkispider import signals as cnki_signals

    spider, engine = spider_on(db_url)
    middleware = ErrorRecordingMiddleware.from_crawler(spider.crawler)
    failed = []

    def list_failed(reason, detail="", request=None, spider=None):
        failed.append((reason, request))

    spider.crawler.signals.connect(list_failed, signal=cnki_signals.list_failed)
    search = {
        "doc_type": "patent",
        "day_start": "2024-01-03",
        "day_end": "2024-01-03",
        "category": "G06",
    }
    request = scrapy.Request(
        "http://127.0.0.1:9/kns8s/brief/grid",
        meta={"cnki_kind": "list", "search": search, "page": 4, "round_id": 2},
    )
    response = HtmlResponse(request.url, body=b"<html></html>", request=request)
    try:
        raise ValueError("a page no parser understands")
    except ValueError as exc:
        error = exc
    assert drain_outputs(middleware.process_spider_exception(response, error)) == []
    with engine.connect() as conn:
        row = conn.execute(sa.select(error_code)).one()
    assert (row.task_id, row.day, row.page, row.reason) == (
        spider.context.task_id,
        "2024-01-03",
        4,
        "ValueError",
    )
    assert "ValueError: a page no parser understands" in row.detail
    assert failed == [("ValueError", request)]
    assert spider.crawler.stats.get_value("errors/exception/ValueError") == 1


def test_a_document_a_pipeline_did_not_store_is_recorded_in_error_link(db_url):
    from scrapy.http import HtmlResponse
    from twisted.python.failure import Failure

    spider, engine = spider_on(db_url)
    middleware = ErrorRecordingMiddleware.from_crawler(spider.crawler)
    request = scrapy.Request(
        "http://127.0.0.1:9/kcms2/article/abstract?v=y",
        meta={
            "cnki_kind": "detail",
            "doc_key": "SCPD/CN2024B",
            "round_id": 3,
            "listing": {"title": "一种装置"},
            "search": {"day_start": "2024-01-05", "category": "H04"},
        },
    )
    try:
        raise RuntimeError("the pipeline broke")
    except RuntimeError:
        failure = Failure()
    response = HtmlResponse(request.url, body=b"<html></html>", request=request)
    asyncio.run(middleware.item_error({}, response, failure=failure))
    with engine.connect() as conn:
        row = conn.execute(sa.select(error_link)).one()
    assert (row.doc_type, row.dbname, row.filename, row.title, row.day, row.reason) == (
        "patent",
        "SCPD",
        "CN2024B",
        "一种装置",
        "2024-01-05",
        "pipeline:RuntimeError",
    )
