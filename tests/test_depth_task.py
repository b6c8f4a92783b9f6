"""A task's depth: `task add/set --depth`, `[task] depth` and `[cnki] export_batch` in
config.ini, a bad value refused in one line with nothing written, and the depth shown by
`task show`, `status` and the web page's report."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from cnkispider.config import load_config
from cnkispider.exceptions import ConfigError
from cnkispider.store.db import open_database
from cnkispider.store.schema import task
from tests.fixtures.commands import cli


def _depths(ini) -> dict[str, str | None]:
    engine = open_database(load_config(ini).database_url)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(task.c.name, task.c.depth)).all()
    engine.dispose()
    return dict(rows)


def _add(ini, name, *extra):
    return cli(ini, "task", "add", name, "--type", "paper", "--start", "2024-03-05", *extra)


def test_task_add_and_set_keep_the_depth_and_show_it(ini, capsys):
    assert _add(ini, "all2024", "--depth", "list") == 0
    assert "depth list" in capsys.readouterr().out
    assert _add(ini, "plain") == 0
    assert _depths(ini) == {"all2024": "list", "plain": "detail"}
    assert cli(ini, "task", "set", "all2024", "--depth", "export") == 0
    assert "depth export" in capsys.readouterr().out
    assert cli(ini, "task", "show", "all2024") == 0
    assert "depth export" in capsys.readouterr().out
    assert _depths(ini)["all2024"] == "export"
    assert cli(ini, "status", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert {t["name"]: t["depth"] for t in report["tasks"]} == {
        "all2024": "export",
        "plain": "detail",
    }
    assert cli(ini, "status") == 0
    assert "depth export" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["deep", "LISTS", ""])
def test_a_bad_depth_is_one_error_line_and_nothing_is_written(ini, capsys, bad):
    assert cli(ini, "init-db") == 0
    capsys.readouterr()
    assert _add(ini, "t", "--depth", bad) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--depth" in err[0] and "list, export, detail" in err[0]
    assert _depths(ini) == {}
    assert _add(ini, "t") == 0
    assert cli(ini, "task", "set", "t", "--depth", bad) == 2
    assert _depths(ini) == {"t": "detail"}


def test_a_task_row_with_a_depth_edited_into_nonsense_is_a_bad_row(ini, capsys):
    assert _add(ini, "t") == 0
    engine = open_database(load_config(ini).database_url)
    with engine.begin() as conn:
        conn.execute(task.update().values(depth="deeper"))
    engine.dispose()
    capsys.readouterr()
    assert cli(ini, "task", "list") == 0
    out = capsys.readouterr().out
    assert "BAD ROW" in out and "deeper" in out


def test_config_ini_takes_a_depth_and_an_export_batch(tmp_path):
    path = tmp_path / "config.ini"
    path.write_text("[task]\ndepth = export\n[cnki]\nexport_batch = 10\n", encoding="utf-8")
    config = load_config(str(path))
    assert config.task.depth == "export" and config.cnki["export_batch"] == 10
    for section, key, value in (("task", "depth", "deep"), ("cnki", "export_batch", "0")):
        path.write_text(f"[{section}]\n{key} = {value}\n", encoding="utf-8")
        with pytest.raises(ConfigError, match=f"{section}.*{key}"):
            load_config(str(path))


def test_the_shipped_config_says_detail_and_50():
    config = load_config("config.ini")
    assert config.task.depth == "detail" and config.cnki["export_batch"] == 50


def test_the_depths_and_the_default_depth_are_written_once():
    """cnkispider.items holds the depths and default_settings the default (``TASKS_DEPTH``); no
    other module writes the list again or falls back to a depth of its own."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    second_home = re.compile(
        r"""\(\s*["'](?:list|export|detail)["'],\s*["'](?:list|export|detail)["'],"""  # a list
        r"""|or\s+["']detail["']"""  # a fallback
        r"""|(?:depth\w*(?:\s*:\s*str)?\s*|default)=\s*["']detail["']"""  # a default
        r"""|get\(\s*DEPTH_KEY\s*,"""  # a fallback of a stored value
    )
    found = []
    for folder in ("cnkispider", "tasks", "errors", "proxy", "bench"):
        for path in (root / folder).rglob("*.py"):
            if path == root / "cnkispider" / "items.py":
                continue  # the one home
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if second_home.search(line):
                    found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    assert found == []
