"""Flow control: the task table, its rounds and its workers, as the one object callers hold.

:class:`TaskStore` is composed of parts, each in the module that owns its concern (read those
for the invariants):

    tasks/rows.py      the task row: :class:`~tasks.rows.Task`, checking a hand-edited row
                       (``validate_row``), CNKI's calendar, reading rows (``TaskRows``)
    tasks/phase.py     a task's phase: ``next_action(PhaseFacts) -> Action``, pure
    tasks/rounds.py    the rounds and the counts the phase rules read (``Rounds``), composed
                       of tasks/claims.py (claims, the cursor, take-overs) and tasks/closing.py
                       (seeded, done, failed, halted); their states and every move of them
                       (``move``, ``transition``): tasks/roundstate.py
    tasks/steering.py  what an operator does to a task row: add, set, stop, extend, move the
                       cursor, halt, resume (``Steering``)
    tasks/workers.py   worker rows and heartbeats (``Workers``)
    tasks/lookback.py  a task that follows today: its looks re-open the look-back's rounds
                       (``Looks``)
    tasks/parts.py     a look's parts: a split day's rounds recounted by one facet request
                       (``Parts``)

errorCode rows are written by errors/recorder.py (``TaskStore.errors``), in the transaction of
the round move they belong to. The other names here (``Task``, ``Action``, ``PhaseFacts``,
``next_action``, ``new_worker_id``) are imported from here by cnkispider/runtime/context.py and
tasks/feeder.py; new code imports them from their own modules.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from sqlalchemy.engine import Engine

from cnkispider import default_settings
from errors.recorder import ErrorRecorder
from tasks.lookback import Looks
from tasks.parts import Parts
from tasks.phase import Action, PhaseFacts, next_action
from tasks.rounds import Rounds
from tasks.rows import Task
from tasks.steering import Steering
from tasks.workers import Workers, new_worker_id

__all__ = ["Action", "PhaseFacts", "Task", "TaskStore", "new_worker_id", "next_action"]


class TaskStore(Steering, Rounds, Workers, Looks, Parts):
    """Tasks, rounds and worker heartbeats in the database (SQLite or MySQL/MariaDB)."""

    def __init__(
        self,
        engine: Engine,
        *,
        round_lease: int = default_settings.TASKS_ROUND_LEASE,
        round_attempts: int = default_settings.TASKS_ROUND_ATTEMPTS,
        base_dir: Path | None = None,
        day_census: bool = False,
        errors: ErrorRecorder | None = None,
    ):
        self.engine = engine
        # the crawl's [task] day_census (the feeder passes it; default on in config.ini); off
        # here for the tools that only read or steer the table
        self.day_census = day_census
        self.round_lease = dt.timedelta(seconds=round_lease)
        self.round_attempts = max(1, round_attempts)
        self.base_dir = base_dir
        # errorCode rows are the recorder's to write (a round re-opened forgets its rows, a
        # round failed for good leaves one, a resume opens them again), in the transaction
        # that moves the round; its methods used here do not depend on its settings
        self.errors = errors or ErrorRecorder(engine)
        # worker id -> the rounds its claims handed it, not yet seeded or handed back: what
        # its heartbeat renews (tasks/roundstate.py ``renew_leases``), and how a claim tells its
        # own earlier claim whose reply was lost from a round it holds
        self.held: dict[str, set[int]] = {}
        self._reported: set[tuple[int, str]] = set()
