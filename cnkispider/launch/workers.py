"""``cnkispider run --processes N``: N workers on this machine, and a worker that dies is started again.

Each worker is a child process (``cnkispider run --processes 1``) sharing Redis and the database
with the others. Losing a worker loses nothing (its leased requests return to the queue when the
lease runs out, see scheduling/), but it does lose speed, and on a server nobody may be watching:
a worker killed by the kernel's OOM killer, or one that stopped because the database stayed away
longer than ``[database] outage_seconds``, left the crawl half done until someone restarted it.

So the parent watches its workers and starts a dead one again (:func:`should_restart`):

- status 0 (finished, up to date, or a graceful stop), 2 (a configuration or start-up error:
  the same again), 3 (the task halted: a person must look) and 130 (interrupted) are final;
- any other status (1: the crawl ended unfinished; negative: killed by a signal) is a death.
  The worker is started again after a back-off (``RESTART_DELAYS``); more than ``RESTART_LIMIT``
  deaths of one worker within ``RESTART_WINDOW`` seconds mean it would only die again: the
  parent stops restarting it and says so.

Ctrl-C reaches every worker (one console, one process group) and each stops gracefully; a second
one stops them at once. SIGTERM to the parent (a service manager) is passed to every worker.
Nothing is restarted once a stop was asked for.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

#: Exit statuses after which a worker is not started again (see the module docstring).
FINAL = {0: "finished", 2: "start-up error", 3: "task halted", 130: "interrupted"}
RESTART_DELAYS = (2.0, 5.0, 15.0, 30.0, 60.0)  # seconds before the 1st, 2nd, ... restart
RESTART_LIMIT = 5  # deaths of one worker ...
RESTART_WINDOW = 600.0  # ... within this many seconds: stop restarting it
POLL_SECONDS = 0.5


def describe(returncode: int) -> str:
    """A worker's exit status in words: 'status 1' or 'killed by SIGKILL'."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"status {returncode}"


def should_restart(returncode: int, recent_deaths: int, limit: int = RESTART_LIMIT) -> bool:
    """Whether the worker that exited with ``returncode`` is started again.

    ``recent_deaths`` counts this worker's deaths within the window, this one included."""
    return returncode not in FINAL and recent_deaths <= limit


def overall(finals: list[int]) -> int:
    """The parent's exit status: 0 when every worker finished, else the highest status (a
    worker killed by a signal counts as 1)."""
    return max(code if code >= 0 else 1 for code in finals)


@dataclass
class Slot:
    """One worker place: the process in it now and its recent deaths (monotonic times)."""

    process: subprocess.Popen | None = None
    deaths: list[float] = field(default_factory=list)
    restart_at: float | None = None  # a restart is due at this time
    final: int | None = None  # the exit status it ended with for good


class Workers:
    """Runs ``processes`` workers from ``command`` until each has ended for good."""

    def __init__(
        self,
        command: list[str],
        processes: int,
        *,
        say: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        delays: tuple[float, ...] = RESTART_DELAYS,
        limit: int = RESTART_LIMIT,
        window: float = RESTART_WINDOW,
    ):
        self.command, self.slots = command, [Slot() for _ in range(max(1, processes))]
        self.say = say or (lambda text: print(f"workers: {text}", file=sys.stderr, flush=True))
        self.clock, self.delays, self.limit, self.window = clock, delays, limit, window
        self.stopping = False
        self.restarts = 0

    def _start(self, slot: Slot) -> None:
        slot.process, slot.restart_at = subprocess.Popen(self.command), None

    def _check(self, slot: Slot) -> None:
        """Notice a worker that exited; schedule its restart or mark it ended for good."""
        if slot.final is not None or slot.restart_at is not None or slot.process is None:
            return
        code = slot.process.poll()
        if code is None:
            return
        pid, now = slot.process.pid, self.clock()
        if self.stopping or code in FINAL:
            slot.final = code
            return
        slot.deaths = [t for t in slot.deaths if now - t <= self.window] + [now]
        deaths = len(slot.deaths)
        if not should_restart(code, deaths, self.limit):
            slot.final = code
            self.say(
                f"worker {pid} died ({describe(code)}), {deaths} deaths in {self.window / 60:.0f} min: "
                "not started again (its log says why)"
            )
            return
        delay = self.delays[min(deaths, len(self.delays)) - 1]
        slot.restart_at = now + delay
        self.say(
            f"worker {pid} died ({describe(code)}); starting it again in {delay:.0f} s "
            f"(restart {deaths} of {self.limit} in {self.window / 60:.0f} min); "
            "its leased requests return to the queue"
        )

    def run(self) -> int:
        for slot in self.slots:
            self._start(slot)
        previous = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        try:
            while any(slot.final is None for slot in self.slots):
                try:
                    self._step()
                    time.sleep(POLL_SECONDS)
                except KeyboardInterrupt:
                    self._interrupted()
        finally:
            signal.signal(signal.SIGTERM, previous)
        return overall([slot.final for slot in self.slots])

    def _step(self) -> None:
        now = self.clock()
        for slot in self.slots:
            self._check(slot)
            if slot.restart_at is not None and not self.stopping and now >= slot.restart_at:
                self._start(slot)
                self.restarts += 1
                self.say(f"worker started again: pid {slot.process.pid}")
            elif slot.restart_at is not None and self.stopping:
                slot.restart_at, slot.final = None, slot.process.returncode

    def _on_sigterm(self, signum, frame) -> None:
        self.stopping = True
        for slot in self.slots:
            if slot.process is not None and slot.process.poll() is None:
                slot.process.send_signal(signal.SIGTERM)  # Scrapy's graceful shutdown

    def _interrupted(self) -> None:
        """Ctrl-C: the workers got it too and are stopping; a second one stops them now."""
        if self.stopping:
            for slot in self.slots:
                if slot.process is not None and slot.process.poll() is None:
                    slot.process.terminate()
        self.stopping = True
