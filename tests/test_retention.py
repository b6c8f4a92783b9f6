"""Retention (issue 43, case 10, the database part): worker rows pruned after a week, and the
ledger rows of long-done rounds folded into per-round counts that read the same numbers
(tasks/retention.py, cnkispider/store/ledger.py), on SQLite and the real MariaDB."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import sqlalchemy as sa

from cnkispider.config import load_config
from cnkispider.exceptions import ConfigError
from cnkispider.launch.crawlsettings import crawler_settings
from cnkispider.store import ledger as ledgers
from cnkispider.store.db import db_now, open_database
from cnkispider.store.schema import fill, ledger, ledger_fold, round_, task, worker
from errors.recorder import ErrorRecorder
from tasks.flow import TaskStore
from tasks.retention import LOOK_MARGIN_DAYS, WORKER_DAYS, fold, fold_ledgers
from tests.fixtures.commands import cli

# -- worker rows ----------------------------------------------------------------------------------


def test_a_worker_row_not_seen_for_a_week_goes_when_a_worker_registers(db_url):
    """A row per process start was kept for ever; now rows of workers silent for over
    WORKER_DAYS go at the next registration, and the others (a worker seen yesterday) stay."""
    store = TaskStore(open_database(db_url))
    with store.engine.begin() as conn:
        now = db_now(conn)
        for worker_id, days in (("old:1:a", WORKER_DAYS + 1), ("recent:2:b", WORKER_DAYS - 1)):
            seen = now - dt.timedelta(days=days)
            conn.execute(
                worker.insert().values(
                    id=worker_id,
                    host=worker_id.split(":")[0],
                    pid=int(worker_id.split(":")[1]),
                    started_at=seen,
                    last_seen=seen,
                    state="stopped",
                )
            )
    store.register_worker("new:3:c", None)
    with store.engine.connect() as conn:
        ids = sorted(conn.execute(sa.select(worker.c.id)).scalars())
    assert ids == ["new:3:c", "recent:2:b"]


# -- the ledger fold ------------------------------------------------------------------------------


def _closed_round(store: TaskStore, keys: list[str]) -> int:
    """A round that listed ``keys`` and a dropped row, stored all but the last (in errorLink),
    and closed done."""
    r = store.claim(1, "w1")
    store.set_total(r.id, len(keys) + 1)
    store.note_listed(r.id, keys, {f"CPFD/{r.id}": "other-database"})
    with store.engine.begin() as conn:
        ledgers.note_stored(conn, [(r.id, key) for key in keys[:-1]])
    dbname, filename = keys[-1].split("/")
    ErrorRecorder(store.engine).record_link(1, r.id, "patent", "u", dbname, filename, "http-500")
    closed = store.close_round(r.id)
    assert (closed.moved, closed.state) == (True, "done"), closed
    return r.id


def _numbers(store: TaskStore, ini: str, capsys, round_ids: list[int]) -> tuple:
    """What reads a round's ledger: its verdict, `status`'s ledger lines, `status --json`'s."""
    with store.engine.connect() as conn:
        totals = {r.id: r.total for r in conn.execute(sa.select(round_.c.id, round_.c.total))}
        verdicts = [ledgers.judge(conn, rid, totals[rid]) for rid in round_ids]
    assert cli(ini, "status") == 0
    text = [line for line in capsys.readouterr().out.splitlines() if "ledger" in line]
    assert cli(ini, "status", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    return verdicts, text, [t["ledger"] for t in report["tasks"]]


def _rows(store: TaskStore, table, round_id: int) -> int:
    with store.engine.connect() as conn:
        return conn.execute(
            sa.select(sa.func.count()).select_from(table).where(table.c.round_id == round_id)
        ).scalar()


def test_folding_a_long_done_round_keeps_its_verdict_and_the_status_sums(ini, capsys):
    """The per-document rows of a round done 40 days ago fold into counts (30 days); the round's
    verdict, `status`'s ledger line and `status --json`'s ledger key read the same numbers, and
    a round done today keeps its rows."""
    store = TaskStore(open_database(load_config(ini).database_url), round_lease=60)
    store.register("t", "patent", "2024-01-01", "2024-01-01", "G06,H04")
    old = _closed_round(store, ["SCPD/A1", "SCPD/A2", "SCPD/A3", "SCPD/A4"])
    recent = _closed_round(store, ["SCPD/B1", "SCPD/B2"])
    with store.engine.begin() as conn:
        conn.execute(
            round_.update()
            .where(round_.c.id == old)
            .values(updated_at=db_now(conn) - dt.timedelta(days=40))
        )
    before = _numbers(store, ini, capsys, [old, recent])
    assert before[0][0].words() == "listed 5, stored 3, in errorLink 1, dropped other-database 1"
    assert before[2][0]["stored"] == 4  # 3 + 1: the sums are the rounds'

    assert fold_ledgers(store.engine, 30) == 4  # 3 stored and 1 dropped rows
    assert fold_ledgers(store.engine, 30) == 0  # folded once
    assert _rows(store, ledger, old) == 1  # its errorLink document's row: a replay may store it
    assert _rows(store, ledger_fold, old) == 2
    assert _rows(store, ledger, recent) == 3 and _rows(store, ledger_fold, recent) == 0
    assert _numbers(store, ini, capsys, [old, recent]) == before
    # the document in errorLink stored later (the recrawl phase): the round counts it stored
    with store.engine.begin() as conn:
        ledgers.note_stored(conn, [(old, "SCPD/A4")])
        assert ledgers.count(conn, old) == ledgers.Counts(stored=4, drops={"other-database": 1})


def test_a_folded_round_listed_again_counts_its_new_rows_only(db_url):
    """A folded round crawled again (the cursor moved back) lists and stores its documents anew:
    its folded counts go, or each document would count twice and the round never balance."""
    store = TaskStore(open_database(db_url), round_lease=60)
    store.register("t", "patent", "2024-01-01", "2024-01-01", "G06")
    rid = _closed_round(store, ["SCPD/A1", "SCPD/A2"])
    with store.engine.begin() as conn:
        conn.execute(
            round_.update()
            .where(round_.c.id == rid)
            .values(updated_at=db_now(conn) - dt.timedelta(days=2))
        )
    assert fold_ledgers(store.engine, 1) == 2
    store.note_listed(rid, ["SCPD/A1", "SCPD/A2"], {f"CPFD/{rid}": "other-database"})
    with store.engine.connect() as conn:
        assert ledgers.folded(conn, rid) == {}
        assert ledgers.count(conn, rid) == ledgers.Counts(
            pending=1, in_error=1, drops={"other-database": 1}
        )


def test_folding_is_on_by_default_and_its_days_are_checked(tmp_path):
    """Issue 47.7: on by default, at half a year; 0 still keeps every row."""
    path = tmp_path / "config.ini"
    path.write_text("[database]\nurl = sqlite:///x.db\n", encoding="utf-8")
    assert crawler_settings(load_config(path, environ={}))["DATABASE_LEDGER_DAYS"] == 180
    path.write_text("[database]\nledger_days = 0\n", encoding="utf-8")
    assert crawler_settings(load_config(path, environ={}))["DATABASE_LEDGER_DAYS"] == 0
    path.write_text("[database]\nledger_days = -1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\[database\] ledger_days"):
        load_config(path, environ={})


@pytest.mark.slow  # two crawls in worker subprocesses
def test_a_worker_started_with_ledger_days_folds_the_rounds_done_that_long_ago(crawl_setup):
    """The whole path: a crawl against the stand-in, its rounds aged three days, then a worker
    with `-s DATABASE_LEDGER_DAYS=1` (the task up to date): its item pipeline folds them in the
    background and waits for the fold before it closes; `status --json`'s ledger is unchanged."""
    setup = crawl_setup("patent", "G06", "sqlite", end="2024-01-01", site={"seed": 3, "scale": 0.2})
    setup.run_ok()
    engine = open_database(setup.db_url)
    with engine.begin() as conn:
        listed = conn.execute(sa.select(sa.func.count()).select_from(ledger)).scalar()
        conn.execute(round_.update().values(updated_at=db_now(conn) - dt.timedelta(days=3)))
    assert listed > 0
    before = json.loads(setup.run_ok("status", "--json").stdout)["tasks"][0]["ledger"]
    setup.run_ok("run", "-s", "DATABASE_LEDGER_DAYS=1")
    with engine.connect() as conn:
        left = conn.execute(sa.select(sa.func.count()).select_from(ledger)).scalar()
        counted = conn.execute(sa.select(sa.func.sum(ledger_fold.c.documents))).scalar()
    assert (left, counted) == (0, listed)
    assert json.loads(setup.run_ok("status", "--json").stdout)["tasks"][0]["ledger"] == before
    engine.dispose()


# -- issue 47.7: a year of daily looks keeps the tables bounded ------------------------------------

YEAR, ROWS, FIELDS, LEDGER_DAYS, LOOK_BACK = 230, 3, 4, 180, 60


def _a_year_of_rounds(engine, store, name: str, *, follow: bool, days: int = YEAR) -> int:
    """A task with a round a day for YEAR days, each done on its day with ROWS stored ledger
    rows and FIELDS fill rows (what a year of daily crawls and looks leaves behind)."""
    current, _ = store.register(name, "paper", "2024-01-01", "2024-01-01", "A")
    with engine.begin() as conn:
        now = db_now(conn)
        if follow:
            conn.execute(task.update().where(task.c.id == current.id).values(follow=1))
        for age in range(days):
            done = now - dt.timedelta(days=age, hours=1)
            day = (dt.date(2030, 1, 1) - dt.timedelta(days=age)).isoformat()
            round_id = conn.execute(
                round_.insert().values(
                    task_id=current.id, day=day, category="A", state="done", attempts=1,
                    total=ROWS, stored=ROWS, in_error=0, dropped=0, beyond=0,
                    created_at=done, updated_at=done,
                )
            ).inserted_primary_key[0]  # fmt: skip
            conn.execute(
                ledger.insert(),
                [{"round_id": round_id, "doc_key": f"CJFQ/{age}-{i}", "outcome": "stored"}
                 for i in range(ROWS)],
            )  # fmt: skip
            conn.execute(
                fill.insert(),
                [{"task_id": current.id, "round_id": round_id, "doc_type": "paper",
                  "field": f"f{k}", "documents": ROWS, "filled": ROWS} for k in range(FIELDS)],
            )  # fmt: skip
    return current.id


def _count(engine, table, where=None) -> int:
    query = sa.select(sa.func.count()).select_from(table)
    with engine.connect() as conn:
        return conn.execute(query if where is None else query.where(where)).scalar()


def test_a_year_of_daily_rounds_keeps_the_tables_bounded(db_url):
    """The worker's fold (at start and every DATABASE_FOLD_EVERY): the ledger keeps the rows of
    the rounds done within ledger_days (a follow task's: within its look-back + 30 days at
    least), the fill table a task's latest 200 rounds; the verdicts' counts are all kept."""
    from cnkispider.watch.drift import RECENT_ROUNDS

    engine = open_database(db_url)
    store = TaskStore(engine)
    plain = _a_year_of_rounds(engine, store, "plain", follow=False)
    follows = _a_year_of_rounds(engine, store, "follows", follow=True)
    assert _count(engine, ledger) == 2 * YEAR * ROWS
    folded, removed = fold(engine, LEDGER_DAYS, LOOK_BACK)
    kept_rounds = LEDGER_DAYS  # ages 0 .. 179 are younger than 180 days
    assert folded == 2 * (YEAR - kept_rounds) * ROWS
    assert _count(engine, ledger) == 2 * kept_rounds * ROWS
    assert removed == 2 * (YEAR - RECENT_ROUNDS) * FIELDS
    for task_id in (plain, follows):
        assert _count(engine, fill, fill.c.task_id == task_id) == RECENT_ROUNDS * FIELDS
    with engine.connect() as conn:  # every round's counts still there, folded or not
        assert conn.execute(sa.select(sa.func.sum(ledger_fold.c.documents))).scalar() == folded
    # a second fold changes nothing: the tables stay at their bound however long it runs
    assert fold(engine, LEDGER_DAYS, LOOK_BACK) == (0, 0)
    engine.dispose()


def test_a_follow_task_folds_nothing_inside_its_look_back(db_url):
    """ledger_days shorter than a follow task's look-back: its rounds fold only past the
    look-back + 30 days (a look walks them on their rows); a task that does not follow folds at
    ledger_days."""
    engine = open_database(db_url)
    store = TaskStore(engine)
    plain = _a_year_of_rounds(engine, store, "plain", follow=False, days=100)
    follows = _a_year_of_rounds(engine, store, "follows", follow=True, days=100)
    fold_ledgers(engine, 7, LOOK_BACK)

    def rows_of(task_id):
        rounds = sa.select(round_.c.id).where(round_.c.task_id == task_id)
        return _count(engine, ledger, ledger.c.round_id.in_(rounds))

    assert rows_of(plain) == 7 * ROWS
    assert rows_of(follows) == (LOOK_BACK + LOOK_MARGIN_DAYS) * ROWS
    engine.dispose()
