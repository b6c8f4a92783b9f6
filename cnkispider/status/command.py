"""``cnkispider status`` and the end-of-run summary: open the database (read only) and Redis (if
it runs), collect the report, render it."""

from __future__ import annotations

import sys
import time

from sqlalchemy.engine import Engine

from cnkispider import default_settings
from cnkispider.sessions.pool import namespace_for
from cnkispider.status.collecting import collect
from cnkispider.status.rendering import render, render_summary, to_json
from cnkispider.status.watching import watch
from cnkispider.store.db import open_database_readonly
from cnkispider.store.redisconn import connect_if_running
from tasks.skips import skipped_days

REDIS_RETRY_SECONDS = 30


def run_summary(
    engine: Engine,
    task_name: str,
    stats: dict,
    *,
    heartbeat_seconds: float = default_settings.TASKS_HEARTBEAT,
) -> str:
    """The summary printed when a run ends: rounds, documents, errors by reason, time and rates.

    ``stats`` are the run's Scrapy stats plus ``elapsed_seconds``; the rest comes from the
    database, so it covers every worker of the task, not only this one.
    """
    report = collect(engine, None, heartbeat_seconds=heartbeat_seconds, task_name=task_name)
    entry = report["tasks"][0]
    if entry.get("skipped", {}).get("days"):
        # which command skipped each day, for the closing lines (status --json says how many)
        with engine.connect() as conn:
            entry["skipped"] = {**entry["skipped"], "command": skipped_days(conn, entry["id"])}
    return render_summary(entry, stats)


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
    client, label, error = connect_if_running(config.redis_url, config.data_dir)
    tried = time.monotonic()

    def sample() -> dict:
        nonlocal client, error, tried
        # A Redis that was down is tried again now and then; a connected client reconnects itself.
        if client is None and time.monotonic() - tried >= REDIS_RETRY_SECONDS:
            client, _, error = connect_if_running(config.redis_url, config.data_dir)
            tried = time.monotonic()
        return collect(
            engine,
            client,
            heartbeat_seconds=config.crawl["heartbeat_seconds"],
            base_dir=config.base_dir,
            task_name=task_name,
            redis_label=label,
            redis_error=error,
            sessions_namespace=namespace_for(config.cnki["base_url"], config.redis_prefix),
            key_prefix=config.redis_prefix,
            look=(config.task.look_back_days, config.task.look_tiers),
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
