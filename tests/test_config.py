"""config.ini: lookup order, environment overrides, and clear errors for bad input."""

from __future__ import annotations

import pytest

from cnkispider.config import load_config
from cnkispider.exceptions import ConfigError


def write(tmp_path, text, name="config.ini"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_apply_without_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(environ={})
    assert config.path is None or config.path.name == "config.ini"
    assert config.cnki["page_size"] == 50 and config.redis_url == ""


def test_shipped_config_ini_is_valid():
    """The config.ini in the repository loads with no error (every key in it is known)."""
    from pathlib import Path

    config = load_config(Path(__file__).resolve().parents[1] / "config.ini", environ={})
    assert config.task.type == "patent"


def test_unknown_key_names_file_section_and_key(tmp_path):
    path = write(tmp_path, "[database]\nurll = sqlite:///x.db\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    message = str(err.value)
    assert str(path) in message and "[database] urll" in message and "expected one of url" in message


def test_unknown_section_is_named(tmp_path):
    path = write(tmp_path, "[databse]\nurl = sqlite:///x.db\n")
    with pytest.raises(ConfigError, match=r"\[databse\]: unknown section"):
        load_config(path, environ={})


@pytest.mark.parametrize(
    ("section", "key", "value", "expected"),
    [
        ("cnki", "page_size", "fifty", "expected a whole number"),
        ("cnki", "page_size", "80", "<= 50"),
        ("task", "type", "thesis", "expected one of patent, paper, achievement"),
        ("task", "start_date", "2024-02-30", "expected a date as YYYY-MM-DD"),
        ("proxy", "enabled", "maybe", "expected true or false"),
        ("database", "url", "postgres://x", "expected a database URL"),
        ("redis", "url", "localhost:6379", "expected empty (embedded Redis)"),
    ],
)
def test_malformed_value_says_what_was_expected(tmp_path, section, key, value, expected):
    path = write(tmp_path, f"[{section}]\n{key} = {value}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    assert f"[{section}] {key}" in str(err.value) and expected in str(err.value)


def test_environment_overrides_the_file_and_is_named_in_errors(tmp_path):
    path = write(tmp_path, "[cnki]\npage_size = 20\n")
    assert load_config(path, environ={"CNKI_CNKI_PAGE_SIZE": "30"}).cnki["page_size"] == 30
    with pytest.raises(ConfigError, match=r"\$CNKI_CNKI_PAGE_SIZE: \[cnki\] page_size"):
        load_config(path, environ={"CNKI_CNKI_PAGE_SIZE": "x"})


def test_explicit_path_wins_over_working_directory(tmp_path, monkeypatch):
    write(tmp_path, "[task]\nname = from-cwd\n")
    other = tmp_path / "elsewhere"
    other.mkdir()
    explicit = write(other, "[task]\nname = explicit\n")
    monkeypatch.chdir(tmp_path)
    assert load_config(environ={}).task.name == "from-cwd"
    assert load_config(explicit, environ={}).task.name == "explicit"


def test_missing_explicit_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "nope.ini", environ={})


def test_relative_sqlite_path_is_beside_the_config_file(tmp_path, monkeypatch):
    path = write(tmp_path, "[database]\nurl = sqlite:///data/cnki.db\n")
    monkeypatch.chdir("/")
    assert load_config(path, environ={}).database_url == f"sqlite:///{(tmp_path / 'data/cnki.db').as_posix()}"


def test_end_before_start_in_config_is_rejected(tmp_path):
    path = write(tmp_path, "[task]\nstart_date = 2024-02-01\nend_date = 2024-01-01\n")
    with pytest.raises(ConfigError, match=r"\[task\] end_date: is before start_date"):
        load_config(path, environ={})


def test_bom_written_by_notepad_is_accepted(tmp_path):
    path = tmp_path / "config.ini"
    path.write_bytes("\ufeff[task]\nname = 中文任务\n".encode())
    assert load_config(path, environ={}).task.name == "中文任务"
