"""A list page's rows in the round's ledger: the rows of the spider's databases kept, the
others dropped by their rule and counted; every row noted in the ledger before its detail
request is handed out (docs/RELIABILITY.md#every-listed-row-accounted-for); a look's round that
lists what it listed before left as it stands; and counts-only mode's rows
(cnkispider/watch/refresh.py). A part of :class:`cnkispider.spiders.base.RoundSpider`.
"""

from __future__ import annotations

import datetime as dt

from cnkispider.runtime.offload import in_thread
from cnkispider.store import ledger
from cnkispider.watch import refresh


def counted_now() -> str:
    """The time a list row's counts were read, as ``counted_at`` carries it (UTC, seconds)."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


#: The rule a row of another database is dropped by (a 总库 search lists every family).
OTHER_DATABASE = "other-database"
#: Rounds whose drops this worker has logged (INFO once per round), the most recent ones.
_LOGGED_ROUNDS = 1000


class ListedRowsMixin:
    """The listed rows of a :class:`cnkispider.spiders.base.RoundSpider` (needs ``protocol``,
    ``crawler``, ``doc_type``, ``counts_only``, ``context`` and its ``_drops_logged``, set in
    ``RoundSpider.__init__``)."""

    async def _census_walked_before(self, meta: dict) -> bool:
        """A look's census whose day it walked itself before (it listed rows): grown over the
        cap, it is split inside its own round (its ledger holds the day's rows), not handed to
        root rounds, which would leave its ledger's rows unlisted."""
        context = self.context
        if context is None or not context.task.follow:
            return False
        return bool(await in_thread(context.tasks.listed_before, meta["round_id"]))

    async def _counted_unchanged(self, meta: dict, total: int) -> bool:
        """A round a look re-opened (tasks/lookback.py) lists what it listed before: its ledger
        stands as it was, nothing more is asked (True). Else, if it is a look's round, its
        pages are walked with ``look`` in meta, so rows it has stored are not fetched again."""
        context = self.context
        if context is None or self.counts_only or not context.task.follow:
            return False
        before = await in_thread(context.tasks.listed_before, meta["round_id"])
        if before is None:
            return False
        if before == total:
            self.crawler.stats.inc_value("follow/rounds-unchanged")
            return True
        self.crawler.stats.inc_value("follow/rounds-changed")
        self.logger.info(
            "round %s: listed %d, %d before: walked again for what CNKI added",
            meta["round_id"],
            total,
            before,
        )
        meta["look"] = True
        await in_thread(context.tasks.begin_walk, meta["round_id"])
        return False

    def kept_rows(self, rows, meta: dict) -> list:
        """The rows of this spider's databases (see :meth:`sorted_rows`)."""
        return self.sorted_rows(rows, meta)[0]

    def sorted_rows(self, rows, meta: dict) -> tuple[list, list]:
        """The rows of this spider's databases, and the others with the rule that drops them.
        A 总库 search lists whatever its KuaKuCode names (and CNKI may add more): rows are kept
        by their own dbname's family (``Protocol.keeps``), and every dropped one is counted
        (``rows/dropped/other-database/<dbname>``) and goes into the round's ledger."""
        kept, drops = [], []
        for row in rows:
            if self.protocol.keeps(self.doc_type, row.dbname):
                kept.append(row)
                continue
            drops.append((row, OTHER_DATABASE))
            self.crawler.stats.inc_value(f"rows/dropped/{OTHER_DATABASE}/{row.dbname}")
            self.logger.debug(
                "dropped a %s row of another database: %s/%s %r (round %s, page %s)",
                self.doc_type,
                row.dbname,
                row.filename,
                row.title[:40],
                meta.get("round_id"),
                meta.get("page"),
            )
        return kept, drops

    async def _refresh_counts(self, meta: dict, kept: list, drops: list) -> None:
        """Counts-only mode (cnkispider/watch/refresh.py): the page's rows update the stored
        documents' cited, downloads and counted_at, and settle the round's ledger."""
        context = self.context
        if context is None:
            return
        rows = [(r.dbname, r.filename, r.cited, r.downloads) for r in kept]
        dropped = {ledger.doc_key(row.dbname, row.filename): rule for row, rule in drops}
        when = dt.datetime.fromisoformat(counted_now())
        updated, missing = await in_thread(
            refresh.update_counts,
            context.tasks.engine,
            self.doc_type,
            meta.get("round_id"),
            rows,
            when,
            dropped,
        )
        self.crawler.stats.inc_value("counts/updated", updated)
        self.crawler.stats.inc_value("counts/not-stored", missing)

    async def _note_listed(
        self, meta: dict, requests: list, drops: list, keys: list[str] | None = None
    ) -> None:
        """Write the page's rows into its round's ledger (one batch, off the reactor) before
        any of its detail requests is handed out: a row is in the ledger before anything can
        store it or record its failure."""
        round_id = meta.get("round_id")
        context = self.context
        if round_id is None or context is None:
            return  # a title search's page, or a crawl without flow control: no round to account
        pending = keys if keys is not None else [r.meta["doc_key"] for r in requests]
        dropped = {ledger.doc_key(row.dbname, row.filename): rule for row, rule in drops}
        await in_thread(context.tasks.note_listed, round_id, pending, dropped)
        if drops and round_id not in self._drops_logged:
            self._drops_logged[round_id] = None
            while len(self._drops_logged) > _LOGGED_ROUNDS:
                self._drops_logged.popitem(last=False)
            self.logger.info(
                "round %s: dropping rows (%s), counted in its ledger",
                round_id,
                # other-database: by dbname; not-selected (a deepening task's rule): by rule
                ", ".join(
                    sorted({row.dbname if rule == OTHER_DATABASE else rule for row, rule in drops})
                ),
            )
