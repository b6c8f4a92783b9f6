"""The round-driven spider all three document types share.

A spider only decides what to request next and hands pages to the pure parsers in
``cnkispider.cnki`` (listgrid, detailpage). Where rounds come from (claims, leases, the recrawl phase) is flow
control's business (``tasks.feeder``), and so is the task it crawls for, which the spider reads
from the crawl context (``cnkispider.runtime.context``, ``self.context``); CNKI sessions, proxies and
retries are the downloader middlewares'; writing failures down (errorCode, errorLink) and halting
on a rejection is ``errors.middleware``'s; acknowledging a request once its outcome is written is
the scheduler's.

A round's searches::

    round (day, category) --page 1--> total <= cap ......... walk pages 1..N, one detail request a row
                                      total > cap, category has children  -> one search per child
                                      total > cap, leaf ..... both PT orders (desc, asc), each up to
                                                              the cap; what even that cannot reach is
                                                              recorded in errorCode as "overflow"

A census round ``(day, *)`` ([task] day_census) searches the day whole, split by the roots when
it lists more than the cap (``cnkispider/spiders/census.py``). A stale detail link is refreshed
by a title search in its round (``cnkispider/spiders/stale_links.py``); a first page that may be
a true zero is told from the soft block by a canary (``cnkispider/spiders/canary.py``). Each kind
of list request names its own callback (``parse_list``: the round's own page). Every listed row
goes into the round's ledger before its detail request is handed out
(docs/RELIABILITY.md#every-listed-row-accounted-for).

A kept row becomes, by the task's depth (``cnkispider/spiders/depth.py``), a detail request
(detail), a document from the row alone (list), or its place in a citation export batch (export).
The listed rows in the round's ledger: ``cnkispider/spiders/listed.py``; failures and replays:
``cnkispider/spiders/failures.py``. The rest: docs/INTERNALS.md#cnkispiderspidersbasepy.
"""

from __future__ import annotations

from collections import OrderedDict

import scrapy
from twisted.internet import defer

from cnkispider.cnki import detailpage, listgrid
from cnkispider.cnki.protocol import protocol_from_settings
from cnkispider.cnki.refusals import ZERO_CHECK
from cnkispider.cnki.search import Search
from cnkispider.exceptions import RefusedPage
from cnkispider.items import FIELDS, ITEM_CLASSES, ROW_FIELDS
from cnkispider.runtime.context import CrawlContext, context_of
from cnkispider.runtime.offload import in_thread
from cnkispider.spiders.canary import CanaryMixin
from cnkispider.spiders.carry import carry, verified_session
from cnkispider.spiders.census import CensusMixin
from cnkispider.spiders.daysplit import DaySplitMixin
from cnkispider.spiders.depth import DepthMixin
from cnkispider.spiders.facets import FacetsMixin
from cnkispider.spiders.failures import FailuresMixin
from cnkispider.spiders.listed import ListedRowsMixin, counted_now
from cnkispider.spiders.references import ReferencesMixin
from cnkispider.spiders.stale_links import StaleLinksMixin
from cnkispider.watch.drift import watched
from errors.middleware import record_failure
from tasks.categories import DAY, covers

#: A list row's 数据库 that names a thesis's degree.
THESIS_DEGREES = {"博士": "博士", "硕士": "硕士"}


# Detail requests get few retries: a verify page on a detail link is most often a stale token,
# which no retry cures; a title search for a fresh link does.
DETAIL_RETRIES = 2


class RoundSpider(
    CanaryMixin,
    CensusMixin,
    DaySplitMixin,
    ListedRowsMixin,
    FailuresMixin,
    FacetsMixin,
    StaleLinksMixin,
    DepthMixin,
    ReferencesMixin,
    scrapy.Spider,
):
    doc_type: str = ""
    custom_settings: dict = {}
    #: The only callbacks and errbacks a request read from the shared Redis may name (the
    #: scheduler refuses any other: see cnkispider.scheduling.serialize).
    queue_callbacks = (
        "parse_list",
        "parse_detail",
        "parse_export",
        "on_error",
        *CanaryMixin.canary_callbacks,
        *StaleLinksMixin.stale_link_callbacks,
        *ReferencesMixin.references_callbacks,
        *FacetsMixin.facets_callbacks,
        *DaySplitMixin.daysplit_callbacks,
    )
    #: ``cnkispider refresh-counts`` (setting CNKI_COUNTS_ONLY): list pages only, counts updated
    counts_only = False

    def __init__(self, *args, task: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.task_name = task  # `scrapy crawl patent -a task=NAME` joins another task
        self._drops_logged: OrderedDict[int, None] = OrderedDict()
        #: Days whose canary listed rows (a soft-block body on them is a true zero), and the
        #: pages waiting for a canary under way, by day: one canary a day per worker.
        self._days_with_rows: OrderedDict[str, None] = OrderedDict()
        self._canaries: dict[str, list[defer.Deferred]] = {}
        #: Census rounds split by the tree's roots: round id -> [census, the roots' totals so
        #: far, roots still to answer] (the shortfall check, :meth:`_census_part`).
        self._census_parts: dict[int, list[int]] = {}

    @classmethod
    def from_crawler(cls, crawler, *args, **kwargs):
        spider = super().from_crawler(crawler, *args, **kwargs)
        spider.protocol = protocol_from_settings(crawler.settings)
        spider._drift_fields = watched(spider.doc_type) if spider.doc_type else ()
        spider.counts_only = crawler.settings.getbool("CNKI_COUNTS_ONLY")
        return spider

    @property
    def context(self) -> CrawlContext | None:
        """The task this spider crawls for (flow control opens it: ``cnkispider.runtime.context``)."""
        return context_of(self.crawler)

    def day_search(self, day, category: str | None = None, **cuts) -> Search:
        """A search of the task on one day: the category's (None: every one), with the task's
        professional-search expression when it has one (docs/QUERY.md), so every search a
        round makes (its pages, its split, its census, its replays) stays inside the query."""
        context = self.context
        query = context.task.query if context is not None else None
        return Search.for_day(self.doc_type, day, category, query=query, **cuts)

    def _task_id(self) -> int | None:
        context = self.context
        return context.task_id if context is not None else None

    async def start(self):
        # Rounds are fed by tasks.feeder.RoundFeeder as the queue drains; nothing to start with.
        return
        yield  # pragma: no cover - makes this an async generator

    # -- requests ------------------------------------------------------------------------

    def search_request(
        self,
        search: Search,
        page: int,
        *,
        turn_token: str | None = None,
        callback=None,
        **meta,
    ) -> scrapy.FormRequest:
        """A list request: a page of ``search``, answered by ``callback`` (the round's own page,
        :meth:`parse_list`, unless the request is a canary, a refresh or a relist)."""
        meta.update(
            cnki_kind="list",
            doc_type=self.doc_type,
            task_id=self._task_id(),
            search=search.to_dict(),
            page=page,
        )
        if page == 1 and not meta.get("refresh_for") and meta.get("round_id") is not None:
            # a round's search may truly list nothing: its soft-block body comes to the spider
            meta.setdefault(ZERO_CHECK, True)
        return scrapy.FormRequest(
            self.protocol.grid_url,
            formdata=self.protocol.grid_form(search, page, turn_token),
            headers=self.protocol.grid_headers(),
            meta=meta,
            callback=callback or self.parse_list,
            errback=self.on_error,
            dont_filter=True,  # list requests are unique by construction (search + page)
        )

    def round_requests(self, round_) -> list[scrapy.Request]:
        """The first request of a round (flow control seeds it into Redis)."""
        if round_.category == DAY:
            # the day's census (tasks/rounds.py): its search without a category, or over the
            # task's root categories OR'd in one group when they are not the whole tree
            context = self.context
            whole = context is None or self.covers_tree()
            roots = () if whole else tuple(context.tree.roots)
            search = self.day_search(round_.day, None, any_of=roots)
            if getattr(round_, "parts", ()):  # a look's split day: one recount of its parts
                return [self.facet_request(round_, search)]
            return [
                self.search_request(search, 1, round_id=round_.id, round_root=True, census=True)
            ]
        search = self.day_search(round_.day, round_.category)
        return [self.search_request(search, 1, round_id=round_.id, round_root=True)]

    def covers_tree(self) -> bool:
        """The task's categories are the type's whole tree: its census is its rows."""
        context = self.context
        return context is not None and covers(context.tree, self.doc_type)

    def row_listing(self, row: listgrid.ListRow) -> dict:
        """What a list row says of its document (carried to its detail request, or stored as
        it is at list depth)."""
        listing = {name: getattr(row, name) for name in ROW_FIELDS[self.doc_type]}
        listing["title"] = row.title
        if "counted_at" in FIELDS[self.doc_type]:
            # when the row's counts were read (they change; refresh-counts reads them again)
            listing["counted_at"] = counted_now()
        return listing

    def detail_request(
        self, row: listgrid.ListRow, meta: dict, refreshed: bool = False
    ) -> scrapy.Request:
        if not (row.dbname.strip() and row.filename.strip()) or "/" in row.dbname:
            # The dupefilter and the fingerprint key on doc_key: an empty (or ambiguous) one
            # would make every keyless document "seen" after the first. The parser refuses
            # such rows already; this keeps any other caller from getting one through.
            raise RefusedPage(
                "unexpected",
                f"list row {row.seq or '?'} ({row.title[:40]!r}) has no dbname/filename key",
            )
        listing = self.row_listing(row)
        return scrapy.Request(
            self.protocol.absolute(row.url),
            meta={
                "cnki_kind": "detail",
                "doc_type": self.doc_type,
                "task_id": self._task_id(),
                "round_id": meta.get("round_id"),
                "doc_key": f"{row.dbname}/{row.filename}",
                "listing": listing,
                "search": meta["search"],
                "refreshed": refreshed,
                "max_retry_times": DETAIL_RETRIES,
                "page": meta.get("page"),  # the list page to list again if its session is lost
                # a v= link opens only in the verified session that listed it
                **verified_session(meta),
            },
            callback=self.parse_detail,
            errback=self.on_error,
            dont_filter=refreshed,  # a refreshed link is for a document already in the dupefilter
        )

    # -- callbacks -----------------------------------------------------------------------

    async def parse_list(self, response):
        """A page of a round's search (or of its recrawl's replay): its rows, its next page."""
        meta = response.meta
        older = self._older_list_callback(meta)
        if older is not None:
            async for out in older(response):
                yield out
            return
        if self.soft_block_to_check(response):
            async for out in self._zero_or_soft_block(response):
                yield out
            return
        search = Search.from_dict(meta["search"])
        page = listgrid.parse_list(response.body, self.doc_type)
        async for out in self._listed(page, search, meta):
            yield out
        if meta.get("error_code_id") and meta["page"] == (meta.get("replay_page") or meta["page"]):
            # The replayed page of an errorCode row is mended only now, once everything that
            # came of it was handed out (its detail requests, its next page, what it recorded):
            # a failure before this line still finds its row and counts an attempt on it. A
            # worker dying between here and the ack brings the request back; if it fails then,
            # record_code finds its row gone and writes a new one (never an update of nothing).
            await in_thread(self.context.error_recorder.resolve_code, meta["error_code_id"])

    def _older_list_callback(self, meta: dict):
        """The callback of a list request stored by an older worker, or None for a round's page.

        Before each kind of list request named its own callback, every one named ``parse_list``
        and said its kind in meta. Requests are stored in Redis by callback name
        (cnkispider.scheduling.serialize) and outlive the worker that queued them (an upgrade
        while a task's queue is full, a halt and resume), so such a request still comes here:
        it is handed to its kind's callback, in the order the meta used to be read."""
        if meta.get("canary_for"):
            return self.parse_canary
        if meta.get("refresh_for"):
            return self.parse_refresh
        if meta.get("relist"):
            return self.parse_relist
        return None

    async def _listed(self, page, search: Search, meta: dict):
        """What a list page yields: its detail requests and its next page, or its split."""
        number = meta["page"]
        if number == 1:
            if meta.get("round_root"):
                self.crawler.stats.inc_value("rounds/searched")
                if (
                    meta.get("census")
                    and page.total > self.protocol.cap
                    and self.context is not None
                    and not await self._census_walked_before(meta)
                ):
                    # The census lists more than one search can walk: split by its facet
                    # counts into root rounds (daysplit.py), else the day's root rounds become
                    # due (some categories, or a day split so before: its parts were
                    # re-opened by the look), else the whole tree splits inside the round.
                    if self.split_by_facets():
                        yield self.split_request(search, page.total, meta)
                        return
                    if await self.split_by_roots(search, meta["round_id"]):
                        await self.census_by_categories(meta["round_id"], page.total)
                        return
                await in_thread(self.context.tasks.set_total, meta["round_id"], page.total)
                if await self._counted_unchanged(meta, page.total):
                    return
                if meta.get("census"):
                    self.crawler.stats.inc_value("census/days")
                    if page.total == 0:
                        self.crawler.stats.inc_value("census/empty-days")
                    else:  # the day lists rows: it is its own zero canary (a root's empty answer)
                        self._days_with_rows[search.day_start] = None
                    if page.total > self.protocol.cap and self.context is not None:
                        roots = len(self.context.tree.roots)
                        self._census_parts[meta["round_id"]] = [page.total, 0, roots]
            if meta.get("census_part"):
                await self._census_part(meta, page.total)
            if page.total > self.protocol.cap and not meta.get("sort_cut"):
                async for out in self._split(search, page.total, meta):
                    yield out
                return
        # Read every row before yielding any: a page that turns out unreadable half-way yields
        # nothing (it is retried whole), rather than some of its documents.
        kept, drops = self.sorted_rows(page.rows, meta)
        if page.rows and not kept:
            # Not one row of this search's own documents: CNKI answered another search, or the
            # family list is wrong. Loud, never a quiet "done" (the rows stay unaccounted).
            names = sorted({row.dbname for row, _ in drops})
            raise RefusedPage(
                "unexpected",
                f"round {meta.get('round_id')} page {number} ({search.day_start} "
                f"{search.category or ''}): every one of its {len(page.rows)} rows is of "
                f"another database ({', '.join(names)})",
            )
        if meta.get("look") and not self.counts_only:
            # a look's round walked again: the page's rows are listed (tasks/lookback.py), and
            # what its ledger holds stored costs nothing more
            stored = await in_thread(
                self.context.tasks.look_page, meta["round_id"], [r.doc_key for r in page.rows]
            )
            if stored:
                self.crawler.stats.inc_value("follow/rows-known", len(stored))
                kept = [row for row in kept if row.doc_key not in stored]
        depth = self.depth()
        if self.counts_only:  # `cnkispider refresh-counts`: the rows' counts, no detail page
            await self._refresh_counts(meta, kept, drops)
        elif depth == "detail":
            kept, drops = self.selected_rows(kept, drops)  # a deepening task's rule
            kept = await self.without_known(kept, meta, depth)
            requests = [self.detail_request(row, meta) for row in kept]
            await self._note_listed(meta, requests, drops)
            for request in requests:
                yield request
        else:
            kept, drops = self.selected_rows(kept, drops)  # a deepening task's rule
            if depth != "list":  # a list row costs nothing more: it is stored again
                kept = await self.without_known(kept, meta, depth)
            async for out in self.listed_at_depth(depth, kept, drops, meta):
                yield out
        last = self.last_page(page, meta)
        unreachable = self.unreachable_past_pager(page, meta)
        if unreachable:
            # The pager shows fewer pages than the total needs: CNKI caps this search lower than
            # we think. What lies past its last page cannot be listed: say so, never "done" quietly.
            self.crawler.stats.inc_value("list/pager-short")
            await record_failure(
                self.crawler,
                meta,
                "",
                "pager-short",
                stage="list",
                permanent=True,
                unreachable=unreachable,
                detail=f"{page.total} listed but the pager shows {page.page_count} pages of "
                f"{self.protocol.page_size}: at least {unreachable} unreachable",
            )
        if number < last:
            yield self.search_request(search, number + 1, turn_token=page.turn_token, **carry(meta))

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
        context = self.context
        tree = context.tree if context is not None else None
        children = tree.children(search.category) if search.category and tree else []
        part = {}
        if meta.get("census") and search.category is None and tree is not None:
            children, part = list(tree.roots), {"census_part": True}  # a census over the cap
        self.crawler.stats.inc_value("rounds/split")
        if children:
            self.logger.info(
                "%s %s lists %d > %d: split into %d child categories",
                search.day_start,
                search.category,
                total,
                self.protocol.cap,
                len(children),
            )
            for code in children:
                child = Search.for_day(self.doc_type, search.day_start, code, query=search.query)
                yield self.search_request(child, 1, **part, **carry(meta))
            return
        # A leaf: each end of one sort order reaches `cap` documents; together up to 2 x cap.
        for sort_type in ("desc", "asc"):
            cut = Search.for_day(
                self.doc_type,
                search.day_start,
                search.category,
                query=search.query,
                sort_field="PT",
                sort_type=sort_type,
            )
            yield self.search_request(cut, 1, sort_cut=True, **carry(meta))
        unreachable = total - 2 * self.protocol.cap
        if unreachable > 0:
            self.crawler.stats.inc_value("rounds/overflow")
            await record_failure(
                self.crawler,
                meta,
                "",
                "overflow",
                stage="list",
                permanent=True,
                unreachable=unreachable,
                detail=f"{total} listed; both PT orders reach {2 * self.protocol.cap}; at least {unreachable} unreachable",
            )

    async def parse_detail(self, response):
        meta = response.meta
        parse = getattr(detailpage, f"parse_{self.doc_type}")
        fields = parse(response.body)
        dbname, filename = meta["doc_key"].split("/", 1)
        values = {
            **meta.get("listing", {}),
            **{k: v for k, v in fields.items() if v or k not in meta.get("listing", {})},
        }
        values["dbname"], values["filename"] = (
            fields.get("dbname") or dbname,
            fields.get("filename") or filename,
        )
        if "degree" in fields and not values.get("degree"):
            # a thesis page without its database's name (older pages): the row's 博士/硕士
            values["degree"] = THESIS_DEGREES.get(values.get("database", ""), "")
        item = ITEM_CLASSES[self.doc_type](**values)
        if any(not fields.get(name) for name in self._drift_fields):
            # the drift alarm's sample: the page of a document that lacks a watched field (not a
            # field: never stored; the pipeline saves it only if the task halts for drift)
            item._cnki_page = response.body
        if meta.get("round_id") is not None:
            # The ledger row this document settles: the list's key, whatever key the detail page
            # gives the document. Not a field: it is never stored (the pipeline reads it).
            item._cnki_ledger = (meta["round_id"], meta["doc_key"])
        yield item
        # [crawl] references: the paper's reference list, in this page's session
        follow = self.first_references(response, values["dbname"], values["filename"])
        if follow is not None:
            yield follow
