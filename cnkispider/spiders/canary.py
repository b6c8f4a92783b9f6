"""A zero or the soft block: the first page of a round's search came back as the soft block's body.

CNKI answers a search that truly lists nothing with the same body it sends as its soft block
(PROTOCOL.md, 2026 evidence point 13). A round's first page carries meta ``ZERO_CHECK``
(``cnkispider.cnki.refusals``), so the retry middleware hands such a body to the spider instead
of retrying it; the spider asks one canary on the same session, a search that must list rows
(the day without its category; for the day's census, the week up to that day). Rows listed:
the page was a true zero (its round's listed total is 0). None, or a canary that failed: the
soft block after all, retried as the retry middleware would retry it.

A canary is asked once per day per worker: its answer is kept (the days that list rows), and
pages of that day meanwhile wait for it (``CANARY_WAIT``). A canary request names its own
callback, ``parse_canary``; one stored in Redis by an older worker names ``parse_list`` with
meta ``canary_for`` and is handed on by it (``cnkispider/spiders/base.py``).
"""

from __future__ import annotations

import datetime as dt

import scrapy
from scrapy.utils.asyncio import call_later
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import defer

from cnkispider.cnki import listgrid
from cnkispider.cnki.refusals import SOFT_BLOCK, ZERO_CHECK, body_reason
from cnkispider.cnki.search import Search
from cnkispider.exceptions import HaltedRequest, RefusedPage
from cnkispider.runtime.offload import in_thread

#: Seconds a page waits for the answer of its day's canary, asked by another round's page.
CANARY_WAIT = 60.0
#: Days whose canary listed rows this worker remembers, the most recent ones.
DAYS_REMEMBERED = 1000
#: What a soft-block page and its canary carry to rebuild the page's request.
CANARY_CARRIES = (
    "search",
    "page",
    "round_id",
    "round_root",
    "sort_cut",
    "error_code_id",
    "replay_page",
    "retry_times",
    "census",
    "census_part",
    "look",  # a look's round walked again (tasks/lookback.py)
)


class CanaryMixin:
    """The zero check of a :class:`cnkispider.spiders.base.RoundSpider` (needs ``protocol``,
    ``crawler``, ``context``, ``search_request`` and the census's ``_census_part``).

    Its state is the spider's (set in ``RoundSpider.__init__``): ``_days_with_rows``, the days
    whose canary listed rows (a soft-block body on them is a true zero), and ``_canaries``, the
    pages waiting for a canary under way, by day.
    """

    canary_callbacks = ("parse_canary",)

    def soft_block_to_check(self, response) -> bool:
        """A page asked with the zero check that came back as the soft block's body."""
        return bool(response.meta.get(ZERO_CHECK)) and (
            body_reason("list", response.body) == SOFT_BLOCK
        )

    async def _zero_or_soft_block(self, response):
        """The first page of a round's search came back as the soft block's body, which may be
        CNKI's way of saying "no results". One canary on the same session tells: a search that
        must list rows (the day without its category). Asked once per day per worker: its
        answer is kept, and pages of that day meanwhile wait for it."""
        meta = response.meta
        day = Search.from_dict(meta["search"]).day_start
        if day in self._days_with_rows:
            await self._true_zero(meta)
            return
        waiting = self._canaries.get(day)
        if waiting is None:
            self._canaries[day] = []
            self.crawler.stats.inc_value("list/canaries")
            yield self.canary_request(meta, day)
            return
        answer: defer.Deferred = defer.Deferred()
        waiting.append(answer)
        # no answer within CANARY_WAIT counts as "does not list" (Scrapy's call_later: the
        # reactor's or the asyncio loop's, whichever runs the crawl)
        timeout = call_later(CANARY_WAIT, _give_up, answer)
        try:
            lists = await maybe_deferred_to_future(answer)
        finally:
            timeout.cancel()
        if lists:
            await self._true_zero(meta)
        else:
            yield self._soft_block_retry(meta)

    def canary_request(self, meta: dict, day: str) -> scrapy.FormRequest:
        """The day's search without its category, on the page's own session; it belongs to the
        page's round (meta round_id), so the round does not drain before it answers."""
        carried = {k: meta[k] for k in CANARY_CARRIES if meta.get(k) is not None}
        canary = Search.for_day(self.doc_type, day)
        if meta.get("census"):
            # The census IS the day's search without its category: its own soft block cannot
            # be told by asking it again. The week up to that day must list rows.
            first = dt.date.fromisoformat(str(day)) - dt.timedelta(days=6)
            canary = Search(self.doc_type, day_start=first.isoformat(), day_end=day)
        extra = {"cnki_session": meta["cnki_session"]} if meta.get("cnki_session") else {}
        return self.search_request(
            canary,
            1,
            callback=self.parse_canary,
            canary_for=carried,
            round_id=meta.get("round_id"),
            **{ZERO_CHECK: True},
            **extra,
        )

    async def parse_canary(self, response):
        """The canary's answer (:meth:`canary_request`): the waiting page a true zero, or the
        soft block retried; the other pages of its day waiting for it go on."""
        meta = response.meta
        original = meta["canary_for"]
        day = Search.from_dict(original["search"]).day_start
        lists = False
        try:
            if body_reason("list", response.body) != SOFT_BLOCK:
                lists = listgrid.parse_list(response.body, self.doc_type).total > 0
        except RefusedPage as exc:
            # Never recorded as a page of its own: a replay of the canary's search would crawl
            # the whole day into the round. The round's own page is retried instead.
            self.logger.warning("canary for %s not understood (%s): the soft block", day, exc)
        self._canary_settled(day, lists)
        if lists:
            self._days_with_rows[day] = None
            while len(self._days_with_rows) > DAYS_REMEMBERED:
                self._days_with_rows.popitem(last=False)
        self.logger.info(
            "canary for %s: %s",
            day,
            "rows listed, so an empty answer that day is a true zero"
            if lists
            else "nothing listed on the same session: the soft block, retried",
        )
        if lists:
            await self._true_zero(original)
        else:
            yield self._soft_block_retry(original)

    def canary_failed(self, failure, reason: str):
        """The canary failed for good (the spider's errback): never recorded as a page of its own
        (a replay of the canary's search would crawl the whole day into the round): the round's
        own page is retried as a soft block, and recorded if that fails. A request the halt
        held comes back after resume."""
        original = failure.request.meta["canary_for"]
        self._canary_settled(Search.from_dict(original["search"]).day_start, False)
        if not isinstance(failure.value, HaltedRequest):
            self.logger.warning("canary failed (%s): the soft block", reason)
            yield self._soft_block_retry(original)

    def _canary_settled(self, day: str, lists: bool) -> None:
        """The day's canary answered (or failed for good: ``lists`` False): the pages waiting
        for it go on."""
        for waiter in self._canaries.pop(day, []):
            if not waiter.called:
                waiter.callback(lists)

    async def _true_zero(self, meta: dict) -> None:
        """The page's search lists nothing: its round's listed total is 0 (a root search)."""
        self.crawler.stats.inc_value("list/true-zero")
        if meta.get("round_root") and self.context is not None:
            await in_thread(self.context.tasks.set_total, meta["round_id"], 0)
            if meta.get("census"):
                self.crawler.stats.inc_value("census/empty-days")
        if meta.get("census_part"):
            await self._census_part(meta, 0)
        if meta.get("error_code_id"):
            await in_thread(self.context.error_recorder.resolve_code, meta["error_code_id"])

    def _soft_block_retry(self, meta: dict) -> scrapy.FormRequest:
        """The soft block after all: the page again, as the retry middleware would send it (a
        fresh session, one retry counted), and without the zero check, so that a soft block
        again is retried, counted toward the cool-down, and recorded when retries run out."""
        self.crawler.stats.inc_value(f"retry/reason_count/{SOFT_BLOCK}")
        self.crawler.stats.inc_value("retry/challenges")  # as the retry middleware counts one
        carried = {
            k: meta[k]
            for k in (
                "round_id",
                "round_root",
                "sort_cut",
                "error_code_id",
                "replay_page",
                "census",
                "census_part",
                "look",
            )
            if meta.get(k) is not None
        }
        return self.search_request(
            Search.from_dict(meta["search"]),
            meta.get("page") or 1,
            cnki_renew_session=True,
            retry_times=(meta.get("retry_times") or 0) + 1,
            **{ZERO_CHECK: False},
            **carried,
        )


def _give_up(answer: defer.Deferred) -> None:
    """A canary that has not answered in time: the page it waits for is asked again."""
    if not answer.called:
        answer.callback(False)
