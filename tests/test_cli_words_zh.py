"""The command line's words in Chinese (issue 48.3): a run's finish reason is said, not shown
as its code (``结束原因 up_to_date``), and the words of issue 48's refusals are Chinese."""

from __future__ import annotations

import re

import pytest

from cnkispider.words import i18n
from cnkispider.words.vocabulary import WORDS, word
from tests.fixtures.crawl_harness import ROOT

LATIN_WORD = re.compile(r"[A-Za-z]{2,}")


def _finish_reasons() -> set[str]:
    # every reason the feeder closes a run with, read from its source: a new one needs a word
    source = "".join(p.read_text("utf-8") for p in (ROOT / "tasks").glob("feeder*.py"))
    return set(re.findall(r'_close\("([a-z_]+)"', source)) | {"shutdown", "finished"}


@pytest.mark.parametrize("reason", sorted(_finish_reasons()))
def test_every_finish_reason_has_a_chinese_word(reason):
    assert reason in WORDS
    i18n.activate("zh_CN")
    try:
        said = word(reason)
    finally:
        i18n.activate("en")
    assert not LATIN_WORD.search(said), said


def test_the_run_summary_says_its_finish_reason_in_chinese(tmp_path):
    from cnkispider.status import run_summary
    from cnkispider.store.db import open_database
    from tasks.flow import TaskStore

    engine = open_database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        TaskStore(engine).register("t1", "paper", "2024-01-01", "2024-01-05")
        i18n.activate("zh_CN")
        try:
            text = run_summary(engine, "t1", {"finish_reason": "up_to_date", "elapsed_seconds": 1})
        finally:
            i18n.activate("en")
    finally:
        engine.dispose()
    assert "up_to_date" not in text and "已是最新" in text


@pytest.fixture
def chinese_locale(monkeypatch):
    for name in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "CNKI_UI_LANGUAGE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    yield
    i18n.activate("en")


def _refusal(capsys, ini) -> str:
    from cnkispider.cli import main

    assert main(["--config", str(ini), "task", "list"]) == 2
    return capsys.readouterr().err


def test_a_language_we_have_no_words_for_is_refused_in_the_locale_s(
    tmp_path, chinese_locale, capsys
):
    ini = tmp_path / "config.ini"
    ini.write_text("[ui]\nlanguage = fr\n", encoding="utf-8")
    err = _refusal(capsys, ini)
    assert "错误" in err and "'fr'" in err and "expected" not in err


def test_a_key_given_twice_is_said_in_ui_language(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LANG", "C.UTF-8")
    for name in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "CNKI_UI_LANGUAGE"):
        monkeypatch.delenv(name, raising=False)
    ini = tmp_path / "config.ini"
    ini.write_text("[ui]\nlanguage = zh_CN\n[task]\ntype = paper\ntype = patent\n", "utf-8")
    try:
        err = _refusal(capsys, ini)
    finally:
        i18n.activate("en")
    assert "出现两次" in err and "appears twice" not in err


@pytest.mark.slow  # scrapy in a subprocess
@pytest.mark.parametrize("task", ["t1", "nosuch"])
def test_scrapy_crawl_of_another_type_s_task_or_none_is_one_chinese_line(tmp_path, task):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from cnkispider.cli import main

    ini = tmp_path / "config.ini"
    ini.write_text(
        f"[database]\nurl = sqlite:///{tmp_path / 'db.sqlite'}\n"
        "[redis]\nurl = redis://127.0.0.1:6379/0\n[ui]\nlanguage = zh_CN\n",
        encoding="utf-8",
    )
    try:
        assert main(["--config", str(ini), "task", "add", "t1", "--type", "paper",
                     "--start", "2024-01-01", "--end", "2024-01-02"]) == 0  # fmt: skip
    finally:
        i18n.activate("en")
    scrapy = subprocess.run(
        [str(Path(sys.executable).with_name("scrapy")), "crawl", "patent", "-a", f"task={task}"],
        cwd=ROOT,
        env={**os.environ, "CNKI_CONFIG": str(ini)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert scrapy.returncode == 2, scrapy.stderr[-2000:]
    lines = scrapy.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("错误："), scrapy.stderr[-2000:]
    assert task in lines[0]


def test_a_cookie_file_that_cannot_be_read_is_said_in_chinese(tmp_path, capsys):
    from cnkispider.cli import main

    ini = tmp_path / "config.ini"
    ini.write_text(
        f"[database]\nurl = sqlite:///{tmp_path / 'db.sqlite'}\n[redis]\nurl =\n"
        f"[crawl]\ndata_dir = {tmp_path / 'data'}\n[ui]\nlanguage = zh_CN\n",
        encoding="utf-8",
    )
    missing = tmp_path / "cookies.txt"
    try:
        code = main(["--config", str(ini), "session", "add", "--cookie-file", str(missing)])
    finally:
        i18n.activate("en")
    err = capsys.readouterr().err
    assert code == 2 and "无法读取 cookie 文件" in err and "cannot read" not in err, err
