"""A task is finished only with every day of its range done or skipped by its operator, and
says which (issue 47 point 5): `task move` forward skips the days it passes, recorded and said
in status, `status --json` and the web page's grid; a move back makes them due again."""

from __future__ import annotations

import json

import pytest

from cnkispider.status.round_views import round_grid
from cnkispider.store.db import open_database
from tasks.flow import TaskStore
from tests.fixtures.commands import cli


@pytest.mark.slow  # a crawl in a worker subprocess
def test_a_day_skipped_by_move_is_said_with_finished(census_crawl):
    # the case: 1..5 March, moved to 2 March before the first run; 1 March has rows
    setup = census_crawl("2024-03-01", categories="G,H", end="2024-03-05")
    setup.write()
    add = ["task", "add", setup.task, "--type", "patent", "--categories", "G,H"]
    setup.run_ok(*add, "--start", "2024-03-01", "--end", "2024-03-05")
    setup.run_ok("task", "move", setup.task, "2024-03-02")
    setup.run_ok("run", "--task", setup.task)
    assert setup.site.truth("patent", "2024-03-01", "2024-03-01", ["G", "H"])  # it has rows

    report = json.loads(setup.run_ok("status", "--json").stdout)
    (entry,) = [t for t in report["tasks"] if t["name"] == setup.task]
    assert entry["phase"] == "done"
    assert entry["skipped"] == {"days": ["2024-03-01"], "by": {"move": 1}}
    text = setup.run_ok("status").stdout
    assert "finished, 1 day skipped by move (2024-03-01)" in text, text

    engine = open_database(setup.db_url)
    try:
        grid = round_grid(engine, setup.task)
    finally:
        engine.dispose()
    (first,) = [row for row in grid["rows"] if row["label"] == "2024-03-01"]
    assert {cell["state"] for cell in first["cells"] if cell} == {"skipped"}
    assert grid["by_state"].get("pending", 0) == 0


def test_a_move_back_makes_skipped_days_due_again(ini, capsys):
    assert cli(ini, "init-db") == 0
    add = ["task", "add", "mv", "--type", "patent", "--start", "2024-03-01", "--end", "2024-03-05"]
    assert cli(ini, *add, "--categories", "G06") == 0
    assert cli(ini, "task", "move", "mv", "2024-03-04") == 0
    from cnkispider.config import load_config
    from cnkispider.status import collect

    config = load_config(ini)
    engine = open_database(config.database_url)
    try:
        store = TaskStore(engine, base_dir=config.base_dir)
        (entry,) = collect(engine, None)["tasks"]
        assert entry["skipped"]["days"] == ["2024-03-01", "2024-03-02", "2024-03-03"]
        assert cli(ini, "task", "move", "mv", "2024-03-02") == 0
        (entry,) = collect(engine, None)["tasks"]
        assert entry["skipped"] == {"days": ["2024-03-01"], "by": {"move": 1}}
        assert store.claim(store.get("mv").id, "w").day == "2024-03-02"
    finally:
        engine.dispose()
