"""`cnkispider run --reload` (cnkispider/launch/reload.py): what counts as a code change, and a crawl
whose worker is restarted by a code change half-way that still ends equal to the ground truth."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess

import sqlalchemy as sa

from cnkispider.launch.reload import ROOT, changed, snapshot, watched_paths, worker_command
from cnkispider.store.schema import documents, round_
from tests.fixtures.crawl_harness import compare, count_rows
from tests.fixtures.waiting import wait_until


def test_added_modified_and_removed_files_are_changes_and_caches_are_not(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("A = 1\n")
    (tmp_path / "pkg" / "gone.py").write_text("")
    before = snapshot([tmp_path])
    (tmp_path / "pkg" / "a.py").write_text("A = 22\n")
    (tmp_path / "pkg" / "gone.py").unlink()
    (tmp_path / "pkg" / "new.py").write_text("")
    (tmp_path / "pkg" / "notes.txt").write_text("not code")
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "a.cpython-311.py").write_text("")
    names = [os.path.basename(p) for p in changed(before, snapshot([tmp_path]))]
    assert names == ["a.py", "gone.py", "new.py"]


def test_the_project_packages_are_watched_unless_the_environment_says_otherwise(tmp_path):
    assert watched_paths({}) == [ROOT / p for p in ("cnkispider", "tasks", "proxy", "errors")]
    assert any(path.endswith("reload.py") for path in snapshot(watched_paths({})))
    spec = os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b.py")])
    assert watched_paths({"CNKI_RELOAD_WATCH": spec}) == [tmp_path / "a", tmp_path / "b.py"]
    assert worker_command("x.ini")[-5:] == ["--config", "x.ini", "run", "--processes", "1"]


def test_a_code_change_mid_crawl_restarts_the_worker_and_nothing_is_lost(
    tmp_path, crawl_setup, monkeypatch
):
    """The watched code is a stand-in folder (the repository's files are never touched)."""
    watch = tmp_path / "code"
    watch.mkdir()
    (watch / "module.py").write_text("VALUE = 1\n")
    monkeypatch.setenv("CNKI_RELOAD_WATCH", str(watch))
    monkeypatch.setenv("PYTHONFAULTHANDLER", "1")  # a worker that hangs: its threads, on SIGABRT
    setup = crawl_setup(
        "paper",
        "TP3,F0,O1,R4",
        "mysql",
        "2024-01-01",
        "2024-01-02",
        site={"seed": 21, "latency": "0.1"},
        crawl={
            "log_file": "",
            "concurrent_requests": 4,
            "lease_seconds": 5,
            "round_lease_seconds": 5,
        },
    )
    truth = setup.truth()
    # The output goes to a file, not a pipe: nothing reads a pipe while the test waits, and a
    # full one would stall the worker that writes to it.
    output = tmp_path / "supervisor.out"
    setup.write()
    with output.open("w") as sink:
        supervisor = subprocess.Popen(
            setup.command("run", "--reload"), cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT
        )
    try:

        def stored() -> int:
            try:
                return count_rows(setup, documents["paper"])
            except sa.exc.SQLAlchemyError:  # the worker has not made the tables yet
                return 0

        stored_then = wait_until(
            lambda: (n := stored()) >= 20 and n,
            120,
            what="20 papers stored",
            workers=[supervisor],
            log=output.read_text,
        )
        (watch / "module.py").write_text("VALUE = 2  # a change\n")
        # The end, or a worker that failed: the supervisor would wait for the next code change
        # (reload.py), so the test stops there, with the output that says why.
        try:
            wait_until(
                lambda: (
                    supervisor.poll() is not None
                    or re.search(r"exited with status (?!0\b)", output.read_text())
                ),
                600,  # generous: a busy machine
                what="the supervisor's end",
                log=output.read_text,
            )
        except AssertionError as stuck:  # once in a busy run: say where the crawl stood
            raise AssertionError(f"{stuck}\n{post_mortem(setup, output)}") from None
    finally:
        if supervisor.poll() is None:  # SIGTERM: the supervisor stops its workers too
            supervisor.terminate()
            supervisor.wait(120)
    out = output.read_text()
    assert supervisor.returncode == 0, out[-4000:]
    assert 20 <= stored_then < len(truth), "the change landed mid-crawl"
    assert "reload: code changed" in out and "reload: restarted 1 worker(s)" in out, out[-4000:]
    assert "reload: every worker finished" in out
    assert compare(setup.stored(), truth, "paper") == {"missing": [], "extra": [], "differing": {}}
    rounds = setup.query(sa.select(round_.c.state))
    assert {r.state for r in rounds} == {"done"}


def post_mortem(setup, output) -> str:
    """The rounds and Redis keys of a crawl that stopped moving, then the running workers'
    threads (``PYTHONFAULTHANDLER``: SIGABRT dumps every thread's stack and ends the worker)."""
    state = setup.state()
    before = len(output.read_text())
    started = re.findall(r"pids ([\d ]+)$", output.read_text(), re.M)
    for pid in started[-1].split() if started else []:
        try:
            os.kill(int(pid), signal.SIGABRT)
        except ProcessLookupError:
            continue
        with contextlib.suppress(AssertionError):  # no dump in time: the state still says much
            wait_until(lambda: "most recent call first" in output.read_text()[before:], 30)
    return f"{state}\nthe workers' threads:\n{output.read_text()[before:][-6000:]}"
