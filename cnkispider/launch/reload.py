"""``cnkispider run --reload``: workers that restart themselves when the project's code changes.

The supervisor (this module, the process the operator started) runs each worker as a child
process (``cnkispider run --processes 1``) and looks at the modification times of the project's
Python files every second. On a change it stops the workers gracefully and starts them again on
the new code:

- Stopping is Scrapy's own graceful shutdown (SIGTERM; CTRL_BREAK_EVENT on Windows): the
  scheduler writes its pending acks and releases the requests it had popped but not started.
  Requests in flight when the worker stops keep their Redis lease, which runs out and hands
  them to the next worker (the new one, or any other): the leased scheduler's guarantee, so a
  restart loses nothing, whatever it interrupts. A worker that does not stop within
  ``STOP_TIMEOUT`` is killed, which loses nothing either (the same guarantee covers kill -9).
- A worker that exits on its own with status 0 has finished (its task is done or up to date):
  it is not restarted, and the supervisor exits 0 once every worker has.
- A worker that exits on its own with another status (say, a syntax error just saved) is
  started again at the next code change; the supervisor keeps watching until then.
- SIGINT/SIGTERM to the supervisor stops the workers gracefully and ends the supervisor.

Watched: every ``*.py`` under ``cnkispider/``, ``tasks/``, ``proxy/`` and ``errors/`` of the
project; the environment variable ``CNKI_RELOAD_WATCH`` (folders or files, separated by
``os.pathsep``) replaces that list. Changes that land within ``SETTLE`` seconds of each other
(an editor saving several files) make one restart.

Not available in the frozen .exe: its code is inside the executable.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

logger = logging.getLogger("cnkispider.reload")  # its name before the move: log lines keep it

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cnkispider", "tasks", "proxy", "errors")
WATCH_ENV = "CNKI_RELOAD_WATCH"
POLL_SECONDS = 1.0
SETTLE = 0.3  # seconds: one restart for a burst of saves
STOP_TIMEOUT = 60.0  # seconds a worker gets to stop gracefully before it is killed

Snapshot = dict[str, tuple[int, int]]


def watched_paths(environ: dict | None = None) -> list[Path]:
    environ = os.environ if environ is None else environ
    spec = environ.get(WATCH_ENV, "").strip()
    if spec:
        return [Path(p) for p in spec.split(os.pathsep) if p.strip()]
    return [ROOT / name for name in PACKAGES]


def snapshot(paths: Iterable[Path]) -> Snapshot:
    """``{file: (mtime_ns, size)}`` of every ``*.py`` file under ``paths``."""
    found: Snapshot = {}
    for path in paths:
        files = [path] if path.is_file() else path.rglob("*.py") if path.is_dir() else []
        for file in files:
            if "__pycache__" in file.parts:
                continue
            try:
                st = file.stat()
            except OSError:  # removed while we looked
                continue
            found[str(file)] = (st.st_mtime_ns, st.st_size)
    return found


def changed(before: Snapshot, after: Snapshot) -> list[str]:
    """Files added, removed or modified between two snapshots."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def worker_command(config: str | None, command: str = "run", task: str | None = None) -> list[str]:
    base = [sys.executable, "-m", "cnkispider.cli"]
    if config:
        base += ["--config", config]
    return [*base, command, "--processes", "1", *(["--task", task] if task else [])]


class Supervisor:
    """Runs ``processes`` workers from ``command`` and restarts them on a code change."""

    def __init__(
        self,
        command: list[str],
        processes: int = 1,
        *,
        paths: list[Path] | None = None,
        poll: float = POLL_SECONDS,
        stop_timeout: float = STOP_TIMEOUT,
        say: Callable[[str], None] | None = None,
    ):
        self.command, self.processes = command, max(1, processes)
        self.paths = paths if paths is not None else watched_paths()
        self.poll, self.stop_timeout = poll, stop_timeout
        self.say = say or (lambda text: print(f"reload: {text}", file=sys.stderr, flush=True))
        self.workers: list[subprocess.Popen | None] = []
        self.codes: list[int | None] = []
        self.restarts = 0
        self._stopping = False

    # -- the workers -----------------------------------------------------------------------

    def _start(self, index: int) -> None:
        # A process group of its own: a Ctrl-C at the console reaches the supervisor alone,
        # which stops each worker with one signal (a second one would force Scrapy to stop
        # uncleanly). On Windows that also lets CTRL_BREAK_EVENT reach this worker alone.
        options: dict = {}
        if sys.platform == "win32":
            options["creationflags"] = subprocess.CREATE_NEW_PROCESS_GROUP
        else:
            options["process_group"] = 0
        worker = subprocess.Popen(self.command, **options)
        self.workers[index], self.codes[index] = worker, None

    def _stop_all(self) -> None:
        alive = [w for w in self.workers if w is not None and w.poll() is None]
        for worker in alive:
            try:
                if sys.platform == "win32":
                    worker.send_signal(signal.CTRL_BREAK_EVENT)
                else:
                    worker.send_signal(signal.SIGTERM)  # Scrapy's graceful shutdown
            except OSError:
                pass
        deadline = time.monotonic() + self.stop_timeout
        for worker in alive:
            try:
                worker.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say(
                    f"worker {worker.pid} did not stop in {self.stop_timeout:.0f} s; killed "
                    f"(its leases return to the queue)"
                )
                worker.kill()
                worker.wait()

    def _on_signal(self, signum, frame) -> None:
        self._stopping = True

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> int:
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for s in previous:
            signal.signal(s, self._on_signal)
        try:
            return self._run()
        finally:
            self._stop_all()
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _run(self) -> int:
        files = snapshot(self.paths)
        self.say(f"watching {len(files)} files in {', '.join(str(p) for p in self.paths)}")
        self.workers = [None] * self.processes
        self.codes = [None] * self.processes
        for i in range(self.processes):
            self._start(i)
        self.say(f"started {self.processes} worker(s): pids {self._pids()}")
        while not self._stopping:
            time.sleep(self.poll)
            now = snapshot(self.paths)
            diff = changed(files, now)
            if diff:
                time.sleep(SETTLE)  # let a burst of saves land, then restart once
                now = snapshot(self.paths)
                diff = changed(files, now) or diff
                files = now
                shown = ", ".join(diff[:3]) + (
                    f" and {len(diff) - 3} more" if len(diff) > 3 else ""
                )
                self.say(f"code changed ({shown}); restarting workers {self._pids()}")
                self._stop_all()
                if self._stopping:
                    break
                for i in range(self.processes):
                    self._start(i)
                self.restarts += 1
                self.say(
                    f"restarted {self.processes} worker(s) on the new code: pids {self._pids()}"
                )
                continue
            for i, worker in enumerate(self.workers):
                if worker is not None and self.codes[i] is None and worker.poll() is not None:
                    self.codes[i] = worker.returncode
                    self.say(
                        f"worker {worker.pid} exited with status {worker.returncode}"
                        + (
                            ""
                            if worker.returncode == 0
                            else "; it starts again at the next code change"
                        )
                    )
            if all(code is not None for code in self.codes):
                if all(code == 0 for code in self.codes):
                    self.say("every worker finished")
                    return 0
        self.say("stopping the workers")
        self._stop_all()
        return 0 if all(w is None or w.returncode == 0 for w in self.workers) else 1

    def _pids(self) -> str:
        return ", ".join(str(w.pid) for w in self.workers if w is not None and w.poll() is None)


def supervise(
    config: str | None, command: str = "run", processes: int = 1, task: str | None = None
) -> int:
    """``cnkispider run --reload``: the supervisor's entry (see the module docstring)."""
    if getattr(sys, "frozen", False):
        print(
            "error: --reload needs the project's source code; the .exe cannot reload itself",
            file=sys.stderr,
        )
        return 2
    return Supervisor(worker_command(config, command, task), processes).run()
