"""What a round's list rows become at each depth of its task (docs/DEPTH.md).

- ``detail`` (default): one detail request a row (``RoundSpider.detail_request``), as ever;
- ``list``: a document from its list row alone (title, people, source, date, database, counts,
  export id, online-first), no other request;
- ``export``: the rows' export ids to CNKI's citation export (``POST /dm8/API/GetExport``) in
  batches of the size learned for the session (:class:`~cnkispider.cnki.export_batch.
  ExportBatches`), each EndNote record matched to its row by content and stored with the row's
  fields under it. A row CNKI never answers for (left out of a batch of one, or of a request
  that failed for good) goes to errorLink with reason ``export-missing``; the recrawl phase
  fetches its detail page. A row without an export id gets its detail request.

The ledger holds at every depth: each kept row is written ``pending`` before anything can settle
it, and it is settled by its item (``stored``) or its errorLink row (``error``), as at detail
depth. Requests carry their rows as plain JSON in meta (the shared Redis queue holds them).

Settings: ``CNKI_EXPORT_BATCH`` (the size a session's first request asks for).
"""

from __future__ import annotations

import json

import scrapy

from cnkispider.cnki import listgrid
from cnkispider.cnki.export_batch import ALONE_AFTER, ExportBatches, ExportQueue, ExportRow
from cnkispider.cnki.export_records import ExportAnswerError, parse_export
from cnkispider.cnki.refusals import REJECTION, kind_of
from cnkispider.exceptions import HaltedRequest, RefusedPage
from cnkispider.items import DEFAULT_DEPTH, FIELDS, ITEM_CLASSES
from cnkispider.runtime.offload import in_thread
from cnkispider.store import doclinks
from errors.middleware import failure_reason, record_download_failure, record_failure
from tasks.selection import FIELDS as SELECTION_FIELDS
from tasks.selection import NOT_SELECTED

#: errorLink's reason for a row whose export record never came.
EXPORT_MISSING = "export-missing"
#: Which list-row cell holds a type's people, and the item field it fills.
PEOPLE_FIELD = {"paper": "authors", "patent": "inventors", "achievement": "completers"}


class DepthMixin:
    """The depth-dependent part of :class:`cnkispider.spiders.base.RoundSpider`."""

    _export_batches: ExportBatches | None = None

    def depth(self) -> str:
        """The task's depth (the crawl context's task row); detail without one."""
        context = self.context
        task = getattr(context, "task", None) if context is not None else None
        return getattr(task, "depth", None) or DEFAULT_DEPTH

    @property
    def export_batches(self) -> ExportBatches:
        if self._export_batches is None:
            # the default lives in default_settings, installed by the add-on
            self._export_batches = ExportBatches(self.crawler.settings.getint("CNKI_EXPORT_BATCH"))
        return self._export_batches

    def selected_rows(self, kept: list, drops: list) -> tuple[list, list]:
        """A deepening task crawls only the rows its rule selects; the others are dropped by
        the rule ``not-selected`` (counted in the ledger). Every row without a rule."""
        context = self.context
        task = getattr(context, "task", None) if context is not None else None
        selection = getattr(task, "selection", None)
        if selection is None:
            return kept, drops
        chosen, skipped = [], []
        for row in kept:
            fields = {name: getattr(row, name, "") for name in SELECTION_FIELDS}
            (chosen if selection.selects(fields) else skipped).append(row)
        if skipped:
            self.crawler.stats.inc_value(f"rows/dropped/{NOT_SELECTED}", len(skipped))
        return chosen, drops + [(row, NOT_SELECTED) for row in skipped]

    # -- a page's rows at list or export depth -------------------------------------------

    async def without_known(self, kept: list, meta: dict, depth: str) -> list:
        """The kept rows less the documents another task already stored at ``depth`` or
        deeper (issue 47): those are linked to this task and stored in the round's ledger
        (cnkispider/store/doclinks.py), not fetched again for it."""
        context = self.context
        round_id = meta.get("round_id")
        if context is None or round_id is None or not kept:
            return kept
        known = await in_thread(
            doclinks.take_known,
            context.tasks.engine,
            context.task_id,
            round_id,
            self.doc_type,
            [(row.dbname, row.filename) for row in kept],
            depth,
        )
        if not known:
            return kept
        self.crawler.stats.inc_value("rows/known", len(known))
        return [row for row in kept if (row.dbname, row.filename) not in known]

    async def listed_at_depth(self, depth: str, kept: list, drops: list, meta: dict):
        """The kept rows of one list page at ``depth`` (list or export): their items or export
        requests (and detail requests for rows without an export id), after their ledger rows."""
        keys = [row.doc_key for row in kept]
        if depth == "list":
            await self._note_listed(meta, [], drops, keys=keys)
            self.crawler.stats.inc_value("depth/list/rows", len(kept))
            for row in kept:
                yield self.row_item(row, meta)
            return
        with_id = [row for row in kept if row.export_id]
        without = [row for row in kept if not row.export_id]
        details = [self.detail_request(row, meta) for row in without]
        await self._note_listed(meta, details, drops, keys=keys)
        if without:
            self.crawler.stats.inc_value("depth/export/no-export-id", len(without))
        for request in details:
            yield request
        rows = [self._export_row(row) for row in with_id]
        for request in self._export_requests(rows, meta):
            yield request

    def row_item(self, row: listgrid.ListRow, meta: dict, depth: str = "list") -> scrapy.Item:
        """A document from its list row alone."""
        values = {**self.row_listing(row), "dbname": row.dbname, "filename": row.filename}
        people = PEOPLE_FIELD[self.doc_type]
        values[people] = row.authors
        if self.doc_type == "patent":
            values.setdefault("applicant", row.source)
        return self._item(values, meta.get("round_id"), row.doc_key, depth)

    def _item(self, values: dict, round_id, doc_key: str, depth: str) -> scrapy.Item:
        fields = FIELDS[self.doc_type]
        item = ITEM_CLASSES[self.doc_type](
            **{
                k: (json.dumps(v, ensure_ascii=False) if isinstance(v, list | dict) else v)
                for k, v in values.items()
                if k in fields
            }
        )
        if round_id is not None:
            item._cnki_ledger = (round_id, doc_key)
        item._cnki_depth = depth
        return item

    def _export_row(self, row: listgrid.ListRow) -> dict:
        return {
            "export_id": row.export_id,
            "title": row.title,
            "people": row.authors,
            "doc_key": row.doc_key,
            "url": self.protocol.absolute(row.url),
            "listing": {
                **self.row_listing(row),
                PEOPLE_FIELD[self.doc_type]: row.authors,
            },
            "left_out": 0,
        }

    def _export_requests(self, rows: list[dict], meta: dict) -> list[scrapy.Request]:
        """``rows`` in batches of the session's learned size; a row left out again and again
        goes alone (:data:`~cnkispider.cnki.export_batch.ALONE_AFTER`)."""
        size = self.export_batches.size(meta.get("cnki_session"))
        out, batch = [], []
        for row in rows:
            if row.get("left_out", 0) >= ALONE_AFTER:
                out.append(self.export_request([row], meta))
                continue
            batch.append(row)
            if len(batch) >= size:
                out.append(self.export_request(batch, meta))
                batch = []
        if batch:
            out.append(self.export_request(batch, meta))
        return out

    def export_request(self, rows: list[dict], meta: dict) -> scrapy.FormRequest:
        carried = {
            k: meta[k]
            for k in ("round_id", "search", "page", "cnki_session", "cnki_verified")
            if meta.get(k) is not None
        }
        self.crawler.stats.inc_value("depth/export/requests")
        return scrapy.FormRequest(
            self.protocol.export_url,
            formdata=self.protocol.export_form([r["export_id"] for r in rows]),
            headers=self.protocol.export_headers(self.protocol.referer(self.doc_type)),
            meta={
                "cnki_kind": "export",
                "doc_type": self.doc_type,
                "task_id": self._task_id(),
                "export_rows": rows,
                **carried,
            },
            callback=self.parse_export,
            errback=self.on_error,
            dont_filter=True,  # unique by its rows; a batch asked again is a new request
        )

    # -- the answer ----------------------------------------------------------------------

    async def parse_export(self, response):
        meta = response.meta
        rows = meta["export_rows"]
        try:
            records = parse_export(response.body)
        except ExportAnswerError as exc:
            raise RefusedPage("unexpected", str(exc)) from None
        queue = ExportQueue.of(
            ExportRow(r["export_id"], r["title"], r["people"], payload=r, left_out=r["left_out"])
            for r in rows
        )
        number, _ = queue.take(len(rows))
        pairs, given_up = queue.answered(number, records)
        stats = self.crawler.stats
        stats.inc_value("depth/export/records", len(pairs))
        if queue.strays:
            stats.inc_value("depth/export/strays", queue.strays)
        size = self.export_batches.answered(meta.get("cnki_session"), len(rows), len(pairs))
        stats.set_value("depth/export/batch_size", size)
        for row, record in pairs:
            yield self.export_item(row.payload, record.fields, meta)
        for row in given_up:
            await self._export_missing(row.payload, meta, "CNKI's export never answered for it")
        again = [dict(r.payload, left_out=r.left_out) for r in queue.pending]
        if again:
            stats.inc_value("depth/export/left-out", len(again))
            for request in self._export_requests(again, meta):
                yield request

    def export_item(self, row: dict, record: dict, meta: dict) -> scrapy.Item:
        """A document from its list row and its export record (a non-empty record value wins)."""
        dbname, filename = row["doc_key"].split("/", 1)
        values = {
            **row["listing"],
            **{k: v for k, v in record.items() if v not in ("", None, [])},
            "dbname": dbname,
            "filename": filename,
        }
        if self.doc_type == "achievement" and record.get("summary"):
            values["summary"] = record["summary"]
        return self._item(values, meta.get("round_id"), row["doc_key"], "export")

    async def _export_missing(self, row: dict, meta: dict, why: str) -> None:
        """A row whose record never came: errorLink ``export-missing`` (the ledger says error);
        the recrawl phase fetches its detail page."""
        self.crawler.stats.inc_value("depth/export/missing")
        await record_failure(
            self.crawler,
            {
                "round_id": meta.get("round_id"),
                "doc_key": row["doc_key"],
                "listing": row["listing"],
                "search": meta.get("search") or {},
            },
            row.get("url", ""),
            EXPORT_MISSING,
            why,
            stage="detail",
        )

    async def export_failed(self, failure):
        """An export request that failed for good: a rejection (暂无数据: the request is wrong)
        is recorded and halts the task as any rejection does; a held request comes back; any
        other failure sends its rows to errorLink (``export-missing``, with the reason)."""
        meta = failure.request.meta
        reason = failure_reason(failure.value)
        if isinstance(failure.value, HaltedRequest) or kind_of(reason) == REJECTION:
            await record_download_failure(self.crawler, failure)
            return
        for row in meta.get("export_rows", []):
            await self._export_missing(row, meta, f"its export request failed: {reason}")
