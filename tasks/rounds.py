"""Rounds: a task hands out rounds of (day x category), atomically, to any number of workers.

The task table is the truth of progress; a worker keeps nothing a restart would miss. The
rounds and every move of their state, and the task's cursor and phase moves: :class:`Rounds`,
composed of tasks/claims.py (claims, take-overs) and tasks/closing.py (seeded, done, failed,
halted), over tasks/roundstate.py (the states and :func:`~tasks.roundstate.move`); here, the
facts the phase rule reads. A move that passes a day's census round again re-opens its root rounds.

A round's life (the invariants; who makes each move: docs/INTERNALS.md#tasksroundspy)::

    (pending: ahead of the cursor, no row yet)
      --cursor advance--> claimed --seed in Redis--> seeded --last request acked--> done (balanced)
                          ^ ^ ^ ^                      |                      '--> failed
                          | | | '-- lease ran out -----+-- Redis lost its state: a new epoch, or
                          | | |                        |   nothing of it in Redis for a lease
                          | | '-- the operator: `task reopen` (any state) -----'
                          | '---- the cursor passes it again (done | failed)
                          '------ failed on its ledger, attempts left, no new round due

- Every move is a conditional UPDATE on the state it expects (``move``, ``transition``): two
  workers never both win it; a ``False`` from :meth:`Rounds.mark_seeded` stops a seeder.
- Claims are compare-and-swap on the cursor in the transaction that inserts the round row; a
  claim is run again while the database is away and recognises its own lost-reply claim.
- A heartbeat renews only the rounds its worker knows it holds (:meth:`Rounds.held_rounds`).
- done only when the ledger balances (docs/RELIABILITY.md#every-listed-row-accounted-for): the
  total set once per listing, ``beyond`` only what overflow/pager-short/census rows count.
- Every seeding has its token (``round.seeding``, from :meth:`Rounds.mark_seeded` to Redis and
  back with the drain); every write of the drain compares it in its own statement, so a late
  handler of an earlier seeding changes nothing, whatever the Redis epoch.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from cnkispider.store.db import db_now, retried
from cnkispider.store.schema import round_, task
from errors.recorder import ErrorRecorder
from tasks.claims import ClaimRounds
from tasks.closing import CloseRounds
from tasks.phase import Action, Phase, PhaseFacts, next_action
from tasks.roundstate import (
    IN_FLIGHT,
    LEDGER_NOTE,
    RoundState,
    transition,
)
from tasks.rows import validate_row


class Rounds(ClaimRounds, CloseRounds):
    """Claims, round moves and the counts the phase rules read (a part of
    :class:`tasks.flow.TaskStore`, which sets ``round_lease``, ``round_attempts``,
    ``day_census`` and ``errors``, the :class:`~errors.recorder.ErrorRecorder` that writes the
    errorCode rows of the rounds it moves)."""

    round_lease: dt.timedelta
    round_attempts: int
    day_census: bool
    errors: ErrorRecorder
    held: dict[str, set[int]]  # worker id -> the rounds it knows it holds claimed (this process)

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
