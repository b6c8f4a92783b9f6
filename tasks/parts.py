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

Bound to the census's seeding, as a drain is (tasks/closing.py ``close_round``): its token is
written to the census before its request leaves (:meth:`Parts.bind_seeding`; any worker may
handle the answer, even before the census is marked seeded), the request carries it
(``FACET_SEEDING``), and a late answer of an earlier seeding moves nothing.

A day's first census over the cap is split by one group/result too (:meth:`Parts.split_day`,
cnkispider/spiders/daysplit.py): only the roots that list rows are claimed; a root the facet
counts 0 is a part done at once (total 0, note ``empty part``), never searched.
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
from tasks.roundstate import CATEGORIES_NOTE, IN_FLIGHT, RoundState, move
from tasks.rows import TaskRows

#: round.note of a root round a census split by facet counts closed at once: the facet counts 0
EMPTY_PART_NOTE = "empty part"


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

    @retried("binding a look's census to its seeding")
    def bind_seeding(self, round_id: int, worker_id: str, seeding: str) -> bool:
        """Write the seeding ``seeding`` to the look's census ``round_id`` this worker holds
        claimed, before its group/result (or its parts' re-opening) is sent: the recount is
        bound to it. True while the census is this worker's claim (run again after a lost
        commit, the row read tells); False: taken over, the new holder seeds it."""
        ours = [
            round_.c.id == round_id,
            round_.c.state == RoundState.CLAIMED,
            round_.c.worker == worker_id,
        ]
        with self.engine.begin() as conn:  # not a move: no state changes, no updated_at
            conn.execute(round_.update().where(*ours).values(seeding=seeding))
            row = conn.execute(
                sa.select(round_.c.id).where(*ours, round_.c.seeding == seeding)
            ).first()
        return row is not None

    @retried("reading whether a day has parts")
    def day_has_parts(self, round_id: int) -> bool:
        """The census ``round_id``'s day has root rounds: it was split into its parts before
        (by facet counts, or by its categories), so it is split so again, whatever this
        worker's ``facet_counts`` (a whole tree's census split inside its round too would walk
        the day twice: once in it, once in the parts its look re-opened)."""
        census = round_.alias("census")
        with self.engine.connect() as conn:
            return (
                conn.execute(
                    sa.select(round_.c.id)
                    .join(
                        census,
                        sa.and_(census.c.task_id == round_.c.task_id, census.c.day == round_.c.day),
                    )
                    .where(census.c.id == round_id, round_.c.category != DAY)
                    .limit(1)
                ).first()
                is not None
            )

    @retried("recounting a look's parts")
    def recount_parts(
        self,
        round_id: int,
        counts: Mapping[str, int] | None,
        counted: frozenset[str] = frozenset(),
        seeding: str | None = None,
        note: str | None = None,
    ) -> tuple[int, int] | None:
        """Decide the held parts of the look's census ``round_id`` by ``counts`` (``{code:
        count}`` of its day's facet; ``counted``: the codes the facet counts; None: re-open
        every part). Returns (parts that stay done, parts re-opened), or None when the census
        is not this seeding's to decide: closed since, or in flight under another ``seeding``
        (None: a request of an older worker that named none, decided as before). ``note``: the
        census's note, written with its total 0 in the same transaction (the day is its
        parts')."""
        where = [round_.c.id == round_id, round_.c.category == DAY, round_.c.state.in_(IN_FLIGHT)]
        if seeding is not None:
            where.append(round_.c.seeding == seeding)
        with self.engine.begin() as conn:
            census = conn.execute(
                sa.select(round_.c.task_id, round_.c.day, round_.c.look).where(*where)
            ).first()
            if census is None or census.look is None:
                return None
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
            if note is not None:  # as set_note and set_total would, bound to this seeding
                conn.execute(round_.update().where(*where).values(note=note[:500], total=0))
        return len(same), len(other)

    @retried("splitting a day by its facet counts")
    def split_day(
        self, round_id: int, listed: int, empty: list[str], seeding: str | None = None
    ) -> bool:
        """The census ``round_id`` listed ``listed`` rows, more than one search reaches: it
        closes as ``categories`` (total 0: the day is its root rounds') and its roots in
        ``empty`` (the facet counts 0) are parts done at once, so only the others are claimed
        (tasks/claims.py ``_missing``). One transaction, only while the census is in flight
        (False: closed since, or in flight under another ``seeding``: a late answer of an
        earlier seeding, whose counts may be older); idempotent (a root round that exists is
        left as it is)."""
        where = [round_.c.id == round_id, round_.c.category == DAY, round_.c.state.in_(IN_FLIGHT)]
        if seeding is not None:
            where.append(round_.c.seeding == seeding)
        note = f"{CATEGORIES_NOTE}: census {listed}: split by group/result"
        with self.engine.begin() as conn:
            # the census's row first: a second handler of the same answer waits here
            conn.execute(round_.update().where(*where).values(note=note, total=0))
            census = conn.execute(
                sa.select(round_.c.task_id, round_.c.day).where(*where, round_.c.note == note)
            ).first()
            if census is None:
                return False
            have = set(
                conn.execute(
                    sa.select(round_.c.category).where(
                        round_.c.task_id == census.task_id,
                        round_.c.day == census.day,
                        round_.c.category.in_(empty),
                    )
                ).scalars()
            )
            now = db_now(conn)
            for code in (c for c in empty if c not in have):
                conn.execute(
                    round_.insert().values(
                        task_id=census.task_id,
                        day=census.day,
                        category=code,
                        state=RoundState.DONE,
                        total=0,
                        note=EMPTY_PART_NOTE,
                        attempts=0,
                        created_at=now,
                        updated_at=now,
                    )
                )
        return True
