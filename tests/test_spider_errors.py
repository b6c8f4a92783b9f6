"""The spider's failure paths write the error tables (real SQLite/MariaDB, no engine needed)."""

from __future__ import annotations

import asyncio

import scrapy
import sqlalchemy as sa
from scrapy.utils.test import get_crawler

from cnkispider.db import open_database
from cnkispider.schema import error_code, error_link
from cnkispider.spiders.patent import PatentSpider
from errors.recorder import ErrorRecorder


def spider_on(db_url):
    crawler = get_crawler(PatentSpider, {"CNKI_BASE_URL": "http://127.0.0.1:9"})
    spider = PatentSpider.from_crawler(crawler)
    crawler.spider = spider
    engine = open_database(db_url)
    spider.task_id, spider.errors = 1, ErrorRecorder(engine)
    return spider, engine


def test_an_abandoned_detail_request_goes_to_error_link(db_url):
    spider, engine = spider_on(db_url)
    request = scrapy.Request(
        "http://127.0.0.1:9/kcms2/article/abstract?v=x",
        meta={"cnki_kind": "detail", "doc_key": "SCPD/CN2024A", "round_id": 3,
              "listing": {"title": "一种方法"}, "search": {"day_start": "2024-01-01", "category": "H04"}},
    )
    asyncio.run(spider.request_abandoned(request, "lease-expired", 5))
    with engine.connect() as conn:
        rows = conn.execute(sa.select(error_link.c.dbname, error_link.c.filename, error_link.c.reason,
                                      error_link.c.title, error_link.c.detail)).all()
    assert [tuple(r) for r in rows] == [("SCPD", "CN2024A", "lease-expired", "一种方法", "lease ran out 5 times")]


def test_an_abandoned_list_request_goes_to_error_code_with_its_search_and_page(db_url):
    spider, engine = spider_on(db_url)
    search = {"doc_type": "patent", "day_start": "2024-01-02", "day_end": "2024-01-02", "category": "G06"}
    request = scrapy.Request("http://127.0.0.1:9/kns8s/brief/grid",
                             meta={"cnki_kind": "list", "search": search, "page": 7, "round_id": 4})
    asyncio.run(spider.request_abandoned(request, "lease-expired", 5))
    with engine.connect() as conn:
        row = conn.execute(sa.select(error_code)).one()
    assert (row.day, row.category, row.page, row.reason, row.state) == ("2024-01-02", "G06", 7, "lease-expired", "open")
