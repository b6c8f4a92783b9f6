"""A request that failed for good, and the recrawl phase's replays: the spider's errback
(``on_error``) hands a failure to the part that owns it (a citation export, a facet recount, a
dead session's relist, a canary, a stale detail link's title search) or records it
(``errors.middleware``); ``replay_code`` and ``replay_link`` build again the requests of the
error rows the recrawl phase claims. A part of :class:`cnkispider.spiders.base.RoundSpider`.
"""

from __future__ import annotations

import json

import scrapy

from cnkispider.cnki.groups import FACET_PARTS
from cnkispider.cnki.search import Search
from cnkispider.exceptions import SessionLost
from cnkispider.scheduling.outcome import errback_lineage
from cnkispider.spiders.daysplit import FACET_SPLIT
from cnkispider.spiders.stale_links import STALE_LINK
from errors.middleware import failure_reason, record_download_failure


class FailuresMixin:
    """The errback and the replays of a :class:`cnkispider.spiders.base.RoundSpider` (needs
    ``crawler``, ``doc_type``, ``search_request``, ``day_search`` and the other parts' failure
    handlers)."""

    async def on_error(self, failure):
        """A request that failed for good (after its retries): a detail request whose link went
        stale (CNKI's verify page) is refreshed by a title search; any other failure is recorded
        (``errors.middleware``: a rejection there halts the task). What it yields is the child
        of the failed request's lease, as a callback's is: refused once that hand-out is no
        longer current (its lease ran out and the round went on without it)."""
        async for out in errback_lineage(failure, self._on_error(failure)):
            yield out

    async def _on_error(self, failure):
        request = failure.request
        meta = request.meta
        reason = failure_reason(failure.value)
        if meta.get("cnki_kind") == "export":
            await self.export_failed(failure)
            return
        if meta.get(FACET_SPLIT) is not None:  # a census's split (daysplit.py)
            async for out in self.split_failed(failure):
                yield out
            return
        if meta.get(FACET_PARTS) is not None:
            await self.facets_failed(failure)
            return
        if isinstance(failure.value, SessionLost) and meta.get("cnki_kind") == "detail":
            # its verified session cannot open it: list its page again (once for all its dead
            # links) in the round's session
            relist = await self.relist_request(meta)
            if relist is not None:
                self.crawler.stats.inc_value("sessions/relisted")
                yield relist
            return
        if meta.get("canary_for"):
            for out in self.canary_failed(failure, reason):
                yield out
            return
        if meta.get("cnki_kind") == "detail" and not meta.get("refreshed") and reason in STALE_LINK:
            self.crawler.stats.inc_value(f"errors/detail/{reason}")
            yield self.refresh_request(meta, request.url)
            return
        await record_download_failure(self.crawler, failure)

    # -- the recrawl phase: the same requests, another input source ------------------------

    def replay_code(self, row) -> scrapy.Request:
        search = (
            Search.from_dict(json.loads(row["search"]))
            if row["search"]
            else self.day_search(row["day"], row["category"] or None)
        )
        page = row["page"] or 1
        meta = {"error_code_id": row["id"], "replay_page": page}
        if row.get("round_id") is not None:
            meta["round_id"] = row["round_id"]  # its rows go into their round's ledger
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
            "round_id": row.get("round_id"),  # stored, its round's ledger row says so
        }
        # Days later the old link is surely stale: go straight to a title search for a fresh one.
        return self.refresh_request(meta, row["url"])
