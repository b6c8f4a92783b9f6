"""Flow control: tasks hand out rounds of (day x category), atomically, to any number of workers.

The task table is the truth of progress; a worker keeps nothing a restart would miss.

The cursor
    ``(cur_date, cur_code)`` is the last round handed out (``cur_code`` NULL: none yet on
    ``cur_date``). The next round is ``(cur_date, the root category after cur_code)``; past the
    last category it is ``(cur_date + 1, first category)``. Rounds are handed out while their day
    is <= ``end_date``, or <= today (Beijing time, CNKI's calendar) when ``end_date`` is empty.

The day census (``[task] day_census``, on by default; :attr:`TaskStore.day_census`)
    The cursor walks days: the next round is ``(cur_date + 1, '*')``, the day's census (its
    search without a category, cnkispider/spiders/base.py). A cursor an operator set on a root
    goes on through that day's roots, then by days again. The census round covers its day
    (note ``empty day``, or its pages walked, or split by root inside it), except when it
    closes with note ``categories: census N`` (the task's categories are not the whole tree):
    then that day's root rounds are due, and :meth:`TaskStore.claim` opens them before the
    cursor moves on (:meth:`TaskStore._missing`). Off: a round per (day x root category).

Steering, from any MySQL client, while workers run
    - end_date earlier than cur_date: nothing more is handed out; in-flight rounds finish.
    - a later end_date (or an empty one): the task goes on from its cursor.
    - changing cur_date / cur_code moves the cursor; rounds already done are crawled again when
      the cursor passes them (upserts make that safe).

A round's life (only this module moves it, always by a conditional UPDATE, so two workers can
never both win the same transition)::

    (cursor advance) --> claimed --seed in Redis--> seeded --last request acked--> done (balanced)
                          ^   ^                        |                      '--> failed
                          |   '-- lease ran out -------+-- Redis lost its state (epoch changed)
                          '------ failed on its ledger, attempts left, no new round due

    A round drained is ``done`` only when its ledger balances (tasks/ledger.py: listed = stored +
    in errorLink + dropped + beyond, nothing pending, no list page in errorCode); else it is
    ``failed`` (note ``ledger: <the numbers>``). While it has attempts left (``round_attempts``)
    it is claimed again, from its first page, once no new round is due (:meth:`_claim_failed`);
    the last attempt leaves a permanent errorCode row ``ledger``. A task whose every round failed
    halts (:func:`next_action`), however few rounds it has: it is never "finished" on failures.

    ``failed`` with note ``halted`` is the round of a halted task (``task.halt_reason`` set, see
    cnkispider/halting.py): nothing is claimed, and a round that drains is marked failed, never
    done; ``resume`` re-opens it (claimed, lease lapsed: the next claim takes it over from its
    first page).

A task's life (its ``phase``) follows one pure rule, :func:`next_action`, table-tested in
tests/test_flow.py::test_the_phase_rules; the feeder gathers the facts and does what it says::

    crawl --every round done or failed for good--> recrawl --no error row left to replay--> done
      |-- every round failed for good: the task halts (reason ``ledger: every round failed``)
      '-- open-ended, crawled to today: the run ends (up to date), the phase stays crawl

Re-opening a round (a take-over, the cursor passing it again, a resume) deletes its errorCode
rows: the round is crawled again from its first page, so what still fails is recorded again and
what succeeds leaves no stale row behind.

    claimed: a worker holds it with a lease (``lease_until``), renewed by its heartbeat; when the
             lease runs out any worker reclaims it (``attempts`` + 1).
    seeded:  its first request is in Redis, whose leases now guard it; ``epoch`` records the Redis
             epoch, so after a Redis crash (new epoch) the round is found and replayed.

Claims are compare-and-swap on the cursor (``UPDATE task ... WHERE cur_date <=> old AND
cur_code <=> old``) in the same transaction that inserts the round row: either both happen or
neither, and of two workers racing for one cursor position exactly one updates a row.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import os
import socket
import uuid
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from cnkispider import default_settings, ledger
from cnkispider.db import db_now, retrying
from cnkispider.exceptions import TaskRowError
from cnkispider.items import DOC_TYPES
from cnkispider.schema import error_code, error_link, round_, task, worker
from tasks.categories import DAY, CategoryError, CategoryTree, load_tree, reload_if_changed

logger = logging.getLogger(__name__)

BEIJING = dt.timedelta(hours=8)
IN_FLIGHT = ("claimed", "seeded")
HALTED_NOTE = "halted"  # round.note of a round that drained while its task was halted
# round.note of a census round (category DAY): nothing listed that day, so no other round; or
# the task's categories do not cover the tree, so the day's root rounds are due (``_missing``)
EMPTY_DAY_NOTE = "empty day"
CATEGORIES_NOTE = "categories"
LEDGER_NOTE = "ledger"  # round.note (and errorCode reason) of a round whose ledger did not balance
NOW = object()  # a value for _transition: the database's clock at the move


def _forget_errors(conn, round_id: int) -> None:
    """The round is crawled again from its first page: its old list-stage failures are stale
    (what still fails is recorded again, an overflow too, by the new crawl of the round)."""
    conn.execute(error_code.delete().where(error_code.c.round_id == round_id))


def _retried(what: str):
    """Run the method again while the database is away (``cnkispider.db.retrying``): only for
    reads, and for moves that are one conditional UPDATE (run again after its commit was lost,
    it matches nothing and says False: another caller's move, which is what the callers already
    expect). Never for claims (a lost commit's round would stay claimed by a live worker's
    lease) nor for ``add_total`` (it adds)."""

    def wrap(method):
        @functools.wraps(method)
        def run(*args, **kwargs):
            return retrying(method, *args, what=what, **kwargs)

        return run

    return wrap


class Action(StrEnum):
    """What a worker does about its task's phase now (:func:`next_action`)."""

    WAIT = "wait"  # rounds or replays are under way somewhere: look again later
    START_RECRAWL = "start-recrawl"  # crawl -> recrawl: every round of the task is done
    UP_TO_DATE = "up-to-date"  # an open-ended task crawled to today: this run ends
    SKIP_RECRAWL = "skip-recrawl"  # recrawl -> done at once ([crawl] recrawl = false)
    REPLAY = "replay"  # claim and seed a batch of error rows (nothing claimable: wait)
    FINISH = "finish"  # recrawl -> done: nothing queued and no error row left to replay
    CLOSE = "close"  # the task is done and nothing is queued: this worker stops
    HALT = "halt"  # every round of the task failed: halt it with the reason (never "finished")


@dataclass(frozen=True)
class PhaseFacts:
    """What the phase rules look at, read once (the feeder reads only what the phase needs)."""

    phase: str
    halted: bool = False
    open_ended: bool = False  # end_date empty: the task follows the calendar
    exhausted: bool = False  # no round is due: the cursor is past end_date (or today)
    in_flight: int = 0  # rounds claimed or seeded
    missing: bool = False  # a (day x category) round behind the cursor was never opened
    retryable: int = 0  # rounds failed on their ledger with attempts left (claimed again)
    rounds_done: int = 0  # rounds done (read once nothing is in flight)
    rounds_failed: int = 0  # rounds failed (their ledger never balanced)
    queue_idle: bool = False  # nothing queued or leased in Redis, nothing pending in this worker
    errors_pending: bool = False  # error rows open or claimed (not permanent)
    recrawl: bool = True  # [crawl] recrawl
    exit_when_idle: bool = True  # a run ends when an open-ended task is up to date


def next_action(facts: PhaseFacts) -> Action:
    """The phase rules, in one place. A halted task waits (``task resume`` lifts it)."""
    f = facts
    if f.halted:
        return Action.WAIT
    if f.phase == "crawl":
        settled = f.exhausted and not f.in_flight and not f.missing and not f.retryable
        if settled and f.rounds_failed and not f.rounds_done:
            # Nothing was crawled: a task is never "finished" on failures alone, however few
            # rounds it has (the breaker needs halt_after of them; a short task has fewer).
            return Action.HALT
        if settled and not f.open_ended:
            return Action.START_RECRAWL
        if f.exhausted and not f.retryable and f.open_ended and f.queue_idle and f.exit_when_idle:
            return Action.UP_TO_DATE
        return Action.WAIT
    if f.phase == "recrawl":
        if not f.recrawl:
            return Action.SKIP_RECRAWL
        if f.queue_idle and not f.errors_pending:
            return Action.FINISH
        return Action.REPLAY
    if f.phase == "done":
        return Action.CLOSE if f.queue_idle else Action.WAIT
    return Action.WAIT


def new_worker_id() -> str:
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class Task:
    """A task row that passed validation."""

    id: int
    name: str
    type: str
    start_date: dt.date
    cur_date: dt.date | None
    cur_code: str | None
    end_date: dt.date | None
    categories: str
    phase: str
    status: dt.datetime | None
    tree: CategoryTree
    halt_reason: str | None = None
    halted_at: dt.datetime | None = None

    def limit(self, now: dt.datetime) -> dt.date:
        """The last day that may be handed out: end_date, or today on CNKI's calendar."""
        return self.end_date or (now + BEIJING).date()

    def next_round(self, census: bool = False) -> tuple[dt.date, str]:
        """The round after the cursor. With the day census (``census``) the cursor walks days:
        ``(day, '*')``; a cursor an operator set on a root goes on through that day's roots,
        then by days again, so steering by the table keeps its meaning."""
        if census:
            if self.cur_date is None:
                return self.start_date, DAY
            if self.cur_code in (None, DAY):
                if self.cur_code is None:
                    return self.cur_date, DAY
                return self.cur_date + dt.timedelta(days=1), DAY
            following = self.tree.next_root(self.cur_code)
            if following is None:
                return self.cur_date + dt.timedelta(days=1), DAY
            return self.cur_date, following
        if self.cur_date is None:
            return self.start_date, self.tree.roots[0]
        if self.cur_code == DAY:  # the census was switched off on a census cursor
            return self.cur_date + dt.timedelta(days=1), self.tree.roots[0]
        following = self.tree.next_root(self.cur_code)
        if following is None:
            return self.cur_date + dt.timedelta(days=1), self.tree.roots[0]
        return self.cur_date, following


@dataclass(frozen=True)
class Closed:
    """What closing a drained round did (:meth:`TaskStore.close_round`)."""

    moved: bool | None  # this caller moved it; None: not seeded yet, ask again later
    state: str = ""  # done | again (failed, attempts left: claimed again) | failed (for good)
    verdict: ledger.Verdict | None = None
    attempts: int = 0


@dataclass(frozen=True)
class Round:
    id: int
    task_id: int
    day: str
    category: str
    attempts: int
    state: str = "claimed"


def _parse_day(value, what: str, task_id: int, required: bool) -> dt.date | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise TaskRowError(task_id, f"{what} is empty")
        return None
    try:
        return dt.date.fromisoformat(str(value).strip())
    except ValueError:
        raise TaskRowError(task_id, f"{what} {value!r} is not a date (YYYY-MM-DD)") from None


def validate_row(row, base_dir: Path | None = None) -> Task:
    """Turn a task row into a Task, or raise TaskRowError saying what is wrong with it."""
    tid = row.id
    if row.type not in DOC_TYPES:
        raise TaskRowError(
            tid, f"type {row.type!r} is unknown; expected one of {', '.join(DOC_TYPES)}"
        )
    start = _parse_day(row.start_date, "start_date", tid, required=True)
    cur = _parse_day(row.cur_date, "cur_date", tid, required=False)
    end = _parse_day(row.end_date, "end_date", tid, required=False)
    # end_date = the day before start_date is how `task stop` stops a task still on its first
    # day; anything earlier is a typo.
    if end is not None and end < start - dt.timedelta(days=1):
        raise TaskRowError(tid, f"end_date {end} is before start_date {start}")
    try:
        reload_if_changed(row.categories, base_dir)
        tree = load_tree(row.categories, row.type, base_dir)
    except CategoryError as exc:
        raise TaskRowError(tid, f"categories: {exc}") from None
    code = row.cur_code or None
    if code is not None and code != DAY and code not in tree:
        raise TaskRowError(tid, f"cur_code {code!r} is not one of the task's categories")
    if cur is None and code is not None:
        raise TaskRowError(tid, "cur_code is set but cur_date is empty")
    return Task(
        id=tid,
        name=row.name,
        type=row.type,
        start_date=start,
        cur_date=cur,
        cur_code=code,
        end_date=end,
        categories=row.categories,
        phase=row.phase,
        status=row.status,
        tree=tree,
        halt_reason=getattr(row, "halt_reason", None) or None,
        halted_at=getattr(row, "halted_at", None),
    )


class TaskStore:
    """Tasks, rounds and worker heartbeats in the database (SQLite or MySQL/MariaDB)."""

    def __init__(
        self,
        engine: Engine,
        *,
        round_lease: int = default_settings.TASKS_ROUND_LEASE,
        round_attempts: int = default_settings.TASKS_ROUND_ATTEMPTS,
        base_dir: Path | None = None,
        day_census: bool = False,
    ):
        self.engine = engine
        # the crawl's [task] day_census (the feeder passes it; default on in config.ini); off
        # here for the tools that only read or steer the table
        self.day_census = day_census
        self.round_lease = dt.timedelta(seconds=round_lease)
        self.round_attempts = max(1, round_attempts)
        self.base_dir = base_dir
        self._reported: set[tuple[int, str]] = set()

    # -- tasks ---------------------------------------------------------------------------

    def register(
        self,
        name: str,
        doc_type: str,
        start_date: str,
        end_date: str = "",
        categories: str = "builtin",
    ) -> tuple[Task, bool]:
        """Create the task if it is new; join it unchanged if it exists (returns created?).

        An existing row is never overwritten from a config file: the operator steers through
        the table, and a PC restarting with an old config.ini must not undo that.
        """
        if doc_type not in DOC_TYPES:
            raise ValueError(f"type must be one of {', '.join(DOC_TYPES)}")
        start = dt.date.fromisoformat(start_date).isoformat()
        end = dt.date.fromisoformat(end_date).isoformat() if end_date else None
        load_tree(categories, doc_type, self.base_dir)  # fail now on a bad category spec
        with self.engine.begin() as conn:
            existing = conn.execute(sa.select(task.c.id).where(task.c.name == name)).first()
            if existing is None:
                now = db_now(conn)
                try:
                    conn.execute(
                        task.insert().values(
                            name=name,
                            type=doc_type,
                            start_date=start,
                            cur_date=start,
                            cur_code=None,
                            end_date=end,
                            categories=categories,
                            phase="crawl",
                            created_at=now,
                            updated_at=now,
                        )
                    )
                    created = True
                except sa.exc.IntegrityError:  # another PC registered it a moment ago
                    created = False
            else:
                created = False
        return self.get(name), created

    def _row(self, conn, key: int | str):
        where = task.c.id == int(key) if str(key).isdigit() else task.c.name == key
        row = conn.execute(sa.select(task).where(where)).first()
        if row is None:
            raise LookupError(f"no task {key!r}")
        return row

    @_retried("reading a task")
    def get(self, key: int | str) -> Task:
        with self.engine.connect() as conn:
            return validate_row(self._row(conn, key), self.base_dir)

    def rows(self) -> list:
        """Every task row, unvalidated (for listing, where a bad row is shown, not hidden)."""
        with self.engine.connect() as conn:
            return list(conn.execute(sa.select(task).order_by(task.c.id)))

    def set_end_date(self, key: int | str, end_date: str | None) -> Task:
        """What an operator does by editing end_date: extend, resume (None = up to today)."""
        value = dt.date.fromisoformat(end_date).isoformat() if end_date else None
        with self.engine.begin() as conn:
            row = self._row(conn, key)
            if value is not None and value < row.start_date:
                raise ValueError(
                    f"end_date {value} is before the task's start_date {row.start_date}"
                )
            conn.execute(
                task.update()
                .where(task.c.id == row.id)
                .values(end_date=value, updated_at=db_now(conn))
            )
        return self.get(row.id)

    def stop(self, key: int | str) -> Task:
        """Stop handing out rounds: end_date becomes the day before the cursor's day."""
        current = self.get(key)
        day = current.cur_date or current.start_date
        stop_at = day - dt.timedelta(days=1)
        with self.engine.begin() as conn:
            conn.execute(
                task.update()
                .where(task.c.id == current.id)
                .values(end_date=stop_at.isoformat(), updated_at=db_now(conn))
            )
        return self.get(current.id)

    def move_cursor(self, key: int | str, cur_date: str, cur_code: str | None) -> Task:
        with self.engine.begin() as conn:
            row = self._row(conn, key)
            conn.execute(
                task.update()
                .where(task.c.id == row.id)
                .values(
                    cur_date=dt.date.fromisoformat(cur_date).isoformat(),
                    cur_code=cur_code,
                    updated_at=db_now(conn),
                )
            )
        return self.get(row.id)

    def report_bad_row(self, error: TaskRowError) -> None:
        """Log a bad task row once per process (the same problem is not repeated every claim)."""
        key = (error.task_id, error.problem)
        if key not in self._reported:
            self._reported.add(key)
            logger.error("skipping %s (fix the row in the task table)", error)

    # -- rounds --------------------------------------------------------------------------

    def claim(
        self, task_ids: int | list[int], worker_id: str, epoch: str | None = None
    ) -> Round | None:
        """Hand this worker its next round from the given tasks, or None when none is due.

        First a round whose lease ran out (or whose Redis state was lost: seeded under another
        epoch) is taken over; then the cursor of the first task with a round due advances. A
        task row that fails validation is reported once and skipped; the others go on.
        """
        ids = [task_ids] if isinstance(task_ids, int) else list(task_ids)
        for task_id in ids:
            try:
                found = self._claim_one(task_id, worker_id, epoch)
            except TaskRowError as exc:
                self.report_bad_row(exc)
                continue
            if found is not None:
                return found
        return None

    def _claim_one(self, task_id: int, worker_id: str, epoch: str | None) -> Round | None:
        if self.halt_of(task_id):
            return None
        taken = self._take_over(task_id, worker_id, epoch)
        if taken is not None:
            return taken
        if self.day_census:
            # a census round closed as `categories` (the task does not cover the tree): that
            # day's root rounds are due before the cursor moves on
            due = self._claim_missing(task_id, worker_id)
            if due is not None:
                return due
        for _ in range(100):  # each retry means another worker won the race: move on
            with self.engine.begin() as conn:
                current = validate_row(self._row(conn, task_id), self.base_dir)
                if current.halt_reason:
                    return None
                now = db_now(conn)
                day, code = current.next_round(self.day_census)
                if day > current.limit(now):
                    break
                moved = conn.execute(
                    task.update()
                    .where(
                        task.c.id == task_id,
                        task.c.cur_date.is_not_distinct_from(_iso(current.cur_date)),
                        task.c.cur_code.is_not_distinct_from(current.cur_code),
                    )
                    .values(
                        cur_date=day.isoformat(),
                        cur_code=code,
                        phase="crawl",
                        status=now,
                        updated_at=now,
                    )
                ).rowcount
                if moved != 1:
                    continue
                claimed = self._open_round(conn, task_id, day.isoformat(), code, worker_id, now)
                if claimed is not None:
                    return claimed
                # the cursor passed a round still in flight (the operator moved it back): skip it
        else:
            raise RuntimeError(f"task {task_id}: could not claim a round after 100 tries")
        return self._claim_missing(task_id, worker_id) or self._claim_failed(task_id, worker_id)

    def _claim_missing(self, task_id: int, worker_id: str) -> Round | None:
        """The cursor is past its end: open a round the cursor walked past without one (a root
        category added to the file before the cursor's category, while workers ran)."""
        try:
            with self.engine.begin() as conn:
                current = validate_row(self._row(conn, task_id), self.base_dir)
                now = db_now(conn)
                missing = self._missing(conn, current, now, first_only=True)
                if not missing:
                    return None
                day, code = missing[0]
                logger.info(
                    "task %s: round %s %s has no row (%s): crawling it",
                    task_id,
                    day,
                    code,
                    "the day's census was not for this task's categories"
                    if self.day_census
                    else "category added?",
                )
                return self._open_round(conn, task_id, day.isoformat(), code, worker_id, now)
        except sa.exc.IntegrityError:  # another worker opened it a moment ago
            return None

    def _retryable(self):
        """A round failed on its ledger with attempts left: crawled again (:meth:`_claim_failed`)."""
        return sa.and_(
            round_.c.state == "failed",
            round_.c.note.like(f"{LEDGER_NOTE}:%"),
            round_.c.attempts < self.round_attempts,
        )

    def _claim_failed(self, task_id: int, worker_id: str) -> Round | None:
        """No new round is due: take a round whose ledger did not balance and that has attempts
        left, from its first page (its errorCode rows go; its ledger rows stay, so what it stored
        stays stored). After the new rounds, so that a passing fault does not spend a round's
        attempts in a burst, and its errorCode rows stay to be seen until then."""
        with self.engine.begin() as conn:
            return self._reclaim(
                conn,
                task_id,
                worker_id,
                db_now(conn),
                self._retryable(),
                "round %s (%s %s) crawled again: its ledger did not balance (attempt %s)",
            )

    @_retried("counting rounds to crawl again")
    def retryable(self, task_id: int) -> int:
        """Rounds failed on their ledger that will be crawled again (attempts left)."""
        with self.engine.connect() as conn:
            return conn.execute(
                sa.select(sa.func.count())
                .select_from(round_)
                .where(round_.c.task_id == task_id, self._retryable())
            ).scalar()

    @_retried("looking for missing rounds")
    def missing_rounds(self, task_id: int) -> list[tuple[dt.date, str]]:
        """(day, root category) pairs the cursor has walked past (up to end_date or today) that
        have no round row: the crawl phase is not over while there is one."""
        with self.engine.connect() as conn:
            current = validate_row(self._row(conn, task_id), self.base_dir)
            return self._missing(conn, current, db_now(conn))

    @staticmethod
    def _missing(
        conn, current: Task, now: dt.datetime, first_only: bool = False
    ) -> list[tuple[dt.date, str]]:
        """Of the days the cursor walked (those with a round row, up to the cursor and end_date),
        the root categories without a round. Days the operator skipped by moving the cursor have
        no row and stay skipped (steering as documented above)."""
        if current.cur_date is None:
            return []
        roots = current.tree.roots
        upto = min(current.cur_date, current.limit(now))
        in_range = [
            round_.c.task_id == current.id,
            round_.c.day >= current.start_date.isoformat(),
            round_.c.day <= upto.isoformat(),
            round_.c.category.in_(roots),
        ]

        def walked(day: str) -> list[str]:  # the roots the cursor has passed on that day
            if day == current.cur_date.isoformat():
                if current.cur_code is None or current.cur_code not in roots:
                    return []
                return roots[: roots.index(current.cur_code) + 1]
            return roots

        per_day = conn.execute(
            sa.select(round_.c.day, sa.func.count())
            .where(*in_range)
            .group_by(round_.c.day)
            .order_by(round_.c.day)
        ).all()
        # A day with a census round is covered by it, unless it closed as `categories` (the
        # task does not cover the tree): then every root of the day is due.
        census = {
            day: state == "done" and (note or "").startswith(CATEGORIES_NOTE)
            for day, state, note in conn.execute(
                sa.select(round_.c.day, round_.c.state, round_.c.note).where(
                    round_.c.task_id == current.id,
                    round_.c.day >= current.start_date.isoformat(),
                    round_.c.day <= upto.isoformat(),
                    round_.c.category == DAY,
                )
            ).all()
        }

        def due(day: str) -> list[str]:
            if day in census:
                return roots if census[day] else []
            return walked(day)

        counts = dict(per_day)
        for day, split in census.items():
            if split:
                counts.setdefault(day, 0)
        short = sorted(day for day, count in counts.items() if count < len(due(day)))
        missing = []
        for day in short:  # the common case: none, after one grouped COUNT
            have = set(
                conn.execute(
                    sa.select(round_.c.category).where(*in_range, round_.c.day == day)
                ).scalars()
            )
            for code in due(day):
                if code not in have:
                    missing.append((dt.date.fromisoformat(day), code))
                    if first_only:
                        return missing
        return missing
        return missing

    def _open_round(self, conn, task_id, day, code, worker_id, now) -> Round | None:
        lease = now + self.round_lease
        existing = conn.execute(
            sa.select(round_.c.id, round_.c.state).where(
                round_.c.task_id == task_id, round_.c.day == day, round_.c.category == code
            )
        ).first()
        if existing is None:
            result = conn.execute(
                round_.insert().values(
                    task_id=task_id,
                    day=day,
                    category=code,
                    state="claimed",
                    worker=worker_id,
                    lease_until=lease,
                    attempts=1,
                    created_at=now,
                    updated_at=now,
                )
            )
            return Round(result.inserted_primary_key[0], task_id, day, code, 1)
        if existing.state in IN_FLIGHT:
            return None
        _forget_errors(conn, existing.id)
        conn.execute(
            round_.update()
            .where(round_.c.id == existing.id)
            .values(
                state="claimed",
                worker=worker_id,
                lease_until=lease,
                attempts=1,
                epoch=None,
                total=None,
                stored=None,
                note=None,
                updated_at=now,
            )
        )
        return Round(existing.id, task_id, day, code, 1)

    def _take_over(self, task_id: int, worker_id: str, epoch: str | None) -> Round | None:
        with self.engine.begin() as conn:
            now = db_now(conn)
            lapsed = sa.and_(round_.c.state == "claimed", round_.c.lease_until < now)
            if epoch is not None:
                lost = sa.and_(
                    round_.c.state == "seeded",
                    round_.c.epoch.is_not(None),
                    round_.c.epoch != epoch,
                )
                lapsed = sa.or_(lapsed, lost)
            return self._reclaim(
                conn,
                task_id,
                worker_id,
                now,
                lapsed,
                "took over round %s (%s %s) from a lost worker",
            )

    def _reclaim(self, conn, task_id, worker_id, now, which, announce: str) -> Round | None:
        """Claim again the first round of the task that ``which`` matches (a lapsed lease, a lost
        Redis, a ledger that did not balance), from its first page: one conditional UPDATE per
        candidate, so of two workers racing for it exactly one wins. The attempt starts over, as
        in _open_round: its search adds its total again (add_total), so the old total must go,
        and so must what it counted and its errorCode rows (its ledger rows stay: what it stored
        stays stored). ``announce``: the log line, with id, day, category (and the attempt)."""
        candidates = conn.execute(
            sa.select(round_.c.id, round_.c.day, round_.c.category, round_.c.attempts)
            .where(round_.c.task_id == task_id, which)
            .order_by(round_.c.day, round_.c.id)
            .limit(5)
        ).all()
        for cand in candidates:
            won = conn.execute(
                round_.update()
                .where(round_.c.id == cand.id, which)
                .values(
                    state="claimed",
                    worker=worker_id,
                    lease_until=now + self.round_lease,
                    attempts=round_.c.attempts + 1,
                    epoch=None,
                    total=None,
                    stored=None,
                    note=None,
                    updated_at=now,
                )
            ).rowcount
            if won == 1:
                _forget_errors(conn, cand.id)
                attempt = cand.attempts + 1
                args = (cand.id, cand.day, cand.category, attempt)
                logger.info(announce, *args[: announce.count("%s")])
                return Round(cand.id, task_id, cand.day, cand.category, attempt)
        return None

    def release_claim(self, round_id: int, worker_id: str) -> bool:
        """This worker cannot seed a round it claimed: its lease lapses now, so the next claim
        (any worker's, this one's too) takes it over from its first page. One conditional
        UPDATE: a round already seeded or taken over is left alone."""
        with self.engine.begin() as conn:
            now = db_now(conn)
            return (
                conn.execute(
                    round_.update()
                    .where(
                        round_.c.id == round_id,
                        round_.c.state == "claimed",
                        round_.c.worker == worker_id,
                    )
                    # no worker: this worker's heartbeat renews the leases of the rounds it
                    # holds, and would keep this one from lapsing
                    .values(worker=None, lease_until=now - dt.timedelta(seconds=1), updated_at=now)
                ).rowcount
                == 1
            )

    def mark_seeded(self, round_id: int, worker_id: str, epoch: str) -> bool:
        """The round's first request is in Redis: from now on Redis leases guard it."""
        return self._transition(
            round_,
            [round_.c.id == round_id, round_.c.state == "claimed", round_.c.worker == worker_id],
            state="seeded",
            epoch=epoch,
        )

    def mark_done(
        self,
        round_id: int,
        total: int | None = None,
        note: str | None = None,
        epoch: str | None = None,
    ) -> bool | None:
        """The round drained: done if its ledger balances; True for exactly the one caller that
        moved it to done (:meth:`close_round` says what happened otherwise)."""
        closed = self.close_round(round_id, total=total, note=note, epoch=epoch)
        if closed.moved is None:
            return None
        return closed.moved and closed.state == "done"

    @_retried("closing a round")
    def close_round(
        self,
        round_id: int,
        total: int | None = None,
        note: str | None = None,
        epoch: str | None = None,
    ) -> Closed:
        """The round drained: ``done`` when its ledger balances (tasks/ledger.py), else ``failed``.

        One transaction: the ledger is counted and the round moved by one conditional UPDATE,
        so of the callers draining it exactly one moves it (``moved``; the others get False).
        Never while its task is halted (the UPDATE's condition: the halt and this move cannot
        interleave); the caller then marks it failed with :meth:`mark_halted`.

        ``total``: the listed total, when the caller knows it (the round's searches added it with
        :meth:`add_total`). A round whose list never answered has none: it fails.

        A round that does not balance is ``failed`` (note ``ledger: <the numbers>``); while it
        has attempts left (``round_attempts``) it is claimed again once no new round is due
        (:meth:`_claim_failed`: from its first page, deleting its errorCode rows; its ledger rows
        stay, a stored row stays stored). The last attempt leaves a permanent errorCode row
        ``ledger`` naming the numbers.

        ``epoch``: the Redis epoch the round drained in (the scheduler's drain). Only a round
        seeded under that same epoch is closed by it: a round seeded before Redis lost its data
        had requests only the old Redis held, so it stays seeded under its old epoch and
        ``claim`` replays it whole, whatever the new Redis counted (False). A round not marked
        seeded yet (its seeder is between the flush and ``mark_seeded``, or it was taken over
        and is being seeded again) answers ``moved=None``: ask again later.
        """
        not_halted = ~sa.exists().where(
            task.c.id == round_.c.task_id, task.c.halt_reason.is_not(None)
        )
        if epoch is None:
            where = [round_.c.id == round_id, round_.c.state.in_(IN_FLIGHT), not_halted]
        else:
            where = [
                round_.c.id == round_id,
                round_.c.state == "seeded",
                round_.c.epoch == epoch,
                not_halted,
            ]
        with self.engine.begin() as conn:
            now = db_now(conn)
            row = conn.execute(sa.select(round_).where(round_.c.id == round_id)).first()
            if row is None:
                return Closed(False)
            listed = total if total is not None else row.total
            verdict = ledger.judge(conn, round_id, listed)
            values = {"lease_until": None, "updated_at": now, **verdict.columns()}
            if total is not None:
                values["total"] = total
            if verdict.balanced:
                values["state"] = "done"
                if note is None and row.category == DAY and listed == 0 and not row.note:
                    note = EMPTY_DAY_NOTE  # the census found nothing: no other request that day
                if note is not None:
                    values["note"] = note[:500]
            else:
                values["state"] = "failed"
                values["note"] = f"{LEDGER_NOTE}: {verdict.words()}"[:500]
            moved = conn.execute(round_.update().where(*where).values(**values)).rowcount == 1
            if not moved:
                state = row.state
            elif verdict.balanced:
                return Closed(True, "done", verdict, row.attempts)
            else:
                return Closed(True, *self._failed(conn, row, verdict, now))
        if epoch is not None and state == "claimed":
            return Closed(None)
        return Closed(False)

    def _failed(self, conn, row, verdict, now) -> tuple:
        """A round whose ledger did not balance: crawled again while it has attempts left
        (:meth:`_claim_failed`), else failed for good with a permanent errorCode row ``ledger``."""
        words = f"{LEDGER_NOTE}: {verdict.words()}"
        if row.attempts < self.round_attempts:
            return "again", verdict, row.attempts  # claimed again once no new round is due
        conn.execute(
            error_code.insert().values(
                task_id=row.task_id,
                round_id=row.id,
                day=row.day,
                category=row.category,
                search=None,
                page=None,
                reason=LEDGER_NOTE,
                detail=f"{words} (after {row.attempts} attempts)",
                attempts=row.attempts,
                state="permanent",
                created_at=now,
                updated_at=now,
            )
        )
        return "failed", verdict, row.attempts

    def mark_halted(self, round_id: int) -> bool:
        """A round that drained while its task was halted: failed, re-opened by ``resume``."""
        return self._transition(
            round_,
            [round_.c.id == round_id, round_.c.state.in_(IN_FLIGHT)],
            state="failed",
            lease_until=None,
            note=HALTED_NOTE,
        )

    # -- halting -------------------------------------------------------------------------

    def halt(self, task_id: int, reason: str) -> bool:
        """Halt the task with ``reason``: True for the one caller that halted it (a task already
        halted keeps its first reason). One conditional UPDATE."""
        return self._transition(
            task,
            [task.c.id == task_id, task.c.halt_reason.is_(None)],
            halt_reason=reason[:500],
            halted_at=NOW,
        )

    @_retried("reading a task's halt")
    def halt_of(self, task_id: int) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(sa.select(task.c.halt_reason).where(task.c.id == task_id)).scalar()

    def resume_halted(self, key: int | str, end_date: str | None = None) -> tuple[Task, dict]:
        """Clear the task's halt and crawl again what failed for it.

        Rounds that drained while halted are re-opened (claimed with a lapsed lease: the next
        claim takes them over from their first page, deleting their errorCode rows); errorCode
        rows that failed for the halt's reason (for a network halt: any network reason) are
        opened again with their attempts reset, so the recrawl phase replays them.
        """
        from cnkispider.halting import NETWORK_REASONS, is_network, slug_of

        with self.engine.begin() as conn:
            row = self._row(conn, key)
            now = db_now(conn)
            slug = slug_of(row.halt_reason)
            values = {"halt_reason": None, "halted_at": None, "updated_at": now}
            if end_date:
                values["end_date"] = dt.date.fromisoformat(end_date).isoformat()
            conn.execute(task.update().where(task.c.id == row.id).values(**values))
            reasons: list[str] = []
            if slug is not None:
                reasons = list(NETWORK_REASONS) if is_network(slug) else [slug]
            failed_for_it = sa.select(error_code.c.round_id).where(
                error_code.c.task_id == row.id,
                error_code.c.reason.in_(reasons),
                error_code.c.round_id.is_not(None),
            )
            # rounds that drained while halted, and rounds marked done before the breaker tripped
            # whose list stage failed for the halt's reason: crawled again from their first page
            reopen = sa.or_(
                sa.and_(round_.c.state == "failed", round_.c.note == HALTED_NOTE),
                sa.and_(round_.c.state.in_(("done", "failed")), round_.c.id.in_(failed_for_it)),
            )
            reopened = conn.execute(
                round_.update()
                .where(round_.c.task_id == row.id, reopen)
                .values(
                    state="claimed",
                    worker=None,
                    lease_until=now - dt.timedelta(seconds=1),
                    attempts=0,
                    note=None,
                    updated_at=now,
                )
            ).rowcount
            replay = 0
            if reasons:  # the others (a replay's row, a round not re-opened): replayed by recrawl
                replay = conn.execute(
                    error_code.update()
                    .where(error_code.c.task_id == row.id, error_code.c.reason.in_(reasons))
                    .values(state="open", attempts=0, lease_until=None, updated_at=now)
                ).rowcount
            if (replay or reopened) and row.phase != "crawl":
                # what failed is crawled again: the task is not done, whatever phase it halted in
                conn.execute(task.update().where(task.c.id == row.id).values(phase="crawl"))
        return self.get(row.id), {
            "rounds": reopened,
            "error_code": replay,
            "reason": row.halt_reason,
        }

    def note_listed(self, round_id: int, pending: list[str], drops: dict[str, str]) -> None:
        """A list page's rows into the round's ledger (tasks/ledger.py; idempotent, so run
        again while the database is away)."""

        def write():
            with self.engine.begin() as conn:
                ledger.note_listed(conn, round_id, pending, drops)

        retrying(write, what="writing a list page's rows into its round's ledger")

    @_retried("noting a round")
    def set_note(self, round_id: int, note: str) -> None:
        """A note the round keeps when it closes done (its ledger's note wins if it fails)."""
        with self.engine.begin() as conn:
            conn.execute(round_.update().where(round_.c.id == round_id).values(note=note[:500]))

    def add_total(self, round_id: int, listed: int) -> None:
        """Add a search's listed total to its round (a split round sums its searches)."""
        with self.engine.begin() as conn:
            conn.execute(
                round_.update()
                .where(round_.c.id == round_id)
                .values(total=sa.func.coalesce(round_.c.total, 0) + listed)
            )

    @_retried("reading a round")
    def round_info(self, round_id: int):
        with self.engine.connect() as conn:
            return conn.execute(sa.select(round_).where(round_.c.id == round_id)).first()

    @_retried("counting rounds in flight")
    def in_flight(self, task_id: int) -> int:
        with self.engine.connect() as conn:
            return conn.execute(
                sa.select(sa.func.count())
                .select_from(round_)
                .where(round_.c.task_id == task_id, round_.c.state.in_(IN_FLIGHT))
            ).scalar()

    @_retried("reading a task's cursor")
    def exhausted(self, task_id: int) -> bool:
        """No round is due now: the cursor is past end_date (or today)."""
        with self.engine.connect() as conn:
            current = validate_row(self._row(conn, task_id), self.base_dir)
            return current.next_round()[0] > current.limit(db_now(conn))

    @_retried("deciding a task's phase")
    def phase_facts(self, task_id: int) -> PhaseFacts:
        """What the database says for :func:`next_action` (the queue and error facts are the
        caller's: Redis and the error recorder). Reads only what the task's phase needs."""
        current = self.get(task_id)
        facts = PhaseFacts(
            phase=current.phase,
            halted=bool(current.halt_reason),
            open_ended=current.end_date is None,
        )
        if current.phase != "crawl" or facts.halted:
            return facts
        exhausted = self.exhausted(task_id)
        in_flight = self.in_flight(task_id) if exhausted else 0
        # a category added behind the cursor (its file edited): claim opens those rounds
        missing = bool(self.missing_rounds(task_id)) if exhausted and not in_flight else False
        settled = exhausted and not in_flight and not missing
        retryable = self.retryable(task_id) if settled else 0
        by_state = self.progress(task_id)["rounds"] if settled and not retryable else {}
        return PhaseFacts(
            phase="crawl",
            open_ended=facts.open_ended,
            exhausted=exhausted,
            in_flight=in_flight,
            missing=missing,
            retryable=retryable,
            rounds_done=by_state.get("done", 0),
            rounds_failed=by_state.get("failed", 0),
        )

    @_retried("reading why a task's rounds failed")
    def all_failed_reason(self, task_id: int) -> str:
        """The halt reason of a task whose every round failed: ``ledger: every round failed
        (N of N); last: <the last round's numbers>``."""
        with self.engine.connect() as conn:
            failed = (
                conn.execute(
                    sa.select(round_.c.note)
                    .where(round_.c.task_id == task_id, round_.c.state == "failed")
                    .order_by(round_.c.updated_at.desc(), round_.c.id.desc())
                )
                .scalars()
                .all()
            )
        last = (failed[0] or "").split(": ", 1)[-1] if failed else ""
        return f"{LEDGER_NOTE}: every round failed ({len(failed)} of {len(failed)}); last: {last}"

    def finish_crawl_phase(self, task_id: int) -> bool:
        """Move the task from crawl to recrawl when :func:`next_action` says its rounds are all
        done (an open-ended task never: it waits for tomorrow's rounds).

        True for exactly one caller across the cluster (a conditional UPDATE), so one worker
        reports the task's crawl finished.
        """
        if next_action(self.phase_facts(task_id)) is not Action.START_RECRAWL:
            return False
        return self.start_recrawl(task_id)

    def start_recrawl(self, task_id: int) -> bool:
        """crawl -> recrawl (never while halted); True for the one caller that moved it."""
        return self._transition(
            task,
            [task.c.id == task_id, task.c.phase == "crawl", task.c.halt_reason.is_(None)],
            phase="recrawl",
        )

    def set_phase(self, task_id: int, phase: str, expect: str | None = None) -> bool:
        """Move the phase (never while halted: a halted task keeps the phase it halted in)."""
        where = [task.c.id == task_id, task.c.halt_reason.is_(None)]
        if expect is not None:
            where.append(task.c.phase == expect)
        return self._transition(task, where, phase=phase)

    @_retried("moving a round or task")
    def _transition(self, table, where: list, **values) -> bool:
        """One state move: a conditional UPDATE, true for exactly the one caller that made it.

        Every move of a round or a task goes through here, so "two workers can never both win
        the same transition" holds by construction.
        """
        with self.engine.begin() as conn:
            now = db_now(conn)
            values = {k: now if v is NOW else v for k, v in values.items()}
            values["updated_at"] = now
            return conn.execute(table.update().where(*where).values(**values)).rowcount == 1

    # -- workers -------------------------------------------------------------------------

    def register_worker(self, worker_id: str, task_id: int | None) -> None:
        host, pid = worker_id.split(":")[0], int(worker_id.split(":")[1])
        with self.engine.begin() as conn:
            now = db_now(conn)
            conn.execute(
                worker.insert().values(
                    id=worker_id, task_id=task_id, host=host, pid=pid, started_at=now, last_seen=now
                )
            )

    @_retried("sending a heartbeat")
    def heartbeat(
        self,
        worker_id: str,
        task_id: int | None,
        *,
        pages: int = 0,
        items: int = 0,
        errors: int = 0,
        current_round: str | None = None,
        state: str = "running",
    ) -> None:
        """Renew this worker's round leases and say it is alive (task.status = now)."""
        with self.engine.begin() as conn:
            now = db_now(conn)
            conn.execute(
                round_.update()
                .where(round_.c.worker == worker_id, round_.c.state == "claimed")
                .values(lease_until=now + self.round_lease)
            )
            if task_id is not None:
                conn.execute(task.update().where(task.c.id == task_id).values(status=now))
            conn.execute(
                worker.update()
                .where(worker.c.id == worker_id)
                .values(
                    last_seen=now,
                    pages=pages,
                    items=items,
                    errors=errors,
                    current_round=current_round,
                    state=state,
                )
            )

    @_retried("counting a task's rounds")
    def progress(self, task_id: int) -> dict:
        """Counts for the operator: rounds by state, error rows."""
        with self.engine.connect() as conn:
            by_state = dict(
                conn.execute(
                    sa.select(round_.c.state, sa.func.count())
                    .where(round_.c.task_id == task_id)
                    .group_by(round_.c.state)
                ).all()
            )
            codes = conn.execute(
                sa.select(sa.func.count())
                .select_from(error_code)
                .where(error_code.c.task_id == task_id)
            ).scalar()
            links = conn.execute(
                sa.select(sa.func.count())
                .select_from(error_link)
                .where(error_link.c.task_id == task_id)
            ).scalar()
        return {"rounds": by_state, "error_code": codes, "error_link": links}


def _iso(day: dt.date | None) -> str | None:
    return day.isoformat() if day is not None else None


def rounds_between(current: Task, upto: dt.date, census: bool = False) -> int:
    """How many rounds the task has from its start to ``upto`` (for progress bars); with the
    day census, the census rounds (one a day: the root rounds of a split day come on top)."""
    days = max((upto - current.start_date).days + 1, 0)
    return days if census else days * len(current.tree.roots)
