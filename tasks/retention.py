"""Retention: what the database keeps of finished work, and for how long.

Without it the database only grows: a ``worker`` row per process start, and a ``ledger`` row per
(round, document) the rounds listed, kept for ever (issue 43, case 10). So:

- worker rows not seen for :data:`WORKER_DAYS` go when any worker registers
  (:meth:`tasks.workers.Workers.register_worker`): a week of starts is what ``status`` and the
  web page show, and a worker that has not beaten for a week is long gone;
- with ``[database] ledger_days`` (``DATABASE_LEDGER_DAYS``; 0, the default, keeps everything),
  the ledger rows of rounds done more than that many days ago are folded into per-round counts
  (:func:`fold_ledgers`, by :func:`cnkispider.ledger.fold_round`): the round's verdict and the
  sums of ``cnkispider status`` read the same numbers afterwards.

Folding runs round by round, each round in its own short transaction holding the round's row,
so a worker folding and a worker re-opening that round take turns (the re-open then finds its
counts and the new crawl lists them anew: cnkispider/ledger.py), and two workers folding at once
fold each row once.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from cnkispider import ledger
from cnkispider.db import db_now, retrying
from cnkispider.schema import ledger as ledger_table
from cnkispider.schema import round_
from tasks.rounds import RoundState

logger = logging.getLogger(__name__)

#: Days a worker row is kept after the worker's last heartbeat.
WORKER_DAYS = 7
#: Rounds looked up per query while folding.
FOLD_BATCH = 100


def fold_ledgers(engine: Engine, days: int, *, stop: threading.Event | None = None) -> int:
    """Fold the ledger rows of the rounds done more than ``days`` days ago (by the database's
    clock); returns the rows folded. ``stop`` set: return after the round being folded."""
    if days <= 0:
        return 0
    folded = rounds = 0
    after = 0
    while stop is None or not stop.is_set():
        with engine.connect() as conn:
            cutoff = db_now(conn) - dt.timedelta(days=days)
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


def _due(after: int, cutoff: dt.datetime):
    """Rounds done before ``cutoff``, after id ``after``, with ledger rows that can fold."""
    return sa.select(round_.c.id).where(
        round_.c.id > after,
        round_.c.state == RoundState.DONE,
        round_.c.updated_at < cutoff,
        sa.exists().where(ledger_table.c.round_id == round_.c.id, ledger.final()),
    )


def _fold(engine: Engine, round_id: int, cutoff: dt.datetime) -> int:
    """One round, one transaction, its row held (FOR UPDATE; SQLite's writer lock): a round
    re-opened meanwhile is not done any more and is left as it is."""
    with engine.begin() as conn:
        held = conn.execute(
            sa.select(round_.c.id)
            .where(
                round_.c.id == round_id,
                round_.c.state == RoundState.DONE,
                round_.c.updated_at < cutoff,
            )
            .with_for_update()
        ).first()
        return ledger.fold_round(conn, round_id) if held is not None else 0
