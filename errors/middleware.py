"""The seed's global exception handler, as a spider middleware.

An exception raised by a spider callback (a parser meeting a page it does not understand, a
bug) is recorded in errorCode (list stage) or errorLink (detail stage) with its traceback, and
the crawl goes on: the exception is swallowed here after it is written down, so one bad page
never stops a worker and never passes for "zero results".
"""

from __future__ import annotations

import logging

from scrapy.exceptions import NotConfigured

logger = logging.getLogger(__name__)


class ErrorRecordingMiddleware:
    def __init__(self, stats):
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler):
        if not crawler.settings.getbool("ERRORS_ENABLED"):
            raise NotConfigured
        middleware = cls(crawler.stats)
        middleware.crawler = crawler
        return middleware

    def process_spider_exception(self, response, exception):
        record = getattr(self.crawler.spider, "record_exception", None)
        if record is None:
            return None  # not one of our spiders: let Scrapy handle it
        self.stats.inc_value(f"errors/exception/{type(exception).__name__}")
        logger.warning("recorded %s on %s: %s", type(exception).__name__, response.url, exception)
        # Scrapy consumes this (empty) output before it is done with the response, so the
        # error row is written before the scheduler acknowledges the request.
        return self._recorded(record, response, exception)

    @staticmethod
    async def _recorded(record, response, exception):
        await record(response, exception)
        return
        yield  # pragma: no cover - makes this an async generator
