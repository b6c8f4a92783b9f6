"""The plan's inputs beyond the task's rounds: config.ini's ``[task]`` before its first run, the
days a moved cursor hands out again, and the census totals ``task plan --sample N`` asked CNKI
for, kept in the ``census_sample`` table.

A sample is kept so that the next plan (and the one a run makes at its start, which its summary's
``plan`` line compares with what it sent) plans from it without asking CNKI again. Samples are
kept by task name: a task of config.ini is sampled before its first run makes its row. The
plan of config.ini's task writes nothing; only keeping a sample writes, one row a day.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from cnkispider.store.schema import census_sample
from tasks.categories import DAY


def config_task(config, name: str | None, today: dt.date | None = None):
    """(a task row as a dict, its days) of config.ini's ``[task]`` when ``name`` is its name
    (or None), else None: the plan of a task no run has registered yet, every day to go."""
    task = config.task
    if name not in (None, task.name) or not task.start_date:
        return None
    row = {
        "id": None,
        "name": task.name,
        "type": task.type,
        "start_date": task.start_date,
        "end_date": task.end_date or "",
        "categories": task.categories,
        "depth": task.depth,
        "query": task.query,
        "follow": task.follow,
    }
    first = dt.date.fromisoformat(task.start_date)
    last = dt.date.fromisoformat(task.end_date) if task.end_date else (today or dt.date.today())
    days = [(first + dt.timedelta(n)).isoformat() for n in range((last - first).days + 1)]
    return row, days


def with_cursor_days(row: dict, days: list[str], tree, today: dt.date | None = None) -> list[str]:
    """``days`` and the days from the one the task's cursor hands out next to its end: after
    ``task move`` back, days whose rounds are done are crawled again (tasks/rows.py
    next_round: a cursor on a day's census or last root goes on the next day, else on that
    day)."""
    cur, code = row.get("cur_date"), row.get("cur_code")
    if not cur:
        return days  # nothing handed out yet: every day not done is in ``days``
    again = dt.date.fromisoformat(cur)
    if code == DAY or (code is not None and code in tree.roots and tree.next_root(code) is None):
        again += dt.timedelta(days=1)
    last = dt.date.fromisoformat(row["end_date"]) if row["end_date"] else (today or dt.date.today())
    more = {(again + dt.timedelta(n)).isoformat() for n in range((last - again).days + 1)}
    return sorted(set(days) | more)


def kept_samples(engine, task: str) -> dict[str, int]:
    """{day: census total} sampled earlier for ``task``; {} on a database made before the
    table (read-only: the next run creates it)."""
    if engine is None:
        return {}
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.select(census_sample.c.day, census_sample.c.total).where(
                    census_sample.c.task == task
                )
            ).all()
    except sa.exc.DBAPIError:
        return {}
    return {day: int(total) for day, total in rows}


def keep_samples(engine, task: str, totals: dict[str, int]) -> None:
    """Keep the days' sampled totals of ``task``, a day sampled again replacing its row."""
    if not totals:
        return
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    with engine.begin() as conn:
        conn.execute(
            census_sample.delete().where(
                census_sample.c.task == task, census_sample.c.day.in_(list(totals))
            )
        )
        conn.execute(
            census_sample.insert(),
            [{"task": task, "day": d, "total": n, "sampled_at": now} for d, n in totals.items()],
        )
