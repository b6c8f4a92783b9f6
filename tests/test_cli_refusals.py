"""Accepted though wrong (issue 48.2): a query typed with a Chinese keyboard's quotes, unknown
category codes, a day in another spelling, grant-worker on SQLite. Each is normalised and
said, or refused in one line, through the real command line (in process)."""

from __future__ import annotations

import pytest

from cnkispider.cli import main
from cnkispider.cnki.query import normalize


@pytest.fixture
def ini(tmp_path):
    path = tmp_path / "config.ini"
    path.write_text(
        f"[database]\nurl = sqlite:///{tmp_path / 'db.sqlite'}\n[redis]\nurl =\n"
        f"[crawl]\ndata_dir = {tmp_path / 'data'}\n",
        encoding="utf-8",
    )
    assert main(["--config", str(path), "task", "add", "t1", "--type", "paper",
                 "--start", "2024-01-01", "--end", "2024-01-05"]) == 0  # fmt: skip
    return str(path)


def _refused(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_full_width_quotes_and_operators_are_read_as_ascii(ini, capsys):
    assert normalize("SU=‘碳中和’", "paper") == "SU='碳中和'"
    # full-width operators outside a value are operators; inside one, the searched text
    assert normalize("SU＝“碳中和（综述）” AND TI＝（‘a’＋‘b’）", "paper") == (
        "SU='碳中和（综述）' AND TI='a' + 'b'"
    )
    capsys.readouterr()
    assert main(["--config", ini, "task", "add", "q1", "--type", "paper",
                 "--start", "2024-01-01", "--query", "SU=‘碳中和’"]) == 0  # fmt: skip
    assert "query SU='碳中和'" in capsys.readouterr().out  # said as it is kept


@pytest.mark.parametrize("spec", ["ZZ9", "TP,XX"])
def test_unknown_category_codes_are_refused(ini, capsys, spec):
    capsys.readouterr()
    err = _refused(capsys, ["--config", ini, "task", "set", "t1", "--categories", spec])
    assert "unknown" in err and spec.split(",")[-1] in err
    assert main(["--config", ini, "task", "set", "t1", "--categories", "TP,TP3"]) == 0


@pytest.mark.parametrize("day", ["20240301", "2024-1-5", "2024/01/03"])
def test_a_day_has_one_spelling_everywhere(ini, capsys, day):
    capsys.readouterr()
    move = _refused(capsys, ["--config", ini, "task", "move", "t1", day])
    add = _refused(capsys, ["--config", ini, "task", "add", "t2", "--type", "paper",
                            "--start", day])  # fmt: skip
    assert "YYYY-MM-DD" in move and "YYYY-MM-DD" in add
    assert move.split(repr(day))[1] == add.split(repr(day))[1]  # the same words


def test_grant_worker_refuses_sqlite_with_the_reason(ini, capsys):
    capsys.readouterr()
    assert main(["--config", ini, "admin", "grant-worker", "w1"]) == 2
    out = capsys.readouterr()
    assert "SQLite" in out.err and "MySQL" in out.err
    assert out.out == ""  # no sqlite://w1:PASS@ URL, no GRANT statements
