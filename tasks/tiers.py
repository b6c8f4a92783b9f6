"""Which days of the look-back a look counts again, by their tier (issue 46).

The rule is :func:`cnkispider.config.looktiers.due` (``[task] look_tiers``), the same function the cost
model (bench/follow_cost.py) applies; this module reads what it needs from the round rows, in
the look's own transaction (tasks/lookback.py ``claim_look``), so "due" stays a fact of the
rows: a day of a tier of ``period`` days whose last count (the oldest ``updated_at`` of its done
rounds: the crawl that walked it, or the last look that closed it) was on Beijing day D is due
again on day D + period. A day is due whole: its census round and its root rounds together.
No state of its own.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from cnkispider.clock import cnki_today
from cnkispider.config.looktiers import Tier, due
from cnkispider.store.schema import round_


def due_days(
    conn, task_id: int, tiers: tuple[Tier, ...], today: dt.date, first: dt.date, last: dt.date
) -> list[str]:
    """The days from ``first`` to ``last`` whose done rounds a look on ``today`` counts again
    by their tier (ISO dates)."""
    rows = conn.execute(
        sa.select(round_.c.day, sa.func.min(round_.c.updated_at))
        .where(
            round_.c.task_id == task_id,
            round_.c.day >= first.isoformat(),
            round_.c.day <= last.isoformat(),
            round_.c.state == "done",
        )
        .group_by(round_.c.day)
    ).all()
    out = []
    for day, counted_at in rows:
        date = dt.date.fromisoformat(str(day)[:10])
        if isinstance(counted_at, str):  # SQLite's aggregate gives the text it keeps
            counted_at = dt.datetime.fromisoformat(counted_at)
        counted = cnki_today(counted_at) if counted_at is not None else None
        age = (today - date).days
        if due(tiers, age, None if counted is None else (counted - date).days):
            out.append(str(day)[:10])
    return out
