"""A day over the cap split by its facet counts: one ``group/result`` instead of probing.

A day's census (``[task] day_census``) that lists more than one search can walk is split by
its roots. With ``[task] facet_counts`` (issue 46.2) the census's page 1 is followed by one
group/result for the same search, counted by the facet of the task's categories; then
(tasks/parts.py ``split_day``) the census closes as ``categories`` and the day becomes its root
rounds, its **parts**, whatever the task's categories (the whole tree too): a root the facet
counts 0 is a part done at once, never searched; the others are claimed as any round is and
walked from their first page (a root still over the cap splits inside its round, by its
children, then by sort order). Later looks recount those parts with one request
(cnkispider/spiders/facets.py), so a late document costs the pages of its part, not its day.

Bound to the census's seeding (written to its row before its page 1 leaves, carried by page 1
and its group/result): the late answer of an earlier seeding, whose counts may be older, splits
nothing (stat ``facets/late``). Trusted only when it can be checked: every root is a code the
facet counts (tasks/parts.py ``facet_codes``) and the roots' counts add up to the census at
least (a document under two roots counts twice). Anything else (refused, odd, codes the facet
does not count, counts short of the census) walks the day as before, still correct, and is said
(INFO line, stat ``facets/fallback/<reason>``): a task of some categories, or a day split into
its root rounds before, hands every root to its round; a task of the whole tree splits its
census inside the round, whose roots' own totals are checked against the census
(cnkispider/spiders/census.py).
"""

from __future__ import annotations

from cnkispider.cnki.groups import FACET_PARTS, FACET_SEEDING
from cnkispider.cnki.search import Search
from cnkispider.exceptions import HaltedRequest, RefusedPage
from cnkispider.runtime.offload import in_thread
from cnkispider.spiders.carry import carry
from cnkispider.words.i18n import _
from errors.middleware import failure_reason
from tasks.parts import facet_codes
from tasks.roundstate import CATEGORIES_NOTE

#: meta of a census's split request: the census's listed total
FACET_SPLIT = "facet_split"


class DaySplitMixin:
    """The facet split of a :class:`cnkispider.spiders.base.RoundSpider` (needs its
    ``group_request``, ``facet_counts``, ``covers_tree``, ``_split`` and ``_census_parts``)."""

    daysplit_callbacks = ("parse_split",)

    def split_by_facets(self) -> bool:
        """``[task] facet_counts`` is on: a census over the cap is split by its counts."""
        return self.context is not None and self.crawler.settings.getbool("TASKS_FACET_COUNTS")

    def split_request(self, search: Search, listed: int, meta: dict):
        """The group/result of census ``meta['round_id']``, which listed ``listed`` rows."""
        split = {"round_id": meta["round_id"], FACET_SPLIT: listed, FACET_PARTS: []}
        if meta.get(FACET_SEEDING):  # the census's seeding, its seed's: the split is bound to it
            split[FACET_SEEDING] = meta[FACET_SEEDING]
        return self.group_request(search, {**carry(meta), **split}, self.parse_split)

    async def parse_split(self, response):
        """The census's facet counts: its day split into the root rounds that list rows."""
        meta = response.meta
        listed = meta[FACET_SPLIT]
        roots = list(self.context.tree.roots)
        try:
            counts = self.facet_counts(response)
        except RefusedPage as exc:
            async for out in self.split_fell_back(meta, exc.reason, str(exc)):
                yield out
            return
        counted = facet_codes(self.doc_type)
        uncounted = [root for root in roots if root not in counted]
        found = sum(counts.get(root, 0) for root in roots)
        if uncounted or found < listed:
            reason = "codes" if uncounted else "short"
            detail = f"roots {uncounted[:5]} uncounted" if uncounted else f"{found} < {listed}"
            async for out in self.split_fell_back(meta, reason, detail):
                yield out
            return
        empty = [root for root in roots if counts.get(root, 0) == 0]
        tasks = self.context.tasks
        seeding = meta.get(FACET_SEEDING)
        if not await in_thread(tasks.split_day, meta["round_id"], listed, empty, seeding):
            self.crawler.stats.inc_value("facets/late")
            return  # the census closed or seeded again since (a late answer): nothing moves
        stats = self.crawler.stats
        stats.inc_value("census/categories")
        stats.inc_value("facets/splits")
        stats.inc_value("facets/roots-empty", len(empty))
        self.logger.info(
            _(
                "round %s (%s) lists %s: split by group/result into %s root rounds (%s of them "
                "empty, not searched)"
            ),  # fmt: skip
            meta["round_id"],
            meta["search"].get("day_start"),
            listed,
            len(roots),
            len(empty),
        )

    async def split_failed(self, failure):
        """The census's group/result failed for good: the day walked as before."""
        if isinstance(failure.value, HaltedRequest):
            return  # held for after `task resume`: the census is seeded again then
        reason = failure_reason(failure.value)
        async for out in self.split_fell_back(failure.request.meta, reason, str(failure.value)):
            yield out

    async def split_fell_back(self, meta: dict, reason: str, detail: str):
        """The census over the cap split as it was before facet counts: by root rounds (a task
        of some categories) or inside its round (the whole tree, its roots' totals checked)."""
        self.crawler.stats.inc_value(f"facets/fallback/{reason}")
        self.logger.info(
            _("round %s (%s): group/result refused or odd (%s): the day is split by probing"),
            meta["round_id"],
            meta["search"].get("day_start"),
            reason,
        )
        self.logger.debug("group/result of round %s: %s", meta["round_id"], detail)
        listed, search = meta[FACET_SPLIT], Search.from_dict(meta["search"])
        tasks = self.context.tasks
        if await self.split_by_roots(search, meta["round_id"]):
            await self.census_by_categories(meta["round_id"], listed)
            return
        await in_thread(tasks.set_total, meta["round_id"], listed)
        self._census_parts[meta["round_id"]] = [listed, 0, len(self.context.tree.roots)]
        census = {**carry(meta), "census": True, "search": meta["search"], "page": 1}
        async for out in self._split(search, listed, census):
            yield out

    async def split_by_roots(self, search: Search, round_id: int) -> bool:
        """Without facet counts, census ``round_id``'s day is split by its root rounds: the
        task's categories are not the whole tree, or the day was split so before (a look
        re-opened its parts: walked inside the census as well, the day would be walked twice)."""
        if search.any_of and not self.covers_tree():
            return True
        return await in_thread(self.context.tasks.day_has_parts, round_id)

    async def census_by_categories(self, round_id: int, listed: int) -> None:
        """The census lists more than one search can walk and its day is split by its root
        rounds (:meth:`split_by_roots`): it closes as ``categories``, the roots become due."""
        self.crawler.stats.inc_value("census/categories")
        tasks = self.context.tasks
        await in_thread(tasks.set_note, round_id, f"{CATEGORIES_NOTE}: census {listed}")
        await in_thread(tasks.set_total, round_id, 0)
