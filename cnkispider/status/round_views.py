"""The web page's views of rounds, which the status report has no room for.

:func:`round_grid` is a task's coverage (its rounds, day x category, rolled up to months when
large) and :func:`round_detail` one round (its worker, its errorCode rows and a sample of its
errorLink). Like the report (:mod:`cnkispider.status.collecting`) they only read, on the
database's clock; the web page (cnkispider/web/) has no query of its own.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from cnkispider import default_settings
from cnkispider.exceptions import TaskRowError, UnknownName
from cnkispider.status.liveness import GONE_AFTER_BEATS, liveness, worker_report
from cnkispider.status.times import iso
from cnkispider.store.db import db_now
from cnkispider.store.schema import error_code, error_link, round_, task, worker
from cnkispider.words.i18n import _
from tasks.categories import DAY
from tasks.roundstate import IN_FLIGHT, LEDGER_NOTE, RoundState
from tasks.rows import validate_row
from tasks.skips import skipped_days

#: A task's grid shows a cell per (day x category) up to this many cells; past it, a cell per
#: (month x category), each opening its month's days (a year x 600 categories: 7,200 cells).
GRID_CELLS_MAX = 20_000
#: errorLink rows of a round shown by :func:`round_detail` (the count says how many in all).
ROUND_LINKS_SHOWN = 20
#: A grid cell's colour: the round's state in the words of the page (``skipped``: a day without
#: a round that the operator skipped, tasks/skips.py). A month's cell takes the
#: first of these that one of its rounds has.
CELL_STATES = ("unbalanced", "failed", "in-flight", "pending", "skipped", "done")


def cell_state(state: str | None, note: str | None) -> str:
    if state is None:
        return "pending"
    if state in IN_FLIGHT:
        return "in-flight"
    if state == RoundState.FAILED:
        return "unbalanced" if (note or "").startswith(LEDGER_NOTE) else "failed"
    return "done"


def round_grid(
    engine: Engine,
    task_name: str,
    *,
    month: str | None = None,
    now: dt.datetime | None = None,
    base_dir: Path | None = None,
    cells_max: int = GRID_CELLS_MAX,
) -> dict:
    """A task's coverage: rows of days (or months, past ``cells_max`` cells) x its categories.

    ``month`` (``YYYY-MM``) keeps the days of that month only. Columns are the task's root
    categories (with the day census: ``*``, then the roots some day was split by); a cell with
    no round yet within ``start .. until`` is ``pending``, or ``skipped`` on a day its operator
    skipped (tasks/skips.py). JSON-able::

        {"task", "task_id", "unit" ("day" | "month"), "month", "columns": [category],
         "rows": [{"label", "cells": [{"state", "rounds", "documents", "id" (a day's round),
                                       "by_state": {state: n}} | None]}],
         "by_state": {state: rounds}, "rounds", "problem" (a BAD ROW's reason, else null)}
    """
    with engine.connect() as conn:
        now = now or db_now(conn)
        row = conn.execute(
            sa.select(
                task.c.id,
                task.c.name,
                task.c.type,
                task.c.start_date,
                task.c.cur_date,
                task.c.cur_code,
                task.c.end_date,
                task.c.categories,
                task.c.phase,
                task.c.status,
            ).where(sa.or_(task.c.name == task_name, sa.cast(task.c.id, sa.String) == task_name))
        ).first()
        if row is None:
            raise UnknownName(_("no task %(name)r") % {"name": task_name})
        report: dict = {"task": row.name, "task_id": row.id, "month": month, "problem": None}
        try:
            current = validate_row(row, base_dir)
        except TaskRowError as exc:
            current = None
            report["problem"] = exc.problem
        where = [round_.c.task_id == row.id]
        if month:
            where += [round_.c.day >= f"{month}-01", round_.c.day <= f"{month}-31"]
        roots = list(current.tree.roots) if current is not None else []
        census = (
            conn.execute(
                sa.select(round_.c.id).where(*where, round_.c.category == DAY).limit(1)
            ).first()
            is not None
        )
        planned = [DAY] if census else roots
        first = current.start_date if current is not None else None
        until = current.limit(now) if current is not None else None
        days = _days(first, until, month)
        by_month = not month and len(days) * max(len(planned), 1) > cells_max
        if by_month:
            cells = _month_cells(conn, where)
            labels = sorted({d[:7] for d in days} | {k[0] for k in cells})
            planned_days: dict[str, int] = {}
            for d in days:
                planned_days[d[:7]] = planned_days.get(d[:7], 0) + 1
        else:
            cells = _day_cells(conn, where)
            labels = sorted(set(days) | {k[0] for k in cells})
            planned_days = dict.fromkeys(days, 1)
        # the days its operator skipped (task move forward): not pending, skipped (issue 47)
        skipped: dict[str, int] = {}
        for day in skipped_days(conn, row.id):
            label = day[:7] if by_month else day
            skipped[label] = skipped.get(label, 0) + 1
    # the columns: the planned ones, then those that only round rows name (split roots of a
    # census day, categories edited away)
    extra = {category for (_day, category) in cells} - set(planned)
    columns = planned + sorted(extra, key=_column_order(roots))
    report.update(unit="month" if by_month else "day", columns=columns)
    planned_set = set(planned)
    totals: dict[str, int] = {}
    rows = []
    for label in labels:
        line = []
        for column in columns:
            cell = cells.get((label, column))
            due = planned_days.get(label, 0) if column in planned_set else 0
            if cell is None and not due:
                line.append(None)
                continue
            cell = cell or {"rounds": 0, "documents": 0, "by_state": {}, "id": None}
            pending = max(due - cell["rounds"], 0)
            skip = min(pending, skipped.get(label, 0))
            if skip:
                cell["by_state"]["skipped"] = cell["by_state"].get("skipped", 0) + skip
                pending -= skip
            if pending:
                cell["by_state"]["pending"] = cell["by_state"].get("pending", 0) + pending
            cell["state"] = next(s for s in CELL_STATES if s in cell["by_state"])
            for state, n in cell["by_state"].items():
                totals[state] = totals.get(state, 0) + n
            line.append(cell)
        rows.append({"label": label, "cells": line})
    report.update(
        rows=rows, by_state=totals, rounds=sum(totals.values()) - totals.get("pending", 0)
    )
    return report


def _column_order(roots: list[str]):
    rank = {code: i for i, code in enumerate(roots)}
    return lambda code: (rank.get(code, len(rank)), code)


def _days(first: dt.date | None, until: dt.date | None, month: str | None) -> list[str]:
    """The days a task plans (start .. until), within ``month`` if given."""
    if first is None or until is None:
        return []
    if month:
        start = dt.date.fromisoformat(f"{month}-01")
        following = (start + dt.timedelta(days=32)).replace(day=1)
        first, until = max(first, start), min(until, following - dt.timedelta(days=1))
    count = (until - first).days + 1
    return [(first + dt.timedelta(days=i)).isoformat() for i in range(max(count, 0))]


def _day_cells(conn, where) -> dict[tuple[str, str], dict]:
    out = {}
    for r in conn.execute(
        sa.select(
            round_.c.id,
            round_.c.day,
            round_.c.category,
            round_.c.state,
            round_.c.note,
            round_.c.stored,
        ).where(*where)
    ):
        out[(r.day, r.category)] = {
            "id": r.id,
            "rounds": 1,
            "documents": r.stored or 0,
            "by_state": {cell_state(r.state, r.note): 1},
        }
    return out


def _month_cells(conn, where) -> dict[tuple[str, str], dict]:
    """(month, category) -> the rounds of the month by state: one GROUP BY, whatever the size."""
    month = sa.func.substr(round_.c.day, 1, 7)
    out: dict[tuple[str, str], dict] = {}
    for label, category, state, n, stored in conn.execute(
        sa.select(
            month, round_.c.category, round_.c.state, sa.func.count(), sa.func.sum(round_.c.stored)
        )
        .where(*where)
        .group_by(month, round_.c.category, round_.c.state)
    ):
        cell = out.setdefault(
            (label, category), {"id": None, "rounds": 0, "documents": 0, "by_state": {}}
        )
        kind = cell_state(state, None)
        cell["rounds"] += n
        cell["documents"] += int(stored or 0)
        cell["by_state"][kind] = cell["by_state"].get(kind, 0) + n
    # the failed rounds out of balance: few, found through the (task, state) index
    for label, category, n in conn.execute(
        sa.select(month, round_.c.category, sa.func.count())
        .where(*where, round_.c.state == RoundState.FAILED, round_.c.note.like(f"{LEDGER_NOTE}%"))
        .group_by(month, round_.c.category)
    ):
        states = out[(label, category)]["by_state"]
        states["failed"] -= n
        if not states["failed"]:
            del states["failed"]
        states["unbalanced"] = n
    return out


def round_detail(
    engine: Engine,
    round_id: int,
    *,
    now: dt.datetime | None = None,
    heartbeat_seconds: float = default_settings.TASKS_HEARTBEAT,
) -> dict:
    """One round: its row (state, attempts, note, ledger, times), its worker (alive, gone,
    stopped, or unknown), its errorCode rows and the first ``ROUND_LINKS_SHOWN`` errorLink rows."""
    gone_after = dt.timedelta(seconds=GONE_AFTER_BEATS * heartbeat_seconds)
    with engine.connect() as conn:
        now = now or db_now(conn)
        r = conn.execute(sa.select(round_).where(round_.c.id == round_id)).first()
        if r is None:
            raise UnknownName(_("no round %(id)s") % {"id": round_id})
        name = conn.execute(sa.select(task.c.name).where(task.c.id == r.task_id)).scalar()
        holder = None
        if r.worker:
            w = conn.execute(sa.select(worker).where(worker.c.id == r.worker)).first()
            if w is not None:
                alive = w.last_seen is not None and w.last_seen >= now - gone_after
                holder = worker_report(w, now, liveness(w.state, alive))
        codes = [
            {
                "id": e.id,
                "page": e.page,
                "reason": e.reason,
                "state": e.state,
                "attempts": e.attempts,
                "updated_at": iso(e.updated_at),
                "detail": (e.detail or "")[:500],
            }
            for e in conn.execute(
                sa.select(error_code)
                .where(error_code.c.round_id == round_id)
                .order_by(error_code.c.id)
            )
        ]
        link_count = conn.execute(
            sa.select(sa.func.count())
            .select_from(error_link)
            .where(error_link.c.round_id == round_id)
        ).scalar()
        links = [
            {
                "id": e.id,
                "url": e.url,
                "dbname": e.dbname,
                "filename": e.filename,
                "title": e.title,
                "reason": e.reason,
                "state": e.state,
                "attempts": e.attempts,
            }
            for e in conn.execute(
                sa.select(error_link)
                .where(error_link.c.round_id == round_id)
                .order_by(error_link.c.id)
                .limit(ROUND_LINKS_SHOWN)
            )
        ]
    return {
        "id": r.id,
        "task": name,
        "day": r.day,
        "category": r.category,
        "state": r.state,
        "cell": cell_state(r.state, r.note),
        "attempts": r.attempts,
        "note": r.note,
        "worker_id": r.worker,
        "worker": holder,
        "lease_until": iso(r.lease_until),
        "created_at": iso(r.created_at),
        "updated_at": iso(r.updated_at),
        "ledger": {
            "listed": r.total,
            "stored": r.stored,
            "in_error": r.in_error,
            "dropped": json.loads(r.drops) if r.drops else {},
            "beyond": r.beyond,
        },
        "error_code": codes,
        "error_link": {"total": link_count, "shown": links},
    }
