"""Issue 47, points 3 and 5 (the config.ini part): a config.ini that fails its checks is refused
in one line naming the file, the section and the key, exit 2, before anything is written: no
database file, no task row, no Redis key. An empty ``start_date`` beside an ``end_date`` used to
be accepted (a task row written, then the run exited 1), and ``nan``/``inf`` passed every
number's range."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis

from tests.fixtures.bad_settings import BAD as SETTINGS_BAD
from tests.fixtures.commands import cli
from tests.fixtures.services import REDIS_URL

BAD = [
    (
        "[task]\nstart_date =\nend_date = 2024-01-05\n",
        "[task] start_date: must be set when end_date is",
    ),
    ("[task]\nend_date = 2024-01-05\n", "[task] start_date: must be set when end_date is"),
    ("[crawl]\ndownload_timeout = nan\n", "[crawl] download_timeout: expected a finite number"),
    ("[crawl]\ndownload_delay = nan\n", "[crawl] download_delay: expected a finite number"),
    ("[crawl]\ndownload_timeout = inf\n", "[crawl] download_timeout: expected a finite number"),
    ("[proxy]\nban_seconds = -inf\n", "[proxy] ban_seconds: expected a finite number"),
    ("[database]\noutage_seconds = NaN\n", "[database] outage_seconds: expected a finite number"),
]


def _ini(tmp_path, extra: str):
    """A config.ini whose own database and Redis prefix nothing has made yet, plus ``extra``
    (sections given twice are merged: the extra keys first, the base's after)."""
    prefix = f"cnkit-confcheck-{uuid.uuid4().hex[:12]}:"  # tmp names repeat across workers
    database = tmp_path / "data" / "cnki.db"
    base = {
        "database": f"url = sqlite:///{database}\n",
        "redis": f"url = {REDIS_URL}\nprefix = {prefix}\n",
        "task": "name = bad-ini\n",
    }
    text = ""
    for block in extra.split("[")[1:]:
        section, body = block.split("]\n", 1)
        text += f"[{section}]\n{body}{base.pop(section, '')}"
    text += "".join(f"[{section}]\n{body}" for section, body in base.items())
    path = tmp_path / "config.ini"
    path.write_text(text, encoding="utf-8")
    return path, database, prefix


def _redis_keys(prefix: str) -> list:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        return list(client.scan_iter(match=f"{prefix}*"))
    finally:
        client.close()


@pytest.mark.parametrize(("extra", "expected"), BAD, ids=[e for _, e in BAD])
def test_a_bad_config_ini_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, extra, expected):
    path, database, prefix = _ini(tmp_path, extra)
    assert cli(str(path), "run") == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert str(path) in lines[0] and expected in lines[0], err
    assert "Traceback" not in err
    assert not database.exists()  # no task registered: the database was never opened
    assert _redis_keys(prefix) == []


def test_no_task_row_from_a_bad_config_ini_on_a_database_in_use(tmp_path, capsys):
    """A database that already holds the tables (another task ran on it) gets no row for the
    task of a config.ini that fails its checks."""
    path, database, prefix = _ini(tmp_path, "[task]\nend_date = 2024-01-05\n")
    good = tmp_path / "good.ini"
    good.write_text(
        f"[database]\nurl = sqlite:///{database}\n[redis]\nurl = {REDIS_URL}\nprefix = {prefix}\n",
        encoding="utf-8",
    )
    assert (
        cli(
            str(good),
            "task",
            "add",
            "other",
            "--type",
            "paper",
            "--start",
            "2024-01-01",
            "--end",
            "2024-01-01",
        )
        == 0
    )
    capsys.readouterr()
    assert cli(str(path), "run") == 2
    assert "[task] start_date" in capsys.readouterr().err
    with sqlite3.connect(database) as db:
        names = [row[0] for row in db.execute("SELECT name FROM task")]
    assert names == ["other"]


# -- the same checks through `scrapy crawl` ---------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
SCRAPY = str(Path(sys.executable).with_name("scrapy"))


@pytest.mark.parametrize(("pair", "expected"), SETTINGS_BAD, ids=[p for p, _ in SETTINGS_BAD])
@pytest.mark.slow  # a command in a subprocess
def test_scrapy_crawl_refuses_each_bad_setting_in_one_line(tmp_path, pair, expected):
    """The twelve settings of issue 47 (and the near miss) refused by `scrapy crawl -s` as by
    `cnkispider run -s`: one line, exit 2, no database file, no Redis key."""
    path, database, prefix = _ini(tmp_path, "[task]\nstart_date = 2024-01-01\n")
    scrapy = subprocess.run(
        [SCRAPY, "crawl", "patent", "-s", pair],
        cwd=ROOT,
        env={**os.environ, "CNKI_CONFIG": str(path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert scrapy.returncode == 2, scrapy.stderr[-2000:]
    lines = scrapy.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), scrapy.stderr[-2000:]
    assert not database.exists()
    assert _redis_keys(prefix) == []
