"""The command line's words (issue 28): --version, help for every positional argument, no INFO
line on a short command, and what `session login` says where no person can pass CNKI's check."""

from __future__ import annotations

import argparse
import sys
import tomllib

import pytest

from cnkispider.cli import build_parser, main
from tests.fixtures import launcher
from tests.fixtures.crawl_harness import ROOT


def test_version_is_the_project_s(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    version = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["version"]
    assert capsys.readouterr().out.strip() == f"cnkispider {version}"


def _parsers(parser, path=("cnkispider",)):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_every_positional_argument_has_help():
    missing = [
        f"{' '.join(path)} {action.dest}"
        for path, parser in _parsers(build_parser())
        for action in parser._actions
        if not action.option_strings
        and not isinstance(action, argparse._SubParsersAction)
        and not action.help
    ]
    assert missing == []


@pytest.mark.slow  # over a second alone: commands in subprocesses and an embedded Redis
def test_a_short_command_prints_no_info_line_and_the_embedded_redis_line_goes_to_the_log(
    tmp_path,
):
    ini = tmp_path / "config.ini"
    ini.write_text(
        f"[database]\nurl = sqlite:///{tmp_path / 'db.sqlite'}\n[redis]\nurl =\n"
        f"[crawl]\ndata_dir = {tmp_path / 'data'}\n",
        encoding="utf-8",
    )
    result = launcher.run(
        [sys.executable, "-m", "cnkispider.cli", "--config", str(ini), "session", "list"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("no sessions")
    assert " INFO " not in result.stdout + result.stderr, result.stderr
    log = (tmp_path / "data" / "cnkispider.log").read_text("utf-8")
    assert "Embedded Redis running" in log


def test_session_login_with_no_display_points_to_the_paste_and_cdp(monkeypatch):
    from cnkispider.sessions.login import LoginError, has_display, login

    assert not has_display({}, "linux") and has_display({"DISPLAY": ":0"}, "linux")
    assert has_display({}, "win32")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    with pytest.raises(LoginError) as refused:
        login("https://kns.cnki.net/kns8s/", ("kns.cnki.net",), browser=sys.executable)
    words = str(refused.value)
    assert "no display" in words
    assert "session add --from-curl -" in words and "--cdp" in words


def test_headless_says_it_cannot_pass_a_real_check():
    from cnkispider.sessions.login import HEADLESS

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    session = sub.choices["session"]
    login = next(a for a in session._actions if isinstance(a, argparse._SubParsersAction)).choices[
        "login"
    ]
    help_text = next(a.help for a in login._actions if "--headless" in a.option_strings)
    assert "cannot" in help_text or "no person can pass" in help_text
    assert "no person can pass CNKI's check" in HEADLESS


# -- issue 41: the command line in the operator's language --------------------------------------


@pytest.fixture
def english_after():
    """The process's language back to English after a test that changed it."""
    from cnkispider.words import i18n

    yield
    i18n.activate("en")


def _ini(tmp_path, *extra: str):
    ini = tmp_path / "config.ini"
    ini.write_text(
        f"[database]\nurl = sqlite:///{tmp_path / 'db.sqlite'}\n[redis]\nurl =\n"
        f"[crawl]\ndata_dir = {tmp_path / 'data'}\n" + "".join(extra),
        encoding="utf-8",
    )
    return ini


def test_status_speaks_the_locale_s_language_unless_ui_language_says(
    tmp_path, monkeypatch, capsys, english_after
):
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    for name in ("LANGUAGE", "LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(name, raising=False)
    assert main(["--config", str(_ini(tmp_path)), "init-db"]) == 0
    capsys.readouterr()
    assert main(["--config", str(_ini(tmp_path)), "status"]) == 0
    chinese = capsys.readouterr().out
    assert "尚无任务" in chinese and "数据库时钟" in chinese, chinese
    english = _ini(tmp_path, "[ui]\nlanguage = en\n")
    assert main(["--config", str(english), "status"]) == 0
    assert "no tasks yet" in capsys.readouterr().out


def test_a_bad_ui_language_names_its_key(tmp_path, capsys):
    assert main(["--config", str(_ini(tmp_path, "[ui]\nlanguage = klingon\n")), "status"]) == 2
    assert "[ui] language: expected zh_CN, en or nothing" in capsys.readouterr().err


def test_a_config_error_names_the_file_as_typed_not_as_a_path_object(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c4.ini").write_text("[crawl]\nlog_level = info\n[crawl]\n", encoding="utf-8")
    assert main(["--config", "c4.ini", "status"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: c4.ini: [-]: line 3: section [crawl] appears twice", err


# -- issue 41, point 2: every word the operator reads goes through gettext -----------------------


class _Marked:
    """A catalogue that brackets every word it is asked for: a line printed without going
    through gettext shows no bracket."""

    def gettext(self, message):
        return f"«{message}»"

    def ngettext(self, singular, plural, n):
        return f"«{singular if n == 1 else plural}»"


def test_export_session_and_demo_lines_are_looked_up_in_the_catalogue(
    tmp_path, monkeypatch, capsys, english_after
):
    from cnkispider.words import i18n

    ini = _ini(tmp_path, "[task]\ntype = patent\n")
    assert main(["--config", str(ini), "init-db"]) == 0
    monkeypatch.setattr(i18n, "translation", lambda language: _Marked())
    capsys.readouterr()

    assert main(["--config", str(ini), "export", "--out", str(tmp_path / "out.csv")]) == 0
    line = capsys.readouterr().err.strip()
    assert line.startswith("«exported 0 «patent» documents to ") and line.endswith("»"), line

    missing = tmp_path / "no such folder" / "out.csv"
    assert main(["--config", str(ini), "export", "--out", str(missing)]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("«error: «--out ") and "does not exist»»" in line, line

    assert (
        main(
            [
                "--config",
                str(ini),
                "session",
                "add",
                "--egress",
                "u:p@h:1",
                "--cookie-string",
                "a=1",
            ]
        )
        == 2
    )
    assert "«error: «--egress: give the proxy" in capsys.readouterr().err

    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert main(["demo"]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("«error: «the demo is not part of the program") and "standin/" in line


def test_the_export_line_is_chinese_for_a_chinese_operator(tmp_path, capsys, english_after):
    """Passes once the catalogue has the Chinese of the export line (make catalogue)."""
    english = _ini(tmp_path, "[task]\ntype = patent\n[ui]\nlanguage = en\n")
    assert main(["--config", str(english), "init-db"]) == 0
    out = str(tmp_path / "out.csv")
    capsys.readouterr()
    assert main(["--config", str(english), "export", "--out", out]) == 0
    assert "exported 0 patent documents to " in capsys.readouterr().err
    chinese = _ini(tmp_path, "[task]\ntype = patent\n[ui]\nlanguage = zh_CN\n")
    assert main(["--config", str(chinese), "export", "--out", out]) == 0
    line = capsys.readouterr().err
    assert "exported" not in line and "documents" not in line and out in line, line


def test_task_help_is_looked_up_in_the_catalogue_argparse_s_own_words_too(
    monkeypatch, capsys, english_after
):
    from cnkispider.words import i18n

    monkeypatch.setattr(i18n, "translation", lambda language: _Marked())
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as stop:
        main(["task", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("«usage: »cnkispider task"), out
    assert "«positional arguments»:" in out and "«options»:" in out, out
    assert "«show this help message and exit»" in out, out
    # every help line: argparse writes the help from column 24 on (at 100 columns), beside its
    # option or action, or below it where that is longer; outside the brackets, nothing
    helps = [
        line[24:]
        for line in out.split("\n\n", 1)[1].splitlines()
        if line.startswith("  ") and not line.strip().startswith("{")  # the actions' list
    ]
    assert len(helps) > 12, out
    depth, unmarked = 0, []
    for char in " ".join(helps):
        depth += {"«": 1, "»": -1}.get(char, 0)
        if depth == 0 and char not in " »":
            unmarked.append(char)
    assert depth == 0 and unmarked == [], out
    assert "«add, list, show and steer tasks»" not in out  # the parent's line, not task's own
    assert "«one task with its progress»" in out and "«config.ini to use" in out, out

    with pytest.raises(SystemExit) as stop:
        main(["task", "add"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "«cnkispider task add: error: «the following arguments are required: name»" in err, err


def test_argparse_s_words_are_argparse_s():
    """The words cli/argparse_words.py marks for the catalogue are the ones argparse looks up:
    one that a Python release rewords would be translated no more."""
    import inspect

    from cnkispider.cli.argparse_words import WORDS

    source = inspect.getsource(argparse)
    missing = [word for word in WORDS if repr(word) not in source]
    assert missing == []


def test_a_bad_task_row_and_refused_task_commands_are_looked_up_in_the_catalogue(
    tmp_path, monkeypatch, capsys, english_after
):
    """A BAD ROW's reason, a refused `task move` and `task set`, a bad --query: each sentence
    goes through gettext, the values in it (names, codes, options, the expression's words)
    stay as written."""
    import sqlalchemy as sa

    from cnkispider.store.db import open_database
    from cnkispider.store.schema import task
    from cnkispider.words import i18n

    ini = _ini(tmp_path)
    assert main(["--config", str(ini), "init-db"]) == 0
    for name in ("t1", "bad"):
        assert (
            main(
                ["--config", str(ini), "task", "add", name, "--type", "patent"]
                + ["--start", "2024-01-01", "--end", "2024-01-31"]
            )
            == 0
        )
    engine = open_database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with engine.begin() as conn:
        conn.execute(
            task.update().where(task.c.name == "bad").values(cur_date="2024-01-02", cur_code="ZZ9")
        )
    engine.dispose()
    monkeypatch.setattr(i18n, "translation", lambda language: _Marked())
    capsys.readouterr()

    assert main(["--config", str(ini), "task", "list"]) == 0
    out = capsys.readouterr().out
    assert "BAD ROW" in out and "«cur_code 'ZZ9' is not one of the task's categories»" in out, out

    assert main(["--config", str(ini), "task", "move", "t1", "2024-01-05", "ZZ9"]) == 2
    err = capsys.readouterr().err
    assert "«cur_code 'ZZ9' is not one of the task's categories» (nothing changed)»" in err, err

    assert main(["--config", str(ini), "task", "set", "t1"]) == 2
    err = capsys.readouterr().err
    assert "«task set: give --categories, --type, --depth and/or --query»" in err, err

    assert main(["--config", str(ini), "task", "set", "t1", "--query", "SU='a' XOR"]) == 2
    err = capsys.readouterr().err
    assert "«--query: «at character 8: «expected AND, OR or NOT, got 'XOR'»»»" in err, err
    assert main(["--config", str(ini), "task", "set", "t1", "--query", "SU="]) == 2
    err = capsys.readouterr().err
    assert "«expected a value ('text' or a word), got the end»" in err, err
    assert main(["--config", str(ini), "task", "set", "t1", "--query", "ZZ='a'"]) == 2
    err = capsys.readouterr().err
    assert "«unknown field 'ZZ' (fields: SU, " in err, err
    with sa.create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}").connect() as conn:
        assert conn.execute(sa.select(task.c.query)).scalars().all() == [None, None]


def test_errors_of_the_database_redis_export_and_refresh_counts_are_looked_up(
    tmp_path, monkeypatch, capsys, english_after
):
    """The one line of an error (database, Redis, export, refresh-counts) goes through gettext,
    the values in it (a URL, a name, the library's own words) as they were written."""
    from cnkispider.words import i18n
    from tests.fixtures.fault_services import free_port

    def ini(name: str, database: str, redis_url: str = "", extra: str = ""):
        path = tmp_path / name
        path.write_text(
            f"[database]\nurl = {database}\n[redis]\nurl = {redis_url}\n"
            f"[crawl]\ndata_dir = {tmp_path / 'data'}\n{extra}",
            encoding="utf-8",
        )
        return str(path)

    good = ini("good.ini", f"sqlite:///{tmp_path / 'db.sqlite'}", extra="[task]\ntype = patent\n")
    assert main(["--config", good, "init-db"]) == 0
    assert (
        main(["--config", good, "task", "add", "p", "--type", "patent", "--start", "2024-01-01"])
        == 0
    )
    monkeypatch.setattr(i18n, "translation", lambda language: _Marked())
    capsys.readouterr()

    (tmp_path / "a folder").mkdir()  # a database file that is a folder
    unusable = f"sqlite:///{tmp_path / 'a folder'}"
    assert main(["--config", ini("bad-db.ini", unusable), "init-db"]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"«error: «cannot use the database {unusable}: "), line
    assert "unable to open database file" in line and line.endswith("»»"), line

    closed = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    no_redis = ini("no-redis.ini", f"sqlite:///{tmp_path / 'db.sqlite'}", closed)
    assert main(["--config", no_redis, "session", "list"]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"«error: «Redis at {closed} is not reachable: "), line

    assert main(["--config", good, "export", "--format", "xlsx"]) == 2
    line = capsys.readouterr().err.strip()
    assert line == "«error: «--format xlsx: give a file with --out (a workbook is not text)»»"

    assert main(["--config", good, "refresh-counts", "nosuchtask"]) == 2
    assert capsys.readouterr().err.strip() == "«error: «refresh-counts: no task 'nosuchtask'»»"
    assert main(["--config", good, "refresh-counts", "p"]) == 2
    line = capsys.readouterr().err.strip()
    assert line == "«error: «refresh-counts: «patent» rows carry no counts on CNKI's list»»", line


def test_category_and_selection_problems_are_looked_up_in_the_catalogue(
    tmp_path, monkeypatch, capsys, english_after
):
    """A task's categories and its --where rule are typed by the operator: what is wrong with
    them is a sentence of the catalogue, the codes and the rule as typed."""
    from cnkispider.words import i18n

    ini = _ini(tmp_path)
    assert main(["--config", str(ini), "init-db"]) == 0
    monkeypatch.setattr(i18n, "translation", lambda language: _Marked())
    capsys.readouterr()
    add = ["--config", str(ini), "task", "add", "t", "--type", "patent", "--start", "2024-01-01"]

    assert main([*add, "--categories", "g06,ZZZ9"]) == 2
    err = capsys.readouterr().err
    assert "«categories for «patent» (IPC tree): «'g06' should be 'G06' (codes are" in err, err
    assert "«'ZZZ9' is unknown (nearest: " in err, err

    assert main([*add, "--categories", "G06;H04"]) == 2
    err = capsys.readouterr().err
    assert "«categories 'G06;H04': separate codes with commas, e.g. 'G06,H04'»" in err, err

    assert main([*add, "--categories", "G06", "--where", "cited >= many"]) == 2
    err = capsys.readouterr().err
    assert "«--where: 'cited >= many': >= needs a number»" in err, err


def test_help_and_argparse_s_errors_follow_ui_language_of_the_config_ini(
    tmp_path, monkeypatch, capsys, english_after
):
    """--help is printed while the line is parsed, before config.ini is loaded: the language
    is read from the config.ini the line names first ([ui] language, else the locale)."""
    monkeypatch.setenv("LANG", "C.UTF-8")
    for name in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "CNKI_UI_LANGUAGE"):
        monkeypatch.delenv(name, raising=False)
    chinese = _ini(tmp_path, "[ui]\nlanguage = zh_CN\n")
    with pytest.raises(SystemExit) as ended:
        main(["task", "--help", "--config", str(chinese)])
    assert ended.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("用法：") and "显示此帮助信息并退出" in out, out[:300]
    with pytest.raises(SystemExit):
        main([f"--config={chinese}", "task", "add"])  # no name: argparse's own error
    assert "以下参数是必需的" in capsys.readouterr().err
    (tmp_path / "en").mkdir()
    with pytest.raises(SystemExit):
        main(["task", "--help", "--config", str(_ini(tmp_path / "en"))])  # no [ui]: the locale's
    assert capsys.readouterr().out.startswith("usage: ")
