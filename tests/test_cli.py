"""The `cnkispider` command line: task steering as an operator uses it, and clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cnkispider.cli import main
from tests.fixtures import launcher
from tests.fixtures.commands import cli
from tests.fixtures.crawl_harness import ROOT


def test_task_commands_steer_the_task_table(ini, capsys):
    assert cli(ini, "init-db") == 0
    assert (
        cli(
            ini,
            "task",
            "add",
            "q1",
            "--type",
            "paper",
            "--start",
            "2024-01-01",
            "--end",
            "2024-01-31",
            "--categories",
            "TP3,F0",
        )
        == 0
    )
    assert "created task 1 'q1': paper 2024-01-01..2024-01-31" in capsys.readouterr().out
    assert cli(ini, "task", "add", "q1", "--type", "paper", "--start", "2024-01-01") == 0
    assert "exists: task 1" in capsys.readouterr().out
    assert cli(ini, "task", "move", "q1", "2024-01-10", "F0") == 0
    assert "cursor 2024-01-10 F0" in capsys.readouterr().out
    assert cli(ini, "task", "stop", "q1") == 0
    assert "2024-01-01..2024-01-09" in capsys.readouterr().out
    assert cli(ini, "task", "extend", "q1", "2024-02-29") == 0
    assert "2024-01-01..2024-02-29" in capsys.readouterr().out
    assert cli(ini, "task", "resume", "q1") == 2  # not paused: the end date stays (issue 28)
    assert "task extend q1" in capsys.readouterr().err
    assert cli(ini, "task", "show", "q1") == 0
    assert "rounds: none; errorCode 0; errorLink 0" in capsys.readouterr().out


def test_task_list_flags_a_bad_row_instead_of_hiding_it(ini, capsys):

    from cnkispider.store.db import open_database
    from cnkispider.store.schema import task

    cli(ini, "task", "add", "bad", "--type", "patent", "--start", "2024-01-01")
    engine = open_database(open(ini).read().split("= ", 1)[1].strip())
    with engine.begin() as conn:
        conn.execute(task.update().values(cur_date="2024-02-31"))
    capsys.readouterr()
    assert cli(ini, "task", "list") == 0
    assert (
        "BAD ROW, skipped by workers: cur_date '2024-02-31' is not a date"
        in capsys.readouterr().out
    )


def test_unknown_task_is_a_clear_error(ini, capsys):
    assert cli(ini, "task", "show", "nope") == 2
    assert "error: " in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "[database]\nurll = sqlite:///x.db\n",
            "[database] urll: unknown key; expected one of url",
        ),
        (
            "[database]\nurl = mysql+pymysql://u:topsecret@127.0.0.1:1/cnki\n",
            "u:***@127.0.0.1:1/cnki",
        ),
        (
            "[redis]\nurl = redis://:pw@127.0.0.1:1/0\n[database]\nurl = sqlite:///x.db\n",
            "127.0.0.1:1",
        ),
    ],
)
@pytest.mark.slow  # a command in a subprocess
def test_bad_config_or_unreachable_service_exits_2_with_one_line_and_no_traceback(
    tmp_path, text, expected
):
    path = tmp_path / "config.ini"
    path.write_text(text, encoding="utf-8")
    result = launcher.run(
        [sys.executable, "-m", "cnkispider.cli", "--config", str(path), "run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert expected in output and "Traceback" not in output
    assert "topsecret" not in output and ":pw@" not in output


def test_task_show_names_a_halt_and_resume_clears_it_keeping_the_end_date(ini, capsys):
    from cnkispider.config import load_config
    from cnkispider.store.db import open_database
    from tasks.flow import TaskStore

    assert (
        cli(
            ini,
            "task",
            "add",
            "h1",
            "--type",
            "patent",
            "--start",
            "2024-01-01",
            "--end",
            "2024-01-31",
            "--categories",
            "G06",
        )
        == 0
    )
    store = TaskStore(open_database(load_config(ini).database_url))
    store.halt(store.get("h1").id, "http-500: the last 10 list pages all failed with http-500")
    capsys.readouterr()
    assert cli(ini, "task", "show", "h1") == 0
    assert (
        ", halted: http-500: the last 10 list pages all failed with http-500"
        in capsys.readouterr().out
    )
    assert cli(ini, "task", "resume", "h1") == 0
    out = capsys.readouterr().out
    assert (
        "2024-01-01..2024-01-31" in out
        and "halt cleared: http-500" in out
        and ", halted:" not in out
    )
    assert store.get("h1").halt_reason is None


# -- issue 14: input checked before it is saved ------------------------------------------------


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize(
    ("categories", "expected"),
    [
        ("H04;G06", "separate codes with commas, e.g. 'H04,G06'"),
        ("h04", "'h04' should be 'H04' (codes are in capitals)"),
        ("H04,ZZ9", "'ZZ9' is unknown (nearest: "),
        ("H04,GO6", "'GO6' is unknown (nearest: G06"),
        ("mycats.txt", "category file 'mycats.txt' does not exist"),
        ("ZZ9,mycats.txt", "category file 'mycats.txt' does not exist"),
        ("H04" + "1" * 70, "is longer than 64 characters"),
    ],
)
def test_task_add_checks_categories_and_leaves_no_row_on_an_error(
    ini, capsys, categories, expected
):
    assert (
        cli(
            ini,
            "task",
            "add",
            "t",
            "--type",
            "patent",
            "--start",
            "2024-01-01",
            "--categories",
            categories,
        )
        == 2
    )
    assert expected in _one_error_line(capsys.readouterr().err)
    assert cli(ini, "task", "list") == 0
    assert capsys.readouterr().out == "no tasks\n"


def test_task_add_with_end_before_start_inserts_nothing_and_the_fix_then_works(ini, capsys):
    args = ("task", "add", "q", "--type", "patent", "--categories", "H04")
    assert cli(ini, *args, "--start", "2024-02-01", "--end", "2024-01-01") == 2
    assert (
        _one_error_line(capsys.readouterr().err)
        == "error: end date 2024-01-01 is before start date 2024-02-01"
    )
    assert cli(ini, *args, "--start", "2024-01-01", "--end", "2024-02-01") == 0
    assert "created task 1 'q': patent 2024-01-01..2024-02-01" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ("task", "add", "d", "--type", "patent", "--start", "yesterday"),
            "error: start date 'yesterday' is not a date; expected YYYY-MM-DD, e.g. 2024-01-31",
        ),
        (
            ("task", "add", "d", "--type", "patent", "--start", "2024-02-30"),
            "error: start date '2024-02-30' is not a real day (month or day out of range); expected YYYY-MM-DD, e.g. 2024-01-31",
        ),
        (("task", "extend", "d0", "2024-02-30"), "error: end date '2024-02-30' is not a real day"),
        (
            ("task", "resume", "d0", "--end", "tomorrow"),
            "error: end date 'tomorrow' is not a date; expected YYYY-MM-DD",
        ),
        (
            ("task", "move", "d0", "2024/01/05"),
            "error: date '2024/01/05' is not a date; expected YYYY-MM-DD",
        ),
        (
            ("export", "--since", "yesterday"),
            "error: --since 'yesterday' is not a date; expected YYYY-MM-DD",
        ),
    ],
)
def test_every_date_gets_the_same_one_line_message(ini, capsys, args, expected):
    assert (
        cli(
            ini,
            "task",
            "add",
            "d0",
            "--type",
            "patent",
            "--start",
            "2024-01-01",
            "--categories",
            "H04",
        )
        == 0
    )
    capsys.readouterr()
    assert cli(ini, *args) == 2
    assert _one_error_line(capsys.readouterr().err).startswith(expected)


def test_task_set_changes_categories_and_the_type_only_while_nothing_is_crawled(ini, capsys):
    from cnkispider.config import load_config
    from cnkispider.store.db import open_database
    from cnkispider.store.schema import round_

    assert (
        cli(
            ini,
            "task",
            "add",
            "s",
            "--type",
            "patent",
            "--start",
            "2024-01-01",
            "--categories",
            "H04",
        )
        == 0
    )
    assert cli(ini, "task", "set", "s", "--categories", "h04,G06") == 2
    assert "'h04' should be 'H04'" in _one_error_line(capsys.readouterr().err)
    assert cli(ini, "task", "set", "s", "--categories", "H04,G06") == 0
    out = capsys.readouterr().out
    assert "changed: task 1 's': patent" in out and "2 categories" in out
    assert cli(ini, "task", "set", "s", "--type", "paper", "--categories", "TP3") == 0
    assert "changed: task 1 's': paper" in capsys.readouterr().out
    engine = open_database(load_config(ini).database_url)
    with engine.begin() as conn:
        conn.execute(
            round_.insert().values(task_id=1, day="2024-01-01", category="TP3", state="done")
        )
    assert cli(ini, "task", "set", "s", "--type", "patent") == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "the type stays paper because 1 rounds are already crawled as paper" in line
    engine.dispose()


def test_a_config_ini_that_differs_from_the_task_row_is_warned_with_the_command(
    tmp_path, db_url, capsys
):
    from cnkispider.config import load_config
    from cnkispider.launch.preflight import preflight

    path = tmp_path / "config.ini"
    task = "[task]\nname = w\ntype = patent\nstart_date = 2024-01-01\nend_date = 2024-01-05\ncategories = {}\n"
    redis = "[redis]\nurl = redis://127.0.0.1:6379/0\n"
    path.write_text(f"[database]\nurl = {db_url}\n{redis}" + task.format("H04"), encoding="utf-8")
    assert (
        main(
            [
                "--config",
                str(path),
                "task",
                "add",
                "w",
                "--type",
                "patent",
                "--start",
                "2024-01-01",
                "--end",
                "2024-01-05",
                "--categories",
                "H04",
            ]
        )
        == 0
    )
    capsys.readouterr()
    preflight(load_config(path))
    assert capsys.readouterr().err == ""  # the same: nothing said
    path.write_text(
        f"[database]\nurl = {db_url}\n{redis}" + task.format("H04,G06").replace("01-05", "01-09"),
        encoding="utf-8",
    )
    preflight(load_config(path))
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "warning: config.ini [task] categories = H04,G06 but task 'w' has H04 (the task row wins; "
        "to apply: cnkispider task set w --categories H04,G06)",
        "warning: config.ini [task] end_date = 2024-01-09 but task 'w' has 2024-01-05 (the task row wins; "
        "to apply: cnkispider task extend w 2024-01-09)",
    ]


@pytest.mark.slow  # a command in a subprocess
def test_run_refuses_a_typod_category_in_config_ini_with_one_line(tmp_path, db_url):
    path = tmp_path / "config.ini"
    path.write_text(
        f"[database]\nurl = {db_url}\n[redis]\nurl = redis://127.0.0.1:6379/0\n"
        "[task]\nname = typo\nstart_date = 2024-01-01\nend_date = 2024-01-01\ncategories = H04;G06\n",
        encoding="utf-8",
    )
    result = launcher.run(
        [sys.executable, "-m", "cnkispider.cli", "run", "--config", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert (
        _one_error_line(result.stderr)
        == f"error: {path}: [task] categories: categories 'H04;G06': separate codes with commas, "
        "e.g. 'H04,G06'"
    )


# -- issue 14: Scrapy parity ------------------------------------------------------------------


SCRAPY = str(Path(sys.executable).with_name("scrapy"))


@pytest.mark.parametrize(
    ("ini_text", "args", "expected"),
    [
        (
            "[database]\nurl = mysql+pymysql://root:wrongpw@127.0.0.1:3306/x\n",
            (),
            "error: cannot use the database mysql+pymysql://root:***@127.0.0.1:3306/x",
        ),
        (
            "[database]\nurl = sqlite:///x.db\n[redis]\nurl = redis://127.0.0.1:1/0\n",
            (),
            "error: Redis at redis://127.0.0.1:1/0 is not reachable",
        ),
        (
            "[database]\nurl = sqlite:///x.db\n[redis]\nurl = redis://127.0.0.1:6379/0\n",
            ("-a", "task=nosuch"),
            "error: no task 'nosuch'",
        ),
        (
            "[database]\nurl = sqlite:///x.db\n[redis]\nurl = redis://127.0.0.1:6379/0\n[task]\ncategories = h04\n",
            (),
            "error: {config}: [task] categories: categories for patent (IPC tree): 'h04' should "
            "be 'H04'",
        ),
        (  # issue 43, case 11
            "[database]\nurl = sqlite:///x.db\n[redis]\nurl = redis://127.0.0.1:6379/0\n",
            ("-s", "RATELIMIT_RATE=abc"),
            "error: -s RATELIMIT_RATE='abc': expected a number",
        ),
    ],
)
@pytest.mark.slow  # a command in a subprocess
def test_scrapy_crawl_gives_the_same_one_line_and_exit_code_as_run(
    tmp_path, ini_text, args, expected
):
    path = tmp_path / "config.ini"
    path.write_text(ini_text, encoding="utf-8")
    env = {**os.environ, "CNKI_CONFIG": str(path)}
    scrapy = subprocess.run(
        [SCRAPY, "crawl", "patent", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert scrapy.returncode == 2, scrapy.stderr[-2000:]
    expected = expected.format(config=path)
    assert _one_error_line(scrapy.stderr).startswith(expected) and scrapy.stdout == ""
    if not args:  # the same through `cnkispider run`
        run = launcher.run(
            [sys.executable, "-m", "cnkispider.cli", "run", "--config", str(path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 2 and _one_error_line(run.stderr) == _one_error_line(scrapy.stderr)


def test_run_takes_scrapy_settings_and_feeds(capsys):
    from cnkispider.cli import build_parser
    from cnkispider.cli.crawl import run_overrides

    args = build_parser().parse_args(
        ["run", "-s", "DOWNLOAD_DELAY=2", "-o", "x.jsonl", "-o", "y.csv", "--verbose"]
    )
    assert run_overrides(args) == {
        "CNKI_VERBOSE": True,
        "DOWNLOAD_DELAY": "2",
        "FEEDS": {
            "x.jsonl": {"format": "jsonlines", "encoding": "utf-8"},
            "y.csv": {"format": "csv", "encoding": "utf-8"},
        },
    }
    assert main(["run", "-s", "NOEQUALS"]) == 2
    assert "-s 'NOEQUALS': expected KEY=VALUE" in _one_error_line(capsys.readouterr().err)


def test_feeds_are_utf8_not_escapes():
    from cnkispider.config import load_config
    from cnkispider.launch.crawlsettings import crawler_settings

    assert crawler_settings(load_config(None, environ={}))["FEED_EXPORT_ENCODING"] == "utf-8"


# -- issue 14: small things ---------------------------------------------------------------------


def test_the_exe_leaves_demo_out_with_a_clear_message(monkeypatch, capsys):
    from cnkispider.cli import build_parser

    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert "demo" not in build_parser().format_help()
    assert main(["demo"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "the demo is not part of the program" in line and "(standin/)" in line


def test_a_feed_with_several_processes_is_refused_in_one_line(ini, capsys):
    assert cli(ini, "run", "--processes", "2", "-o", "x.jsonl") == 2
    assert "-o FILE takes one process" in _one_error_line(capsys.readouterr().err)


@pytest.mark.slow  # a crawl in a worker subprocess
def test_config_names_the_file_even_beside_a_broken_config_ini(tmp_path, crawl_setup):
    """Issue 15's first defect: `cnkispider.settings` loaded ./config.ini when it was imported,
    so `cnkispider --config good.ini run` from a folder whose config.ini has a typo stopped with
    exit 2 naming the stray file. Only Scrapy's own command line reads config.ini that way now."""
    from tests.fixtures.crawl_harness import compare

    setup = crawl_setup("patent", "G06", "sqlite", end="2024-01-01", site={"seed": 3, "scale": 0.2})
    setup.write()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "config.ini").write_text("[crawl]\nconcurrent_requestz = 4\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CNKI_CONFIG", None)
    result = launcher.run(
        [sys.executable, "-m", "cnkispider.cli", "--config", str(setup.config_path), "run"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "concurrent_requestz" not in result.stderr
    truth = setup.truth()
    assert truth and compare(setup.stored(), truth, "patent") == {
        "missing": [],
        "extra": [],
        "differing": {},
    }


# -- issue 41 ------------------------------------------------------------------------------------


def test_config_is_taken_anywhere_on_the_line(ini, capsys):
    """Before the command, after it, after its subcommand (`task list --config x.ini`)."""
    add = ["add", "q", "--type", "patent", "--start", "2024-01-01"]
    assert main(["task", *add, "--config", ini]) == 0
    for argv in (
        ["--config", ini, "task", "list"],
        ["task", "--config", ini, "list"],
        ["task", "list", "--config", ini],
    ):
        assert main(argv) == 0
        assert "task 1 'q'" in capsys.readouterr().out


def test_every_command_and_subcommand_takes_config():
    import argparse

    from cnkispider.cli import build_parser

    def parsers(parser, path):
        yield path, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    yield from parsers(child, f"{path} {name}")

    found = list(parsers(build_parser(), "cnkispider"))
    assert len(found) > 20
    for path, parser in found:
        assert "--config" in parser._option_string_actions, path


def _run_ini(tmp_path, db_url, task_text=""):
    from tests.fixtures.services import REDIS_URL

    path = tmp_path / "config.ini"
    path.write_text(
        f"[database]\nurl = {db_url}\n[redis]\nurl = {REDIS_URL}\n{task_text}", encoding="utf-8"
    )
    return str(path)


def test_run_of_a_task_that_does_not_exist_is_one_line_and_exit_2(tmp_path, db_url, capsys):
    ini = _run_ini(tmp_path, db_url)
    assert main(["--config", ini, "run", "--task", "nosuch"]) == 2
    assert _one_error_line(capsys.readouterr().err).startswith("error: no task 'nosuch'")
    assert main(["--config", ini, "task", "list"]) == 0
    assert "no tasks" in capsys.readouterr().out  # config.ini's task was not added either


@pytest.mark.parametrize(
    ("task_text", "expected"),
    [
        ("[task]\ncategories = ZZZ\n", "[task] categories: categories for patent (IPC tree):"),
        ("[task]\nname =\n", "[task] name: a task's name cannot be blank"),
    ],
)
@pytest.mark.slow  # a command in a subprocess
def test_a_config_ini_that_run_refuses_creates_no_file(tmp_path, task_text, expected):
    """Issue 41: refused for its [task], `run` had already made the SQLite file and the
    embedded Redis folder. config.ini is checked whole first."""
    path = tmp_path / "config.ini"
    path.write_text(f"[database]\nurl = sqlite:///t.db\n[redis]\nurl =\n{task_text}", "utf-8")
    result = launcher.run(
        [sys.executable, "-m", "cnkispider.cli", "run", "--config", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert _one_error_line(result.stderr).startswith(f"error: {path}: {expected}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.ini"]


@pytest.mark.slow  # a command in a subprocess
def test_run_of_a_missing_task_on_the_embedded_default_creates_no_file(tmp_path):
    """Issue 41: `run --task NOSUCH` on a fresh folder made the SQLite file and the embedded
    Redis folder before it said the task is not there. No database, no task: nothing made."""
    path = tmp_path / "config.ini"
    path.write_text("[database]\nurl = sqlite:///t.db\n[redis]\nurl =\n", "utf-8")
    result = launcher.run(
        [sys.executable, "-m", "cnkispider.cli", "run", "--config", str(path), "--task", "nosuch"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert _one_error_line(result.stderr).startswith("error: no task 'nosuch'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.ini"]


@pytest.mark.slow  # a crawl
def test_run_task_crawls_the_task_named_and_not_the_one_of_config_ini(crawl_setup):
    """`cnkispider run --task NAME` is `scrapy crawl TYPE -a task=NAME`: the named task's
    rounds are crawled whole; config.ini's task is never added."""
    import sqlalchemy as sa

    from cnkispider.store.schema import round_, task
    from tests.fixtures.crawl_harness import compare

    setup = crawl_setup("patent", "G06,H04", "sqlite", start="2024-01-01", end="2024-01-01")
    named = setup.task + "-b"  # under the setup's Redis keys (cnki:<task>*), dropped after
    add = ["--type", "patent", "--start", setup.start, "--end", setup.end]
    setup.run_ok("task", "add", named, *add, "--categories", setup.categories)
    result = setup.run_ok("run", "--task", named)
    assert f"task {named!r}" in result.stdout  # the summary is the named task's
    assert [r.name for r in setup.query(sa.select(task.c.name))] == [named]
    states = {r.state for r in setup.query(sa.select(round_.c.state))}
    assert states == {"done"}
    truth = setup.truth()
    assert truth and compare(setup.stored(), truth, "patent")["missing"] == []


# -- issue 43, case 11: a bad -s value ---------------------------------------------------------


@pytest.fixture
def crawl_ini(tmp_path, db_url) -> str:
    """A config.ini a crawl could start from: the test's database and the real Redis."""
    path = tmp_path / "config.ini"
    path.write_text(
        f"[database]\nurl = {db_url}\n[redis]\nurl = redis://127.0.0.1:6379/0\n"
        "[task]\nname = bad-s\nstart_date = 2024-01-01\nend_date = 2024-01-01\n",
        encoding="utf-8",
    )
    return str(path)


@pytest.mark.parametrize(
    ("pair", "expected"),
    [
        ("RATELIMIT_RATE=abc", "error: -s RATELIMIT_RATE='abc': expected a number"),
        (
            "CONCURRENT_REQUESTS=many",
            "error: -s CONCURRENT_REQUESTS='many': expected a whole number",
        ),
        ("PACE_ENABLED=maybe", "error: -s PACE_ENABLED='maybe': expected true or false"),
    ],
)
def test_a_bad_setting_value_on_the_command_line_is_one_line_and_exit_2(
    crawl_ini, capsys, pair, expected
):
    """`run -s RATELIMIT_RATE=abc` reached the crawler, whose rate-limit middleware failed while
    it was being built, and ended in a 16-line StopIteration traceback."""
    assert cli(crawl_ini, "run", "-s", pair) == 2
    captured = capsys.readouterr()
    assert _one_error_line(captured.err) == expected and captured.out == ""


def test_a_crawler_that_cannot_be_built_raises_its_own_error(crawl_ini):
    """Whatever -s does not check, a crawler failing to build says why: the crawler is made with
    create_crawler and handed to crawl, not looked up afterwards (a StopIteration). In a process
    of its own: building a CrawlerProcess installs a Twisted reactor, and later tests on this
    xdist worker crawl without one."""
    code = (
        "import sys\n"
        "from cnkispider.cli.crawl import crawl\n"
        "from cnkispider.config import load_config\n"
        "try:\n"
        f"    crawl(load_config({crawl_ini!r}), settings_overrides={{'RATELIMIT_RATE': 'abc'}})\n"
        "except ValueError as e:\n"
        "    print('ValueError:', e)\n"
        "    sys.exit(3)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert "ValueError:" in result.stdout and "'abc'" in result.stdout


def test_good_setting_values_pass_the_check_as_typed():
    from cnkispider.launch.settingcheck import check_setting

    for name, value in (
        ("RATELIMIT_RATE", "2.5"),
        ("CONCURRENT_REQUESTS", " 8 "),
        ("PACE_ENABLED", "False"),
        ("PACE_ENABLED", "0"),
        ("DNS_TIMEOUT", "2.5"),  # a whole-number default Scrapy reads with getfloat
        ("LOG_FILE", "x.log"),
        ("LOG_LEVEL", "debug"),
        ("DOWNLOAD_DELAY", "0"),
        ("RETRY_PRIORITY_ADJUST", "-1"),  # a priority may be below 0
        ("DATABASE_URL", "mysql+pymysql://w@127.0.0.1/cnki"),
        ("REDIS_URL", ""),  # the embedded Redis
        ("ARCHIVE_DIR", "pages"),  # read by the code, no default
    ):
        check_setting(name, value)


def test_a_sqlite_path_under_a_file_is_one_line_and_exit_2(tmp_path, capsys):
    """A folder of the database's path that is a file: one line naming the database, no
    traceback (it was a FileExistsError from the engine's mkdir)."""
    (tmp_path / "data").write_text("not a folder", encoding="utf-8")
    path = tmp_path / "config.ini"
    path.write_text("[database]\nurl = sqlite:///data/cnki.db\n", encoding="utf-8")
    assert main(["--config", str(path), "init-db"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.startswith("error: cannot use the database sqlite:///") and "cnki.db" in line
    assert (tmp_path / "data").read_text(encoding="utf-8") == "not a folder"
