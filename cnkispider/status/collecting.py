"""Collecting the status report: the database (and Redis) in, one plain JSON-able dict out.

``collect(engine, redis_client, now)`` reads the task, round, errorCode, errorLink, worker and
document tables (and the task's Redis queue, when Redis can be reached) into the report below;
:mod:`cnkispider.status.rendering` turns it into text. Nothing here writes: status runs beside
the workers, on the server or on any PC that reaches the database, as often as anyone likes.

Clock: ``now`` is the database's clock, never this machine's (:mod:`cnkispider.status.times`).
A task's workers (:mod:`~cnkispider.status.liveness`) and its rate and ETA
(:mod:`~cnkispider.status.rates`) are read by their own modules.

The report is ``cnkispider status --json``; its keys (tasks, rounds, ledger, errors, queue,
workers, ...) and the definitions of total rounds, finished, rate, ETA and a worker alive, gone
or stopped are in docs/INTERNALS.md. The ledger sums follow the equation in
docs/RELIABILITY.md#every-listed-row-accounted-for.

The web page (cnkispider/web/) shows this report, and two views of rounds the report has no
room for (:mod:`cnkispider.status.round_views`): every query of the status stays in this package.

The rest of this module's story: docs/INTERNALS.md#cnkispiderstatuscollectingpy.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from cnkispider import default_settings
from cnkispider.config.looktiers import parse_tiers, spans
from cnkispider.exceptions import TaskRowError, UnknownName
from cnkispider.items import DEFAULT_DEPTH, FIELDS
from cnkispider.pace.store import windows_report
from cnkispider.status.liveness import GONE_AFTER_BEATS, task_workers
from cnkispider.status.rates import round_rate
from cnkispider.status.times import age, iso
from cnkispider.store import doclinks
from cnkispider.store.db import db_now
from cnkispider.store.redisconn import EMBEDDED_IDLE
from cnkispider.store.schema import error_code, error_link, fill, round_, task
from cnkispider.watch import drift
from cnkispider.words.i18n import _
from tasks import lag
from tasks.categories import DAY, round_label
from tasks.phase import Phase
from tasks.roundstate import IN_FLIGHT, LEDGER_NOTE, RoundState
from tasks.rows import rounds_between, validate_row
from tasks.skips import by_command, skipped_days

#: Rounds out of balance listed by name in a task's report (the count says how many in all).
LEDGER_SHOWN = 20


def namespace_of(task_name: str, prefix: str = default_settings.REDIS_KEY_PREFIX) -> str:
    """The task's Redis namespace (settings.SCHEDULER_NAMESPACE: ``[redis] prefix`` + task)."""
    return f"{prefix}{task_name}"


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
    key_prefix: str = default_settings.REDIS_KEY_PREFIX,
    look: tuple[int, str] | None = None,
) -> dict:
    """One status report of every task (or of ``task_name``), JSON-able.

    ``redis_client`` None means Redis was not reachable (``redis_error`` says why): the report
    then has no queue counts but everything the database knows. ``look``: config.ini's
    ``(look_back_days, look_tiers)``, said beside each follow task's looks (issue 46).
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
                raise UnknownName(_("no task %(name)r") % {"name": task_name})
        ids = [r.id for r in rows]
        rounds_by_state = _grouped(conn, round_, [round_.c.state], ids)
        errors = {
            "errorCode": _grouped(conn, error_code, [error_code.c.state, error_code.c.reason], ids),
            "errorLink": _grouped(conn, error_link, [error_link.c.state, error_link.c.reason], ids),
        }
        in_flight = _in_flight_rounds(conn, ids)
        workers = task_workers(conn, ids, now, gone_after)
        tasks = [
            _task_report(conn, row, now, base_dir, rounds_by_state, errors, in_flight, workers)
            for row in rows
        ]
    if look is not None:
        for entry in tasks:
            if entry.get("follow"):
                entry["follow"].update(look_policy(*look))
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
    windows = None
    if redis_client is not None:
        try:
            windows = windows_report(redis_client, f"{key_prefix}ratelimit")
        except Exception as exc:  # redis.RedisError and socket errors: Redis went away
            redis_info.update(reachable=False, error=str(exc))
            redis_client = None
    for entry in tasks:
        entry["queue"] = None
        entry["waiting"] = None
        if redis_client is not None:
            try:
                entry["queue"] = _queue_sizes(redis_client, namespace_of(entry["name"], key_prefix))
                entry["waiting"] = _waiting(redis_client, sessions_namespace, entry["name"])
            except Exception as exc:  # redis.RedisError and socket errors: Redis went away
                redis_info.update(reachable=False, error=str(exc))
                break
    return {
        "generated_at": iso(now),
        "clock": "database, UTC",
        "database": engine.url.render_as_string(hide_password=True),
        "redis": redis_info,
        "sessions": sessions,
        # CNKI's "come back later" windows, every task's (pace/store.py windows_report)
        "windows": windows,
        "heartbeat_seconds": heartbeat_seconds,
        "gone_after_seconds": gone_after.total_seconds(),
        "tasks": tasks,
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
        "depth": getattr(row, "depth", None) or DEFAULT_DEPTH,  # NULL (or before v7): detail
        # the task's professional-search expression (issue 39); None: a category task
        "query": getattr(row, "query", None) or None,
        "phase": row.phase,
        "halted": getattr(row, "halt_reason", None) or None,
        "halted_at": iso(getattr(row, "halted_at", None)),
        "cursor": {"date": row.cur_date, "category": row.cur_code},
        "last_heartbeat": iso(row.status),
        "last_heartbeat_age_seconds": age(now, row.status),
        "categories": None,
        # issue 38: a task that follows today, its looks (tasks/lookback.py); None: it does not
        "follow": _follow(row),
    }
    if entry["follow"] is not None:  # issue 46.3: the entry lag its looks measured so far
        entry["follow"]["entry_lag"] = lag.measured(conn, row.id).to_dict()
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
        # done rounds only: a failed round stored nothing, it is no progress (its percent
        # would say "85.7%" of a task whose every round failed)
        entry["progress"] = round(rounds["done"] / total, 4) if total else 1.0
        per_hour, counted, seconds = round_rate(conn, row.id, now, rounds["remaining"])
        entry["rate"] = {"rounds_per_hour": per_hour, "rounds_counted": counted}
        if rounds["remaining"] and per_hour and seconds is not None:
            entry["eta_seconds"] = seconds
            entry["eta_at"] = iso(now + dt.timedelta(seconds=seconds))
    entry["current_rounds"] = in_flight.get(row.id, [])
    entry["documents"] = _documents(conn, row) if row.type in FIELDS else None
    # the days its operator skipped (task move forward): said with "finished" (issue 47)
    days = skipped_days(conn, row.id)
    entry["skipped"] = {"days": list(days), "by": by_command(days)}
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


def look_policy(look_back_days: int, look_tiers: str) -> dict:
    """The window and the tiers of the looks (cnkispider/config/looktiers.py), JSON-able: each tier
    the days back it covers and how often they are counted (``every_days`` 0: every look)."""
    tiers = parse_tiers(look_tiers)
    return {
        "look_back_days": look_back_days,
        "tiers": [
            {"days_back": [first, last], "every_days": period}
            for first, last, period in spans(tiers, look_back_days)
        ],
    }


def _follow(row) -> dict | None:
    """The looks of a task that follows today: how many, the last, when the next is due (None:
    when its crawl reaches today); and its counts refreshes, the same."""
    if not getattr(row, "follow", None):  # NULL, 0, or a database before schema 9
        return None
    return {
        "looks": getattr(row, "looks", None) or 0,
        "last_look": iso(getattr(row, "look_at", None)),
        "next_look_due": iso(getattr(row, "look_due", None)),
        # [task] refresh_counts_every: the last counts refresh over the look-back (claimed
        # then) and when the next is due; None: none yet (or the key is off)
        "last_counts_refresh": iso(getattr(row, "counts_at", None)),
        "next_counts_refresh_due": iso(getattr(row, "counts_due", None)),
    }


def _fill(conn, task_id: int) -> dict[str, float]:
    """Issue 26: per detail field, the share of the documents of the task's latest rounds that
    the parser filled it on (cnkispider/watch/drift.py; {} for a database not upgraded yet)."""
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


def _documents(conn, row) -> int:
    # every document the task found, whichever task stored it first (issue 47)
    return doclinks.count(conn, row.type, row.id)


def _error_summary(groups: list[tuple]) -> dict:
    by_state: dict[str, int] = {}
    by_reason: dict[str, int] = {}
    for state, reason, n in groups:
        by_state[state] = by_state.get(state, 0) + n
        by_reason[reason] = by_reason.get(reason, 0) + n
    return {"total": sum(by_state.values()), "by_state": by_state, "by_reason": by_reason}


def _queue_sizes(client, namespace: str) -> dict[str, int]:
    from cnkispider.scheduling.queue import LeasedQueue

    return LeasedQueue(client, namespace).sizes()


def _waiting(client, namespace: str | None, task_name: str) -> str | None:
    """What a worker of the task waits for (a person to pass CNKI's check), if one does."""
    if not namespace:
        return None
    from cnkispider.sessions.pool import SessionStore

    waits = SessionStore(client, namespace).waiting(task_name)
    return waits[0]["message"] if waits else None
