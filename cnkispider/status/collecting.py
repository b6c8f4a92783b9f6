"""Collecting the status report: the database (and Redis) in, one plain JSON-able dict out.

``collect(engine, redis_client, now)`` reads the task, round, errorCode, errorLink, worker and
document tables (and the task's Redis queue, when Redis can be reached) into the report below;
:mod:`cnkispider.status.rendering` turns it into text. Nothing here writes: status runs beside
the workers, on the server or on any PC that reaches the database, as often as anyone likes.

Clock: every time compared here (heartbeats, round completions) was stamped with the database's
clock (:func:`cnkispider.db.db_now`), so ``now`` is the database's clock too, never this
machine's: a PC whose clock is off still sees the right ages.

The report is ``cnkispider status --json``; its keys (tasks, rounds, ledger, errors, queue,
workers, ...) and the definitions of total rounds, finished, rate, ETA and a worker alive, gone
or stopped are in docs/INTERNALS.md. The ledger sums follow the equation in
docs/RELIABILITY.md#every-listed-row-accounted-for.

The web page (cnkispider/web/) shows this report, and two views the report has no room for,
collected here too so that every query of the status stays in this module:
:func:`round_grid` (a task's rounds, day x category, rolled up to months when large) and
:func:`round_detail` (one round, its worker, its errorCode rows and a sample of its errorLink).

The rest of this module's story: docs/INTERNALS.md#cnkispiderstatuscollectingpy.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from cnkispider import default_settings, drift
from cnkispider.db import db_now
from cnkispider.exceptions import TaskRowError
from cnkispider.items import FIELDS
from cnkispider.redisconn import EMBEDDED_IDLE
from cnkispider.schema import documents, error_code, error_link, fill, round_, task, worker
from tasks.categories import DAY, round_label
from tasks.phase import Phase
from tasks.rounds import IN_FLIGHT, LEDGER_NOTE, RoundState
from tasks.rows import rounds_between, validate_row

GONE_AFTER_BEATS = 3
RATE_WINDOW = dt.timedelta(hours=6)
RATE_ROUNDS = 50
#: Rounds out of balance listed by name in a task's report (the count says how many in all).
LEDGER_SHOWN = 20
# Workers that went silent or stopped long ago are counted but no longer listed: a crawl that
# runs for weeks leaves one worker row per process start.
LIST_GONE_FOR = dt.timedelta(hours=24)
LIST_STOPPED_FOR = dt.timedelta(hours=1)


#: The least a round in flight counts for in the ETA (of a mean round): one past the mean
#: duration has no known end, and a task with rounds in flight is not done in 0 s.
OVERDUE_SHARE = 0.1


def round_rate_eta(
    finished: list[tuple[float, float]], in_flight: list[float], remaining: int, now: float
) -> tuple[float | None, float | None]:
    """(rounds per hour, seconds left) of a task; pure, every time injected (seconds).

    ``finished`` are (started, finished) times of the last finished rounds, ``in_flight`` the
    start times of the rounds running now, ``remaining`` the rounds not finished (those in
    flight included). Rounds run several at a time, so this is Little's law rather than
    "rounds over time since the first finish" (which made four rounds finishing together look
    instant: "22 s" with 81 s left): a round takes ``mean`` seconds, ``c`` run at once (the
    rounds in flight now, at least one), so ``c / mean`` rounds finish a second. What is left
    is ``mean`` for each round not started yet and, for each round in flight, what its mean
    leaves of it, all shared by ``c`` lanes, and never less than the last rounds need on their
    own (at the end, lanes fall idle). A stalled crawl keeps a steady ETA (its rounds in
    flight count as nearly done) instead of a falling one; status shows no ETA at all when no
    worker is alive. No rate before one round finishes.

    The rate is the one every view shows (status, the run's summary, the web page, /metrics):
    the rounds counted over the time from the first one's start to the last one's finish.
    The ETA counts the rounds in flight: each counts at least ``OVERDUE_SHARE`` of a round still
    to go (one past the mean has no known end), so the ETA never reads 0 while one runs. None
    when nothing is left (a finished task has no ETA) or nothing is known.
    """
    durations = [max(end - start, 0.0) for start, end in finished]
    if not durations:
        return None, None
    mean = sum(durations) / len(durations)
    if mean <= 0:
        return None, None
    span = max(end for _, end in finished) - min(start for start, _ in finished)
    per_hour = len(finished) / span * 3600 if span > 0 else None
    lanes = max(len(in_flight), 1)
    remaining = max(remaining, len(in_flight))
    if remaining <= 0:
        return per_hour, None
    waiting = max(remaining - len(in_flight), 0)
    lefts = [max(mean - (now - start), mean * OVERDUE_SHARE) for start in in_flight[:remaining]]
    shared = (waiting * mean + sum(lefts)) / lanes
    # at the end lanes fall idle: the last rounds take their own time, whatever the lanes
    if waiting:
        tail = (min(lefts) if lefts else 0.0) + math.ceil(waiting / lanes) * mean
    else:
        tail = max(lefts, default=0.0)
    return per_hour, max(shared, tail)


def namespace_of(task_name: str) -> str:
    """The task's Redis namespace (settings.SCHEDULER_NAMESPACE: ``cnki:`` + task name)."""
    return f"cnki:{task_name}"


# -- collecting ---------------------------------------------------------------------------------


def collect(
    engine: Engine,
    redis_client=None,
    now: dt.datetime | None = None,
    *,
    heartbeat_seconds: float = default_settings.TASKS_HEARTBEAT,
    base_dir: Path | None = None,
    task_name: str | None = None,
    redis_label: str = "",
    redis_error: str | None = None,
    sessions_namespace: str | None = None,
) -> dict:
    """One status report of every task (or of ``task_name``), JSON-able.

    ``redis_client`` None means Redis was not reachable (``redis_error`` says why): the report
    then has no queue counts but everything the database knows.
    """
    gone_after = dt.timedelta(seconds=GONE_AFTER_BEATS * heartbeat_seconds)
    with engine.connect() as conn:
        now = now or db_now(conn)
        # A database not upgraded yet (no worker of this version ran) has no halt columns.
        present = {c["name"] for c in sa.inspect(conn).get_columns(task.name)}
        columns = [c for c in task.c if c.name in present]
        rows = list(conn.execute(sa.select(*columns).order_by(task.c.id)))
        if task_name is not None:
            rows = [r for r in rows if r.name == task_name or str(r.id) == str(task_name)]
            if not rows:
                raise LookupError(f"no task {task_name!r}")
        ids = [r.id for r in rows]
        rounds_by_state = _grouped(conn, round_, [round_.c.state], ids)
        errors = {
            "errorCode": _grouped(conn, error_code, [error_code.c.state, error_code.c.reason], ids),
            "errorLink": _grouped(conn, error_link, [error_link.c.state, error_link.c.reason], ids),
        }
        in_flight = _in_flight_rounds(conn, ids)
        workers = _workers(conn, ids, now, gone_after)
        tasks = [
            _task_report(conn, row, now, base_dir, rounds_by_state, errors, in_flight, workers)
            for row in rows
        ]
    redis_info = {
        "url": redis_label,
        "reachable": redis_client is not None,
        "error": redis_error,
        "state": "connected"
        if redis_client is not None
        else ("idle" if redis_error == EMBEDDED_IDLE else "unreachable"),
    }
    sessions = None
    if redis_client is not None and sessions_namespace:
        try:
            from cnkispider.sessions.pool import SessionStore

            sessions = SessionStore(redis_client, sessions_namespace).counts()
        except Exception as exc:  # redis.RedisError and socket errors: Redis went away
            redis_info.update(reachable=False, error=str(exc))
            redis_client = None
    for entry in tasks:
        entry["queue"] = None
        entry["waiting"] = None
        if redis_client is not None:
            try:
                entry["queue"] = _queue_sizes(redis_client, entry["name"])
                entry["waiting"] = _waiting(redis_client, sessions_namespace, entry["name"])
            except Exception as exc:  # redis.RedisError and socket errors: Redis went away
                redis_info.update(reachable=False, error=str(exc))
                break
    return {
        "generated_at": _iso(now),
        "clock": "database, UTC",
        "database": engine.url.render_as_string(hide_password=True),
        "redis": redis_info,
        "sessions": sessions,
        "heartbeat_seconds": heartbeat_seconds,
        "gone_after_seconds": gone_after.total_seconds(),
        "tasks": tasks,
    }


# -- the web page's views of rounds -----------------------------------------------------------

#: A task's grid shows a cell per (day x category) up to this many cells; past it, a cell per
#: (month x category), each opening its month's days (a year x 600 categories: 7,200 cells).
GRID_CELLS_MAX = 20_000
#: errorLink rows of a round shown by :func:`round_detail` (the count says how many in all).
ROUND_LINKS_SHOWN = 20
#: A grid cell's colour: the round's state in the words of the page. A month's cell takes the
#: first of these that one of its rounds has.
CELL_STATES = ("unbalanced", "failed", "in-flight", "pending", "done")


def _cell_state(state: str | None, note: str | None) -> str:
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
    no round yet within ``start .. until`` is ``pending``. JSON-able::

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
            raise LookupError(f"no task {task_name!r}")
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
    # the columns: the planned ones, then those that only round rows name (split roots of a
    # census day, categories edited away)
    extra = {category for (_, category) in cells} - set(planned)
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
            "by_state": {_cell_state(r.state, r.note): 1},
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
        kind = _cell_state(state, None)
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
            raise LookupError(f"no round {round_id}")
        name = conn.execute(sa.select(task.c.name).where(task.c.id == r.task_id)).scalar()
        holder = None
        if r.worker:
            w = conn.execute(sa.select(worker).where(worker.c.id == r.worker)).first()
            if w is not None:
                alive = w.last_seen is not None and w.last_seen >= now - gone_after
                holder = _worker_report(w, now, _liveness(w.state, alive))
        codes = [
            {
                "id": e.id,
                "page": e.page,
                "reason": e.reason,
                "state": e.state,
                "attempts": e.attempts,
                "updated_at": _iso(e.updated_at),
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
        "cell": _cell_state(r.state, r.note),
        "attempts": r.attempts,
        "note": r.note,
        "worker_id": r.worker,
        "worker": holder,
        "lease_until": _iso(r.lease_until),
        "created_at": _iso(r.created_at),
        "updated_at": _iso(r.updated_at),
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


def _grouped(conn, table, columns, ids) -> dict[int, list[tuple]]:
    """(task_id -> [(column values..., count)]) for rows of ``table`` grouped by ``columns``."""
    if not ids:
        return {}
    query = (
        sa.select(table.c.task_id, *columns, sa.func.count())
        .where(table.c.task_id.in_(ids))
        .group_by(table.c.task_id, *columns)
    )
    out: dict[int, list[tuple]] = {}
    for row in conn.execute(query):
        out.setdefault(row[0], []).append(tuple(row[1:]))
    return out


def _in_flight_rounds(conn, ids) -> dict[int, list[dict]]:
    if not ids:
        return {}
    query = (
        sa.select(
            round_.c.task_id,
            round_.c.id,
            round_.c.day,
            round_.c.category,
            round_.c.state,
            round_.c.worker,
            round_.c.attempts,
        )
        .where(round_.c.task_id.in_(ids), round_.c.state.in_(IN_FLIGHT))
        .order_by(round_.c.day, round_.c.id)
    )
    out: dict[int, list[dict]] = {}
    for r in conn.execute(query):
        out.setdefault(r.task_id, []).append(
            {
                "id": r.id,
                "day": r.day,
                "category": r.category,
                "state": r.state,
                "worker": r.worker,
                "attempts": r.attempts,
            }
        )
    return out


def _workers(conn, ids, now, gone_after) -> dict[int, dict]:
    """Per task: counts of alive, gone and stopped workers, and the ones worth listing."""
    if not ids:
        return {}
    fresh = now - gone_after
    is_fresh = sa.case((worker.c.last_seen >= fresh, 1), else_=0)
    # A database not upgraded yet (no worker of this version ran) has no challenges column.
    present = {c["name"] for c in sa.inspect(conn).get_columns(worker.name)}
    columns = [c for c in worker.c if c.name in present]
    challenged = sa.func.sum(worker.c.challenges) if "challenges" in present else sa.literal(0)
    counts: dict[int, dict] = {i: {"alive": 0, "gone": 0, "stopped": 0} for i in ids}
    challenges: dict[int, int] = dict.fromkeys(ids, 0)
    for task_id, state, fresh_flag, n, met in conn.execute(
        sa.select(worker.c.task_id, worker.c.state, is_fresh, sa.func.count(), challenged)
        .where(worker.c.task_id.in_(ids))
        .group_by(worker.c.task_id, worker.c.state, is_fresh)
    ):
        counts[task_id][_liveness(state, bool(fresh_flag))] += n
        challenges[task_id] += int(met or 0)
    listed = sa.or_(
        sa.and_(worker.c.state == "running", worker.c.last_seen >= now - LIST_GONE_FOR),
        worker.c.last_seen >= now - LIST_STOPPED_FOR,
    )
    out = {i: {"counts": counts[i], "challenges": challenges[i], "rows": []} for i in ids}
    for w in conn.execute(
        sa.select(*columns)
        .where(worker.c.task_id.in_(ids), listed)
        .order_by(worker.c.started_at, worker.c.id)
    ):
        alive = w.last_seen is not None and w.last_seen >= fresh
        out[w.task_id]["rows"].append(_worker_report(w, now, _liveness(w.state, alive)))
    return out


def _liveness(state: str, fresh: bool) -> str:
    if state != "running":
        return "stopped"
    return "alive" if fresh else "gone"


def _worker_report(w, now, liveness: str) -> dict:
    minutes = None
    if w.started_at is not None and w.last_seen is not None:
        minutes = (w.last_seen - w.started_at).total_seconds() / 60
    return {
        "id": w.id,
        "host": w.host,
        "pid": w.pid,
        "state": liveness,
        "started_at": _iso(w.started_at),
        "last_seen": _iso(w.last_seen),
        "last_seen_age_seconds": _age(now, w.last_seen),
        "pages": w.pages,
        "items": w.items,
        "errors": w.errors,
        "challenges": getattr(w, "challenges", None) or 0,
        "last_error": getattr(w, "last_error", None),
        "export_batch": getattr(w, "export_batch", None),  # GetExport's learned size; null: none
        "pages_per_minute": round(w.pages / minutes, 1) if minutes else None,
        "items_per_minute": round(w.items / minutes, 1) if minutes else None,
        "rounds": [],
    }


def _task_report(conn, row, now, base_dir, rounds_by_state, errors, in_flight, workers) -> dict:
    by_state = {state: n for (state, n) in rounds_by_state.get(row.id, [])}
    entry: dict = {
        "id": row.id,
        "name": row.name,
        "ok": True,
        "problem": None,
        "type": row.type,
        "start_date": row.start_date,
        "end_date": row.end_date or None,
        "until": None,
        "depth": getattr(row, "depth", None) or "detail",  # NULL (or before v7): detail
        "phase": row.phase,
        "halted": getattr(row, "halt_reason", None) or None,
        "halted_at": _iso(getattr(row, "halted_at", None)),
        "cursor": {"date": row.cur_date, "category": row.cur_code},
        "last_heartbeat": _iso(row.status),
        "last_heartbeat_age_seconds": _age(now, row.status),
        "categories": None,
    }
    try:
        current = validate_row(row, base_dir)
    except TaskRowError as exc:
        current = None
        entry.update(ok=False, problem=exc.problem)
    finished = by_state.get(RoundState.DONE, 0) + by_state.get(RoundState.FAILED, 0)
    rounds = {
        "total": None,
        "finished": finished,
        "done": by_state.get(RoundState.DONE, 0),
        "failed": by_state.get(RoundState.FAILED, 0),
        "in_flight": sum(by_state.get(s, 0) for s in IN_FLIGHT),
        "remaining": None,
        "by_state": by_state,
    }
    entry["rounds"] = rounds
    entry["progress"] = None
    entry["rate"] = {"rounds_per_hour": None, "rounds_counted": 0}
    entry["eta_seconds"] = None
    entry["eta_at"] = None
    if current is not None:
        until = current.limit(now)
        entry["until"] = until.isoformat()
        entry["categories"] = len(current.tree.roots)
        total = _planned_rounds(conn, current, until) + _unplanned_rounds(conn, current, until)
        rounds["total"] = total
        # the rounds in flight are not done, whatever the plan counted (a census day's roots)
        rounds["remaining"] = max(total - finished, rounds["in_flight"], 0)
        entry["progress"] = round(finished / total, 4) if total else 1.0
        per_hour, counted, seconds = _round_rate(conn, row.id, now, rounds["remaining"])
        entry["rate"] = {"rounds_per_hour": per_hour, "rounds_counted": counted}
        if rounds["remaining"] and per_hour and seconds is not None:
            entry["eta_seconds"] = seconds
            entry["eta_at"] = _iso(now + dt.timedelta(seconds=seconds))
    entry["current_rounds"] = in_flight.get(row.id, [])
    entry["documents"] = _documents(conn, row) if row.type in FIELDS else None
    entry["errors"] = {
        name: _error_summary(groups.get(row.id, [])) for name, groups in errors.items()
    }
    entry["ledger"] = _ledger(conn, row.id)
    entry["fill"] = _fill(conn, row.id)
    listing = workers.get(
        row.id, {"counts": {"alive": 0, "gone": 0, "stopped": 0}, "challenges": 0, "rows": []}
    )
    for w in listing["rows"]:
        w["rounds"] = [
            f"{r['day']} {round_label(r['category'])}"
            for r in entry["current_rounds"]
            if r["worker"] == w["id"]
        ]
    entry["worker_counts"] = listing["counts"]
    entry["challenges"] = listing["challenges"]
    entry["workers"] = listing["rows"]
    if entry["halted"]:
        # its workers are stopping, or stopped; a pause is the operator's halt
        entry["activity"] = "paused" if entry["halted"].startswith("paused") else "halted"
        entry["eta_seconds"] = entry["eta_at"] = None
    elif listing["counts"]["alive"]:
        entry["activity"] = "running"
    elif row.phase == Phase.DONE and _stopped(row):
        entry["activity"] = "stopped"
    elif row.phase == Phase.DONE:
        entry["activity"] = "finished"
    else:
        entry["activity"] = "no live worker"
        if entry["eta_seconds"]:  # nobody is working: the recent rate promises nothing
            entry["eta_seconds"] = entry["eta_at"] = None
    return entry


def _fill(conn, task_id: int) -> dict[str, float]:
    """Issue 26: per detail field, the share of the documents of the task's latest rounds that
    the parser filled it on (cnkispider/drift.py; {} for a database not upgraded yet)."""
    if not sa.inspect(conn).has_table(fill.name):
        return {}
    return drift.fill_rates(conn, task_id)


def _ledger(conn, task_id: int) -> dict:
    """The sums of the task's closed rounds' ledgers, and its rounds out of balance."""
    present = {c["name"] for c in sa.inspect(conn).get_columns(round_.name)}
    report: dict = {
        "rounds": 0,
        "listed": 0,
        "stored": 0,
        "in_error": 0,
        "dropped": {},
        "beyond": 0,
        "unbalanced": 0,
        "out_of_balance": [],
    }
    if "drops" not in present:  # a database no worker of this version has upgraded yet
        return report
    # Sums in the database, not a loop over every closed round here: a year x 600 categories is
    # 200,000 rounds, which status (and the web page) read in one aggregate each.
    closed = [round_.c.task_id == task_id, round_.c.state.in_((RoundState.DONE, RoundState.FAILED))]
    count, listed, stored, in_error, beyond = conn.execute(
        sa.select(
            sa.func.count(),
            sa.func.sum(round_.c.total),
            sa.func.sum(round_.c.stored),
            sa.func.sum(round_.c.in_error),
            sa.func.sum(round_.c.beyond),
        ).where(*closed)
    ).one()
    report.update(
        rounds=count,
        listed=int(listed or 0),
        stored=int(stored or 0),
        in_error=int(in_error or 0),
        beyond=int(beyond or 0),
    )
    for (drops,) in conn.execute(
        sa.select(round_.c.drops).where(
            *closed, round_.c.drops.is_not(None), round_.c.drops.not_in(("", "{}"))
        )
    ):
        for rule, n in json.loads(drops).items():
            report["dropped"][rule] = report["dropped"].get(rule, 0) + n
    unbalanced = [
        round_.c.task_id == task_id,
        round_.c.state == RoundState.FAILED,
        round_.c.note.like(f"{LEDGER_NOTE}%"),
    ]
    report["unbalanced"] = conn.execute(
        sa.select(sa.func.count()).select_from(round_).where(*unbalanced)
    ).scalar()
    report["out_of_balance"] = [
        {"id": r.id, "day": r.day, "category": r.category, "attempts": r.attempts, "note": r.note}
        for r in conn.execute(
            sa.select(
                round_.c.id, round_.c.day, round_.c.category, round_.c.attempts, round_.c.note
            )
            .where(*unbalanced)
            .order_by(round_.c.day, round_.c.id)
            .limit(LEDGER_SHOWN)
        )
    ]
    return report


def _stopped(row) -> bool:
    """Stopped, not finished: the end date was moved back below the cursor (`task stop`, or an
    operator's edit). A task that runs to its end leaves the cursor on its end date: rounds are
    never handed out past it, so only a stop puts the cursor beyond it."""
    end, cur = (row.end_date or "").strip(), (row.cur_date or "").strip()
    return bool(end and cur and cur > end)


def _planned_rounds(conn, current, until: dt.date) -> int:
    """The rounds of (start .. until): a round per day x root; with the day census (the task
    has census rounds, category ``*``), one per day, which covers the day, plus the root rounds
    of the days split by root (a task not covering the tree, a cursor steered onto a root)."""
    in_range = [
        round_.c.task_id == current.id,
        round_.c.day >= current.start_date.isoformat(),
        round_.c.day <= until.isoformat(),
    ]
    census = conn.execute(
        sa.select(sa.func.count()).select_from(round_).where(*in_range, round_.c.category == DAY)
    ).scalar()
    if not census:
        return rounds_between(current, until)
    roots = conn.execute(
        sa.select(sa.func.count())
        .select_from(round_)
        .where(*in_range, round_.c.category.in_(current.tree.roots))
    ).scalar()
    return rounds_between(current, until, census=True) + roots


def _unplanned_rounds(conn, current, until: dt.date) -> int:
    """Round rows outside (start .. until) x (root categories and the day's census): begun,
    then planned away."""
    planned = sa.and_(
        round_.c.day >= current.start_date.isoformat(),
        round_.c.day <= until.isoformat(),
        round_.c.category.in_([*current.tree.roots, DAY]),
    )
    return conn.execute(
        sa.select(sa.func.count())
        .select_from(round_)
        .where(round_.c.task_id == current.id, sa.not_(planned))
    ).scalar()


def _round_rate(
    conn, task_id: int, now: dt.datetime, remaining: int
) -> tuple[float | None, int, float | None]:
    """(rounds per hour, rounds counted, ETA seconds) from the last RATE_ROUNDS rounds finished
    within RATE_WINDOW and the rounds in flight (:func:`round_rate_eta`)."""
    finished = [
        ((created or updated).timestamp(), updated.timestamp())
        for created, updated in conn.execute(
            sa.select(round_.c.created_at, round_.c.updated_at)
            .where(
                round_.c.task_id == task_id,
                round_.c.state.in_((RoundState.DONE, RoundState.FAILED)),
                round_.c.updated_at >= now - RATE_WINDOW,
            )
            .order_by(round_.c.updated_at.desc())
            .limit(RATE_ROUNDS)
        )
        if updated is not None
    ]
    in_flight = [
        (created or now).timestamp()
        for (created,) in conn.execute(
            sa.select(round_.c.created_at).where(
                round_.c.task_id == task_id, round_.c.state.in_(IN_FLIGHT)
            )
        )
    ]
    per_hour, eta = round_rate_eta(finished, in_flight, remaining, now.timestamp())
    return (
        (round(per_hour, 2) if per_hour else None),
        len(finished),
        (round(eta) if eta is not None else None),
    )


def _documents(conn, row) -> int:
    table = documents[row.type]
    return conn.execute(
        sa.select(sa.func.count()).select_from(table).where(table.c.task_id == row.id)
    ).scalar()


def _error_summary(groups: list[tuple]) -> dict:
    by_state: dict[str, int] = {}
    by_reason: dict[str, int] = {}
    for state, reason, n in groups:
        by_state[state] = by_state.get(state, 0) + n
        by_reason[reason] = by_reason.get(reason, 0) + n
    return {"total": sum(by_state.values()), "by_state": by_state, "by_reason": by_reason}


def _queue_sizes(client, task_name: str) -> dict[str, int]:
    from cnkispider.scheduling.queue import LeasedQueue

    return LeasedQueue(client, namespace_of(task_name)).sizes()


def _waiting(client, namespace: str | None, task_name: str) -> str | None:
    """What a worker of the task waits for (a person to pass CNKI's check), if one does."""
    if not namespace:
        return None
    from cnkispider.sessions.pool import SessionStore

    waits = SessionStore(client, namespace).waiting(task_name)
    return waits[0]["message"] if waits else None


def _iso(value: dt.datetime | None) -> str | None:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else None


def _age(now: dt.datetime, then: dt.datetime | None) -> float | None:
    return round((now - then).total_seconds(), 1) if then is not None else None
