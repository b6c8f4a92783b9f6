"""A task's round rate and ETA: what every view shows (status, the run's summary, the web page,
/metrics), from the rounds finished lately and the rounds in flight.

:func:`round_rate_eta` is pure (every time injected, tested on a fixed clock);
:func:`round_rate` reads its times from the task's rounds. The definitions: docs/INTERNALS.md
(rate, ETA).
"""

from __future__ import annotations

import datetime as dt
import math

import sqlalchemy as sa

from cnkispider.schema import round_
from tasks.rounds import IN_FLIGHT, RoundState

RATE_WINDOW = dt.timedelta(hours=6)
RATE_ROUNDS = 50
#: The least a round in flight counts for in the ETA (of a mean round): one past the mean
#: duration has no known end, and a task with rounds in flight is not done in 0 s.
OVERDUE_SHARE = 0.1


def round_rate_eta(
    finished: list[tuple[float, float]], in_flight: list[float], remaining: int, now: float
) -> tuple[float | None, float | None]:
    """(rounds per hour, seconds left) of a task; pure, every time injected (seconds).

    ``finished`` are (started, finished) times of the last finished rounds, ``in_flight`` the
    start times of the rounds running now, ``remaining`` the rounds not finished (those in
    flight included). Rounds run several at a time, so this is Little's law rather than
    "rounds over time since the first finish" (which made four rounds finishing together look
    instant: "22 s" with 81 s left): a round takes ``mean`` seconds, ``c`` run at once (the
    rounds in flight now, at least one), so ``c / mean`` rounds finish a second. What is left
    is ``mean`` for each round not started yet and, for each round in flight, what its mean
    leaves of it, all shared by ``c`` lanes, and never less than the last rounds need on their
    own (at the end, lanes fall idle). A stalled crawl keeps a steady ETA (its rounds in
    flight count as nearly done) instead of a falling one; status shows no ETA at all when no
    worker is alive. No rate before one round finishes.

    The rate is the one every view shows (status, the run's summary, the web page, /metrics):
    the rounds counted over the time from the first one's start to the last one's finish.
    The ETA counts the rounds in flight: each counts at least ``OVERDUE_SHARE`` of a round still
    to go (one past the mean has no known end), so the ETA never reads 0 while one runs. None
    when nothing is left (a finished task has no ETA) or nothing is known.
    """
    durations = [max(end - start, 0.0) for start, end in finished]
    if not durations:
        return None, None
    mean = sum(durations) / len(durations)
    if mean <= 0:
        return None, None
    span = max(end for _, end in finished) - min(start for start, _ in finished)
    per_hour = len(finished) / span * 3600 if span > 0 else None
    lanes = max(len(in_flight), 1)
    remaining = max(remaining, len(in_flight))
    if remaining <= 0:
        return per_hour, None
    waiting = max(remaining - len(in_flight), 0)
    lefts = [max(mean - (now - start), mean * OVERDUE_SHARE) for start in in_flight[:remaining]]
    shared = (waiting * mean + sum(lefts)) / lanes
    # at the end lanes fall idle: the last rounds take their own time, whatever the lanes
    if waiting:
        tail = (min(lefts) if lefts else 0.0) + math.ceil(waiting / lanes) * mean
    else:
        tail = max(lefts, default=0.0)
    return per_hour, max(shared, tail)


def round_rate(
    conn, task_id: int, now: dt.datetime, remaining: int
) -> tuple[float | None, int, float | None]:
    """(rounds per hour, rounds counted, ETA seconds) from the last RATE_ROUNDS rounds done
    within RATE_WINDOW and the rounds in flight (:func:`round_rate_eta`)."""
    finished = [
        ((created or updated).timestamp(), updated.timestamp())
        for created, updated in conn.execute(
            sa.select(round_.c.created_at, round_.c.updated_at)
            .where(
                round_.c.task_id == task_id,
                # done rounds only: a failed round stored nothing (its ledger never balanced),
                # and six failing fast made a rate of 415 rounds/h with nothing crawled
                round_.c.state == RoundState.DONE,
                round_.c.updated_at >= now - RATE_WINDOW,
            )
            .order_by(round_.c.updated_at.desc())
            .limit(RATE_ROUNDS)
        )
        if updated is not None
    ]
    in_flight = [
        (created or now).timestamp()
        for (created,) in conn.execute(
            sa.select(round_.c.created_at).where(
                round_.c.task_id == task_id, round_.c.state.in_(IN_FLIGHT)
            )
        )
    ]
    per_hour, eta = round_rate_eta(finished, in_flight, remaining, now.timestamp())
    return (
        (round(per_hour, 2) if per_hour else None),
        len(finished),
        (round(eta) if eta is not None else None),
    )
