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
from scrapy.utils.defer import deferred_from_coro

from cnkispider import masking
from cnkispider import signals as cnki_signals
from cnkispider.cnki import parsers
from cnkispider.cnki.protocol import Search, protocol_from_settings
from cnkispider.cnki.refusals import REJECTION, kind_of, rejection_text
from cnkispider.exceptions import GaveUp, HaltedRequest, RefusedPage
from cnkispider.items import ITEM_CLASSES, ROW_FIELDS
from cnkispider.offload import in_thread as _in_thread
from cnkispider.scheduling.outcome import hold

# Detail requests get few retries: a verify page on a detail link is most often a stale token,
# which no retry cures; a title search for a fresh link does.
DETAIL_RETRIES = 2


class RoundSpider(scrapy.Spider):
    doc_type: str = ""
    custom_settings: dict = {}
    #: The only callbacks and errbacks a request read from the shared Redis may name (the
    #: scheduler refuses any other: see cnkispider.scheduling.serialize).
    queue_callbacks = ("parse_list", "parse_detail", "on_error")

    def __init__(self, *args, task: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.task_name = task  # `scrapy crawl patent -a task=NAME` joins another task
        self.task_id: int | None = None
        self.tree = None
        self.halted: str | None = None  # the task's halt reason, once known (see halt())

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
        if not (row.dbname.strip() and row.filename.strip()) or "/" in row.dbname:
            # The dupefilter and the fingerprint key on doc_key: an empty (or ambiguous) one
            # would make every keyless document "seen" after the first. The parser refuses
            # such rows already; this keeps any other caller from getting one through.
            raise RefusedPage(
                "unexpected",
                f"list row {row.seq or '?'} ({row.title[:40]!r}) has no dbname/filename key",
            )
        listing = {name: getattr(row, name) for name in ROW_FIELDS[self.doc_type]}
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
        page = parsers.parse_list(response.body, self.doc_type)
        if meta.get("refresh_for"):
            async for out in self._refreshed(page, search, meta):
                yield out
            return
        async for out in self._listed(page, search, meta):
            yield out
        if meta.get("error_code_id") and meta["page"] == (meta.get("replay_page") or meta["page"]):
            # The replayed page of an errorCode row is mended only now, once everything that
            # came of it was handed out (its detail requests, its next page, what it recorded):
            # a failure before this line still finds its row and counts an attempt on it. A
            # worker dying between here and the ack brings the request back; if it fails then,
            # record_code finds its row gone and writes a new one (never an update of nothing).
            await _in_thread(self.errors.resolve_code, meta["error_code_id"])

    async def _listed(self, page, search: Search, meta: dict):
        """What a list page yields: its detail requests and its next page, or its split."""
        number = meta["page"]
        if number == 1:
            if meta.get("round_root"):
                self.crawler.stats.inc_value("rounds/searched")
                await _in_thread(self.flow.add_total, meta["round_id"], page.total)
            if page.total > self.protocol.cap and not meta.get("sort_cut"):
                async for out in self._split(search, page.total, meta):
                    yield out
                return
        # Read every row before yielding any: a page that turns out unreadable half-way yields
        # nothing (it is retried whole), rather than some of its documents.
        requests = [self.detail_request(row, meta) for row in self.kept_rows(page.rows, meta)]
        for request in requests:
            yield request
        last = self.last_page(page, meta)
        unreachable = self.unreachable_past_pager(page, meta)
        if unreachable:
            # The pager shows fewer pages than the total needs: CNKI caps this search lower than
            # we think. What lies past its last page cannot be listed: say so, never "done" quietly.
            self.crawler.stats.inc_value("list/pager-short")
            await self._record_code(
                meta, "pager-short", permanent=True,
                detail=f"{page.total} listed but the pager shows {page.page_count} pages of "
                f"{self.protocol.page_size}: at least {unreachable} unreachable",
            )
        if number < last:
            yield self.search_request(
                search, number + 1, turn_token=page.turn_token, **_carry(meta)
            )

    def kept_rows(self, rows, meta: dict) -> list:
        """The rows of this spider's databases. A 总库 search lists whatever its KuaKuCode
        names (and CNKI may add more): rows are kept by their own dbname, and every dropped
        one is counted (``rows/dropped/other-database/<dbname>``) and logged, never lost quietly."""
        kept = []
        for row in rows:
            if self.protocol.keeps(self.doc_type, row.dbname):
                kept.append(row)
                continue
            self.crawler.stats.inc_value(f"rows/dropped/other-database/{row.dbname}")
            self.logger.debug(
                "dropped a %s row of another database: %s/%s %r (round %s, page %s)",
                self.doc_type,
                row.dbname,
                row.filename,
                row.title[:40],
                meta.get("round_id"),
                meta.get("page"),
            )
        return kept

    def last_page(self, page, meta: dict) -> int:
        """The last page to walk: what the pager shows, but never past what the total and the
        cap allow (a broken pager may claim a million pages)."""
        allowed = self.protocol.page_count(page.total)
        if page.page_count > allowed:
            self.crawler.stats.inc_value("list/pager-capped")
            if meta.get("page") == 1:
                self.logger.warning(
                    "round %s: the pager shows %d pages for %d results; walking %d",
                    meta.get("round_id"),
                    page.page_count,
                    page.total,
                    allowed,
                )
        return min(page.page_count, allowed)

    def unreachable_past_pager(self, page, meta: dict) -> int:
        """On page 1: how many of the search's reachable rows lie past the pager's last page."""
        if meta.get("page") != 1:
            return 0
        shown = page.page_count * self.protocol.page_size
        return max(0, self.protocol.reachable(page.total) - shown)

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

    async def _refreshed(self, page, search: Search, meta):
        """A title search made to refresh one stale detail link: take that document's new link.

        A common title lists many documents of a day: the search's pages are walked (as far as
        its pager, the total and the cap allow) until the document's row is found, so a document
        in row 51 or later is refreshed like one on page 1. Only a document in none of them is
        recorded as ``not-found-on-refresh``, with how far the search was walked.
        """
        dbname, filename = meta["refresh_for"].split("/", 1)
        for row in self.kept_rows(page.rows, meta):
            if (row.dbname, row.filename) == (dbname, filename):
                yield self.detail_request(row, meta, refreshed=True)
                return
        number, last = meta["page"], self.last_page(page, meta)
        if number < last:
            self.crawler.stats.inc_value("details/refresh-pages")
            carried = {k: meta[k] for k in ("refresh_for", "listing", "stale_url") if k in meta}
            yield self.search_request(search, number + 1, turn_token=page.turn_token, **carried, **_carry(meta))
            return
        await self._record_link(
            meta, meta.get("stale_url", ""), "not-found-on-refresh",
            f"not among the {page.total} results of its title search ({number} of {last} pages walked)",
        )

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
        """A request that failed for good (after its retries): refresh, or record it.

        A rejection (CNKI refused the query itself) is recorded and halts the task at once: every
        other round would be refused the same way.
        """
        request = failure.request
        meta = request.meta
        error = failure.value
        if isinstance(error, HaltedRequest):
            return  # held for after `task resume`: not a failure of the page
        reason = error.reason if isinstance(error, (GaveUp, RefusedPage)) else type(error).__name__
        if isinstance(error, IgnoreRequest) and not isinstance(error, GaveUp):
            reason = f"ignored:{reason}"
        detail = failure.getTraceback() if not isinstance(error, (GaveUp, RefusedPage)) else str(error)
        words = getattr(error, "detail", "") or ""
        self.crawler.stats.inc_value(f"errors/{meta.get('cnki_kind', 'other')}/{reason}")
        if meta.get("cnki_kind") == "detail":
            if not meta.get("refreshed") and reason in ("verify", "captcha", "http-302"):
                yield self.refresh_request(meta, request.url)
                return
            recorded = await self._recorded(request, self._record_link(meta, request.url, reason, detail))
        else:
            recorded = await self._recorded(
                request, self._record_code(meta, reason, detail, request=request, words=words)
            )
        if not recorded:
            return
        if kind_of(reason) == REJECTION:
            await self.halt(f"{reason}: {words}" if words else reason)

    async def halt(self, reason: str) -> bool:
        """Halt this spider's task (once across the cluster) and tell this worker's feeder."""
        self.halted = self.halted or reason  # the retry middleware stops retrying
        flow = getattr(self, "flow", None)
        if flow is None or self.task_id is None:
            return False
        if await _in_thread(flow.halt, self.task_id, reason):
            self.logger.error("task %s halted: %s", getattr(getattr(self, "task", None), "name", self.task_id), reason)
        self.crawler.signals.send_catch_log(cnki_signals.task_halted, task_id=self.task_id, reason=reason, spider=self)
        return True

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
        url = response.url if response is not None else ""
        request = response.request if response is not None else None
        await self._recorded(request, self._record_link(meta, url, reason, detail), what="store a document")

    async def _recorded(self, request, write, what: str = "crawl a page") -> bool:
        """Await ``write`` (the recording of a failure); True once it is written.

        If even that fails (the database stayed down past ``[database] outage_seconds``, a value
        its column refuses), the failure would be lost with the request's ack: the request is
        held instead (never released, so it is not acked: its lease runs out and it comes back
        to another worker, or this one restarted) and this worker stops, in one line naming the
        cause. The invariant kept: each document found is stored, or in errorLink, or still
        leased in Redis.
        """
        try:
            await write
        except Exception as exc:
            cause = str(getattr(exc, "orig", None) or exc).splitlines()[0] if str(exc) else ""
            self.crawler.stats.inc_value("errors/unrecorded")
            self.logger.critical(
                "cannot %s nor record its failure (%s: %s); %s is kept for its lease to bring "
                "back; stopping this worker",
                what, type(exc).__name__, masking.mask_text(cause), getattr(request, "url", "the request"),
            )
            self.logger.debug("the recording's failure", exc_info=True)
            if request is not None:
                hold(self.crawler, request)  # never released: its lease brings it back
            if not getattr(self, "_stopping", False):
                self._stopping = True
                d = deferred_from_coro(self.crawler.engine.close_spider_async(reason="database_error"))
                d.addErrback(lambda f: self.logger.debug("closing: %s", f.getErrorMessage()))
            return False
        return True

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
        words = ""
        if isinstance(exception, RefusedPage) and kind_of(reason) == REJECTION:
            words = rejection_text(response.body) or exception.detail  # CNKI's own words
        if meta.get("cnki_kind") == "detail":
            recorded = await self._recorded(response.request, self._record_link(meta, response.url, reason, detail))
        else:
            recorded = await self._recorded(
                response.request,
                self._record_code(meta, reason, detail, request=response.request, words=words),
            )
        if recorded and kind_of(reason) == REJECTION:  # a parser saw what the middleware let through
            await self.halt(f"{reason}: {words}" if words else reason)

    async def _record_code(self, meta, reason, detail="", permanent=False, *, request=None, words=""):
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
        if not permanent:  # an overflow is a fact about CNKI, not a failure of the crawl
            self.crawler.signals.send_catch_log(
                cnki_signals.list_failed, reason=reason, detail=words, request=request, spider=self
            )

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
