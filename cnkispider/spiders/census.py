"""The day's census: a round ``(day, *)`` that searches the day without a category.

With [task] day_census a day is searched whole first (or, for a task of some categories, over
its root categories OR'd in one group): an empty day is one request, a day within the cap is
the day's only round, a larger one is split by the tree's roots (the full table:
docs/INTERNALS.md#cnkispiderspidersbasepy). A census split by the roots is checked once every
root has answered its total: together they must list the census at least (a document under two
roots counts twice). Less is a shortfall, recorded in errorCode as ``census`` (permanent), never
passed over.
"""

from __future__ import annotations

from cnkispider.cnki.search import Search
from errors.middleware import record_failure


class CensusMixin:
    """The census check of a :class:`cnkispider.spiders.base.RoundSpider` (needs ``crawler``,
    ``doc_type`` and its ``_census_parts``: round id -> [census, the roots' totals so far,
    roots still to answer], set in ``RoundSpider.__init__``)."""

    async def _census_part(self, meta: dict, total: int) -> None:
        """A root search of a split census answered its total: once every root has, their
        totals must add up to the census at least (a document under two roots counts twice).
        Less is a shortfall: recorded (errorCode ``census``, permanent: what the census saw
        beyond the roots' rows no category search reaches), never passed over."""
        round_id = meta.get("round_id")
        entry = self._census_parts.get(round_id)
        if entry is None:
            return  # another worker's census, or this worker restarted: not checked here
        entry[1] += total
        entry[2] -= 1
        if entry[2] > 0:
            return
        census, parts, _ = self._census_parts.pop(round_id)
        self.crawler.stats.inc_value("census/checked")
        if parts >= census:
            return
        self.crawler.stats.inc_value("census/short")
        day = Search.from_dict(meta["search"]).day_start
        self.logger.warning(
            "round %s: the categories of %s list %d of the census's %d",
            round_id,
            day,
            parts,
            census,
        )
        # the row names the census's search (page 1), the one whose total was not met
        census_search = Search.for_day(
            self.doc_type, day, None, query=Search.from_dict(meta["search"]).query
        )
        await record_failure(
            self.crawler,
            {"round_id": round_id, "search": census_search.to_dict(), "page": 1},
            "",
            "census",
            stage="list",
            permanent=True,
            unreachable=census - parts,
            detail=f"census {census}, categories {parts}: {census - parts} unaccounted",
        )
