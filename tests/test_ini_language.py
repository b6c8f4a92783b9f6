"""config.ini's parse errors in the language its ``[ui] language`` asks for (issue 48.3): the
language is read leniently before the file is parsed, so a file configparser refuses is still
refused in Chinese when it says zh_CN, and in English when it says en."""

from __future__ import annotations

import re

import pytest

from cnkispider.config.inifile import ui_language
from cnkispider.words import i18n

LATIN_WORD = re.compile(r"[A-Za-z]{2,}")

#: (what is wrong, config.ini's text after its [ui] section or before it, the English words)
BROKEN = {
    "a line before any section": ("stray = 1\n{ui}", "comes before any [section]"),
    "a key twice": ("{ui}[task]\ntype = paper\ntype = patent\n", "appears twice in [task]"),
    "a section twice": ("{ui}[crawl]\n[crawl]\n", "section [crawl] appears twice"),
    "a stray line": ("{ui}[task]\nname = x\n[[x\n", "not key = value"),
}


@pytest.fixture
def english_locale(monkeypatch):
    monkeypatch.setenv("LANG", "C.UTF-8")
    for name in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "CNKI_UI_LANGUAGE"):
        monkeypatch.delenv(name, raising=False)
    yield
    i18n.activate("en")


def _error(capsys, tmp_path, text: str) -> str:
    from cnkispider.cli import main

    ini = tmp_path / "config.ini"
    ini.write_text(text, encoding="utf-8")
    assert main(["--config", str(ini), "task", "list"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_file_configparser_refuses_is_refused_in_chinese(case, tmp_path, english_locale, capsys):
    text, english = BROKEN[case]
    err = _error(capsys, tmp_path, text.format(ui="[ui]\nlanguage = zh_CN\n"))
    assert err.startswith("错误：") and english not in err, err
    # the file's own text ('stray', 'type', [crawl], [[x) is quoted; no English word around it
    words = set(LATIN_WORD.findall(err.replace(str(tmp_path), ""))) - {
        "config",
        "ini",
        "stray",
        "type",
        "crawl",
        "task",
    }
    assert words <= {"paper", "patent", "name", "ui", "language", "zh_CN"}, err


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_the_same_file_asking_for_english_is_refused_in_english(
    case, tmp_path, english_locale, capsys
):
    text, english = BROKEN[case]
    err = _error(capsys, tmp_path, text.format(ui="[ui]\nlanguage = en\n"))
    assert err.startswith("error: ") and english in err, err


def test_the_language_is_read_past_what_configparser_refuses(tmp_path):
    ini = tmp_path / "config.ini"
    ini.write_text(
        "stray line\n[task]\n  language = en\nlanguage = en\n[ui]\n; language = en\n"
        "language = zh_CN\nlanguage = zh_CN\n[crawl]\nlanguage = en\n",
        encoding="gb18030",
    )
    assert ui_language(ini) == "zh_CN"
    ini.write_text("[task]\nlanguage = zh_CN\n", encoding="utf-8")
    assert ui_language(ini) is None
    assert ui_language(tmp_path / "missing.ini") is None
