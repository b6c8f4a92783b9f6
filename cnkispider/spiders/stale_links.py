"""Stale detail links: a document's link that no longer opens gets a fresh one from a list page.

CNKI's detail links carry a v= token that goes stale (a verify page, a captcha, a redirect), and
one listed in a verified session opens only in that session. Two ways to a fresh link, each a
list request with its own callback:

- ``refresh_request`` -> ``parse_refresh``: a title search in the document's round (day and
  category); its pages are walked until the document's row is found, else errorLink
  ``not-found-on-refresh``. The recrawl phase replays an errorLink row this way
  (``RoundSpider.replay_link``): days later the old link is surely stale.
- ``relist_request`` -> ``parse_relist``: the list page the document came from, fetched again
  when the verified session that listed it is gone (once for all its dead links:
  ``cnkispider.sessions.runtime``); a document no longer on that page gets a title search.

Requests stored in Redis by an older worker name ``parse_list`` with meta ``refresh_for`` or
``relist``; ``parse_list`` hands them on here (``cnkispider/spiders/base.py``).
"""

from __future__ import annotations

import json

import scrapy

from cnkispider.cnki import listgrid
from cnkispider.cnki.search import Search
from cnkispider.runtime.offload import in_thread
from cnkispider.spiders.carry import carry
from errors.middleware import record_failure

#: What a stale detail link fails with, once its retries are spent: refreshed, not recorded.
STALE_LINK = ("verify", "captcha", "http-302")


class StaleLinksMixin:
    """The fresh links of a :class:`cnkispider.spiders.base.RoundSpider` (needs ``protocol``,
    ``crawler``, ``doc_type``, ``search_request``, ``detail_request``, ``kept_rows`` and
    ``last_page``)."""

    stale_link_callbacks = ("parse_refresh", "parse_relist")

    def refresh_request(self, meta: dict, stale_url: str) -> scrapy.Request:
        listing = meta.get("listing", {})
        origin = Search.from_dict(meta["search"])
        search = Search.for_day(
            self.doc_type, origin.day_start, origin.category, title=listing.get("title") or None
        )
        self.crawler.stats.inc_value("details/refreshed")
        return self.search_request(
            search,
            1,
            callback=self.parse_refresh,
            round_id=meta.get("round_id"),
            refresh_for=meta["doc_key"],
            listing=listing,
            stale_url=stale_url,
        )

    async def parse_refresh(self, response):
        """A page of a title search made to refresh one stale detail link
        (:meth:`refresh_request`): take that document's new link.

        A common title lists many documents of a day: the search's pages are walked (as far as
        its pager, the total and the cap allow) until the document's row is found, so a document
        in row 51 or later is refreshed like one on page 1. Only a document in none of them is
        recorded as ``not-found-on-refresh``, with how far the search was walked.
        """
        meta = response.meta
        search = Search.from_dict(meta["search"])
        page = listgrid.parse_list(response.body, self.doc_type)
        dbname, filename = meta["refresh_for"].split("/", 1)
        for row in self.kept_rows(page.rows, meta):
            if (row.dbname, row.filename) == (dbname, filename):
                yield self.detail_request(row, meta, refreshed=True)
                return
        number, last = meta["page"], self.last_page(page, meta)
        if number < last:
            self.crawler.stats.inc_value("details/refresh-pages")
            carried = {k: meta[k] for k in ("refresh_for", "listing", "stale_url") if k in meta}
            yield self.search_request(
                search,
                number + 1,
                turn_token=page.turn_token,
                callback=self.parse_refresh,
                **carried,
                **carry(meta),
            )
            return
        await record_failure(
            self.crawler,
            meta,
            meta.get("stale_url", ""),
            "not-found-on-refresh",
            f"not among the {page.total} results of its title search ({number} of {last} pages walked)",
            stage="detail",
        )

    async def relist_request(self, meta: dict) -> scrapy.Request | None:
        """The list page a dead detail link came from, to be fetched again for fresh links
        (:meth:`parse_relist`), or None when that is under way already (sessions.runtime)."""
        from cnkispider.sessions.runtime import VerifiedSessions

        runtime = VerifiedSessions.of(self.crawler)
        page = meta.get("page") or 1
        page_key = json.dumps([meta["search"], page], sort_keys=True, ensure_ascii=False)
        if not await in_thread(runtime.relist_add, meta.get("round_id"), page_key, meta["doc_key"]):
            return None
        return self.search_request(
            Search.from_dict(meta["search"]),
            page,
            callback=self.parse_relist,
            round_id=meta.get("round_id"),
            relist=page_key,
        )

    async def parse_relist(self, response):
        """A list page fetched again for the dead links of its documents (:meth:`relist_request`):
        their fresh links. A document no longer on the page (the list moved) is refreshed by a
        title search. A relisted first page carries the zero check as any round's first page
        does: a soft-block body goes to the canary (``cnkispider/spiders/canary.py``), which
        rebuilds it as a plain list page."""
        if self.soft_block_to_check(response):
            async for out in self._zero_or_soft_block(response):
                yield out
            return
        meta = response.meta
        page = listgrid.parse_list(response.body, self.doc_type)
        from cnkispider.sessions.runtime import VerifiedSessions

        runtime = VerifiedSessions.of(self.crawler)
        wanted = await in_thread(runtime.relist_take, meta.get("round_id"), meta["relist"])
        for row in self.kept_rows(page.rows, meta):
            key = f"{row.dbname}/{row.filename}"
            if key in wanted:
                wanted.discard(key)
                yield self.detail_request(row, meta, refreshed=True)
        for key in sorted(wanted):
            self.crawler.stats.inc_value("sessions/relist_moved")
            origin = Search.from_dict(meta["search"])
            search = Search.for_day(self.doc_type, origin.day_start, origin.category)
            yield self.search_request(
                search,
                1,
                callback=self.parse_refresh,
                round_id=meta.get("round_id"),
                refresh_for=key,
                listing={},
            )
