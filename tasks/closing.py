"""Closing rounds: a claimed round marked seeded, a drained round closed done or failed on its
ledger (failed with attempts left: claimed again), a round halted with its task, and what the
listing tells a round before it closes (its total, its note, what it listed but left for later)
(a part of :class:`tasks.rounds.Rounds`).
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from cnkispider.store import ledger
from cnkispider.store.db import db_now, retried, retrying
from cnkispider.store.schema import round_, task
from errors.recorder import ErrorRecorder
from tasks.categories import DAY
from tasks.roundstate import (
    EMPTY_DAY_NOTE,
    HALTED_NOTE,
    IN_FLIGHT,
    LEDGER_NOTE,
    Closed,
    RoundState,
    move,
    transition,
)
from tasks.rows import TaskRows


class CloseRounds(TaskRows):
    """The moves of a round after its claim (a part of :class:`tasks.rounds.Rounds`)."""

    round_lease: dt.timedelta
    round_attempts: int
    day_census: bool
    errors: ErrorRecorder
    held: dict[str, set[int]]  # worker id -> the rounds it knows it holds claimed (this process)

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
        """The round drained: ``done`` when its ledger balances (cnkispider/store/ledger.py), else ``failed``.

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
        """A list page's rows into the round's ledger (cnkispider/store/ledger.py; idempotent, so run
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
