"""A round's states and the one way to move them: :class:`RoundState`, the notes a round
closes with, and :func:`move` / :func:`transition` (the conditional UPDATE every move of a round
or a task goes through), the heartbeat's :func:`renew_leases`, and what a claim or a close hands
back (:class:`Round`, :class:`Closed`). The life these moves make: tasks/rounds.py.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy.engine import Engine

from cnkispider.store import ledger
from cnkispider.store.db import db_now, retried
from cnkispider.store.schema import round_


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

    A round moved to ``claimed`` loses its seeding token (unless ``values`` give one).
    ``NOW`` stands for ``now``, the database's clock. ``updated_at`` is stamped ``now``: last, or
    where ``values`` place it. The assignments keep the caller's order: MySQL applies them left
    to right, so an assignment that reads a column sees it already assigned.
    """
    values = {k: now if v is NOW else v for k, v in values.items()}
    values.setdefault("updated_at", now)
    if table is round_ and values.get("state") == RoundState.CLAIMED:
        # claimed again (re-opened, taken over, by a look): no seeding owns the round until its
        # next one is written (its seeder's bind_seeding or mark_seeded), so the late handler of
        # an earlier seeding finds none of its own (tasks/parts.py, tasks/closing.py)
        values.setdefault("seeding", None)
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
