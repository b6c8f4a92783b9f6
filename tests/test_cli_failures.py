"""What a new user meets first (issue 48.1): no traceback. A log file that cannot be written, a
config.ini saved as GBK, a port out of range or taken, a closed pipe, and any error no check
foresaw: one line each, through the real command line, and nothing written before it."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cnkispider.cli import main
from tests.fixtures import launcher
from tests.fixtures.crawl_harness import ROOT


def _ini(tmp_path: Path, extra: str = "", encoding: str = "utf-8") -> Path:
    ini = tmp_path / "config.ini"
    ini.write_text(
        f"[database]\nurl = sqlite:///{tmp_path / 'db.sqlite'}\n[redis]\nurl =\n"
        f"[crawl]\ndata_dir = {tmp_path / 'data'}\n{extra}",
        encoding=encoding,
    )
    return ini


def _command(ini: Path, *words: str, **kw) -> subprocess.CompletedProcess:
    return launcher.run(
        [sys.executable, "-m", "cnkispider.cli", "--config", str(ini), *words],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        **kw,
    )


def _one_line(result: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_log_file_that_cannot_be_written_is_one_line_before_anything(tmp_path):
    # a file where the log's folder should be (a read-only folder is the same refusal, but a
    # test run as root can write anywhere)
    (tmp_path / "blocked").write_text("", encoding="utf-8")
    ini = _ini(tmp_path, f"log_file = {tmp_path / 'blocked' / 'crawl.log'}\n")
    for words in (["task", "list"], ["run", "--task", "nosuch"]):
        result = _command(ini, *words)
        assert result.returncode == 2, result.stderr
        line = _one_line(result)
        assert "[crawl] log_file" in line and "crawl.log" in line, line


def test_a_config_ini_saved_as_gbk_is_read_and_said(tmp_path):
    ini = _ini(tmp_path, "[task]\nname = 碳中和\ntype = paper\nstart_date = 2024-01-01\n", "gbk")
    result = _command(ini, "task", "list")
    assert result.returncode == 0, result.stderr
    assert "GBK" in _one_line(result)
    bom = _ini(tmp_path, "[task]\nname = 碳中和\n", "utf-8-sig")
    result = _command(bom, "task", "list")
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_a_config_ini_of_no_known_encoding_is_one_line(tmp_path):
    ini = tmp_path / "config.ini"
    ini.write_bytes(b"[task]\nname = " + bytes([0x81, 0x20, 0xFF]) + b"\n")
    result = _command(ini, "task", "list")
    assert result.returncode == 2
    assert "UTF-8" in _one_line(result)


def _token_files(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "data").rglob("*") if "token" in p.name]


def test_web_port_out_of_range_is_refused_before_the_token_is_written(tmp_path):
    result = _command(_ini(tmp_path), "web", "--port", "99999")
    assert result.returncode == 2
    assert "65535" in _one_line(result)
    assert result.stdout == ""
    assert _token_files(tmp_path) == []


def test_web_on_a_port_in_use_is_refused_in_the_operator_s_language(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        ini = _ini(tmp_path, "[ui]\nlanguage = zh_CN\n")
        result = _command(ini, "web", "--port", str(port))
    finally:
        taken.close()
    assert result.returncode == 2
    line = _one_line(result)
    assert str(port) in line and "已被占用" in line, line
    assert result.stdout == ""  # no address printed, no token shown
    assert _token_files(tmp_path) == []


def test_a_closed_pipe_ends_the_command_quietly(tmp_path):
    ini = _ini(tmp_path)
    assert _command(ini, "init-db").returncode == 0
    reader = subprocess.Popen(
        [sys.executable, "-m", "cnkispider.cli", "--config", str(ini), "task", "list"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    reader.stdout.close()  # `| head -1` gone before the first line
    code = reader.wait(timeout=120)
    stderr = reader.stderr.read().decode()
    reader.stderr.close()
    assert stderr == "" and code == 141, stderr


def test_an_unforeseen_error_is_one_line_naming_the_log(tmp_path, monkeypatch, capsys):
    from cnkispider.cli import tasks

    def broken(config, args):
        raise RuntimeError("a bug nobody checked for")

    monkeypatch.setattr(tasks, "cmd_init_db", broken)
    code = main(["--config", str(_ini(tmp_path)), "init-db"])
    assert code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "a bug nobody checked for" in err
    log = tmp_path / "data" / "cnkispider.log"
    assert str(log) in err
    kept = log.read_text("utf-8")
    assert "Traceback" in kept and "RuntimeError: a bug nobody checked for" in kept


@pytest.mark.parametrize("port", ["0", "-1", "70000"])
def test_every_port_out_of_range_is_refused(port, tmp_path, capsys):
    assert main(["--config", str(_ini(tmp_path)), "web", "--port", port]) == 2
    assert "65535" in capsys.readouterr().err
