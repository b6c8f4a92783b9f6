"""Retention: what the database keeps of finished work, and for how long.

Without it the database only grows: a ``worker`` row per process start, and a ``ledger`` row per
(round, document) the rounds listed, kept for ever (issue 43, case 10). So:

- worker rows not seen for :data:`WORKER_DAYS` go when any worker registers
  (:meth:`tasks.workers.Workers.register_worker`): a week of starts is what ``status`` and the
  web page show, and a worker that has not beaten for a week is long gone;
- with ``[database] ledger_days`` (``DATABASE_LEDGER_DAYS``, 180 by default; 0 keeps
  everything), the ledger rows of rounds done more than that many days ago are folded into
  per-round counts (:func:`fold_ledgers`, by :func:`cnkispider.store.ledger.fold_round`): the round's
  verdict and the sums of ``cnkispider status`` read the same numbers afterwards. Never inside
  a follow task's look-back (:func:`fold_window`): a look walks those rounds on their rows;
- the ``fill`` rows (a row per round and watched field) of all but a task's latest
  :data:`cnkispider.watch.drift.RECENT_ROUNDS` rounds, the only ones the drift alarm and ``status``
  read, go with each fold (:func:`fold_fill`);
- a worker folds when it starts and every ``DATABASE_FOLD_EVERY`` seconds after (6 hours), so
  one that follows today for months keeps the tables bounded (the pipeline's timer).

Folding runs round by round, each round in its own short transaction holding the round's row,
so a worker folding and a worker re-opening that round take turns (the re-open then finds its
counts and the new crawl lists them anew: cnkispider/store/ledger.py), and two workers folding at once
fold each row once.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from cnkispider.store import ledger
from cnkispider.store.db import db_now, retrying
from cnkispider.store.schema import fill, round_, task
from cnkispider.store.schema import ledger as ledger_table
from cnkispider.watch.drift import RECENT_ROUNDS
from tasks.roundstate import RoundState

logger = logging.getLogger(__name__)

#: Days a worker row is kept after the worker's last heartbeat.
WORKER_DAYS = 7
#: Rounds looked up per query while folding.
FOLD_BATCH = 100
#: Days a fold stays behind a follow task's look-back window (tasks/lookback.py).
LOOK_MARGIN_DAYS = 30


def follow_days(ledger_days: int, look_back_days: int) -> int:
    """The days after which a done round of a task that follows today folds: never inside its
    look-back (a look lists the window's rounds on their rows; folded, they would be listed
    anew and what they had stored fetched again), with a margin."""
    return max(ledger_days, look_back_days + LOOK_MARGIN_DAYS)


def fold(
    engine: Engine, days: int, look_back_days: int = 0, *, stop: threading.Event | None = None
) -> tuple[int, int]:
    """One fold of a worker: the ledgers of rounds done ``days`` ago (a follow task's:
    :func:`follow_days`), then the fill rows no reader reads; (ledger rows folded, fill rows
    removed)."""
    folded = fold_ledgers(engine, days, look_back_days, stop=stop)
    if stop is not None and stop.is_set():
        return folded, 0
    return folded, retrying(fold_fill, engine, what="folding the fill rows")


def fold_fill(engine: Engine, keep: int = RECENT_ROUNDS) -> int:
    """Remove the ``fill`` rows of every task's rounds but its latest ``keep`` (by round id,
    as :func:`cnkispider.watch.drift.history` reads them); the rows removed."""
    removed = 0
    with engine.connect() as conn:
        tasks = conn.execute(sa.select(fill.c.task_id).distinct()).scalars().all()
    for task_id in tasks:
        with engine.begin() as conn:
            oldest_kept = conn.execute(
                sa.select(fill.c.round_id)
                .where(fill.c.task_id == task_id)
                .group_by(fill.c.round_id)
                .order_by(fill.c.round_id.desc())
                .offset(keep - 1)
                .limit(1)
            ).scalar()
            if oldest_kept is None:
                continue  # fewer rounds than kept
            removed += conn.execute(
                fill.delete().where(fill.c.task_id == task_id, fill.c.round_id < oldest_kept)
            ).rowcount
    if removed:
        logger.info("fill: removed %s rows of rounds the drift alarm no longer reads", removed)
    return removed


def fold_ledgers(
    engine: Engine, days: int, look_back_days: int = 0, *, stop: threading.Event | None = None
) -> int:
    """Fold the ledger rows of the rounds done more than ``days`` days ago (by the database's
    clock; a task that follows today's: :func:`follow_days`); returns the rows folded. ``stop``
    set: return after the round being folded."""
    if days <= 0:
        return 0
    folded = rounds = 0
    after = 0
    while stop is None or not stop.is_set():
        with engine.connect() as conn:
            now = db_now(conn)
            cutoff = _old_enough(
                now - dt.timedelta(days=days),
                now - dt.timedelta(days=follow_days(days, look_back_days)),
            )
            due = _due(after, cutoff)
            ids = conn.execute(due.order_by(round_.c.id).limit(FOLD_BATCH)).scalars().all()
        if not ids:
            break
        for round_id in ids:
            if stop is not None and stop.is_set():
                break
            n = retrying(_fold, engine, round_id, cutoff, what="folding a done round's ledger")
            folded += n
            rounds += 1 if n else 0
        after = ids[-1]
    if folded:
        logger.info(
            "ledger: folded %s rows of %s rounds done more than %s days ago", folded, rounds, days
        )
    return folded


def _old_enough(cutoff: dt.datetime, follow_cutoff: dt.datetime):
    """Done before ``cutoff``, and before ``follow_cutoff`` if its task follows today."""
    follows = sa.exists().where(task.c.id == round_.c.task_id, task.c.follow == 1)
    return sa.and_(
        round_.c.updated_at < cutoff, sa.or_(~follows, round_.c.updated_at < follow_cutoff)
    )


def _due(after: int, cutoff):
    """Rounds done long enough ago (``cutoff``: :func:`_old_enough`), after id ``after``,
    with ledger rows that can fold."""
    return sa.select(round_.c.id).where(
        round_.c.id > after,
        round_.c.state == RoundState.DONE,
        cutoff,
        sa.exists().where(ledger_table.c.round_id == round_.c.id, ledger.final()),
    )


def _fold(engine: Engine, round_id: int, cutoff) -> int:
    """One round, one transaction, its row held (FOR UPDATE; SQLite's writer lock): a round
    re-opened meanwhile is not done any more and is left as it is."""
    with engine.begin() as conn:
        held = conn.execute(
            sa.select(round_.c.id)
            .where(
                round_.c.id == round_id,
                round_.c.state == RoundState.DONE,
                cutoff,
            )
            .with_for_update()
        ).first()
        return ledger.fold_round(conn, round_id) if held is not None else 0
