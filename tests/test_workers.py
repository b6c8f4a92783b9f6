"""`cnkispider run --processes N` starts a worker that died again (cnkispider/launch/workers.py), with
real child processes whose exits are scripted through a file."""

from __future__ import annotations

import sys

import pytest

from cnkispider.launch.workers import Workers, describe, overall, should_restart

# Each start appends a line to the file, then exits with the status of that start's position in
# EXITS (the last one repeats); "kill" means the process kills itself with SIGKILL.
# The append and the count are one step under a lock: several workers start at once, and two
# that both appended before either counted took the same position (a busy run saw 4 starts, not 5).
SCRIPT = """
import fcntl, os, signal, sys
path, exits = sys.argv[1], sys.argv[2].split(",")
with open(path, "a+") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    f.write("start\\n")
    f.flush()
    f.seek(0)
    n = len(f.readlines())
code = exits[min(n, len(exits)) - 1]
if code == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
sys.exit(int(code))
"""


def run_workers(tmp_path, exits: str, processes: int = 1, limit: int = 5):
    said: list[str] = []
    starts = tmp_path / "starts"
    workers = Workers(
        [sys.executable, "-c", SCRIPT, str(starts), exits],
        processes,
        say=said.append,
        delays=(0.0,),
        limit=limit,
    )
    code = workers.run()
    return code, starts.read_text().count("start"), said


@pytest.mark.parametrize(
    "returncode, deaths, expected",
    [
        (0, 1, False),  # finished
        (2, 1, False),  # a configuration or start-up error: the same again
        (3, 1, False),  # the task halted: a person must look
        (130, 1, False),  # interrupted
        (1, 1, True),  # the crawl ended unfinished
        (-9, 1, True),  # killed by the kernel
        (-9, 5, True),
        (-9, 6, False),  # the sixth death in the window: it would only die again
    ],
)
def test_which_exits_start_a_worker_again(returncode, deaths, expected):
    assert should_restart(returncode, deaths, limit=5) is expected


def test_exit_statuses_in_words_and_the_parents_status():
    assert describe(-9) == "killed by SIGKILL"
    assert describe(1) == "status 1"
    assert overall([0, 0]) == 0
    assert overall([0, -9]) == 1
    assert overall([3, 0, 2]) == 3


def test_a_worker_killed_by_a_signal_is_started_again_and_the_run_ends_with_its_status(tmp_path):
    code, starts, said = run_workers(tmp_path, "kill,0")
    assert (code, starts) == (0, 2)
    assert any(
        "died (killed by SIGKILL); starting it again in 0 s (restart 1 of 5" in s for s in said
    ), said
    assert any(s.startswith("worker started again: pid") for s in said), said


def test_a_worker_that_keeps_dying_is_given_up_after_the_limit(tmp_path):
    code, starts, said = run_workers(tmp_path, "1", limit=2)
    assert (code, starts) == (1, 3)  # started, then again twice; the third death is final
    assert "not started again" in said[-1], said


@pytest.mark.parametrize("final", ["0", "2", "3"])
def test_final_statuses_are_not_restarted(tmp_path, final):
    code, starts, said = run_workers(tmp_path, final)
    assert (code, starts) == (int(final), 1)
    assert said == []


def test_each_of_several_workers_is_watched_on_its_own(tmp_path):
    # three workers share the file: the first two starts die, every later one finishes
    code, starts, said = run_workers(tmp_path, "1,1,0", processes=3)
    assert code == 0
    assert starts == 5  # three first starts (the first two died) and two restarts
    assert sum("starting it again" in s for s in said) == 2, said
