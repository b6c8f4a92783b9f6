"""A look's facet recount: one ``group/result`` request recounts every part of a split day.

A look re-opens the census round of a day split by its categories without its parts
(tasks/parts.py). Its seed is not the census's page 1 but CNKI's ``group/result`` for the
same search, counted by the facet of the task's categories (``cnki/groups.py``
``category_group``); :meth:`FacetsMixin.parse_facets` hands the counts to
``TaskStore.recount_parts``: a part whose count equals its total stays done with no list
request, the others are re-opened and walked from their first page. Then the census closes as
it did (``categories``, total 0: the day is still its parts'). The request carries the
census's seeding (``FACET_SEEDING``): an answer handled after its seeding lost the census (taken
over, or closed and re-opened by the next look) moves nothing (stat ``facets/late``).

Anything odd falls back to each part's first page, still correct, and is said (INFO line, stat
``facets/fallback/<reason>``): group/result refused (its retries spent), an answer the parser
does not understand (``unexpected``), a facet naming codes the task's categories are not.
Never a count read from an answer that is not one: a part the facet leaves out counts 0 only
when its code is one the facet counts. A rejection of group/result does not halt the task
(the grid's own search is not refused by it): it is not recorded in errorCode either.
"""

from __future__ import annotations

import scrapy

from cnkispider.cnki.groups import (
    FACET_PARTS,
    FACET_SEEDING,
    category_group,
    counts_of,
    parse_groups,
)
from cnkispider.cnki.search import Search
from cnkispider.exceptions import HaltedRequest, RefusedPage
from cnkispider.runtime.offload import in_thread
from cnkispider.words.i18n import _
from errors.middleware import failure_reason
from tasks.parts import facet_codes
from tasks.roundstate import CATEGORIES_NOTE

#: round.note of a look's census whose parts a facet recount decided
FACETS_NOTE = f"{CATEGORIES_NOTE}: counted by group/result"


class FacetsMixin:
    """The facet recount of a :class:`cnkispider.spiders.base.RoundSpider` (needs
    ``crawler``, ``context``, ``protocol``, ``doc_type``, ``logger`` and ``on_error``)."""

    facets_callbacks = ("parse_facets",)

    def facet_request(self, round_, search: Search) -> scrapy.FormRequest:
        """The group/result POST recounting the parts ``round_.parts`` of a look's census."""
        parts = [[p.round_id, p.code, p.total] for p in round_.parts]
        meta = {"round_id": round_.id, FACET_PARTS: parts}
        return self.group_request(search, meta, self.parse_facets)

    def group_request(self, search: Search, meta: dict, callback) -> scrapy.FormRequest:
        """A group/result POST counting ``search``'s rows by the facet of the task's
        categories; ``meta`` names what it is for (``FACET_PARTS``: the middlewares let its
        fragment through to the parser, ``on_error`` hands its failure back here)."""
        group = category_group(self.doc_type)
        url, form, headers = self.protocol.group_request_args(search, [group])
        return scrapy.FormRequest(
            url,
            formdata=form,
            headers=headers,
            meta={
                "cnki_kind": "list",  # the grid's session, its refusals (cnki/refusals.py)
                "doc_type": self.doc_type,
                "task_id": self._task_id(),
                "search": search.to_dict(),
                "page": 1,
                "facet_group": group,
                **meta,
            },
            callback=callback,
            errback=self.on_error,
            dont_filter=True,
        )

    def facet_counts(self, response) -> dict[str, int]:
        """The answer's ``{code: count}``; RefusedPage when it is refused or odd (no facet, or
        codes the type's categories are not: never read as counts)."""
        group = response.meta["facet_group"]
        counts = counts_of(parse_groups(response.body, [group]), group)
        strange = sorted(code for code in counts if code not in facet_codes(self.doc_type))
        if strange:
            raise RefusedPage(
                "unexpected",
                f"group/result {group}: codes {', '.join(strange[:5])} are not categories",
            )
        return counts

    async def parse_facets(self, response):
        """The day's facet counts: each part decided (tasks/parts.py ``recount_parts``)."""
        meta = response.meta
        try:
            counts = self.facet_counts(response)
        except RefusedPage as exc:
            await self.facets_fell_back(meta, exc.reason, str(exc))
            return
        decided = await self._recount(meta, counts)
        if decided is None:
            return
        same, walked = decided
        stats = self.crawler.stats
        stats.inc_value("facets/recounts")
        stats.inc_value("facets/parts-unchanged", same)
        stats.inc_value("facets/parts-walked", walked)
        self.logger.info(
            _("round %s (%s): group/result counted its %s parts: %s unchanged, %s walked again"),
            meta["round_id"],
            meta["search"].get("day_start"),
            same + walked,
            same,
            walked,
        )
        return
        yield  # pragma: no cover - makes this an async generator

    async def _recount(self, meta: dict, counts: dict[str, int] | None):
        """The parts decided by ``counts`` (None: every part re-opened), for the census's
        seeding; None when that seeding no longer owns the census (closed since, or seeded
        again): nothing moved, said at DEBUG and counted (stat ``facets/late``)."""
        decided = await in_thread(
            self.context.tasks.recount_parts,
            meta["round_id"],
            counts,
            facet_codes(self.doc_type),
            seeding=meta.get(FACET_SEEDING),
            note=FACETS_NOTE,
        )
        if decided is None:
            self.crawler.stats.inc_value("facets/late")
            self.logger.debug(
                "round %s: group/result of an earlier seeding answered late: nothing moved",
                meta["round_id"],
            )
        return decided

    async def facets_failed(self, failure) -> None:
        """The group/result request failed for good: each part's first page instead."""
        if isinstance(failure.value, HaltedRequest):
            return  # held for after `task resume`: the census is seeded again then
        reason = failure_reason(failure.value)
        await self.facets_fell_back(failure.request.meta, reason, str(failure.value))

    async def facets_fell_back(self, meta: dict, reason: str, detail: str) -> None:
        """Every part re-opened (today's walk), the refusal said and counted."""
        self.crawler.stats.inc_value(f"facets/fallback/{reason}")
        decided = await self._recount(meta, None)
        if decided is None:
            return
        self.logger.info(
            _(
                "round %s (%s): group/result refused or odd (%s): its %s parts walked from their "
                "first pages"
            ),  # fmt: skip
            meta["round_id"],
            meta["search"].get("day_start"),
            reason,
            decided[1],
        )
        self.logger.debug("group/result of round %s: %s", meta["round_id"], detail)
