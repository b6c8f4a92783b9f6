"""The round-driven spider all three document types share.

A spider only decides what to request next and hands pages to the pure parsers in
``cnkispider.cnki.parsers``. Where rounds come from (claims, leases, the recrawl phase) is flow
control's business (``tasks.feeder``); CNKI sessions, proxies and retries are the downloader
middlewares'; acknowledging a request once its outcome is written is the scheduler's.

A round's searches::

    round (day, category) --page 1--> total <= cap ......... walk pages 1..N, one detail request a row
                                      total > cap, category has children  -> one search per child
                                      total > cap, leaf ..... both PT orders (desc, asc), each up to
                                                              the cap; what even that cannot reach is
                                                              recorded in errorCode as "overflow"

A detail request whose link went stale (CNKI's verify page) is refreshed by a title search in
the document's round, which yields a new link for the same (dbname, filename).
"""

from __future__ import annotations

import json
import traceback

import scrapy
from scrapy import signals
from scrapy.exceptions import IgnoreRequest

from cnkispider import signals as cnki_signals
from cnkispider.cnki import parsers
from cnkispider.cnki.protocol import Search, protocol_from_settings
from cnkispider.exceptions import GaveUp, RefusedPage
from cnkispider.items import ITEM_CLASSES, LIST_FIELDS
from cnkispider.offload import in_thread as _in_thread
from cnkispider.scheduling.outcome import hold

# Detail requests get few retries: a verify page on a detail link is most often a stale token,
# which no retry cures; a title search for a fresh link does.
DETAIL_RETRIES = 2


class RoundSpider(scrapy.Spider):
    doc_type: str = ""
    custom_settings: dict = {}

    def __init__(self, *args, task: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.task_name = task  # `scrapy crawl patent -a task=NAME` joins another task
        self.task_id: int | None = None
        self.tree = None

    @classmethod
    def from_crawler(cls, crawler, *args, **kwargs):
        spider = super().from_crawler(crawler, *args, **kwargs)
        spider.protocol = protocol_from_settings(crawler.settings)
        crawler.signals.connect(spider.request_abandoned, signal=cnki_signals.request_abandoned)
        crawler.signals.connect(spider.item_error, signal=signals.item_error)
        return spider

    async def start(self):
        # Rounds are fed by tasks.feeder.RoundFeeder as the queue drains; nothing to start with.
        return
        yield  # pragma: no cover - makes this an async generator

    # -- requests ------------------------------------------------------------------------

    def search_request(self, search: Search, page: int, *, turn_token: str | None = None, **meta) -> scrapy.FormRequest:
        meta.update(
            cnki_kind="list",
            doc_type=self.doc_type,
            task_id=self.task_id,
            search=search.to_dict(),
            page=page,
        )
        return scrapy.FormRequest(
            self.protocol.grid_url,
            formdata=self.protocol.grid_form(search, page, turn_token),
            headers=self.protocol.grid_headers(),
            meta=meta,
            callback=self.parse_list,
            errback=self.on_error,
            dont_filter=True,  # list requests are unique by construction (search + page)
        )

    def round_requests(self, round_) -> list[scrapy.Request]:
        """The first request of a round (flow control seeds it into Redis)."""
        search = Search.for_day(self.doc_type, round_.day, round_.category)
        return [self.search_request(search, 1, round_id=round_.id, round_root=True)]

    def detail_request(self, row: parsers.ListRow, meta: dict, refreshed: bool = False) -> scrapy.Request:
        listing = {name: getattr(row, name) for name in LIST_FIELDS}
        listing["title"] = row.title
        return scrapy.Request(
            self.protocol.absolute(row.url),
            meta={
                "cnki_kind": "detail",
                "doc_type": self.doc_type,
                "task_id": self.task_id,
                "round_id": meta.get("round_id"),
                "doc_key": f"{row.dbname}/{row.filename}",
                "listing": listing,
                "search": meta["search"],
                "refreshed": refreshed,
                "max_retry_times": DETAIL_RETRIES,
            },
            callback=self.parse_detail,
            errback=self.on_error,
            dont_filter=refreshed,  # a refreshed link is for a document already in the dupefilter
        )

    # -- callbacks -----------------------------------------------------------------------

    async def parse_list(self, response):
        meta = response.meta
        search = Search.from_dict(meta["search"])
        page = parsers.parse_list(response.body)
        if meta.get("refresh_for"):
            async for out in self._refreshed(page, meta):
                yield out
            return
        if meta.get("error_code_id") and meta["page"] == (meta.get("replay_page") or meta["page"]):
            # the replayed page of an errorCode row parsed: that failure is mended
            await _in_thread(self.errors.resolve_code, meta["error_code_id"])
        number = meta["page"]
        if number == 1:
            if meta.get("round_root"):
                self.crawler.stats.inc_value("rounds/searched")
                await _in_thread(self.flow.add_total, meta["round_id"], page.total)
            if page.total > self.protocol.cap and not meta.get("sort_cut"):
                async for out in self._split(search, page.total, meta):
                    yield out
                return
        for row in page.rows:
            yield self.detail_request(row, meta)
        if number < page.page_count:
            yield self.search_request(
                search, number + 1, turn_token=page.turn_token, **_carry(meta)
            )

    async def _split(self, search: Search, total: int, meta: dict):
        children = self.tree.children(search.category) if search.category and self.tree else []
        self.crawler.stats.inc_value("rounds/split")
        if children:
            self.logger.info("%s %s lists %d > %d: split into %d child categories",
                             search.day_start, search.category, total, self.protocol.cap, len(children))
            for code in children:
                child = Search.for_day(self.doc_type, search.day_start, code)
                yield self.search_request(child, 1, **_carry(meta))
            return
        # A leaf: each end of one sort order reaches `cap` documents; together up to 2 x cap.
        for sort_type in ("desc", "asc"):
            cut = Search.for_day(self.doc_type, search.day_start, search.category, sort_field="PT", sort_type=sort_type)
            yield self.search_request(cut, 1, sort_cut=True, **_carry(meta))
        unreachable = total - 2 * self.protocol.cap
        if unreachable > 0:
            self.crawler.stats.inc_value("rounds/overflow")
            await self._record_code(
                meta, "overflow", permanent=True, detail=f"{total} listed; both PT orders reach {2 * self.protocol.cap}; "
                f"at least {unreachable} unreachable"
            )

    async def _refreshed(self, page, meta):
        """A title search made to refresh one stale detail link: take that document's new link."""
        dbname, filename = meta["refresh_for"].split("/", 1)
        for row in page.rows:
            if (row.dbname, row.filename) == (dbname, filename):
                yield self.detail_request(row, meta, refreshed=True)
                return
        await self._record_link(meta, meta.get("stale_url", ""), "not-found-on-refresh")

    async def parse_detail(self, response):
        meta = response.meta
        parse = getattr(parsers, f"parse_{self.doc_type}")
        fields = parse(response.body)
        dbname, filename = meta["doc_key"].split("/", 1)
        values = {**meta.get("listing", {}), **{k: v for k, v in fields.items() if v or k not in meta.get("listing", {})}}
        values["dbname"], values["filename"] = fields.get("dbname") or dbname, fields.get("filename") or filename
        yield ITEM_CLASSES[self.doc_type](**values)

    # -- failures ------------------------------------------------------------------------

    async def on_error(self, failure):
        """A request that failed for good (after its retries): refresh, or record it."""
        request = failure.request
        meta = request.meta
        error = failure.value
        reason = error.reason if isinstance(error, (GaveUp, RefusedPage)) else type(error).__name__
        if isinstance(error, IgnoreRequest) and not isinstance(error, GaveUp):
            reason = f"ignored:{reason}"
        detail = failure.getTraceback() if not isinstance(error, (GaveUp, RefusedPage)) else str(error)
        self.crawler.stats.inc_value(f"errors/{meta.get('cnki_kind', 'other')}/{reason}")
        if meta.get("cnki_kind") == "detail":
            if not meta.get("refreshed") and reason in ("verify", "captcha", "http-302"):
                yield self.refresh_request(meta, request.url)
                return
            await self._record_link(meta, request.url, reason, detail)
        else:
            await self._record_code(meta, reason, detail)

    async def item_error(self, item, response, spider=None, failure=None):
        """A document parsed but not stored (a pipeline raised): record its link.

        Scrapy awaits this before the request is acknowledged, so the document is in errorLink
        before its request leaves Redis. If even that write fails (the database is gone), the
        worker stops: the request is not acknowledged, its lease runs out, and another worker (or
        this one, restarted) crawls it again. Either way the document is not lost.
        """
        meta = response.meta if response is not None else {}
        reason = f"pipeline:{type(failure.value).__name__}" if failure is not None else "pipeline"
        detail = failure.getTraceback() if failure is not None else ""
        self.crawler.stats.inc_value(f"errors/detail/{reason}")
        try:
            await self._record_link(meta, response.url if response is not None else "", reason, detail)
        except Exception:
            self.logger.critical("cannot store a document nor record its failure; stopping this worker",
                                 exc_info=True)
            if response is not None:
                hold(self.crawler, response.request)  # never released: its lease brings it back
            self.crawler.engine.close_spider(self, "database_error")

    async def request_abandoned(self, request, reason, attempts, spider=None):
        """A request whose lease ran out too often (it kills or stalls its workers): record it.

        The scheduler acknowledges it only after this returns, so it is in the error tables
        before it leaves Redis.
        """
        meta = request.meta
        detail = f"lease ran out {attempts} times"
        self.crawler.stats.inc_value(f"errors/{meta.get('cnki_kind', 'other')}/{reason}")
        if meta.get("cnki_kind") == "detail":
            await self._record_link(meta, request.url, reason, detail)
        else:
            await self._record_code(meta, reason, detail)

    def refresh_request(self, meta: dict, stale_url: str) -> scrapy.Request:
        listing = meta.get("listing", {})
        origin = Search.from_dict(meta["search"])
        search = Search.for_day(self.doc_type, origin.day_start, origin.category, title=listing.get("title") or None)
        self.crawler.stats.inc_value("details/refreshed")
        return self.search_request(
            search,
            1,
            round_id=meta.get("round_id"),
            refresh_for=meta["doc_key"],
            listing=listing,
            stale_url=stale_url,
        )

    async def record_exception(self, response, exception):
        """An unexpected exception in a callback (the seed's global exception handler)."""
        meta = response.meta
        reason = exception.reason if isinstance(exception, RefusedPage) else type(exception).__name__
        detail = "".join(traceback.format_exception(exception))
        if meta.get("cnki_kind") == "detail":
            await self._record_link(meta, response.url, reason, detail)
        else:
            await self._record_code(meta, reason, detail)

    async def _record_code(self, meta, reason, detail="", permanent=False):
        search = meta.get("search") or {}
        args = (
            self.task_id,
            meta.get("round_id"),
            search.get("day_start", ""),
            search.get("category") or "",
            search,
            meta.get("page"),
            reason,
            detail,
            meta.get("error_code_id"),
            permanent,
        )
        await _in_thread(self.errors.record_code, *args)

    async def _record_link(self, meta, url, reason, detail=""):
        dbname, filename = (meta.get("doc_key") or meta.get("refresh_for") or "/").split("/", 1)
        listing = meta.get("listing", {})
        search = meta.get("search") or {}
        await _in_thread(
            self.errors.record_link,
            self.task_id,
            meta.get("round_id"),
            self.doc_type,
            url,
            dbname,
            filename,
            reason,
            title=listing.get("title", ""),
            day=search.get("day_start", ""),
            category=search.get("category") or "",
            listing=listing,
            detail=detail,
        )

    # -- the recrawl phase: the same requests, another input source ------------------------

    def replay_code(self, row) -> scrapy.Request:
        search = Search.from_dict(json.loads(row["search"])) if row["search"] else Search.for_day(
            self.doc_type, row["day"], row["category"] or None
        )
        page = row["page"] or 1
        meta = {"error_code_id": row["id"], "replay_page": page}
        if search.sort_field:
            meta["sort_cut"] = True
        return self.search_request(search, page, **meta)

    def replay_link(self, row) -> scrapy.Request:
        listing = json.loads(row["listing"] or "{}")
        listing.setdefault("title", row["title"] or "")
        search = Search.for_day(self.doc_type, row["day"], row["category"] or None).to_dict()
        meta = {
            "doc_key": f"{row['dbname']}/{row['filename']}",
            "listing": listing,
            "search": search,
            "round_id": None,
        }
        # Days later the old link is surely stale: go straight to a title search for a fresh one.
        return self.refresh_request(meta, row["url"])


def _carry(meta: dict) -> dict:
    """What a follow-up list request inherits from its parent: its round, its cut, and its CNKI
    session, so that one search's pages stay on one session (as a browser's would) until the
    session middleware renews it before CNKI's page-turn limit."""
    return {k: meta[k] for k in ("round_id", "sort_cut", "cnki_session") if meta.get(k) is not None}
