"""The `cnkispider` command line: task steering as an operator uses it, and clear errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cnkispider.cli import main
from tests.crawl_harness import ROOT


@pytest.fixture
def ini(tmp_path, db_url):
    path = tmp_path / "config.ini"
    path.write_text(f"[database]\nurl = {db_url}\n", encoding="utf-8")
    return str(path)


def cli(ini, *args):
    return main(["--config", ini, *args])


def test_task_commands_steer_the_task_table(ini, capsys):
    assert cli(ini, "init-db") == 0
    assert cli(ini, "task", "add", "q1", "--type", "paper", "--start", "2024-01-01", "--end", "2024-01-31",
               "--categories", "TP3,F0") == 0
    assert "created task 1 'q1': paper 2024-01-01..2024-01-31" in capsys.readouterr().out
    assert cli(ini, "task", "add", "q1", "--type", "paper", "--start", "2024-01-01") == 0
    assert "exists: task 1" in capsys.readouterr().out
    assert cli(ini, "task", "move", "q1", "2024-01-10", "F0") == 0
    assert "cursor 2024-01-10 F0" in capsys.readouterr().out
    assert cli(ini, "task", "stop", "q1") == 0
    assert "2024-01-01..2024-01-09" in capsys.readouterr().out
    assert cli(ini, "task", "extend", "q1", "2024-02-29") == 0
    assert "2024-01-01..2024-02-29" in capsys.readouterr().out
    assert cli(ini, "task", "resume", "q1") == 0
    assert "2024-01-01..(today)" in capsys.readouterr().out
    assert cli(ini, "task", "show", "q1") == 0
    assert "rounds: none; errorCode 0; errorLink 0" in capsys.readouterr().out


def test_task_list_flags_a_bad_row_instead_of_hiding_it(ini, capsys):

    from cnkispider.db import open_database
    from cnkispider.schema import task

    cli(ini, "task", "add", "bad", "--type", "patent", "--start", "2024-01-01")
    engine = open_database(open(ini).read().split("= ", 1)[1].strip())
    with engine.begin() as conn:
        conn.execute(task.update().values(cur_date="2024-02-31"))
    capsys.readouterr()
    assert cli(ini, "task", "list") == 0
    assert "BAD ROW, skipped by workers: cur_date '2024-02-31' is not a date" in capsys.readouterr().out


def test_unknown_task_is_a_clear_error(ini, capsys):
    assert cli(ini, "task", "show", "nope") == 2
    assert "error: " in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[database]\nurll = sqlite:///x.db\n", "[database] urll: unknown key; expected one of url"),
        ("[database]\nurl = mysql+pymysql://u:topsecret@127.0.0.1:1/cnki\n", "u:***@127.0.0.1:1/cnki"),
        ("[redis]\nurl = redis://:pw@127.0.0.1:1/0\n[database]\nurl = sqlite:///x.db\n", "127.0.0.1:1"),
    ],
)
def test_bad_config_or_unreachable_service_exits_2_with_one_line_and_no_traceback(tmp_path, text, expected):
    path = tmp_path / "config.ini"
    path.write_text(text, encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "cnkispider.cli", "--config", str(path), "run"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert expected in output and "Traceback" not in output
    assert "topsecret" not in output and ":pw@" not in output
