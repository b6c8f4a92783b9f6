"""The days of a task its operator skipped, by which command (issue 47 point 5).

``task move`` forward past days no round was opened for skips them: the crawl never comes
back for them (tasks/rounds.py counts only the days the cursor walked), so they are recorded
here and said wherever the task is said finished ("finished, 1 day skipped by move"). A move
back to a skipped day or before it makes the day due again: its row goes. State owned: the
``task_skip`` rows, written in the move's transaction (tasks/steering.py).
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, sqlite

from cnkispider.store.schema import round_, task_skip

MOVE = "move"


def record_move(conn, task_id: int, start: dt.date, day: dt.date, now: dt.datetime) -> list[str]:
    """The cursor moves to ``day``: the days from ``start`` before it that have no round are
    skipped by the move; skips on ``day`` or later are due again. Returns the days skipped."""
    conn.execute(
        task_skip.delete().where(task_skip.c.task_id == task_id, task_skip.c.day >= day.isoformat())
    )
    if day <= start:
        return []
    crawled = set(
        conn.execute(
            sa.select(round_.c.day)
            .where(
                round_.c.task_id == task_id,
                round_.c.day >= start.isoformat(),
                round_.c.day < day.isoformat(),
            )
            .distinct()
        ).scalars()
    )
    days = [(start + dt.timedelta(days=i)).isoformat() for i in range((day - start).days)]
    skipped = [d for d in days if d not in crawled]
    if skipped:
        rows = [{"task_id": task_id, "day": d, "command": MOVE, "at": now} for d in skipped]
        if conn.dialect.name == "mysql":
            stmt = mysql.insert(task_skip).prefix_with("IGNORE")
        else:
            stmt = sqlite.insert(task_skip).on_conflict_do_nothing()
        conn.execute(stmt, rows)
    return skipped


def skipped_days(conn, task_id: int) -> dict[str, str]:
    """day -> the command that skipped it, for the task's skipped days without a round since."""
    crawled = sa.exists(
        sa.select(round_.c.id).where(round_.c.task_id == task_id, round_.c.day == task_skip.c.day)
    )
    return dict(
        conn.execute(
            sa.select(task_skip.c.day, task_skip.c.command)
            .where(task_skip.c.task_id == task_id, ~crawled)
            .order_by(task_skip.c.day)
        ).all()
    )


def by_command(days: dict[str, str]) -> dict[str, int]:
    """How many days each command skipped."""
    out: dict[str, int] = {}
    for command in days.values():
        out[command] = out.get(command, 0) + 1
    return out
