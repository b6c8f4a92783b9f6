"""The Referer a browser sends to CNKI, per document type.

The result grid is loaded by the search page of its document type (the advanced search of
patents is not that of papers), and a detail page is opened from that same search page (the grid
is part of it, not a page of its own). So list and detail requests get
``Protocol.referer(meta["doc_type"])``, and a reference list its detail page (meta
``cnki_referer``); other requests are left alone. Set, not setdefault:
Scrapy's referer spider middleware would otherwise send the grid's POST URL, which no browser
does, and a retried request is a copy that keeps the old header.

Settings:
- ``REFERER_ENABLED`` (Scrapy's own, True): the one switch for Referer headers; off ->
  NotConfigured.
- ``CNKI_BASE_URL`` (the site protocol's): the site the Referer points at.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.exceptions import NotConfigured

from cnkispider.cnki.protocol import SESSION_KINDS, protocol_from_settings

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

KINDS = SESSION_KINDS


class RefererMiddleware:
    """Sets ``Referer`` on CNKI list and detail requests from ``referer(doc_type)``."""

    def __init__(self, referer):
        self.referer = referer  # doc_type -> URL
        self._cache: dict[str, str] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RefererMiddleware:
        if not crawler.settings.getbool("REFERER_ENABLED"):
            raise NotConfigured
        return cls(protocol_from_settings(crawler.settings).referer)

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        doc_type = request.meta.get("doc_type")
        if request.meta.get("cnki_kind") not in KINDS or not doc_type:
            return
        # a reference list is asked by its detail page's script: that page is its Referer
        url = request.meta.get("cnki_referer") or self._cache.get(doc_type)
        if url is None:
            url = self._cache[doc_type] = self.referer(doc_type)
        request.headers["Referer"] = url
