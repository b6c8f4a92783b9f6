"""The workers of a task as the status sees them: alive, gone or stopped, from their heartbeats.

A worker row is ``running`` until its process says goodbye (``stopped``); one whose heartbeat
is older than ``GONE_AFTER_BEATS`` heartbeats is ``gone`` (killed, crashed, cut off).
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from cnkispider.status.times import age, iso
from cnkispider.store.schema import worker

GONE_AFTER_BEATS = 3
# Workers that went silent or stopped long ago are counted but no longer listed: a crawl that
# runs for weeks leaves one worker row per process start.
LIST_GONE_FOR = dt.timedelta(hours=24)
LIST_STOPPED_FOR = dt.timedelta(hours=1)


def task_workers(conn, ids, now, gone_after) -> dict[int, dict]:
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
        counts[task_id][liveness(state, bool(fresh_flag))] += n
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
        out[w.task_id]["rows"].append(worker_report(w, now, liveness(w.state, alive)))
    return out


def liveness(state: str, fresh: bool) -> str:
    if state != "running":
        return "stopped"
    return "alive" if fresh else "gone"


def worker_report(w, now, state: str) -> dict:
    minutes = None
    if w.started_at is not None and w.last_seen is not None:
        minutes = (w.last_seen - w.started_at).total_seconds() / 60
    return {
        "id": w.id,
        "host": w.host,
        "pid": w.pid,
        "state": state,
        "started_at": iso(w.started_at),
        "last_seen": iso(w.last_seen),
        "last_seen_age_seconds": age(now, w.last_seen),
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
