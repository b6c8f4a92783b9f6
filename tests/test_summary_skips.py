"""The run's closing lines list the task's skipped days and why (issue 47, a residual): a day
``task move`` jumped past is said "by move", a hand-edited ``task_skip`` row whose day is no
date is said "not a date", in both languages."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from cnkispider.status import run_summary
from cnkispider.store.db import open_database
from cnkispider.store.schema import task, task_skip
from cnkispider.words import i18n
from tasks.flow import TaskStore

NOW = dt.datetime(2024, 3, 1, 12, 0)


@pytest.fixture
def skipped(db_url):
    """Task ``t1`` with one day skipped by a move and one hand-edited row holding no date."""
    engine = open_database(db_url)
    store = TaskStore(engine)
    name = f"skips{dt.datetime.now().timestamp():.0f}"  # the MariaDB database is shared
    store.register(name, "paper", "2024-01-01", "2024-01-05")
    with engine.connect() as conn:
        tid = conn.execute(sa.select(task.c.id).where(task.c.name == name)).scalar_one()
    with engine.begin() as conn:
        conn.execute(
            task_skip.insert(),
            [
                {"task_id": tid, "day": "2024-01-02", "command": "move", "at": NOW},
                {"task_id": tid, "day": "2024-02-30", "command": "move", "at": NOW},
            ],
        )
    yield engine, name
    with engine.begin() as conn:
        conn.execute(task_skip.delete().where(task_skip.c.task_id == tid))
    engine.dispose()


def _summary(engine, name, language):
    i18n.activate(language)
    try:
        return run_summary(engine, name, {"finish_reason": "finished", "elapsed_seconds": 1})
    finally:
        i18n.activate("en")


def test_the_run_summary_lists_the_skipped_days_and_why(skipped):
    text = _summary(*skipped, "en")
    line = next(li for li in text.splitlines() if li.startswith("skipped days"))
    assert line.split(None, 2)[2] == "2024-01-02 (by move), 2024-02-30 (not a date)", text


def test_the_run_summary_lists_the_skipped_days_in_chinese(skipped):
    text = _summary(*skipped, "zh_CN")
    line = next(li for li in text.splitlines() if li.startswith("跳过的日期"))
    assert "2024-01-02（由 move 命令跳过）、2024-02-30（不是日期）" in line, text
    assert "not a date" not in line and "by move" not in line


def test_no_skipped_day_no_line(db_url):
    engine = open_database(db_url)
    try:
        name = f"noskip{dt.datetime.now().timestamp():.0f}"
        TaskStore(engine).register(name, "paper", "2024-01-01", "2024-01-05")
        text = _summary(engine, name, "en")
    finally:
        engine.dispose()
    assert "skipped days" not in text and "finish reason" in text
