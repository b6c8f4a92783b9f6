"""A deepening task's rule (tasks/selection.py): conditions on the list row, a keys file, and
one clear error for a rule that cannot be read, with nothing written."""

from __future__ import annotations

import pytest

from cnkispider.cli import main
from tasks.selection import SelectionError, parse_selection, selection_text

ROW = {"cited": "12", "downloads": "300", "database": "期刊", "title": "基于深度学习的诊断"}


@pytest.mark.parametrize(
    ("rule", "selected"),
    [
        ("cited >= 10", True),
        ("cited > 12", False),
        ("cited >= 10 and downloads < 100", False),
        ("cited >= 10 AND database = 期刊", True),
        ("title ~ 深度学习", True),
        ("database != 期刊", False),
        ("cited = 12", True),
    ],
)
def test_conditions_on_the_list_row(rule, selected):
    assert parse_selection(f"where:{rule}").selects(ROW) is selected


def test_an_unknown_count_is_no_number_so_no_order_holds():
    assert parse_selection("where:cited >= 0").selects({"cited": ""}) is False


@pytest.mark.parametrize(
    ("rule", "words"),
    [
        ("abstract ~ x", "unknown field 'abstract'"),
        ("cited >= many", "needs a number"),
        ("cited", "is not FIELD OP VALUE"),
        ("", "empty rule"),
    ],
)
def test_a_rule_that_cannot_be_read_says_why(rule, words):
    with pytest.raises(SelectionError, match=words):
        selection_text(rule or " ", None)


def test_a_keys_file_selects_its_documents(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text("# chosen\nCJFQ/ABCD2024010100001\nCMFD!XYZW2024010100002\n", encoding="utf-8")
    selection = parse_selection(selection_text(None, str(path)))
    assert selection.selects({"dbname": "CJFQ", "filename": "ABCD2024010100001"})
    assert selection.selects({"dbname": "CMFD", "filename": "XYZW2024010100002"})
    assert not selection.selects({"dbname": "CJFQ", "filename": "OTHER"})
    path.write_text("not a key\n", encoding="utf-8")
    with pytest.raises(SelectionError, match="line 1"):
        selection_text(None, str(path))


def test_task_add_with_a_bad_rule_is_one_line_and_writes_nothing(tmp_path, sqlite_url, capsys):
    ini = tmp_path / "config.ini"
    ini.write_text(f"[database]\nurl = {sqlite_url}\n", encoding="utf-8")
    cli = ["--config", str(ini), "task"]
    assert main([*cli, "add", "all", "--type", "paper", "--start", "2024-01-01"]) == 0
    capsys.readouterr()
    assert main([*cli, "add", "top", "--like", "all", "--where", "abstract ~ x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown field" in err[0]
    assert main([*cli, "add", "top", "--where", "cited >= 1"]) == 2
    assert "--like" in capsys.readouterr().err
    assert main([*cli, "list"]) == 0
    assert "'top'" not in capsys.readouterr().out
    assert main([*cli, "add", "top", "--like", "all", "--where", "cited >= 10"]) == 0
    out = capsys.readouterr().out
    assert "paper 2024-01-01" in out and "selects where:cited >= 10" in out
