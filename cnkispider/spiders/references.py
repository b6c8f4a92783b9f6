"""A paper's reference list, asked after its detail page ([crawl] references = on).

The list comes from CNKI's citation API (:mod:`cnkispider.cnki.references`), 10 entries a
request, paged (``start`` += size until the total is read). Each request carries the detail
link's ``v=`` token and goes in the detail page's own CNKI session (meta ``cnki_session``, and
``cnki_verified`` for a session a person passed): the session, Referer, rate-limit and retry
middlewares treat request kind ``references`` as they treat ``detail``
(:data:`cnkispider.cnki.protocol.DOCUMENT_KINDS`).

What each answer becomes:

- a page of entries: its rows upserted into ``reference`` on (citing key, position) before the
  callback returns, so a replayed page rewrites them; then the next page, if any;
- a refusal (the -403 JSON, the soft block, HTML where JSON was asked): retried by the retry
  middleware in a fresh session, as a detail page is; never "no references";
- a failure after the retries: the citing document's errorLink row, reason
  ``references/<reason>``. The document itself is stored already (its ledger row stays
  ``stored``); the recrawl phase replays the row as any errorLink row (a title search for a
  fresh link, the detail page, its references again), and the upsert keeps that from adding rows.

A paper of a database with no reference type (:func:`~cnkispider.cnki.references.reference_type`)
asks nothing. Setting: ``CNKI_REFERENCES`` (default off).
"""

from __future__ import annotations

import scrapy

from cnkispider.cnki import references
from cnkispider.cnki.protocol import REFERENCES
from cnkispider.cnki.refusals import body_reason
from cnkispider.exceptions import HaltedRequest, RefusedPage
from cnkispider.runtime.offload import in_thread
from cnkispider.store import reference_rows
from cnkispider.store.db import db_now, retrying
from errors.middleware import failure_reason, record_failure

#: the errorLink reason prefix of a reference list that failed
REASON_PREFIX = "references/"
#: retries of one page: as a detail page's (a refusal there is most often a stale link)
RETRIES = 2


class ReferencesMixin:
    """The reference requests of a RoundSpider (needs ``protocol``, ``crawler``, ``context``)."""

    references_callbacks = ("parse_references", "on_references_error")

    def references_on(self) -> bool:
        return self.doc_type == "paper" and self.crawler.settings.getbool("CNKI_REFERENCES")

    def first_references(self, response, dbname: str, filename: str) -> scrapy.Request | None:
        """The first page of the reference list of the paper whose detail page is ``response``,
        or None (references off, no list for its database, a link without its token)."""
        if not self.references_on():
            return None
        kind = references.reference_type(dbname)
        v = references.token_of(response.request.url if response.request else response.url)
        if kind is None or not v:
            self.crawler.stats.inc_value("references/none_asked")
            return None
        meta = response.meta
        carried = {
            name: meta[name]
            for name in ("round_id", "task_id", "listing", "search", "page", "doc_type")
            if meta.get(name) is not None
        }
        return self._references_request(
            {
                **carried,
                "doc_key": f"{dbname}/{filename}",
                "references_v": v,
                "references_type": kind,
                "cnki_referer": response.url,
                "cnki_session": meta.get("cnki_session"),
                **({"cnki_verified": True} if meta.get("cnki_verified") else {}),
            },
            1,
        )

    def _references_request(self, meta: dict, start: int) -> scrapy.Request:
        url = references.references_url(
            self.protocol.base_url,
            meta["references_v"],
            meta["references_type"],
            start,
            references.PAGE_SIZE,
        )
        meta = {
            **{k: v for k, v in meta.items() if not k.startswith("_") and k != "retry_times"},
            "cnki_kind": REFERENCES,
            "references_start": start,
            "max_retry_times": RETRIES,
        }
        meta.pop("cookiejar", None)  # the session middleware sets it from cnki_session
        return scrapy.Request(
            url,
            headers={"Accept": "application/json, text/javascript, */*; q=0.01"},
            meta=meta,
            callback=self.parse_references,
            errback=self.on_references_error,
            dont_filter=True,  # pages of a list are not documents: the dupefilter is for those
        )

    async def parse_references(self, response):
        meta = response.meta
        reason = body_reason(REFERENCES, response.body)
        if reason is not None:  # what the retry middleware let through is still no list
            raise RefusedPage(reason, "reference list")
        start = int(meta.get("references_start") or 1)
        page = references.parse_references(response.body, start)
        dbname, filename = meta["doc_key"].split("/", 1)
        entries = [vars(entry) for entry in page.references]
        context = self.context
        task_id = context.task_id if context is not None else meta.get("task_id")
        if entries and context is not None:
            engine = context.tasks.engine
            await in_thread(
                retrying,
                _store,
                engine,
                dbname,
                filename,
                entries,
                task_id,
                what="storing references",
            )
        self.crawler.stats.inc_value("references/pages")
        self.crawler.stats.inc_value("references/entries", len(entries))
        following = references.next_start(page, start, references.PAGE_SIZE)
        if following is not None:
            yield self._references_request(
                {**meta, "cnki_session": meta.get("cnki_session")}, following
            )

    async def on_references_error(self, failure):
        """A page that failed for good: the citing document's errorLink row (see the docstring)."""
        error = failure.value
        if isinstance(error, HaltedRequest):
            return  # held for after `task resume`
        request = failure.request
        reason = REASON_PREFIX + failure_reason(error)
        self.crawler.stats.inc_value(f"errors/{REFERENCES}/{failure_reason(error)}")
        detail = f"{error} (page from {request.meta.get('references_start')})"
        await record_failure(
            self.crawler, request.meta, request.url, reason, detail, stage="detail"
        )
        return
        yield  # pragma: no cover - an async generator, as Scrapy's errbacks may be


def _store(engine, dbname: str, filename: str, entries: list[dict], task_id) -> None:
    with engine.begin() as conn:
        rows = reference_rows.rows_for(dbname, filename, entries, task_id, db_now(conn))
        reference_rows.upsert_references(conn, rows)
