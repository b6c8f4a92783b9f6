"""The command line's twin of tests/test_web_words.py (issue 48.3): every command's output in
zh_CN (`--help` of each command, `status`, `task list/show/plan`, the refusals of config.ini and
of dates, the run's closing lines) shows no Latin word outside the shared allow-list of names,
codes and units (tests/fixtures/latin.py) and what the operator typed."""

from __future__ import annotations

import argparse
import re
import uuid

import pytest
import redis

from cnkispider.cli import build_parser, main
from cnkispider.config import SCHEMA
from cnkispider.items import DEPTHS
from cnkispider.words import i18n
from tests.fixtures.latin import ADDRESS, latin_words

REDIS_URL = "redis://127.0.0.1:6379/0"
# What the operator types or reads back as it is, set aside before the words are counted: a
# value quoted back ('novel', "SU='碳中和'"), an address or path, a host (kns.cnki.net), a file's
# extension (.jsonl), config.ini's "[section] key" and its snake_case keys (look_back_days), an
# option (--start, -s)
_TYPED = re.compile(
    r"'[^']*'|\"[^\"]*\"|" + ADDRESS.pattern + r"|\b[\w-]+(?:\.[\w-]+)+\b|(?<![\w.])\.[a-z]+\b"
    r"|\[\w+\](?: [a-z_]+)?|\b[a-z]+(?:_[a-z]+)+\b|(?<![\w-])--?[A-Za-z][\w-]*|\{[^}]*\}"
)


def _parsers(parser, path=()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


@pytest.fixture
def chinese(tmp_path, monkeypatch):
    """config.ini asking for zh_CN, a SQLite database, Redis under a prefix of its own."""
    for name in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "CNKI_UI_LANGUAGE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")
    prefix = f"cnkitest:{uuid.uuid4().hex[:10]}:"
    ini = tmp_path / "config.ini"
    ini.write_text(
        f"[database]\nurl = sqlite:///{tmp_path / 'db.sqlite'}\n"
        f"[redis]\nurl = {REDIS_URL}\nprefix = {prefix}\n"
        f"[crawl]\ndata_dir = {tmp_path / 'data'}\n[ui]\nlanguage = zh_CN\n",
        encoding="utf-8",
    )
    yield ini
    i18n.activate("en")
    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def _said(capsys, ini, *args) -> str:
    try:
        main(["--config", str(ini), *args])
    except SystemExit:  # --help and argparse's refusals
        pass
    out = capsys.readouterr()
    return out.out + out.err


def _typed() -> list[str]:
    """What the command line's syntax names: its commands, each argument's metavar (START, N)
    and positional name (name, date), the values of its choices (patent, csv, on), and
    config.ini's sections and keys."""
    out = {"cnkispider"}
    for path, parser in _parsers(build_parser()):
        out.update(path)
        for action in parser._actions:
            metavar = action.metavar or (action.dest.upper() if action.option_strings else None)
            out.update(metavar if isinstance(metavar, tuple) else [metavar or action.dest])
            out.update(str(c) for c in (action.choices or ()))
    for section, keys in SCHEMA.items():
        out.update([section, *keys])
    # the values a help names as the operator types them: a task's depths, the built-in
    # category spec, a keys file's columns, a rule's placeholder, the SQL a grant allows
    out.update([*DEPTHS, "builtin", "dbname", "filename", "RULE", "INSERT"])
    return sorted(v for v in out if v and v not in ("help", "SUPPRESS", "==SUPPRESS=="))


def _left(text: str, data: list[str], tmp_path) -> set[str]:
    text = text.replace(str(tmp_path), " ")
    return latin_words(_TYPED.sub(" ", text), [*data, *_typed()])


def test_every_help_screen_is_chinese(chinese, capsys, tmp_path):
    left = {}
    for path, _parser in _parsers(build_parser()):
        words = _left(_said(capsys, chinese, *path, "--help"), [], tmp_path)
        if words:
            left[" ".join(path) or "(top)"] = sorted(words)
    assert left == {}, "\n".join(f"{p}: {' '.join(w)}" for p, w in left.items())


def test_the_task_commands_status_and_refusals_are_chinese(chinese, capsys, tmp_path):
    runs = [
        ("task", "add", "t1", "--type", "patent", "--start", "2024-01-01", "--end", "2024-01-03",
         "--categories", "G06,H04"),
        ("task", "add", "p1", "--type", "paper", "--start", "2024-01-01", "--end", "2024-01-02",
         "--depth", "list"),
        ("task", "list"),
        ("task", "show", "t1"),
        ("task", "plan", "t1"),
        ("task", "plan", "p1"),
        ("task", "move", "t1", "2024-01-02"),
        ("task", "show", "t1"),
        ("status",),
        ("status", "--task", "t1"),
        ("task", "add", "t2", "--type", "patent", "--start", "2024-1-5"),
        ("task", "add", "t3", "--type", "patent", "--start", "2024-02-30"),
        ("task", "move", "t1", "20240301"),
        ("task", "extend", "t1", "2023-01-01"),
        ("task", "show", "nosuch"),
        ("task", "plan", "nosuch"),
        ("task", "set", "t1", "--categories", "ZZ9"),
        ("task", "add", "t4", "--type", "novel", "--start", "2024-01-01"),
        ("task", "pause", "t1"),
        ("task", "resume", "t1"),
        ("task", "extend", "t1", "2024-01-05"),
        ("task", "reopen", "t1", "2024-01-01"),
        ("task", "set", "t1", "--depth", "list"),
        ("task", "stop", "p1"),
        ("task", "list"),
        ("session", "list"),
        ("admin", "grant-worker", "w1"),
        ("init-db",),
        ("recrawl", "--task", "nosuch"),
        ("run", "-s", "CONCURENT_REQUESTS=4"),
        ("export", "--task", "nosuch", "--format", "csv"),
    ]  # fmt: skip
    data = ["t1", "t2", "t3", "t4", "p1", "nosuch", "novel", "ZZ9", "G06", "H04", "G06,H04", *"ABCDEFGH",
            "CONCURENT_REQUESTS", "CONCURRENT_REQUESTS", "2024-1-5", "20240301", "w1",
            "mysql+pymysql"]  # fmt: skip
    left = {}
    for args in runs:
        words = _left(_said(capsys, chinese, *args), data, tmp_path)
        if words:
            left[" ".join(args)] = sorted(words)
    assert left == {}, "\n".join(f"{p}: {' '.join(w)}" for p, w in left.items())


@pytest.mark.parametrize(
    "text",
    [
        "stray = 1\n[ui]\nlanguage = zh_CN\n",
        "[ui]\nlanguage = zh_CN\n[task]\ntype = paper\ntype = patent\n",
        "[ui]\nlanguage = zh_CN\n[task]\nstart_date = 2024-1-5\n",
        "[ui]\nlanguage = zh_CN\n[task]\nend_date = 2024-01-05\n",
        "[ui]\nlanguage = zh_CN\n[crawl]\nconcurrency = many\n",
        "[ui]\nlanguage = zh_CN\n[nosection]\n",
    ],
)
def test_config_ini_s_refusals_are_chinese(text, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LANG", "C.UTF-8")
    for name in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "CNKI_UI_LANGUAGE"):
        monkeypatch.delenv(name, raising=False)
    ini = tmp_path / "config.ini"
    ini.write_text(text, encoding="utf-8")
    try:
        said = _said(capsys, ini, "task", "list")
    finally:
        i18n.activate("en")
    assert said.startswith("错误："), said
    data = ["stray", "type", "paper", "patent", "task", "start_date", "end_date", "crawl",
            "concurrency", "many", "nosection", "ui", "language", "zh_CN", "2024-1-5"]  # fmt: skip
    assert _left(said, data, tmp_path) == set(), said


def test_the_run_s_closing_lines_are_chinese(chinese, capsys, tmp_path):
    """The summary `run` prints (its rounds, documents, errors, rates, the plan it compares
    with and the days skipped), from the database the run wrote."""
    from cnkispider.status import run_summary
    from cnkispider.store.db import open_database
    from cnkispider.store.schema import error_code, task, task_skip

    main(["--config", str(chinese), "task", "add", "t1", "--type", "patent", "--start",
          "2024-01-01", "--end", "2024-01-03", "--categories", "G06,H04"])  # fmt: skip
    engine = open_database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        with engine.begin() as conn:
            tid = conn.execute(task.select().where(task.c.name == "t1")).one().id
            conn.execute(
                task_skip.insert(),
                [{"task_id": tid, "day": d, "command": "move"} for d in ("2024-01-02", "x")],
            )
            conn.execute(
                error_code.insert().values(task_id=tid, day="2024-01-01", category="G06",
                                           reason="timeout", state="open")
            )  # fmt: skip
        stats = {
            "elapsed_seconds": 4000.0,
            "response_received_count": 900,
            "item_scraped_count": 300,
            "rounds/done": 2,
            "errors/list/timeout": 2,
        }
        text = ""
        for reason in ("up_to_date", "finished", "halted", "shutdown", None):
            text += run_summary(
                engine, "t1", {**stats, "finish_reason": reason} if reason else stats
            )
    finally:
        engine.dispose()
    capsys.readouterr()
    words = _left(text, ["t1", "G06", "timeout", "list/timeout", "x"], tmp_path)
    assert words == set(), text


def test_status_in_every_state_is_chinese(chinese, capsys, tmp_path):
    """`status` with a task halted, one paused, one done, a row a worker skips, a live worker
    with its last error and rows in both error tables."""
    import datetime as dt

    from cnkispider.store.db import open_database
    from cnkispider.store.schema import error_code, error_link, task, worker
    from cnkispider.watch.halting import Breaker
    from tasks.flow import TaskStore
    from tasks.phase import Phase

    engine = open_database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    store = TaskStore(engine)
    ids = {}
    for name in ("run", "halt", "pause", "done", "typo"):
        current, _created = store.register(name, "patent", "2024-01-01", "2024-01-02", "G06,H04")
        ids[name] = current.id
    worker_id = "pc-7:4242:ab12"
    done = store.claim(ids["run"], worker_id)
    store.mark_seeded(done.id, worker_id, "e")
    store.close_round(done.id, total=0)
    failed = store.claim(ids["run"], worker_id)
    store.mark_seeded(failed.id, worker_id, "e")
    store.close_round(failed.id, total=None)
    store.claim(ids["run"], worker_id)
    breaker = Breaker(consecutive=2)
    breaker.failed("timeout", "TimeoutError")
    store.halt(ids["halt"], breaker.failed("timeout", "TimeoutError"))
    store.pause(ids["pause"])
    store.set_phase(ids["done"], Phase.DONE)
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    with engine.begin() as conn:
        conn.execute(task.update().where(task.c.id == ids["typo"]).values(end_date="2024-13-45"))
        conn.execute(
            worker.insert().values(id=worker_id, task_id=ids["run"], host="pc-7", pid=4242,
                                   started_at=now, last_seen=now + dt.timedelta(hours=1),
                                   pages=120, items=40, errors=1, state="running",
                                   challenges=0, last_error="timeout: TimeoutError")
        )  # fmt: skip
        conn.execute(
            error_code.insert().values(task_id=ids["run"], round_id=failed.id, day="2024-01-01",
                                       category="H04", page=3, reason="timeout",
                                       detail="TimeoutError", attempts=1, state="open")
        )  # fmt: skip
        conn.execute(
            error_link.insert().values(task_id=ids["run"], round_id=failed.id,
                                       doc_type="patent", url="http://x/d", dbname="SCPD",
                                       filename="CN1234567A", title="一种装置", reason="parse",
                                       detail="ValueError", attempts=3, state="permanent")
        )  # fmt: skip
    engine.dispose()
    data = ["run", "halt", "pause", "done", "typo", worker_id, "pc-7", "G06", "H04", "timeout",
            "TimeoutError", "ValueError", "parse", "2024-13-45"]  # fmt: skip
    left = {}
    for args in (("status",), ("status", "--task", "run"), ("task", "list"), ("task", "show",
                 "halt"), ("task", "plan", "run")):  # fmt: skip
        said = _said(capsys, chinese, *args)
        words = _left(said, data, tmp_path)
        if words:
            left[" ".join(args)] = (sorted(words), said)
    assert left == {}, "\n".join(f"{p}: {' '.join(w)}\n{said}" for p, (w, said) in left.items())


@pytest.mark.slow  # a crawl in a worker subprocess
def test_a_real_run_s_closing_lines_are_chinese(census_crawl, monkeypatch):
    """`run` on the stand-in, in zh_CN ([ui] language by its environment variable), of a task
    moved past its first day: its closing lines are Chinese, the skipped day listed among them."""
    monkeypatch.setenv("CNKI_UI_LANGUAGE", "zh_CN")
    setup = census_crawl("2024-03-01", categories="G,H", end="2024-03-03")
    setup.write()
    add = ["task", "add", setup.task, "--type", "patent", "--categories", "G,H"]
    setup.run_ok(*add, "--start", "2024-03-01", "--end", "2024-03-03")
    setup.run_ok("task", "move", setup.task, "2024-03-02")
    run = setup.run_ok("run", "--task", setup.task)
    summary = run.stdout[run.stdout.index("== cnkispider") :]
    assert "跳过的日期      2024-03-01（由 move 命令跳过）" in summary, summary
    data = [setup.task, "G", "H", "G,H", "2024-03-01"]
    assert _left(summary, data, setup.tmp_path) == set(), summary
