"""Looks: a task that follows today counts the days of its look-back again (issue 38).

CNKI enters a document days to months after its own date (PROTOCOL.md point 21), so a day
whose rounds balanced is not finished for good. A task that follows today (``task.follow``)
has no end date (today in Beijing, moving with it) and, once its cursor is at today, a
**look** every ``[task] follow_every``: the done rounds of its last ``look_back_days`` days are
re-opened through the rounds' own state machine (tasks/roundstate.py :func:`~tasks.roundstate.move`),
so each is claimed, seeded and closed on its ledger like any round, by any worker:

    done --a look (this module)--> claimed, lease lapsed, ``listed_before`` = its total
         --the next claim takes it over (Rounds._take_over)--> seeded
         --page 1 lists the same total: nothing more is asked--> done (its ledger as it was)
         '--page 1 lists another total: its pages are walked; rows the ledger holds stored
            cost no detail nor export request--> done when its ledger balances again

A look costs one request a day (its census; a split day, one group/result: tasks/parts.py)
when nothing changed, plus the new documents. A re-opened round keeps its history
(``listed_before``, and ``total`` now) and its ledger rows (a stored row stays stored).

Invariants:

- one look per task at a time, across workers and restarts: a look is claimed by a
  compare-and-swap on ``task.look_at`` (the transaction that re-opens its rounds), so of two
  workers exactly one wins it, and a worker killed after the commit leaves rounds with lapsed
  leases that any worker takes over (nothing skipped, nothing looked twice);
- a round counted within ``follow_every`` (closed since, by the crawl or the last look) is not
  re-opened: "due" is a fact of the round rows, not of a worker's memory;
- nothing is looked at while the task is halted or paused, nor before its cursor is at today.

The rest of this module's story (and its counts refreshes): docs/FOLLOW.md.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

import sqlalchemy as sa

from cnkispider.clock import cnki_today
from cnkispider.config.looktiers import Tier
from cnkispider.store.db import db_now, retried
from cnkispider.store.schema import ledger, round_, task
from cnkispider.watch import refresh
from tasks.categories import DAY
from tasks.phase import Phase
from tasks.roundstate import IN_FLIGHT, RoundState, move
from tasks.rows import TaskRows, validate_row
from tasks.tiers import due_days

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Look:
    """A look this worker claimed: its number, its days and the rounds it re-opened."""

    task_id: int
    number: int
    first_day: dt.date
    last_day: dt.date
    reopened: int


@dataclass(frozen=True)
class CountsRefresh:
    """A counts refresh over the look-back this worker is to crawl: the ``NAME~counts`` task's
    name and days, the time it was claimed (its identity), and whether it was claimed now
    (False: one in flight, joined)."""

    task_name: str
    first_day: dt.date
    last_day: dt.date
    claimed_at: dt.datetime
    claimed_now: bool


def look_window(start: dt.date, cursor: dt.date, today: dt.date, days: int):
    """The days a look counts again: the last ``days`` days up to today, within the task's
    start and its cursor (a day the cursor has not reached is the crawl's, not the look's)."""
    first = max(start, today - dt.timedelta(days=days - 1))
    last = min(cursor, today)
    return first, last


def look_due(
    look_at: dt.datetime | None,
    look_due_at: dt.datetime | None,
    now: dt.datetime,
    every: int,
    started: dt.datetime,
    looks: int = 0,
    looks_at_start: int | None = None,
) -> bool:
    """Is a look due? Never looked: yes. ``every`` 0: once per worker's start: no look was
    claimed since it began (``looks_at_start``: the task's looks then; the database's clock
    has whole seconds, and a run that ends and one that starts within one second are one
    instant to it), else a last look before ``started``; else when the time the last look set
    has come."""
    if look_at is None:
        return True
    if every <= 0:
        if looks_at_start is not None:
            return looks == looks_at_start
        return look_at < started
    return look_due_at is None or look_due_at <= now


class Looks(TaskRows):
    """A follow task's looks (a part of :class:`tasks.flow.TaskStore`, which sets
    ``day_census``)."""

    day_census: bool

    @retried("reading whether a task follows today")
    def follows(self, task_id: int) -> bool:
        with self.engine.connect() as conn:
            return bool(conn.execute(sa.select(task.c.follow).where(task.c.id == task_id)).scalar())

    @retried("claiming the telling of a look's end")
    def claim_look_told(self, task_id: int) -> dict | None:
        """The task's last look, once its rounds are all closed and nobody told it yet:
        ``{"number", "rounds", "days", "gained"}`` (:meth:`look_progress`) for the one caller
        that claims it (a compare-and-swap on ``task.look_told``), else None. Any worker asks:
        a look whose claiming worker died is told by the next, and never twice. A look that
        re-opened no round is marked told, with nothing to tell (None)."""
        with self.engine.begin() as conn:
            looks, told = conn.execute(
                sa.select(task.c.looks, task.c.look_told).where(task.c.id == task_id)
            ).one()
            if not looks or (told or 0) >= looks:
                return None
            progress = _look_progress(conn, task_id, looks)
            if any(progress["rounds"].get(s, 0) for s in IN_FLIGHT):
                return None  # its rounds are still crawled
            won = conn.execute(
                task.update()
                .where(
                    task.c.id == task_id,
                    sa.or_(task.c.look_told.is_(None), task.c.look_told < looks),
                )
                .values(look_told=looks)
            ).rowcount
        if won != 1 or not progress["rounds"]:
            return None
        return {"number": looks, **progress}

    @retried("reading a task's looks")
    def looks_now(self, task_id: int) -> int:
        """How many looks the task has had (a worker's ``looks_at_start``)."""
        with self.engine.connect() as conn:
            return conn.execute(sa.select(task.c.looks).where(task.c.id == task_id)).scalar() or 0

    @retried("reading the database's clock")
    def database_now(self) -> dt.datetime:
        """The database's clock (every worker's common time: a look's ``started``)."""
        with self.engine.connect() as conn:
            return db_now(conn)

    def claim_look(
        self,
        task_id: int,
        look_back_days: int,
        every: int,
        started: dt.datetime,
        looks_at_start: int | None = None,
        worker_id: str | None = None,
        tiers: tuple[Tier, ...] = (),
        facets: bool = False,
    ) -> Look | None:
        """Claim the task's look if one is due and re-open the look-back's rounds that were
        not counted within ``every`` seconds (``every`` 0: since ``started``). None: the task
        does not follow today, is halted, is not at today yet, no look is due, or another
        worker claimed it first. One transaction: the compare-and-swap on ``look_at`` and the
        rounds' moves commit together or not at all. ``tiers`` (``[task] look_tiers``): of the
        look-back's rounds, only those their day's tier makes due (tasks/tiers.py). ``facets``
        (``[task] facet_counts``): a day's census round is re-opened without its parts, which
        its recount decides (tasks/parts.py)."""
        with self.engine.begin() as conn:
            current = validate_row(self._row(conn, task_id), self.base_dir)
            if not current.follow or current.halt_reason or current.cur_date is None:
                return None
            now = db_now(conn)
            if current.next_round(self.day_census)[0] <= current.limit(now):
                return None  # the crawl is not at today yet: its rounds come first
            if not look_due(
                current.look_at, current.look_due, now, every, started, current.looks,
                looks_at_start,
            ):  # fmt: skip
                return None
            number = current.looks + 1
            won = move(
                conn,
                task,
                [task.c.id == task_id, task.c.look_at.is_not_distinct_from(current.look_at)],
                now,
                look_at=now,
                look_due=now + dt.timedelta(seconds=every),
                looks=number,
            )
            if won != 1:
                return None  # another worker's look
            first, last = look_window(
                current.start_date, current.cur_date, cnki_today(now), look_back_days
            )
            if every > 0:
                not_counted = round_.c.updated_at < now - dt.timedelta(seconds=every)
            else:  # not the rounds this worker's run walked (it counts as a look); in the
                # second it started, what it closed itself (the clock has whole seconds)
                not_counted = sa.or_(
                    round_.c.updated_at < started,
                    sa.and_(
                        round_.c.updated_at == started,
                        sa.or_(round_.c.worker.is_(None), round_.c.worker != (worker_id or "")),
                    ),
                )
            where = [
                round_.c.task_id == task_id,
                round_.c.day >= first.isoformat(),
                round_.c.day <= last.isoformat(),
                round_.c.state == RoundState.DONE,
                not_counted,
            ]
            if tiers:  # of the window, the days their tier makes due (tasks/tiers.py)
                where.append(
                    round_.c.day.in_(due_days(conn, task_id, tiers, cnki_today(now), first, last))
                )
            values = dict(
                # before anything else: what it listed, its history once it lists again
                listed_before=round_.c.total,
                look=number,
                state=RoundState.CLAIMED,
                worker=None,
                # lapsed: the next claim, any worker's, takes it over from its first page
                lease_until=now - dt.timedelta(seconds=1),
                attempts=0,
            )
            if facets:  # a day's census alone: its parts wait for its recount (tasks/parts.py)
                reopened = move(conn, round_, [*where, round_.c.category == DAY], now, **values)
                held = conn.execute(
                    sa.select(round_.c.day).where(
                        round_.c.task_id == task_id,
                        round_.c.look == number,
                        round_.c.category == DAY,
                    )
                ).scalars()
                rest = [*where, round_.c.category != DAY, round_.c.day.not_in(list(held))]
                reopened += move(conn, round_, rest, now, **values)
            else:
                reopened = move(conn, round_, where, now, **values)
        logger.info(
            "task %s: look %s counts %s..%s again: %s rounds re-opened",
            current.name,
            number,
            first,
            last,
            reopened,
        )
        return Look(task_id, number, first, last, reopened)

    @retried("claiming a counts refresh")
    def claim_counts(self, task_id: int, look_back_days: int, every: int) -> CountsRefresh | None:
        """The counts refresh this worker is to crawl: one in flight (claimed, its
        ``NAME~counts`` task not done nor halted), else a new one when due (``counts_due``
        passed or never refreshed), claimed by a compare-and-swap on ``counts_at`` that forgets
        the last ``NAME~counts`` in the same transaction. None: ``every`` 0, the task does not
        follow today, is halted or not at today yet, nothing is due, or another worker claimed
        it first."""
        if every <= 0:
            return None
        with self.engine.begin() as conn:
            row = self._row(conn, task_id)
            current = validate_row(row, self.base_dir)
            if not current.follow or current.halt_reason or current.cur_date is None:
                return None
            now = db_now(conn)
            if current.next_round(self.day_census)[0] <= current.limit(now):
                return None  # the crawl is not at today yet: its rounds come first
            name = refresh.counts_task_name(current.name)
            shadow = conn.execute(
                sa.select(
                    task.c.phase, task.c.halt_reason, task.c.start_date, task.c.end_date
                ).where(task.c.name == name)
            ).first()
            claimed_at = row.counts_at
            if claimed_at is not None and (
                shadow is None or (shadow.phase != Phase.DONE and not shadow.halt_reason)
            ):  # in flight: join it
                if shadow is not None:
                    first = dt.date.fromisoformat(str(shadow.start_date)[:10])
                    last = dt.date.fromisoformat(str(shadow.end_date)[:10])
                else:
                    first, last = look_window(
                        current.start_date,
                        current.cur_date,
                        cnki_today(claimed_at),
                        look_back_days,
                    )
                return CountsRefresh(name, first, last, claimed_at, False)
            if row.counts_due is not None and row.counts_due > now:
                return None
            won = move(
                conn,
                task,
                [task.c.id == task_id, task.c.counts_at.is_not_distinct_from(claimed_at)],
                now,
                counts_at=now,
                counts_due=now + dt.timedelta(seconds=every),
            )
            if won != 1:
                return None  # another worker's
            refresh.reset_in(conn, name)
            first, last = look_window(
                current.start_date, current.cur_date, cnki_today(now), look_back_days
            )
        logger.info(
            "task %s: counts of %s..%s to be read again (%s)", current.name, first, last, name
        )
        return CountsRefresh(name, first, last, now, True)

    @retried("reading what a round listed before its look")
    def listed_before(self, round_id: int) -> int | None:
        with self.engine.connect() as conn:
            return listed_before(conn, round_id)

    @retried("reading which listed rows a round has stored")
    def stored_keys(self, round_id: int, keys: list[str]) -> set[str]:
        with self.engine.connect() as conn:
            return stored_keys(conn, round_id, keys)

    @retried("starting a look's walk of a round")
    def begin_walk(self, round_id: int) -> None:
        """A look's round lists another total: its pages are walked again. Every ledger row of
        the round is unconfirmed until a page shows it (:meth:`look_page`); what no page shows
        is no longer listed when the round drains (:meth:`mark_unlisted`). Page 1 again (a
        take-over) starts the walk over."""
        with self.engine.begin() as conn:
            look = conn.execute(sa.select(round_.c.look).where(round_.c.id == round_id)).scalar()
            conn.execute(
                ledger.update().where(ledger.c.round_id == round_id).values(unconfirmed=look or 0)
            )

    @retried("reading a page of a look's walk")
    def look_page(self, round_id: int, keys: list[str]) -> set[str]:
        """A page of a look's walk: the rows it shows are listed (confirmed, listed again if a
        look had found them gone); returns those the ledger holds stored (not fetched again)."""
        if not keys:
            return set()
        with self.engine.begin() as conn:
            conn.execute(
                ledger.update()
                .where(ledger.c.round_id == round_id, ledger.c.doc_key.in_(keys))
                .values(unconfirmed=None, unlisted_since=None)
            )
            return stored_keys(conn, round_id, keys)

    @retried("marking rows no longer listed")
    def mark_unlisted(self, round_id: int, seeding: str | None = None) -> int:
        """The round drained: rows its look's walk did not show are no longer listed (since
        now), kept and counted apart by the ledger. Not while the round has list pages in
        errorCode or rows beyond reach: their rows were not shown for another reason (the
        round does not balance, or counts them beyond, and a later walk starts over).

        ``seeding``: the drain's (tasks/closing.py ``close_round``): the rows are marked only
        while the round is still seeded under it, in the UPDATE's own condition, so the late
        handler of an earlier seeding marks nothing of a walk the round began since."""
        from cnkispider.store.ledger import list_facts

        where = [ledger.c.round_id == round_id, ledger.c.unconfirmed.is_not(None)]
        if seeding is not None:
            where.append(
                sa.exists().where(
                    round_.c.id == round_id,
                    round_.c.state == RoundState.SEEDED,
                    round_.c.seeding == seeding,
                )
            )
        with self.engine.begin() as conn:
            beyond, failed = list_facts(conn, round_id)
            if beyond or failed:
                return 0
            return conn.execute(
                ledger.update().where(*where).values(unconfirmed=None, unlisted_since=db_now(conn))
            ).rowcount

    @retried("reading a look's progress")
    def look_progress(self, task_id: int, number: int) -> dict:
        """The rounds of look ``number``: by state, how many listed more than before, and the
        listed rows they gained (for the look's notification)."""
        with self.engine.connect() as conn:
            return _look_progress(conn, task_id, number)


def _look_progress(conn, task_id: int, number: int) -> dict:
    """:meth:`Looks.look_progress` in the caller's connection."""
    rows = conn.execute(
        sa.select(round_.c.state, round_.c.day, round_.c.listed_before, round_.c.total).where(
            round_.c.task_id == task_id, round_.c.look == number
        )
    ).all()
    states: dict[str, int] = {}
    grown_days: set[str] = set()
    gained = 0
    for state, day, before, total in rows:
        states[state] = states.get(state, 0) + 1
        if state == RoundState.DONE and total is not None and total != (before or 0):
            grown_days.add(day)
            gained += max(0, total - (before or 0))
    return {"rounds": states, "days": len(grown_days), "gained": gained}


def listed_before(conn, round_id: int) -> int | None:
    """What a round re-opened by a look listed before it (None: not a look's round, or one
    whose count alone cannot tell: it had rows beyond reach, recorded in errorCode rows its
    re-opening forgot, so it is walked again whole)."""
    row = conn.execute(
        sa.select(round_.c.listed_before, round_.c.look, round_.c.beyond).where(
            round_.c.id == round_id
        )
    ).first()
    if row is None or row.look is None or row.listed_before is None or row.beyond:
        return None
    return row.listed_before


def stored_keys(conn, round_id: int, keys: list[str]) -> set[str]:
    """Of ``keys``, those the round's ledger holds stored (a look does not fetch them again)."""
    if not keys:
        return set()
    return set(
        conn.execute(
            sa.select(ledger.c.doc_key).where(
                ledger.c.round_id == round_id,
                ledger.c.doc_key.in_(keys),
                ledger.c.outcome == "stored",
            )
        ).scalars()
    )
