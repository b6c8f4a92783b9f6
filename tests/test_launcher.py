"""tests/fixtures/launcher.py: a process forked from the preloaded parent behaves as ``python -m`` would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.fixtures import launcher
from tests.fixtures.waiting import wait_until


def test_a_forked_command_gets_its_cwd_env_argv_output_and_exit_status(tmp_path):
    (tmp_path / "config.ini").write_text("[database]\nurl = sqlite:///x.db\n[bogus]\nkey = 1\n")
    result = launcher.run(
        [sys.executable, "-m", "cnkispider.cli", "--config", "config.ini", "status"],
        cwd=tmp_path,
        env={**os.environ, "CNKI_LAUNCHER_TEST": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    # the config error names the file relative to the cwd it was given, on stderr, exit 2
    assert result.returncode == 2, result
    assert "config.ini" in result.stderr and "[bogus]" in result.stderr
    assert result.stdout == ""
    version = launcher.run(
        [sys.executable, "-m", "cnkispider.cli", "--version"], capture_output=True, text=True
    )
    assert version.returncode == 0 and version.stdout.startswith("cnkispider ")


def test_a_forked_process_is_its_own_and_dies_by_a_signal():
    process = launcher.Popen(
        [sys.executable, "-m", "standin", "--port", "0", "--no-human-check"],
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout.readline().startswith(b"CNKI stand-in at http://")
        assert process.pid not in (os.getpid(), os.getppid()) and process.poll() is None
        with open(f"/proc/{process.pid}/status") as status:
            parent = int(next(line for line in status if line.startswith("PPid:")).split()[1])
        assert parent != os.getpid()  # a child of the zygote, not of this process
        os.kill(process.pid, signal.SIGKILL)
        wait_until(lambda: process.poll() is not None, 30, what="the killed process's end")
        assert process.returncode == -signal.SIGKILL
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_command_the_zygote_does_not_run_starts_the_plain_way():
    result = launcher.run(
        [sys.executable, "-c", "import os, sys; print(os.getppid())"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0 and int(result.stdout) == os.getpid()
