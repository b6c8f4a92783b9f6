"""Rounds: a task hands out rounds of (day x category), atomically, to any number of workers.

The task table is the truth of progress; a worker keeps nothing a restart would miss. This
module owns the rounds and every move of their state, and the task's cursor and phase moves. A
move that passes a day's census round again re-opens that day's root rounds too.

A round's life (the invariants; who makes each move: docs/INTERNALS.md#tasksroundspy)::

    (pending: ahead of the cursor, no row yet)
      --cursor advance--> claimed --seed in Redis--> seeded --last request acked--> done (balanced)
                          ^ ^ ^ ^                      |                      '--> failed
                          | | | '-- lease ran out -----+-- Redis lost its state: a new epoch, or
                          | | |                        |   nothing of it in Redis for a lease
                          | | '-- the operator: `task reopen` (any state) -----'
                          | '---- the cursor passes it again (done | failed)
                          '------ failed on its ledger, attempts left, no new round due

- Every move is a conditional UPDATE on the state it expects (:func:`move`, :func:`transition`):
  two workers never both win it; a ``False`` from :meth:`Rounds.mark_seeded` stops a seeder.
- Claims are compare-and-swap on the cursor in the transaction that inserts the round row; a
  claim is run again while the database is away and recognises its own lost-reply claim.
- A heartbeat renews only the rounds its worker knows it holds (:meth:`Rounds.held_rounds`).
- done only when the ledger balances (docs/RELIABILITY.md#every-listed-row-accounted-for): the
  total set once per listing, ``beyond`` only what overflow/pager-short/census rows count.
- Every seeding has its token (``round.seeding``, from :meth:`Rounds.mark_seeded` to Redis and
  back with the drain); every write of the drain compares it in its own statement, so a late
  handler of an earlier seeding changes nothing, whatever the Redis epoch.

The rest of this module's story: docs/INTERNALS.md#tasksroundspy.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from cnkispider import ledger
from cnkispider.db import db_now, retried, retrying
from cnkispider.exceptions import TaskRowError
from cnkispider.schema import round_, task
from errors.recorder import ErrorRecorder
from tasks.categories import DAY, round_label
from tasks.phase import Action, Phase, PhaseFacts, next_action
from tasks.rows import Task, TaskRows, iso, validate_row

logger = logging.getLogger(__name__)


class RoundState(StrEnum):
    """A round's state (``round.state``): equal to its string, so SQL and JSON see the same."""

    CLAIMED = "claimed"  # a worker holds its lease and is seeding it
    SEEDED = "seeded"  # its requests are in Redis, its ledger open
    DONE = "done"  # its ledger balanced
    FAILED = "failed"  # its ledger did not balance (claimed again while attempts are left)


IN_FLIGHT = (RoundState.CLAIMED, RoundState.SEEDED)
HALTED_NOTE = "halted"  # round.note of a round that drained while its task was halted
# round.note of a census round (category DAY): nothing listed that day, so no other round; or
# the task's categories do not cover the tree, so the day's root rounds are due (``_missing``)
EMPTY_DAY_NOTE = "empty day"
CATEGORIES_NOTE = "categories"
LEDGER_NOTE = "ledger"  # round.note (and errorCode reason) of a round whose ledger did not balance
NOW = object()  # a value for move/transition: the database's clock at the move


def move(conn, table, where: list, now: dt.datetime, **values) -> int:
    """One state move of a round or a task, in the caller's transaction: a conditional UPDATE
    (``where`` says which state it moves from); returns how many rows moved (1: this caller won
    the move, 0: another caller made it first, or the row is no longer in that state).

    ``NOW`` stands for ``now``, the database's clock. ``updated_at`` is stamped ``now``: last, or
    where ``values`` place it. The assignments keep the caller's order: MySQL applies them left
    to right, so an assignment that reads a column sees it already assigned.
    """
    values = {k: now if v is NOW else v for k, v in values.items()}
    values.setdefault("updated_at", now)
    return conn.execute(table.update().where(*where).values(**values)).rowcount


@retried("moving a round or task")
def transition(engine: Engine, table, where: list, **values) -> bool:
    """A move that is a transaction of its own (:func:`move`): True for exactly the one caller
    that made it. Run again while the database is away: after a lost commit it matches
    nothing and says False, another caller's move, which the callers already expect."""
    with engine.begin() as conn:
        return move(conn, table, where, db_now(conn), **values) == 1


def renew_leases(conn, worker_id: str, until: dt.datetime, held: Iterable[int]) -> None:
    """The worker is alive: the rounds it *knows* it holds claimed (``held``: what its claims
    returned to it, :meth:`Rounds.held_rounds`) stay claimed until ``until``. Not every round
    claimed under its name: a claim whose commit landed but whose reply was lost (a cut line)
    holds a round the worker never saw; renewed, it would be held for ever by a live worker.
    Not a move (no state changes, so no ``updated_at``): a heartbeat's part (tasks/workers.py)."""
    ids = sorted(held)
    if not ids:
        return
    conn.execute(
        round_.update()
        .where(
            round_.c.worker == worker_id,
            round_.c.state == RoundState.CLAIMED,
            round_.c.id.in_(ids),
        )
        .values(lease_until=until)
    )


@dataclass(frozen=True)
class Closed:
    """What closing a drained round did (:meth:`Rounds.close_round`)."""

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
    state: str = RoundState.CLAIMED
    #: a look's census round: the parts it recounts by one group/result (tasks/parts.py)
    parts: tuple = ()


class Rounds(TaskRows):
    """Claims, round moves and the counts the phase rules read (a part of
    :class:`tasks.flow.TaskStore`, which sets ``round_lease``, ``round_attempts``,
    ``day_census`` and ``errors``, the :class:`~errors.recorder.ErrorRecorder` that writes the
    errorCode rows of the rounds it moves)."""

    round_lease: dt.timedelta
    round_attempts: int
    day_census: bool
    errors: ErrorRecorder
    held: dict[str, set[int]]  # worker id -> the rounds it knows it holds claimed (this process)

    def claim(
        self,
        task_ids: int | list[int],
        worker_id: str,
        epoch: str | None = None,
        idle: Callable[[list[int]], set[int]] | None = None,
    ) -> Round | None:
        """Hand this worker its next round from the given tasks, or None when none is due.

        First a round whose lease ran out (or whose Redis state was lost: seeded under another
        epoch, or seeded under this one but with nothing of it left in Redis) is taken over;
        then the cursor of the first task with a round due advances. A task row that fails
        validation is reported once and skipped; the others go on.

        Run again while the database is away, and idempotent: a claim whose commit landed but
        whose reply was lost (a cut line) left a round claimed under this worker's name that it
        does not know it holds; the next attempt (this call's, or the next call) recognises it
        and hands it over (:meth:`_own_claim`) rather than claiming another. The round returned
        is one this worker holds (:meth:`held_rounds`) until it is seeded or handed back.

        ``idle``: of the given ids of rounds seeded under ``epoch``, those Redis holds nothing
        of (nothing queued, leased, outstanding nor drained awaiting its close; the feeder asks
        its scheduler's queue). Such a round, seeded more than a lease ago, lost its requests
        with the last writes of a Redis that kept its epoch (an fsync a second behind, an RDB
        restore, a promoted replica): it is taken over and seeded again (:meth:`_stuck`).
        """
        ids = [task_ids] if isinstance(task_ids, int) else list(task_ids)
        found = retrying(self._claim_any, ids, worker_id, epoch, idle, what="claiming a round")
        if found is not None:
            self._holding(worker_id).add(found.id)
        return found

    def _claim_any(self, ids: list[int], worker_id: str, epoch, idle) -> Round | None:
        own = self._own_claim(ids, worker_id)
        if own is not None:
            return own
        for task_id in ids:
            try:
                found = self._claim_one(task_id, worker_id, epoch, idle)
            except TaskRowError as exc:
                self.report_bad_row(exc)
                continue
            if found is not None:
                return found
        return None

    # -- the rounds this worker knows it holds --------------------------------------------------

    def _holding(self, worker_id: str) -> set[int]:
        """The ids of the rounds this process's claims handed to ``worker_id`` and that it has
        not yet seeded or handed back (the set the heartbeat renews: :func:`renew_leases`)."""
        return self.held.setdefault(worker_id, set())

    def held_rounds(self, worker_id: str) -> frozenset[int]:
        """The rounds ``worker_id`` knows it holds claimed (a copy: the heartbeat's thread reads
        it while the feeder's claims change it)."""
        return frozenset(self.held.get(worker_id, ()))

    def _let_go(self, worker_id: str, round_id: int) -> None:
        self.held.get(worker_id, set()).discard(round_id)

    def _own_claim(self, ids: list[int], worker_id: str) -> Round | None:
        """A round of these tasks claimed under this worker's name that it does not know it
        holds: the commit of one of its claims landed and the reply was lost. Handed over as
        it is (the claim it stands for was this worker's), so it is seeded, never held for
        ever, and never a second round claimed in its place."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(
                    round_.c.id,
                    round_.c.task_id,
                    round_.c.day,
                    round_.c.category,
                    round_.c.attempts,
                )
                .where(
                    round_.c.task_id.in_(ids),
                    round_.c.worker == worker_id,
                    round_.c.state == RoundState.CLAIMED,
                )
                .order_by(round_.c.id)
            ).all()
        known = self.held_rounds(worker_id)
        for row in rows:
            if row.id in known:
                continue
            with self.engine.begin() as conn:
                # its lease starts again from now, if it is still this worker's (a lapsed one
                # may have been taken over since the SELECT)
                now = db_now(conn)
                mine = conn.execute(
                    round_.update()
                    .where(
                        round_.c.id == row.id,
                        round_.c.worker == worker_id,
                        round_.c.state == RoundState.CLAIMED,
                    )
                    .values(lease_until=now + self.round_lease)
                ).rowcount
            if mine != 1:
                continue
            logger.info(
                "round %s (%s %s): claimed by this worker, whose claim's reply was lost: "
                "seeding it",
                row.id,
                row.day,
                round_label(row.category),
            )
            return Round(row.id, row.task_id, row.day, row.category, row.attempts)
        return None

    def _claim_one(
        self, task_id: int, worker_id: str, epoch: str | None, idle=None
    ) -> Round | None:
        if self.halt_of(task_id):
            return None
        taken = self._take_over(task_id, worker_id, epoch)
        if taken is not None:
            return taken
        if epoch is not None and idle is not None:
            stuck = self._stuck(task_id, worker_id, epoch, idle)
            if stuck is not None:
                return stuck
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
                # the compare-and-swap on the cursor, in the transaction that opens the round
                moved = move(
                    conn,
                    task,
                    [
                        task.c.id == task_id,
                        task.c.cur_date.is_not_distinct_from(iso(current.cur_date)),
                        task.c.cur_code.is_not_distinct_from(current.cur_code),
                    ],
                    now,
                    cur_date=day.isoformat(),
                    cur_code=code,
                    phase=Phase.CRAWL,
                    status=NOW,
                )
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
                    "the day's search over the task's categories lists more than one search "
                    "can walk"
                    if self.day_census
                    else "category added?",
                )
                return self._open_round(conn, task_id, day.isoformat(), code, worker_id, now)
        except sa.exc.IntegrityError:  # another worker opened it a moment ago
            return None

    def _retryable(self):
        """A round failed on its ledger with attempts left: crawled again (:meth:`_claim_failed`)."""
        return sa.and_(
            round_.c.state == RoundState.FAILED,
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

    @retried("counting rounds to crawl again")
    def retryable(self, task_id: int) -> int:
        """Rounds failed on their ledger that will be crawled again (attempts left)."""
        with self.engine.connect() as conn:
            return conn.execute(
                sa.select(sa.func.count())
                .select_from(round_)
                .where(round_.c.task_id == task_id, self._retryable())
            ).scalar()

    @retried("looking for missing rounds")
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
        no row and stay skipped (steering: tasks/steering.py)."""
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
            day: state == RoundState.DONE and (note or "").startswith(CATEGORIES_NOTE)
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
                    state=RoundState.CLAIMED,
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
        # done or failed, passed again by the cursor: crawled again from its first page. The
        # compare-and-swap on the cursor makes this caller the only one passing it, not the only
        # one moving it: another worker may claim the failed round again (:meth:`_claim_failed`)
        # between the SELECT above and this UPDATE (MySQL reads a snapshot; its UPDATE the row
        # as it is now). So the move expects the state it read: if it lost, the round is the
        # other worker's, and this cursor position opens nothing.
        reopened = move(
            conn,
            round_,
            [round_.c.id == existing.id, round_.c.state == existing.state],
            now,
            state=RoundState.CLAIMED,
            worker=worker_id,
            lease_until=lease,
            attempts=1,
            epoch=None,
            total=None,
            stored=None,
            note=None,
            # passed again by the cursor, not by a look: walked whole (tasks/lookback.py)
            look=None,
        )
        if reopened != 1:
            return None
        self.errors.forget_round(conn, existing.id)  # the attempt starts over (as in _reclaim)
        if code == DAY:
            self._reopen_day(conn, task_id, day, now)
        return Round(existing.id, task_id, day, code, 1)

    def _reopen_day(self, conn, task_id: int, day: str, now: dt.datetime) -> None:
        """The cursor passed a day's census again (the operator moved it back): that day's
        category rounds are crawled again too, whatever the census finds. They have rows, so
        ``_missing`` would never see them due; they are claimed with a lapsed lease, and the next
        claim takes each over from its first page (as a resume re-opens rounds)."""
        reopened = move(
            conn,
            round_,
            [
                round_.c.task_id == task_id,
                round_.c.day == day,
                round_.c.category != DAY,
                round_.c.state.in_((RoundState.DONE, RoundState.FAILED)),
            ],
            now,
            state=RoundState.CLAIMED,
            worker=None,
            lease_until=now - dt.timedelta(seconds=1),
            attempts=0,
            note=None,
            look=None,  # walked whole, not counted by a look (tasks/lookback.py)
        )
        if reopened:
            logger.info(
                "task %s: the cursor passed %s again: its %s category rounds are crawled again",
                task_id,
                day,
                reopened,
            )

    def _take_over(self, task_id: int, worker_id: str, epoch: str | None) -> Round | None:
        with self.engine.begin() as conn:
            now = db_now(conn)
            lapsed = sa.and_(round_.c.state == RoundState.CLAIMED, round_.c.lease_until < now)
            if epoch is not None:
                lost = sa.and_(
                    round_.c.state == RoundState.SEEDED,
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

    def _stuck(self, task_id: int, worker_id: str, epoch: str, idle) -> Round | None:
        """Take over a round seeded under this very epoch more than a lease ago of which Redis
        holds nothing: nothing queued, leased or outstanding, and no drain waiting to be closed.
        Its first requests were lost with the last writes of a Redis that kept its epoch key (the
        embedded Redis fsyncs every second; an RDB restore; a promoted replica), so no drain
        will ever come and no epoch change hands it over: without this it stays seeded for ever.

        The order makes it safe: the database says seeded, then Redis says nothing (outstanding
        first, then the drains: a round's last ack adds its drain in the same step, and the
        drain goes only after the round is closed in the database), then one conditional UPDATE
        still expecting it seeded, under this epoch, since before the lease: a round that
        drained and closed meanwhile, or was seeded again, no longer matches."""
        with self.engine.connect() as conn:
            now = db_now(conn)
            seeded_before = now - self.round_lease
            candidates = (
                conn.execute(
                    sa.select(round_.c.id)
                    .where(
                        round_.c.task_id == task_id,
                        round_.c.state == RoundState.SEEDED,
                        round_.c.epoch == epoch,
                        round_.c.updated_at < seeded_before,
                    )
                    .order_by(round_.c.id)
                    .limit(50)
                )
                .scalars()
                .all()
            )
        if not candidates:
            return None
        gone = sorted(set(idle(list(candidates))) & set(candidates))
        if not gone:
            return None
        with self.engine.begin() as conn:
            now = db_now(conn)
            return self._reclaim(
                conn,
                task_id,
                worker_id,
                now,
                sa.and_(
                    round_.c.id.in_(gone),
                    round_.c.state == RoundState.SEEDED,
                    round_.c.epoch == epoch,
                    round_.c.updated_at < now - self.round_lease,
                ),
                "round %s (%s %s) seeded, but Redis holds nothing of it (its requests were lost "
                "with Redis's last writes): seeded again",
            )

    def _reclaim(self, conn, task_id, worker_id, now, which, announce: str) -> Round | None:
        """Claim again the first round of the task that ``which`` matches (a lapsed lease, a lost
        Redis, a ledger that did not balance), from its first page: one conditional UPDATE per
        candidate, so of two workers racing for it exactly one wins. The attempt starts over, as
        in _open_round: its search sets its total again (set_total), so the old total must go,
        and so must what it counted and its errorCode rows (its ledger rows stay: what it stored
        stays stored). ``announce``: the log line, with id, day, category (and the attempt)."""
        candidates = conn.execute(
            sa.select(round_.c.id, round_.c.day, round_.c.category, round_.c.attempts)
            .where(round_.c.task_id == task_id, which)
            .order_by(round_.c.day, round_.c.id)
            .limit(5)
        ).all()
        for cand in candidates:
            won = move(
                conn,
                round_,
                [round_.c.id == cand.id, which],
                now,
                state=RoundState.CLAIMED,
                worker=worker_id,
                lease_until=now + self.round_lease,
                attempts=round_.c.attempts + 1,
                epoch=None,
                total=None,
                stored=None,
                note=None,
            )
            if won == 1:
                self.errors.forget_round(conn, cand.id)
                attempt = cand.attempts + 1
                args = (cand.id, cand.day, round_label(cand.category), attempt)
                logger.info(announce, *args[: announce.count("%s")])
                return Round(cand.id, task_id, cand.day, cand.category, attempt)
        return None

    def release_claim(self, round_id: int, worker_id: str) -> bool:
        """This worker cannot seed a round it claimed: its lease lapses now, so the next claim
        (any worker's, this one's too) takes it over from its first page. One conditional
        UPDATE: a round already seeded or taken over is left alone."""
        self._let_go(worker_id, round_id)  # its heartbeat renews it no more, whatever comes
        with self.engine.begin() as conn:
            now = db_now(conn)
            return (
                move(
                    conn,
                    round_,
                    [
                        round_.c.id == round_id,
                        round_.c.state == RoundState.CLAIMED,
                        round_.c.worker == worker_id,
                    ],
                    now,
                    # no worker: nothing claimed under this worker's name that it does not hold
                    # (its next claim would take it as its own claim whose reply was lost)
                    worker=None,
                    lease_until=now - dt.timedelta(seconds=1),
                )
                == 1
            )

    def mark_seeded(
        self, round_id: int, worker_id: str, epoch: str, seeding: str | None = None
    ) -> bool:
        """The round's first request is in Redis: from now on Redis leases guard it. True when
        this worker seeded it; False when the round is no longer its own (its lease lapsed and
        another worker took it over, or the operator re-opened it): the caller seeds no more of
        it. Run again after a lost commit, the move matches nothing: the round is then read to
        tell this worker's own seeding (seeded by it, under this epoch) from another's move.

        ``seeding``: the token its seed carried to Redis (``{ns}:seedings``); the drain is
        reported with it, and only a writer of this seeding may close the round (:meth:`close_round`)."""
        self._let_go(worker_id, round_id)  # seeded or lost: held claimed no more
        if transition(
            self.engine,
            round_,
            [
                round_.c.id == round_id,
                round_.c.state == RoundState.CLAIMED,
                round_.c.worker == worker_id,
            ],
            state=RoundState.SEEDED,
            epoch=epoch,
            seeding=seeding,
        ):
            return True
        row = self.round_info(round_id)
        return (
            row is not None
            and row.state == RoundState.SEEDED
            and row.worker == worker_id
            and row.epoch == epoch
            and row.seeding == seeding
        )

    def mark_done(
        self,
        round_id: int,
        total: int | None = None,
        note: str | None = None,
        epoch: str | None = None,
        seeding: str | None = None,
    ) -> bool | None:
        """The round drained: done if its ledger balances; True for exactly the one caller that
        moved it to done (:meth:`close_round` says what happened otherwise)."""
        closed = self.close_round(round_id, total=total, note=note, epoch=epoch, seeding=seeding)
        if closed.moved is None:
            return None
        return closed.moved and closed.state == RoundState.DONE

    @retried("closing a round")
    def close_round(
        self,
        round_id: int,
        total: int | None = None,
        note: str | None = None,
        epoch: str | None = None,
        seeding: str | None = None,
    ) -> Closed:
        """The round drained: ``done`` when its ledger balances (cnkispider/ledger.py), else ``failed``.

        One transaction: the ledger is counted and the round moved by one conditional UPDATE,
        so of the callers draining it exactly one moves it (``moved``; the others get False).
        Never while its task is halted (the UPDATE's condition: the halt and this move cannot
        interleave); the caller then marks it failed with :meth:`mark_halted`.

        ``total``: the listed total, when the caller knows it (the round's root search set it
        with :meth:`set_total`). A round whose list never answered has none: it fails.

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

        ``seeding``: the seeding the drain belongs to (its seed's token, reported by Redis with
        the drain). Compared in the move's own condition: the late handler of an earlier
        seeding (its close retried through a database outage while another worker closed that
        seeding and the round was seeded again, by a look or a retry) changes nothing of the
        later one (False), whatever the epoch. None: a drain with no seeding recorded (a round
        seeded before schema 15): the epoch alone decides, as before.
        """
        not_halted = ~sa.exists().where(
            task.c.id == round_.c.task_id, task.c.halt_reason.is_not(None)
        )
        if epoch is None:
            where = [round_.c.id == round_id, round_.c.state.in_(IN_FLIGHT), not_halted]
        else:
            where = [
                round_.c.id == round_id,
                round_.c.state == RoundState.SEEDED,
                round_.c.epoch == epoch,
                not_halted,
            ]
        if seeding is not None:
            where.append(round_.c.seeding == seeding)
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
                values["state"] = RoundState.DONE
                if note is None and row.category == DAY and listed == 0 and not row.note:
                    note = EMPTY_DAY_NOTE  # the census found nothing: no other request that day
                if note is not None:
                    values["note"] = note[:500]
            else:
                values["state"] = RoundState.FAILED
                values["note"] = f"{LEDGER_NOTE}: {verdict.words()}"[:500]
            moved = move(conn, round_, where, now, **values) == 1
            if moved and row.worker:
                self._let_go(row.worker, round_id)
            if not moved:
                state = row.state
            elif verdict.balanced:
                return Closed(True, RoundState.DONE, verdict, row.attempts)
            else:
                return Closed(True, *self._failed(conn, row, verdict, now))
            if seeding is not None and state == RoundState.SEEDED and row.seeding != seeding:
                return Closed(False)  # an earlier seeding's drain: a later one owns the round
        if epoch is not None and state == RoundState.CLAIMED:
            return Closed(None)
        return Closed(False)

    def _failed(self, conn, row, verdict, now) -> tuple:
        """A round whose ledger did not balance: crawled again while it has attempts left
        (:meth:`_claim_failed`), else failed for good with a permanent errorCode row ``ledger``."""
        words = f"{LEDGER_NOTE}: {verdict.words()}"
        if row.attempts < self.round_attempts:
            return "again", verdict, row.attempts  # claimed again once no new round is due
        self.errors.record_round_failed(
            conn,
            task_id=row.task_id,
            round_id=row.id,
            day=row.day,
            category=row.category,
            reason=LEDGER_NOTE,
            detail=f"{words} (after {row.attempts} attempts)",
            attempts=row.attempts,
            now=now,
        )
        return RoundState.FAILED, verdict, row.attempts

    def mark_halted(self, round_id: int, seeding: str | None = None) -> bool:
        """A round that drained while its task was halted: failed, re-opened by ``resume``.
        ``seeding``: the drain's (as in :meth:`close_round`), so an earlier seeding's late
        handler leaves the round alone."""
        where = [round_.c.id == round_id, round_.c.state.in_(IN_FLIGHT)]
        if seeding is not None:
            where.append(round_.c.seeding == seeding)
        return transition(
            self.engine,
            round_,
            where,
            state=RoundState.FAILED,
            lease_until=None,
            note=HALTED_NOTE,
        )

    def note_listed(self, round_id: int, pending: list[str], drops: dict[str, str]) -> None:
        """A list page's rows into the round's ledger (cnkispider/ledger.py; idempotent, so run
        again while the database is away)."""

        def write():
            with self.engine.begin() as conn:
                ledger.note_listed(conn, round_id, pending, drops)

        retrying(write, what="writing a list page's rows into its round's ledger")

    @retried("noting a round")
    def set_note(self, round_id: int, note: str) -> None:
        """A note the round keeps when it closes done (its ledger's note wins if it fails).
        Only while the round is in flight, as :meth:`set_total`: a late handling of a page of
        a round closed since must not change what its closed state means (a census round's
        ``categories`` note makes the day's root rounds due)."""
        with self.engine.begin() as conn:
            conn.execute(
                round_.update()
                .where(round_.c.id == round_id, round_.c.state.in_(IN_FLIGHT))
                .values(note=note[:500])
            )

    @retried("setting a round's listed total")
    def set_total(self, round_id: int, listed: int) -> None:
        """The round's listed total, as its root search's first page says it (or 0: a census
        that hands the day to its root rounds, a true zero). Set, never added: the page is
        handled at least once (a kill between this commit and the ack, a re-sent reply of the
        queue script, a round claimed twice), and each handling must leave the same ledger, so
        this is idempotent and run again while the database is away. A split round's total is
        its root's: its children's searches list the same rows again, by parts.

        Only while the round is in flight: a worker whose line was cut while it wrote this
        (tests/test_cut_lines.py) may get it through after the others re-did its list page and
        closed the round, and a closed round's total no longer moves."""
        with self.engine.begin() as conn:
            conn.execute(
                round_.update()
                .where(round_.c.id == round_id, round_.c.state.in_(IN_FLIGHT))
                .values(total=listed)
            )

    @retried("reading a round")
    def round_info(self, round_id: int):
        with self.engine.connect() as conn:
            return conn.execute(sa.select(round_).where(round_.c.id == round_id)).first()

    @retried("counting rounds in flight")
    def in_flight(self, task_id: int) -> int:
        with self.engine.connect() as conn:
            return conn.execute(
                sa.select(sa.func.count())
                .select_from(round_)
                .where(round_.c.task_id == task_id, round_.c.state.in_(IN_FLIGHT))
            ).scalar()

    @retried("reading a task's cursor")
    def exhausted(self, task_id: int) -> bool:
        """No round is due now: the cursor is past end_date (or today)."""
        with self.engine.connect() as conn:
            current = validate_row(self._row(conn, task_id), self.base_dir)
            return current.next_round()[0] > current.limit(db_now(conn))

    @retried("deciding a task's phase")
    def phase_facts(self, task_id: int) -> PhaseFacts:
        """What the database says for :func:`next_action` (the queue and error facts are the
        caller's: Redis and the error recorder). Reads only what the task's phase needs."""
        current = self.get(task_id)
        facts = PhaseFacts(
            phase=current.phase,
            halted=bool(current.halt_reason),
            open_ended=current.end_date is None,
        )
        if current.phase != Phase.CRAWL or facts.halted:
            return facts
        exhausted = self.exhausted(task_id)
        in_flight = self.in_flight(task_id) if exhausted else 0
        # a category added behind the cursor (its file edited): claim opens those rounds
        missing = bool(self.missing_rounds(task_id)) if exhausted and not in_flight else False
        settled = exhausted and not in_flight and not missing
        retryable = self.retryable(task_id) if settled else 0
        by_state = self.progress(task_id)["rounds"] if settled and not retryable else {}
        return PhaseFacts(
            phase=Phase.CRAWL,
            open_ended=facts.open_ended,
            exhausted=exhausted,
            in_flight=in_flight,
            missing=missing,
            retryable=retryable,
            rounds_done=by_state.get(RoundState.DONE, 0),
            rounds_failed=by_state.get(RoundState.FAILED, 0),
        )

    @retried("reading why a task's rounds failed")
    def all_failed_reason(self, task_id: int) -> str:
        """The halt reason of a task whose every round failed: ``ledger: every round failed
        (N of N); last: <the last round's numbers>``."""
        with self.engine.connect() as conn:
            failed = (
                conn.execute(
                    sa.select(round_.c.note)
                    .where(round_.c.task_id == task_id, round_.c.state == RoundState.FAILED)
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
        return transition(
            self.engine,
            task,
            [task.c.id == task_id, task.c.phase == Phase.CRAWL, task.c.halt_reason.is_(None)],
            phase=Phase.RECRAWL,
        )

    def set_phase(self, task_id: int, phase: str, expect: str | None = None) -> bool:
        """Move the phase (never while halted: a halted task keeps the phase it halted in)."""
        where = [task.c.id == task_id, task.c.halt_reason.is_(None)]
        if expect is not None:
            where.append(task.c.phase == expect)
        return transition(self.engine, task, where, phase=phase)

    @retried("counting a task's rounds")
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
            errors = self.errors.count_rows(conn, task_id)
        return {"rounds": by_state, **errors}
