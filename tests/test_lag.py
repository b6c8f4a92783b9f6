"""The entry lag, measured (issue 46.3): the ledger's first-listed times against the rounds' days
give the lag distribution of the stand-in's late arrivals, and the window that catches 99%."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from cnkispider.status.following import lag_line
from cnkispider.store import ledger as ledgers
from cnkispider.store.db import open_database
from cnkispider.store.schema import ledger, round_
from standin.catalogue import CorpusOptions, parse_day
from standin.corpus import Corpus
from tasks import lag
from tasks.flow import TaskStore
from tasks.lag import _percentile

DAYS = [dt.date(2024, 5, 6) + dt.timedelta(n) for n in range(3)]


def at(day: dt.date, hour: int = 2) -> dt.datetime:
    """A look's time in UTC (10:00 in Beijing: the same CNKI day)."""
    return dt.datetime.combine(day, dt.time(hour))


def late_documents(day: dt.date) -> list[tuple[str, int]]:
    """(doc key, entry lag) of every paper the late stand-in has on ``day``."""
    corpus = Corpus(CorpusOptions(seed=3, late=True))
    ordinal = parse_day(day.isoformat())
    out = []
    for li, n in enumerate(corpus.counts("paper", ordinal)):
        for i in range(n):
            out.append((f"{day}/{li}/{i}", corpus.entry_lag("paper", ordinal, li, i)))
    return out


def add_round(engine, task_id: int, day: dt.date) -> int:
    with engine.begin() as conn:
        return conn.execute(
            round_.insert().values(task_id=task_id, day=day.isoformat(), category="*", state="done")
        ).inserted_primary_key[0]


def test_daily_looks_measure_the_stand_ins_lags(db_url):
    """A task that follows today walks each day on its day, then looks every day: each document
    is first listed on the day the stand-in enters it; the measured percentiles are the
    stand-in's own, and the window that would have caught 99% is p99 + 1 days."""
    engine = open_database(db_url)
    store = TaskStore(engine)
    current, _ = store.register("lag", "paper", DAYS[0].isoformat(), "", "A", follow=True)
    truth: dict[int, int] = {}
    for day in DAYS:
        round_id = add_round(engine, current.id, day)
        by_look: dict[int, list[str]] = {}
        for key, entry_lag in late_documents(day):
            by_look.setdefault(entry_lag, []).append(key)
            truth[entry_lag] = truth.get(entry_lag, 0) + 1
        with engine.begin() as conn:
            # the first walk on the day, then one look a day: each lists the documents entered
            # by then (those listed before keep their first time: the next test shows it)
            for look, keys in sorted(by_look.items()):
                ledgers.note_listed(
                    conn, round_id, keys, {}, listed_at=at(day + dt.timedelta(look))
                )
    with engine.connect() as conn:
        got = lag.measured(conn, current.id)
    assert got.documents == sum(truth.values()) > 500
    assert got.median == _percentile(truth, 0.5)
    assert got.p90 == _percentile(truth, 0.9)
    assert got.p99 == _percentile(truth, 0.99)
    assert got.late == sum(n for lag_days, n in truth.items() if lag_days > 0)
    # the stand-in's model: seven in ten within a week, a tail to four months
    assert got.median <= 7 < got.p90 and 30 < got.p99 <= 120
    assert got.window_99 == got.p99 + 1
    caught = sum(n for lag_days, n in truth.items() if lag_days < got.window_99)
    assert caught >= 0.99 * sum(truth.values())
    line = lag_line(got.to_dict())
    assert f"p99 {got.p99}" in line and f"look-back of {got.window_99} days" in line


def test_a_day_first_walked_long_after_its_date_says_nothing_of_its_lags(db_url):
    """A back-catalogue day walked a month late: its rows are censored (skipped), but what a later
    look finds on it is a late arrival, measured."""
    engine = open_database(db_url)
    store = TaskStore(engine)
    current, _ = store.register("old", "paper", DAYS[0].isoformat(), "", "A", follow=True)
    round_id = add_round(engine, current.id, DAYS[0])
    with engine.begin() as conn:
        ledgers.note_listed(conn, round_id, ["a", "b", "c"], {}, at(DAYS[0] + dt.timedelta(30)))
        # listed again by a look: the first time stays
        ledgers.note_listed(conn, round_id, ["a", "d"], {}, at(DAYS[0] + dt.timedelta(33)))
        first = dict(
            conn.execute(
                sa.select(ledger.c.doc_key, ledger.c.first_listed).where(
                    ledger.c.round_id == round_id
                )
            ).all()
        )
    assert first["a"] == at(DAYS[0] + dt.timedelta(30))
    with engine.connect() as conn:
        got = lag.measured(conn, current.id)
    assert (got.documents, got.late, got.median, got.p99) == (1, 1, 33, 33)


def test_nothing_measured_yet_is_said_so(db_url):
    engine = open_database(db_url)
    store = TaskStore(engine)
    current, _ = store.register("none", "paper", DAYS[0].isoformat(), "", "A", follow=True)
    with engine.connect() as conn:
        got = lag.measured(conn, current.id)
    assert got.documents == 0 and got.window_99 is None
    assert lag_line(got.to_dict()) == "entry lag: nothing measured yet"
