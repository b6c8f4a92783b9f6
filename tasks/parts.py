"""A look's parts: the rounds of a day split by its categories, recounted by one facet request.

A day over the cap is split into its root rounds (tasks/rounds.py: the census closes as
``categories``); those rounds are the day's **parts**. With ``[task] facet_counts`` (issue 46.2)
a look (tasks/lookback.py) re-opens such a day's census round alone and holds its parts back
(they stay done); the worker that seeds the census asks CNKI's ``group/result`` once for the
day's query by the facet that counts the task's categories, and :meth:`Parts.recount_parts`
decides each part in one transaction:

    part done, its facet count = its total ......... stays done, counted by this look (no request)
    part done, another count, or none the facet .... re-opened as the look re-opens a round: its
    can give (a code the facet does not count)        first page, walked if it lists another total

``counts`` None (group/result refused, answered oddly, or the facet counts none of the parts)
re-opens every part: today's walk, still correct. A facet leaves out its empty values, so a
part it does not name counts 0 only for a code the facet counts (:func:`facet_codes`). Any
worker seeding the census holds this duty, whatever its own ``facet_counts``: off, it re-opens
every part before the census's page 1, so no part is ever left behind. Redone from the start
when the census is taken over (a part re-opened already is in flight and is not touched).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

import sqlalchemy as sa

from cnkispider.store.db import db_now, retried
from cnkispider.store.schema import round_
from tasks.categories import DAY, load_tree
from tasks.roundstate import IN_FLIGHT, RoundState, move
from tasks.rows import TaskRows


@dataclass(frozen=True)
class Part:
    """A part of a look's day: its round, its category code, what it listed before."""

    round_id: int
    code: str
    total: int


@lru_cache(maxsize=8)
def facet_codes(doc_type: str) -> frozenset[str]:
    """The codes the category facet counts: the top-level codes of the type's classification
    (the roots of its shipped tree), the values of CNKI's 学科 facet on the stand-in and, as the
    probe checks it, on CNKI. A part of another code is walked."""
    return frozenset(load_tree("builtin", doc_type).roots)


class Parts(TaskRows):
    """A look's parts (a part of :class:`tasks.flow.TaskStore`)."""

    @retried("reading a look's parts")
    def look_parts(self, round_id: int) -> list[Part]:
        """The parts a look's census round holds back: the day's done root rounds, when the
        census (category DAY) was re-opened by a look (``look`` and ``listed_before`` set);
        else none."""
        with self.engine.connect() as conn:
            census = conn.execute(
                sa.select(
                    round_.c.task_id,
                    round_.c.day,
                    round_.c.category,
                    round_.c.look,
                    round_.c.listed_before,
                ).where(round_.c.id == round_id)
            ).first()
            if (
                census is None
                or census.category != DAY
                or census.look is None
                or census.listed_before is None
            ):
                return []
            rows = conn.execute(
                sa.select(round_.c.id, round_.c.category, round_.c.total)
                .where(
                    round_.c.task_id == census.task_id,
                    round_.c.day == census.day,
                    round_.c.category != DAY,
                    round_.c.state == RoundState.DONE,
                )
                .order_by(round_.c.id)
            ).all()
        return [Part(r.id, r.category, r.total or 0) for r in rows]

    @retried("recounting a look's parts")
    def recount_parts(
        self,
        round_id: int,
        counts: Mapping[str, int] | None,
        counted: frozenset[str] = frozenset(),
    ) -> tuple[int, int]:
        """Decide the held parts of the look's census ``round_id`` by ``counts`` (``{code:
        count}`` of its day's facet; ``counted``: the codes the facet counts; None: re-open
        every part). Returns (parts that stay done, parts re-opened). Only while the census is
        in flight: a late answer of an earlier seeding of a census closed since moves nothing."""
        with self.engine.begin() as conn:
            census = conn.execute(
                sa.select(round_.c.task_id, round_.c.day, round_.c.look).where(
                    round_.c.id == round_id,
                    round_.c.category == DAY,
                    round_.c.state.in_(IN_FLIGHT),
                )
            ).first()
            if census is None or census.look is None:
                return 0, 0
            now = db_now(conn)
            parts = conn.execute(
                sa.select(round_.c.id, round_.c.category, round_.c.total).where(
                    round_.c.task_id == census.task_id,
                    round_.c.day == census.day,
                    round_.c.category != DAY,
                    round_.c.state == RoundState.DONE,
                )
            ).all()
            same, other = [], []
            for part in parts:
                known = counts is not None and part.category in counted
                if known and counts.get(part.category, 0) == (part.total or 0):
                    same.append(part.id)
                else:
                    other.append(part.id)
            done = [round_.c.state == RoundState.DONE]
            if same:  # counted by this look: its day's tier starts again from now
                move(
                    conn,
                    round_,
                    [round_.c.id.in_(same), *done],
                    now,
                    listed_before=round_.c.total,
                    look=census.look,
                )
            if other:  # as claim_look re-opens a round: the next claim walks its first page
                move(
                    conn,
                    round_,
                    [round_.c.id.in_(other), *done],
                    now,
                    listed_before=round_.c.total,
                    look=census.look,
                    state=RoundState.CLAIMED,
                    worker=None,
                    lease_until=now - dt.timedelta(seconds=1),
                    attempts=0,
                )
        return len(same), len(other)
