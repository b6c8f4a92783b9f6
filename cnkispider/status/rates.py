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

from cnkispider.store.schema import ledger, round_
from tasks.roundstate import IN_FLIGHT, RoundState

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


def document_eta(
    done: list[tuple[float, float, int]],
    in_flight: list[tuple[float, int | None, int]],
    remaining: int,
    now: float,
) -> float | None:
    """Seconds left from the recent rate of documents settled; pure, every time injected.

    ``done`` are (started, finished, documents listed) of the last rounds done, ``in_flight``
    (started, documents listed or None before its first page, documents settled so far) of the
    rounds running now, ``remaining`` the rounds not done (those in flight included).

    Rounds differ tenfold in size (39 and 130 documents, the demo's two days) and share one pace
    (a person's sessions, the rate limit), so a round's mean duration says little of the one
    still running: the demo's first round done after 93 s left "ETA 9 s" for a round that ran
    100 s more. Documents do not differ so: the rate is the documents settled (the done rounds',
    and the running ones' so far) over the time since the first of those rounds started, and
    what is left is the running rounds' unsettled documents plus a mean done round's for each
    round not started. None when no document was listed yet (the round rate's ETA then).
    """
    if not done and not any(total for _start, total, _settled in in_flight):
        return None
    starts = [start for start, _end, _docs in done] + [start for start, _t, _s in in_flight]
    settled = sum(docs for _s, _e, docs in done) + sum(n for _s, _t, n in in_flight)
    span = now - min(starts)
    if settled <= 0 or span <= 0:
        return None
    per_second = settled / span
    mean = sum(docs for _s, _e, docs in done) / len(done) if done else None
    left = 0.0
    for _start, total, n in in_flight:
        if total is None:  # its first page has not answered: a mean round (or nothing known)
            if mean is None:
                return None
            left += mean
        else:
            left += max(total - n, 0)
    waiting = max(remaining - len(in_flight), 0)
    if waiting:
        if mean is None:
            return None
        left += waiting * mean
    return left / per_second


def in_flight_starts(conn, task_id: int, now: dt.datetime) -> list[float]:
    return [
        (created or now).timestamp()
        for (created,) in conn.execute(
            sa.select(round_.c.created_at).where(
                round_.c.task_id == task_id, round_.c.state.in_(IN_FLIGHT)
            )
        )
    ]


def round_rate(
    conn, task_id: int, now: dt.datetime, remaining: int
) -> tuple[float | None, int, float | None]:
    """(rounds per hour, rounds counted, ETA seconds) from the last RATE_ROUNDS rounds done
    within RATE_WINDOW and the rounds in flight (:func:`round_rate_eta`)."""
    rows = [
        ((created or updated).timestamp(), updated.timestamp(), total or 0)
        for created, updated, total in conn.execute(
            sa.select(round_.c.created_at, round_.c.updated_at, round_.c.total)
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
    finished = [(start, end) for start, end, _total in rows]
    # the rounds running now: when they started, what they listed, what of it is settled (their
    # ledger rows no longer pending: stored, in errorLink or dropped)
    if not sa.inspect(conn).has_table(ledger.name):  # a database no worker has upgraded yet
        per_hour, eta = round_rate_eta(
            finished, in_flight_starts(conn, task_id, now), remaining, now.timestamp()
        )
        return (
            (round(per_hour, 2) if per_hour else None),
            len(finished),
            (round(eta) if eta is not None else None),
        )
    settled = (
        sa.select(sa.func.count())
        .select_from(ledger)
        .where(ledger.c.round_id == round_.c.id, ledger.c.outcome != "pending")
        .scalar_subquery()
    )
    running = [
        ((created or now).timestamp(), total, n or 0)
        for created, total, n in conn.execute(
            sa.select(round_.c.created_at, round_.c.total, settled).where(
                round_.c.task_id == task_id, round_.c.state.in_(IN_FLIGHT)
            )
        )
    ]
    in_flight = [start for start, _total, _n in running]
    per_hour, eta = round_rate_eta(finished, in_flight, remaining, now.timestamp())
    if per_hour and remaining:
        by_documents = document_eta(rows, running, remaining, now.timestamp())
        if by_documents is not None:
            eta = by_documents
    return (
        (round(per_hour, 2) if per_hour else None),
        len(finished),
        (round(eta) if eta is not None else None),
    )
