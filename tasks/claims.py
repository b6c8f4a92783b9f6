"""Claiming rounds: a worker's claim of the task's next round (compare-and-swap on the cursor),
its own lost-reply claim recognised, a round whose lease ran out (or whose Redis state was lost)
taken over, a failed round claimed again while attempts are left, the rounds a category added
behind the cursor is missing, and a claim let go (a part of :class:`tasks.rounds.Rounds`).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable

import sqlalchemy as sa

from cnkispider.exceptions import TaskRowError
from cnkispider.store.db import db_now, retried, retrying
from cnkispider.store.schema import round_, task
from errors.recorder import ErrorRecorder
from tasks.categories import DAY, round_label
from tasks.phase import Phase
from tasks.roundstate import (
    CATEGORIES_NOTE,
    IN_FLIGHT,
    LEDGER_NOTE,
    NOW,
    Round,
    RoundState,
    move,
)
from tasks.rows import Task, TaskRows, iso, validate_row

# logs as the rounds did before their split (issue 49.2): operators know "tasks.rounds"
logger = logging.getLogger("tasks.rounds")


class ClaimRounds(TaskRows):
    """Claims of rounds (a part of :class:`tasks.rounds.Rounds`)."""

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
            # a census round closed as `categories` (split by its facet counts, or the task
            # does not cover the tree): that day's root rounds are due before the cursor moves on
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
        # A day with a census round is covered by it, unless it closed as `categories` (split
        # by its facet counts, or the task does not cover the tree): then every root of the
        # day without a row is due (a root the facet counted 0 has one: done, `empty part`).
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
