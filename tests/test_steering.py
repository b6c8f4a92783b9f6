"""Steering (issue 28): what `task move`, pause, resume, stop and extend do to real crawls and to
the task table, from the command line (the web page's steering is in tests/test_web.py)."""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa

from cnkispider.store.db import open_database
from cnkispider.store.schema import documents, round_
from tasks.flow import TaskStore
from tests.fixtures.commands import cli
from tests.fixtures.crawl_harness import compare


@pytest.mark.parametrize("census", ["on", "off"])
@pytest.mark.parametrize("categories", ["G,H", "A,B,C,D,E,F,G,H"])
def test_a_move_brings_back_every_deleted_document(census_crawl, census, categories):
    """The operator deletes what was stored and moves the cursor back to the first day: the next
    run crawls every round from that day on again, census or not, whole tree or some categories."""
    # the stand-in's realistic year: Fri 1 March has rows, Sat 2 March none
    setup = census_crawl("2024-03-01", categories=categories, end="2024-03-02", day_census=census)
    setup.run_ok()
    truth = setup.truth()
    assert len(truth) >= 10
    assert compare(setup.stored(), truth, "patent")["missing"] == []
    engine = open_database(setup.db_url)
    with engine.begin() as conn:
        conn.execute(documents["patent"].delete())
    engine.dispose()
    assert setup.stored() == []

    setup.run_ok("task", "move", setup.task, setup.start)
    setup.run_ok()
    diff = compare(setup.stored(), truth, "patent")
    assert diff["missing"] == [], f"{len(diff['missing'])} of {len(truth)} never came back"
    states = {r.state for r in setup.query(sa.select(round_.c.state))}
    assert states == {"done"}


# -- pause is not stop (the command line; the page's actions call the same steering) ------------


def _store(ini):
    from cnkispider.config import load_config
    from cnkispider.store.db import open_database
    from tasks.flow import TaskStore

    config = load_config(ini)
    return TaskStore(open_database(config.database_url), base_dir=config.base_dir)


def _add(ini, name="p", start="2024-01-01", end="2024-01-10"):
    assert cli(ini, "init-db") == 0
    args = ["task", "add", name, "--type", "patent", "--start", start, "--categories", "G06"]
    assert cli(ini, *args, *(["--end", end] if end else [])) == 0


def test_pause_then_resume_keeps_the_task_s_dates(ini, capsys):
    _add(ini)
    store = _store(ini)
    first = store.claim(store.get("p").id, "w")
    assert first.day == "2024-01-01"
    assert cli(ini, "task", "pause", "p") == 0
    assert "2024-01-01..2024-01-10" in capsys.readouterr().out
    assert store.claim(store.get("p").id, "w") is None  # paused: nothing handed out
    assert cli(ini, "task", "show", "p") == 0
    assert ", paused" in capsys.readouterr().out
    assert cli(ini, "task", "resume", "p") == 0
    out = capsys.readouterr().out
    assert "resumed: " in out and "2024-01-01..2024-01-10" in out
    current = store.get("p")
    assert current.end_date.isoformat() == "2024-01-10" and not current.halt_reason
    assert store.claim(current.id, "w").day in ("2024-01-01", "2024-01-02")
    store.engine.dispose()


def test_resume_of_a_task_that_is_not_paused_changes_nothing_and_says_extend(ini, capsys):
    _add(ini)
    assert cli(ini, "task", "stop", "p") == 0
    stopped = capsys.readouterr().out
    assert "2024-01-01..2023-12-31" in stopped
    assert cli(ini, "task", "resume", "p") != 0
    err = capsys.readouterr().err
    assert "not paused" in err and "task extend p" in err
    assert _store(ini).get("p").end_date.isoformat() == "2023-12-31"


def test_a_finished_task_offers_extend_and_move_not_pause_or_resume(ini, capsys):
    from cnkispider.web.actions import offered

    _add(ini)
    store = _store(ini)
    with store.engine.begin() as conn:
        from cnkispider.store.schema import task

        conn.execute(task.update().values(phase="done"))
    for action in ("pause", "resume"):
        assert cli(ini, "task", action, "p") != 0
        err = capsys.readouterr().err
        assert "is finished" in err and "task extend p" in err and "task move p" in err
    assert offered(None, "done") == ("extend", "move")
    assert "pause" in offered(None, "crawl") and "resume" not in offered(None, "crawl")
    assert "resume" in offered("paused: by the operator", "crawl")
    store.engine.dispose()


def test_an_end_date_edited_before_the_cursor_stops_the_task_and_a_pause_keeps_it(ini, capsys):
    """From a MySQL client: end_date before the cursor hands out nothing more; pause and resume
    keep that end date as the user wrote it."""
    _add(ini)
    store = _store(ini)
    tid = store.get("p").id
    assert [store.claim(tid, "w").day for _ in range(3)] == [
        "2024-01-01",
        "2024-01-02",
        "2024-01-03",
    ]
    from cnkispider.store.schema import task

    with store.engine.begin() as conn:
        conn.execute(task.update().values(end_date="2024-01-02"))
    assert store.claim(tid, "w") is None
    assert cli(ini, "task", "pause", "p") == 0
    assert cli(ini, "task", "resume", "p") == 0
    assert store.get("p").end_date.isoformat() == "2024-01-02"
    assert store.claim(tid, "w") is None
    store.engine.dispose()


# -- input ---------------------------------------------------------------------------------------


def test_a_start_after_today_in_beijing_is_refused(ini, capsys):
    import datetime as dt

    from cnkispider.clock import cnki_today

    tomorrow = (cnki_today() + dt.timedelta(days=1)).isoformat()
    assert cli(ini, "init-db") == 0
    assert cli(ini, "task", "add", "f", "--type", "paper", "--start", tomorrow) == 2
    err = capsys.readouterr().err
    assert f"start date {tomorrow} is after today" in err and err.count("\n") == 1
    assert cli(ini, "task", "list") == 0
    assert "no tasks" in capsys.readouterr().out  # nothing written
    today = cnki_today().isoformat()
    assert cli(ini, "task", "add", "f", "--type", "paper", "--start", today) == 0


def test_adding_an_existing_name_with_other_arguments_says_the_task_set_command(ini, capsys):
    _add(ini)
    capsys.readouterr()
    same = ["task", "add", "p", "--type", "patent", "--start", "2024-01-01"]
    assert cli(ini, *same) == 0
    assert "exists: task" in capsys.readouterr().out
    assert cli(ini, *same[:3], "--type", "paper", "--start", "2024-01-01") == 2
    assert "cnkispider task set p --type paper" in capsys.readouterr().err
    assert cli(ini, *same, "--categories", "H04") == 2
    assert "cnkispider task set p --categories H04" in capsys.readouterr().err
    assert cli(ini, *same, "--end", "2024-02-01") == 2
    assert "cnkispider task extend p 2024-02-01" in capsys.readouterr().err
    current = _store(ini).get("p")
    assert (current.type, current.categories) == ("patent", "G06")  # nothing written


# -- the steering documentation ------------------------------------------------------------------


def test_docs_steering_covers_every_task_action_and_the_readme_links_it():
    import argparse

    from cnkispider.cli import build_parser
    from tests.fixtures.crawl_harness import ROOT

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    task_actions = next(
        a for a in sub.choices["task"]._actions if isinstance(a, argparse._SubParsersAction)
    ).choices
    steering = (ROOT / "docs" / "STEERING.md").read_text("utf-8")
    for action in ("pause", "resume", "stop", "extend", "move"):
        assert action in task_actions
        assert f"cnkispider task {action} NAME" in steering, action
    assert "MySQL client" in steering and "web page" in steering.lower()
    readme = (ROOT / "README.md").read_text("utf-8")
    assert "(docs/STEERING.md)" in readme
    assert "`task resume`: clears a halt, or sets\nthe end date" not in readme  # the old words


def test_a_move_to_a_day_and_category_re_opens_what_follows_it_with_the_census(sqlite_url):
    """Census on, a task of some categories whose days split by category: `task move NAME DAY
    G06` crawls again that day's categories after G06, then every later day with its
    category rounds; what comes before the cursor stays done."""
    from cnkispider.store.schema import task

    engine = open_database(sqlite_url)
    store = TaskStore(engine, day_census=True)
    current, _ = store.register("t", "patent", "2024-01-01", "2024-01-02", "G06,H04")
    with engine.begin() as conn:
        for day in ("2024-01-01", "2024-01-02"):
            for code, note in (("*", "categories: census 9000"), ("G06", None), ("H04", None)):
                conn.execute(
                    round_.insert().values(
                        task_id=current.id, day=day, category=code, state="done", note=note,
                        attempts=1,
                    )
                )  # fmt: skip
        conn.execute(task.update().values(cur_date="2024-01-02", cur_code="*"))
    assert store.claim(current.id, "w") is None  # all done
    store.move_cursor("t", "2024-01-01", "G06")
    claimed = []
    while (r := store.claim(current.id, "w")) is not None:
        claimed.append((r.day, r.category))
        assert len(claimed) < 10
    assert sorted(claimed) == [
        ("2024-01-01", "H04"),
        ("2024-01-02", "*"),
        ("2024-01-02", "G06"),
        ("2024-01-02", "H04"),
    ]
    with engine.connect() as conn:
        before = conn.execute(
            sa.select(round_.c.state).where(
                round_.c.day == "2024-01-01", round_.c.category != "H04"
            )
        ).scalars()
        assert set(before) == {"done"}
    engine.dispose()


# -- issue 41: a command that fails writes nothing ------------------------------------------------


def _row(ini) -> dict:
    """The task row of 'p' as it is in the database, every column."""
    from cnkispider.store.schema import task

    store = _store(ini)
    with store.engine.connect() as conn:
        found = dict(conn.execute(sa.select(task).where(task.c.name == "p")).one()._mapping)
    store.engine.dispose()
    return found


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    ("before", "args", "says"),
    [
        # issue 41: the category was refused, and written all the same
        ((), ("move", "p", "2024-01-03", "ZZ9"), "cur_code 'ZZ9' is not one of the task's"),
        # a day outside the task's days: before its start, after its end
        ((), ("move", "p", "2019-01-01"), "2019-01-01 is not one of its days (2024-01-01 .. "),
        ((), ("move", "p", "2024-01-11"), "2024-01-11 is not one of its days"),
        # resuming a paused task with an end before its start made a row the workers skip
        (("pause", "p"), ("resume", "p", "--end", "2023-06-01"), "before the task's start_date"),
        ((), ("extend", "p", "2023-06-01"), "before the task's start_date"),
        ((), ("set", "p", "--categories", "ZZZ"), "'ZZZ' is unknown"),
        (("pause", "p"), ("pause", "p"), "is already paused"),
        (("stop", "p"), ("resume", "p"), "not paused"),
    ],
)
def test_a_refused_steering_command_writes_nothing(ini, capsys, before, args, says):
    """Each refusal is one line and exit status 2, and the row is exactly as it was."""
    _add(ini)
    if before:
        assert cli(ini, "task", *before) == 0
    row = _row(ini)
    capsys.readouterr()
    assert cli(ini, "task", *args) == 2
    assert says in _one_line(capsys.readouterr().err)
    assert _row(ini) == row
    assert cli(ini, "task", "list") == 0
    assert "BAD ROW" not in capsys.readouterr().out


def test_a_move_takes_any_day_of_the_task_and_an_open_end_ends_today(ini, capsys):
    """The first and the last day are the task's; with no end date, today in Beijing is its
    last day and tomorrow is refused."""
    import datetime as dt

    from cnkispider.clock import cnki_today

    _add(ini)
    for day in ("2024-01-01", "2024-01-10"):
        assert cli(ini, "task", "move", "p", day, "G06") == 0
        assert f"cursor {day} G06" in capsys.readouterr().out
    _add(ini, name="open", end=None)
    today = cnki_today()
    assert cli(ini, "task", "move", "open", today.isoformat()) == 0
    tomorrow = (today + dt.timedelta(days=1)).isoformat()
    assert cli(ini, "task", "move", "open", tomorrow) == 2
    assert f"{tomorrow} is not one of its days (2024-01-01 .. today" in capsys.readouterr().err
    assert _store(ini).get("open").cur_date == today


def test_a_move_repairs_a_cursor_edited_by_hand_into_a_bad_row(ini, capsys):
    """A MySQL client set a category the task does not have: workers skip the row, and `task
    move` (the row's only bad column is the one it writes) makes it good again."""
    from cnkispider.store.schema import task

    _add(ini)
    store = _store(ini)
    with store.engine.begin() as conn:
        conn.execute(task.update().values(cur_code="ZZ9"))
    assert store.claim(store.rows()[0].id, "w") is None  # skipped by workers
    capsys.readouterr()
    assert cli(ini, "task", "move", "p", "2024-01-02") == 0
    assert store.get("p").cur_code is None
    assert store.claim(store.get("p").id, "w").day == "2024-01-02"
    store.engine.dispose()


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "cannot be blank"),
        ("   ", "cannot be blank"),
        (" q", "begins or ends with a space"),
        ("12", "is a number"),
        ("a/b", "'/'"),
        ("x" * 101, "longer than 100 characters"),
    ],
)
def test_a_task_name_the_commands_and_the_page_cannot_find_is_refused(ini, capsys, name, says):
    assert cli(ini, "init-db") == 0
    args = ["task", "add", name, "--type", "patent", "--start", "2024-01-01"]
    assert cli(ini, *args) == 2
    assert says in _one_line(capsys.readouterr().err)
    assert cli(ini, "task", "list") == 0
    assert "no tasks" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("date", "code", "says"),
    [
        ("2019-01-01", "", "2019-01-01 is not one of its days (2024-01-01 .. 2024-01-10)"),
        ("2024-01-11", "", "2024-01-11 is not one of its days"),
        ("2024-01-03", "ZZ9", "'ZZ9' is not one of the task's categories"),
    ],
)
def test_the_page_s_preview_of_a_move_refuses_what_task_move_refuses(ini, date, code, says):
    """The web page previewed "will move the cursor ... to 2019-01-01" for a day `task move`
    refuses; its plan now runs the command's checks, writing nothing, and says why."""
    from cnkispider.config import load_config
    from cnkispider.store.db import open_database
    from cnkispider.web import actions

    _add(ini)
    row = _row(ini)
    config = load_config(ini)
    engine = open_database(config.database_url)
    try:
        with pytest.raises(ValueError, match=re.escape(says)):
            actions.plan(config, engine, "move", "p", {"date": date, "code": code})
        ok = actions.plan(config, engine, "move", "p", {"date": "2024-01-10", "code": ""})
    finally:
        engine.dispose()
    assert ok.ready and "2024-01-10" in ok.says
    assert _row(ini) == row
