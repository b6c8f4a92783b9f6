"""Workers: who crawls, and that they are alive (the worker table, heartbeats).

A worker registers once (:meth:`Workers.register_worker`, which prunes the rows of workers not
seen for a week) and beats every few seconds
(:meth:`Workers.heartbeat`): the beat renews the leases of the rounds it holds claimed (a worker
that stops beating loses them within one lease, tasks/rounds.py), stamps the task's ``status``
(its last sign of life, shown by ``task list``) and writes the worker's counts and the round it
seeded last (``current_round``) for ``cnkispider status``.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import uuid
from collections.abc import Callable

import sqlalchemy as sa

from cnkispider.store.db import db_now, retried
from cnkispider.store.schema import task, worker
from tasks.retention import WORKER_DAYS
from tasks.roundstate import renew_leases
from tasks.rows import TaskRows


def new_worker_id() -> str:
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Workers(TaskRows):
    """Worker rows and heartbeats (a part of :class:`tasks.flow.TaskStore`, which sets
    ``round_lease``; ``held_rounds``: :class:`tasks.rounds.Rounds`)."""

    round_lease: dt.timedelta
    held_rounds: Callable[[str], frozenset[int]]

    def register_worker(self, worker_id: str, task_id: int | None) -> None:
        """A new row for this worker; the rows of workers not seen for a week go (retention:
        a row per process start would otherwise be kept for ever, tasks/retention.py)."""
        host, pid = worker_id.split(":")[0], int(worker_id.split(":")[1])
        with self.engine.begin() as conn:
            now = db_now(conn)
            conn.execute(
                worker.delete().where(worker.c.last_seen < now - dt.timedelta(days=WORKER_DAYS))
            )
            conn.execute(
                worker.insert().values(
                    id=worker_id, task_id=task_id, host=host, pid=pid, started_at=now, last_seen=now
                )
            )

    @retried("sending a heartbeat")
    def heartbeat(
        self,
        worker_id: str,
        task_id: int | None,
        *,
        pages: int = 0,
        items: int = 0,
        errors: int = 0,
        challenges: int = 0,
        last_error: str | None = None,
        export_batch: int | None = None,
        current_round: str | None = None,
        state: str = "running",
    ) -> None:
        """Renew this worker's round leases and say it is alive (task.status = now).
        ``current_round``: the round it seeded last (``day category``), for the operator;
        ``challenges``: CNKI's challenges it met; ``last_error``: the last failure it recorded
        (cut to the column here); ``export_batch``: the GetExport batch size its sessions last
        reached (None: it asked none)."""
        if last_error is not None:
            last_error = last_error[: worker.c.last_error.type.length]
        with self.engine.begin() as conn:
            now = db_now(conn)
            this = worker.c.id == worker_id
            if state == "running":
                # a beat on its way (a thread) when the worker said goodbye must not undo it:
                # the row would read "running" and, its beats over, the worker "gone"
                this = sa.and_(this, worker.c.state == "running")
            said = conn.execute(
                worker.update()
                .where(this)
                .values(
                    last_seen=now,
                    pages=pages,
                    items=items,
                    errors=errors,
                    challenges=challenges,
                    last_error=last_error,
                    export_batch=export_batch,
                    current_round=current_round,
                    state=state,
                )
            )
            if (
                said.rowcount == 0
                and conn.execute(  # rowcount: the rows matched
                    sa.select(worker.c.state).where(worker.c.id == worker_id)
                ).scalar()
            ):
                return  # it said goodbye already: its leases are not renewed either
            renew_leases(conn, worker_id, now + self.round_lease, self.held_rounds(worker_id))
            if task_id is not None:
                conn.execute(task.update().where(task.c.id == task_id).values(status=now))
