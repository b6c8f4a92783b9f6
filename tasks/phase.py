"""A task's phase: one pure rule, :func:`next_action`, from the facts the feeder gathers.

Table-tested in tests/test_flow.py::test_the_phase_rules; the facts come from the database
(:meth:`tasks.rounds.Rounds.phase_facts`), Redis and the error recorder, and the feeder
(tasks/feeder.py) does what the rule says::

    crawl --every round done or failed for good--> recrawl --no error row left to replay--> done
      |-- every round failed for good: the task halts (reason ``ledger: every round failed``)
      '-- open-ended, crawled to today: the run ends (up to date), the phase stays crawl

A halted task waits whatever its phase (``task resume`` lifts the halt).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Action(StrEnum):
    """What a worker does about its task's phase now (:func:`next_action`)."""

    WAIT = "wait"  # rounds or replays are under way somewhere: look again later
    START_RECRAWL = "start-recrawl"  # crawl -> recrawl: every round of the task is done
    UP_TO_DATE = "up-to-date"  # an open-ended task crawled to today: this run ends
    SKIP_RECRAWL = "skip-recrawl"  # recrawl -> done at once ([crawl] recrawl = false)
    REPLAY = "replay"  # claim and seed a batch of error rows (nothing claimable: wait)
    FINISH = "finish"  # recrawl -> done: nothing queued and no error row left to replay
    CLOSE = "close"  # the task is done and nothing is queued: this worker stops
    HALT = "halt"  # every round of the task failed: halt it with the reason (never "finished")


class Phase(StrEnum):
    """A task's phase (``task.phase``): equal to its string, so SQL and JSON see the same."""

    CRAWL = "crawl"  # rounds are claimed, listed and closed
    RECRAWL = "recrawl"  # every round is closed: error rows are replayed
    DONE = "done"  # nothing left to replay


@dataclass(frozen=True)
class PhaseFacts:
    """What the phase rules look at, read once (the feeder reads only what the phase needs)."""

    phase: str
    halted: bool = False
    open_ended: bool = False  # end_date empty: the task follows the calendar
    exhausted: bool = False  # no round is due: the cursor is past end_date (or today)
    in_flight: int = 0  # rounds claimed or seeded
    missing: bool = False  # a (day x category) round behind the cursor was never opened
    retryable: int = 0  # rounds failed on their ledger with attempts left (claimed again)
    rounds_done: int = 0  # rounds done (read once nothing is in flight)
    rounds_failed: int = 0  # rounds failed (their ledger never balanced)
    queue_idle: bool = False  # nothing queued or leased in Redis, nothing pending in this worker
    errors_pending: bool = False  # error rows open or claimed (not permanent)
    recrawl: bool = True  # [crawl] recrawl
    exit_when_idle: bool = True  # a run ends when an open-ended task is up to date


def next_action(facts: PhaseFacts) -> Action:
    """The phase rules, in one place. A halted task waits (``task resume`` lifts it)."""
    f = facts
    if f.halted:
        return Action.WAIT
    if f.phase == Phase.CRAWL:
        settled = f.exhausted and not f.in_flight and not f.missing and not f.retryable
        if settled and f.rounds_failed and not f.rounds_done:
            # Nothing was crawled: a task is never "finished" on failures alone, however few
            # rounds it has (the breaker needs halt_after of them; a short task has fewer).
            return Action.HALT
        if settled and not f.open_ended:
            return Action.START_RECRAWL
        if f.exhausted and not f.retryable and f.open_ended and f.queue_idle and f.exit_when_idle:
            return Action.UP_TO_DATE
        return Action.WAIT
    if f.phase == Phase.RECRAWL:
        if not f.recrawl:
            return Action.SKIP_RECRAWL
        if f.queue_idle and not f.errors_pending:
            return Action.FINISH
        return Action.REPLAY
    if f.phase == Phase.DONE:
        return Action.CLOSE if f.queue_idle else Action.WAIT
    return Action.WAIT
