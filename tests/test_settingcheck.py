"""Issue 47, point 3: every ``-s KEY=VALUE`` checked against the setting's declared type and range
before anything starts (cnkispider/launch/settingcheck.py): one line, exit 2, nothing written. Each of
the settings a new user tried ran as if fine, idled, or ended in a traceback (or, for
``DOWNLOAD_TIMEOUT=nan``, failed every request and halted the task for every worker)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from tests.fixtures.bad_settings import BAD
from tests.fixtures.commands import cli
from tests.fixtures.services import REDIS_URL


@pytest.fixture
def fresh_ini(tmp_path) -> tuple[str, Path, str]:
    """A config.ini whose database file and Redis prefix nothing has made yet."""
    prefix = f"cnkit-settings-{tmp_path.name}"
    database = tmp_path / "data" / "cnki.db"
    path = tmp_path / "config.ini"
    path.write_text(
        f"[database]\nurl = sqlite:///{database}\n[redis]\nurl = {REDIS_URL}\n"
        f"prefix = {prefix}\n"
        "[task]\nname = bad-s\nstart_date = 2024-01-01\nend_date = 2024-01-01\n",
        encoding="utf-8",
    )
    return str(path), database, prefix


@pytest.mark.parametrize(("pair", "expected"), BAD, ids=[pair for pair, _ in BAD])
def test_a_bad_setting_is_one_line_exit_2_and_writes_nothing(fresh_ini, capsys, pair, expected):
    ini, database, prefix = fresh_ini
    assert cli(ini, "run", "-s", pair) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), captured.err
    assert "Traceback" not in captured.err
    assert not database.exists()  # no task registered: not even the database was opened
    client = redis.Redis.from_url(REDIS_URL)
    try:
        assert list(client.scan_iter(match=f"{prefix}*")) == []
    finally:
        client.close()


@pytest.mark.parametrize("value", ["0", "-2", "two"])
def test_processes_below_one_is_refused(fresh_ini, capsys, value):
    ini, database, _ = fresh_ini
    with pytest.raises(SystemExit) as exited:
        cli(ini, "run", "--processes", value)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --processes: {value!r}: expected a whole number of at least 1" in err
    assert not database.exists()
