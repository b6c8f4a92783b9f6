"""The entry lag, measured (issue 46.3): how many days after its own date CNKI listed a document.

Read from the ledger: each row's ``first_listed`` (written once, when a list page first showed
it, cnkispider/store/ledger.py) against its round's day, on CNKI's calendar. A row first seen by a later
walk of its round (a look) was entered late: its lag is the day it was listed minus the round's
day, an upper bound by at most the time between two looks. A row seen by the round's first walk
counts only when that walk was on the round's day or the next (a task that follows today): a day
first walked weeks after its date says nothing of when its documents came (censored, skipped).
No state of its own; nothing here writes.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import sqlalchemy as sa

from cnkispider.clock import cnki_today
from cnkispider.store.schema import ledger, round_

#: rows listed within this long of a round's first listed row belong to its first walk
FIRST_WALK = dt.timedelta(hours=1)
#: a first walk at most this many days after the round's day measures its rows' lag
FRESH_DAYS = 1


@dataclass(frozen=True)
class LagSummary:
    """The entry-lag distribution seen so far, in days (None: nothing measured yet)."""

    documents: int  # rows measured
    median: int | None
    p90: int | None
    p99: int | None
    late: int  # rows listed after their round's first walk

    @property
    def window_99(self) -> int | None:
        """The look-back window (``[task] look_back_days``) that would have caught 99% of the
        measured lags: a window of N days looks at today and the N-1 days before it."""
        return None if self.p99 is None else self.p99 + 1

    def to_dict(self) -> dict:
        return {
            "documents": self.documents,
            "late": self.late,
            "median_days": self.median,
            "p90_days": self.p90,
            "p99_days": self.p99,
            "window_99_days": self.window_99,
        }


def _percentile(counts: dict[int, int], share: float) -> int:
    """Nearest-rank percentile of a weighted set of lags."""
    total = sum(counts.values())
    rank = max(1, -(-int(share * total * 1000) // 1000))  # ceil(share * total), float-safe
    seen = 0
    for lag in sorted(counts):
        seen += counts[lag]
        if seen >= rank:
            return lag
    return max(counts)


def lag_counts(conn, task_id: int | None = None) -> tuple[dict[int, int], int]:
    """({lag in days: rows}, rows first listed after their round's first walk) of the task (all
    tasks: None). One grouped query: rows of one list page share their second."""
    if "first_listed" not in {c["name"] for c in sa.inspect(conn).get_columns(ledger.name)}:
        return {}, 0  # a database before schema 18: nothing measured
    query = (
        sa.select(
            ledger.c.round_id, round_.c.day, ledger.c.first_listed, sa.func.count().label("n")
        )
        .select_from(ledger.join(round_, round_.c.id == ledger.c.round_id))
        .where(ledger.c.first_listed.is_not(None))
        .group_by(ledger.c.round_id, round_.c.day, ledger.c.first_listed)
    )
    if task_id is not None:
        query = query.where(round_.c.task_id == task_id)
    by_round: dict[int, list] = {}
    for r in conn.execute(query):
        by_round.setdefault(r.round_id, []).append(r)
    counts: dict[int, int] = {}
    late = 0
    for rows in by_round.values():
        try:
            day = dt.date.fromisoformat(rows[0].day[:10])
        except ValueError:
            continue  # a hand-edited day: no lag to tell
        first = min(r.first_listed for r in rows)
        fresh = (cnki_today(first) - day).days <= FRESH_DAYS
        for r in rows:
            later = r.first_listed - first > FIRST_WALK
            if not later and not fresh:
                continue  # censored: the first walk came long after the day
            lag = max(0, (cnki_today(r.first_listed) - day).days)
            counts[lag] = counts.get(lag, 0) + r.n
            late += r.n if later else 0
    return counts, late


def summary(counts: dict[int, int], late: int = 0) -> LagSummary:
    if not counts:
        return LagSummary(0, None, None, None, late)
    return LagSummary(
        sum(counts.values()),
        _percentile(counts, 0.5),
        _percentile(counts, 0.9),
        _percentile(counts, 0.99),
        late,
    )


def measured(conn, task_id: int | None = None) -> LagSummary:
    """The task's entry lag seen so far."""
    return summary(*lag_counts(conn, task_id))
