"""Following today (issue 38): a task whose end date is today, and whose looks count its
look-back again to crawl what CNKI entered late. Real crawls against the stand-in with late
arrivals and a clock (``--as-of``), counted by its own /_stats."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import sqlalchemy as sa

from cnkispider.config.durations import parse_span
from cnkispider.exceptions import InputError
from cnkispider.store.db import open_database
from cnkispider.store.schema import documents, round_, task
from tasks.flow import TaskStore
from tasks.lookback import look_due, look_window
from tests.fixtures import launcher
from tests.fixtures.crawl_harness import compare, depth_fields
from tests.fixtures.crawls import IPC
from tests.fixtures.follow import FOLLOW, LOOK_BACK, RUN, SITE, START, TODAY, WINDOW, days
from tests.fixtures.receiver import Receiver
from tests.fixtures.waiting import wait_until

# -- the pieces -----------------------------------------------------------------------------


def test_follow_every_takes_the_units_the_docs_name():
    assert [parse_span(t) for t in ("0", "30s", "10m", "6h", "1d", "45")] == [
        0,
        30,
        600,
        21600,
        86400,
        45,
    ]
    for bad in ("6 hours", "-1h", "h", ""):
        with pytest.raises(ValueError):
            parse_span(bad)


def test_a_look_counts_the_last_days_within_the_start_and_the_cursor():
    today = dt.date(2026, 3, 10)
    assert look_window(dt.date(2026, 1, 1), today, today, 60) == (dt.date(2026, 1, 10), today)
    assert look_window(dt.date(2026, 3, 5), today, today, 60) == (dt.date(2026, 3, 5), today)
    assert look_window(dt.date(2026, 3, 5), dt.date(2026, 3, 8), today, 3) == (
        dt.date(2026, 3, 8),
        dt.date(2026, 3, 8),
    )


def test_a_look_is_due_when_its_time_has_come_or_at_each_start_with_zero():
    t0 = dt.datetime(2026, 3, 10, 8)
    hour = dt.timedelta(hours=1)
    assert look_due(None, None, t0, 3600, t0)
    assert not look_due(t0, t0 + hour, t0 + hour / 2, 3600, t0)
    assert look_due(t0, t0 + hour, t0 + hour, 3600, t0)
    assert not look_due(t0, t0, t0, 0, t0)  # 0: once a start
    assert look_due(t0, t0, t0 + hour, 0, t0 + hour)
    # 0, the database's whole seconds: a run started in the second the last look began (the
    # previous run's) is due by the looks it saw at its start; not once a look followed them
    assert look_due(t0, t0, t0, 0, t0, looks=3, looks_at_start=3)
    assert not look_due(t0, t0, t0, 0, t0, looks=4, looks_at_start=3)


def test_follow_on_off_stop_and_extend(db_url):
    """A follow task has no end date; `task extend` says it already follows today; `task stop`
    ends the following with today as its end date; `--follow on` makes it follow again."""
    engine = open_database(db_url)
    store = TaskStore(engine, day_census=True)
    current, _ = store.register("f", "patent", START.isoformat(), "", IPC, follow=True)
    assert current.follow and current.end_date is None
    with pytest.raises(InputError, match="already follows today"):
        store.set_end_date("f", (TODAY + dt.timedelta(days=3)).isoformat())
    stopped = store.stop("f")
    assert not stopped.follow and stopped.end_date == TODAY
    again = store.set_follow("f", True)
    assert again.follow and again.end_date is None
    with pytest.raises(InputError, match="no end date"):
        store.register("g", "patent", START.isoformat(), TODAY.isoformat(), IPC, follow=True)
    engine.dispose()


def test_one_look_per_task_across_workers(db_url):
    """Two workers asking for a due look at once: one claims it, in the transaction that
    re-opens the look-back's rounds; the other gets nothing, and nothing is re-opened twice."""
    engine = open_database(db_url)
    store = TaskStore(engine, day_census=True)
    current, _ = store.register("f", "patent", START.isoformat(), "", IPC, follow=True)
    while store.claim(current.id, "w") is not None:  # the cursor walks to today
        pass
    with engine.begin() as conn:  # every round done, a day ago
        conn.execute(
            round_.update().values(
                state="done",
                total=3,
                updated_at=dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(days=1),
            )
        )
    started = store.database_now()
    first = store.claim_look(current.id, LOOK_BACK, 3600, started)
    second = store.claim_look(current.id, LOOK_BACK, 3600, started)
    assert first is not None and first.reopened == LOOK_BACK and second is None
    with engine.connect() as conn:
        reopened = conn.execute(
            sa.select(round_.c.day, round_.c.listed_before, round_.c.state).where(
                round_.c.look == first.number
            )
        ).all()
        looked = conn.execute(sa.select(task.c.looks, task.c.look_due)).first()
    assert sorted(r.day for r in reopened) == [
        (WINDOW + dt.timedelta(days=k)).isoformat() for k in range(LOOK_BACK)
    ]
    assert {(r.listed_before, r.state) for r in reopened} == {(3, "claimed")}
    assert looked.looks == 1 and looked.look_due is not None
    # paused: no look, whatever is due
    store.pause("f")
    assert store.claim_look(current.id, LOOK_BACK, 0, store.database_now()) is None
    engine.dispose()


# -- acceptance: a crawl as of day A, then as of day B -----------------------------------


def truth_of(site) -> list[dict]:
    """The stand-in's truth as of its clock, from the task's start to today."""
    return site.truth("patent", START.isoformat(), TODAY.isoformat(), IPC.split(","))


def _window_rows(rows: list[dict]) -> dict[str, dict]:
    return {r["filename"]: r for r in rows if str(r["date"])[:10] >= WINDOW.isoformat()}


@pytest.mark.slow  # three crawls in worker subprocesses
@pytest.mark.parametrize("depth", ["detail", "export", "list"])
def test_following_catches_late_arrivals_and_costs_a_census_a_day(crawl_setup, depth):
    """Crawled as of day A, then run again as of today: the look-back equals the truth of
    today; the second run costs one census per look-back day plus the new documents (at
    detail depth a detail page each, at export depth an export request per page of them, at
    list depth nothing); a third run right after sends only the look-back's census."""
    setup = crawl_setup(
        "patent",
        IPC,
        "sqlite",
        START.isoformat(),
        "",
        site=SITE,
        day_census="on",
        depth=depth,
        task_keys=FOLLOW,
    )
    first = setup.run_ok("run", "--until-idle", timeout=240)
    before = _window_rows(setup.stored())
    site = setup.site
    assert len(setup.stored()) == len(truth_of(site)) > 0, first.stdout[-2000:]

    site.control(as_of=TODAY.isoformat(), reset_stats=True)  # a week later: CNKI added more
    truth = _window_rows(truth_of(site))
    new = set(truth) - set(before)
    assert len(new) > 20  # the stand-in's late arrivals
    # `export --since` a time after the first run's last store: what the second one brought
    (last,) = setup.query(sa.select(sa.func.max(documents["patent"].c.crawled_at)))[0]
    mark = last + dt.timedelta(seconds=1)
    wait_until(lambda: dt.datetime.now(dt.UTC).replace(tzinfo=None) > mark, 10)
    setup.run_ok("run", "--until-idle", timeout=240)
    exported = launcher.run(
        setup.command("export", "--format", "jsonl", "--since", mark.strftime("%Y-%m-%d %H:%M:%S")),
        **RUN,
    )
    assert exported.returncode == 0, exported.stderr
    assert {json.loads(line)["filename"] for line in exported.stdout.splitlines()} == new
    stats = site.stats()
    stored = _window_rows(setup.stored())
    fields = depth_fields(depth, "patent")
    assert compare(list(stored.values()), list(truth.values()), "patent", fields) == {
        "missing": [],
        "extra": [],
        "differing": {},
    }
    assert stats["searches"]["first"] == days(WINDOW, TODAY)  # one census a look-back day
    rounds = setup.query(
        sa.select(round_.c.day, round_.c.state, round_.c.listed_before, round_.c.total).where(
            round_.c.day >= WINDOW.isoformat()
        )
    )
    grown = [r for r in rounds if r.total != r.listed_before]
    if depth == "detail":
        assert stats["kinds"]["detail"] == len(new)  # only what it had not stored
    elif depth == "export":  # a request per page of new rows (batches of up to 50)
        assert 0 < stats["kinds"]["export"] + stats["kinds"]["detail"] <= 2 * len(grown)
    else:
        assert stats["kinds"]["detail"] == stats["kinds"]["export"] == 0
    assert {r.state for r in rounds} == {"done"}
    assert grown and all(r.total > r.listed_before for r in grown)  # its history kept

    site.control(reset_stats=True)
    setup.run_ok("run", "--until-idle", timeout=240)
    stats = site.stats()
    assert stats["searches"]["first"] == days(WINDOW, TODAY)
    assert stats["searches"]["turns"] == 0
    assert stats["kinds"]["detail"] == stats["kinds"]["export"] == 0


# -- several workers, and one killed during a look --------------------------------------------


def _an_hour_later(setup) -> None:
    """The database's clock an hour on, for a task that looks every hour: its rounds were
    counted, and its next look was due, an hour earlier than they say."""
    hour = dt.timedelta(hours=2)
    engine = open_database(setup.db_url)
    with engine.begin() as conn:  # row by row: SQLite keeps times as text
        for rid, when in conn.execute(sa.select(round_.c.id, round_.c.updated_at)).all():
            conn.execute(round_.update().where(round_.c.id == rid).values(updated_at=when - hour))
        for tid, due in conn.execute(sa.select(task.c.id, task.c.look_due)).all():
            conn.execute(task.update().where(task.c.id == tid).values(look_due=due - hour))
    engine.dispose()


def _look_rounds(setup, number: int) -> dict[str, int]:
    rows = setup.query(
        sa.select(round_.c.state, sa.func.count())
        .where(round_.c.look == number)
        .group_by(round_.c.state)
    )
    return dict(rows)


def _caught_up(setup) -> None:
    stored = _window_rows(setup.stored())
    truth = _window_rows(truth_of(setup.site))
    assert compare(list(stored.values()), list(truth.values()), "patent") == {
        "missing": [],
        "extra": [],
        "differing": {},
    }
    states = {r.state for r in setup.query(sa.select(round_.c.state))}
    assert states == {"done"}


@pytest.mark.slow  # crawls in worker subprocesses, one killed
def test_a_worker_killed_during_a_look_neither_skips_nor_repeats_it(crawl_setup):
    """A worker dies (kill -9) with a look's rounds in flight: the next run takes them over
    when their leases lapse and ends caught up; the look is not claimed again (one look)."""
    setup = crawl_setup(
        "patent",
        IPC,
        "sqlite",
        START.isoformat(),
        "",
        site=SITE,
        day_census="on",
        task_keys={**FOLLOW, "follow_every": "1h"},
        crawl={"round_lease_seconds": 5},
    )
    hook = Receiver()  # [notify]: one message a look, whoever's worker tells it
    # (a generous webhook timeout: on a loaded machine the receiver in this process may answer
    # late, and a message given up on is not what this test is about)
    told = ("-s", f"NOTIFY_WEBHOOKS={hook.url}/hook", "-s", "NOTIFY_TIMEOUT=60")
    setup.run_ok("run", "--until-idle", *told, timeout=240)
    (looks,) = setup.query(sa.select(task.c.looks))[0]
    assert looks == 1  # the first look, at today: the crawl had just counted every day
    setup.site.control(as_of=TODAY.isoformat(), latency="0.3")
    _an_hour_later(setup)
    worker = setup.spawn("run", "--until-idle", *told)
    try:
        wait_until(
            lambda: _look_rounds(setup, 2).get("done", 0) >= 2,
            240,
            what="the look's first rounds done",
            workers=[worker],
            log=setup.log,
        )
    finally:
        worker.kill()
        worker.wait(60)
    left = _look_rounds(setup, 2)
    assert left.get("claimed", 0) + left.get("seeded", 0) > 0, left  # killed during the look
    setup.site.control(latency="0")
    setup.run_ok("run", "--until-idle", *told, timeout=240)
    _caught_up(setup)
    # look 2's worker died before its end: the next run told it, once
    hook.close()
    assert setup.query(sa.select(task.c.look_told))[0][0] == 2, setup.log()[-3000:]
    events = [b["json"]["event"] for b in hook.bodies]
    assert events.count("look:2") == 1, (events, setup.log()[-3000:])
    assert setup.query(sa.select(task.c.looks))[0][0] == 2
    assert sum(_look_rounds(setup, 2).values()) == days(WINDOW, TODAY)


@pytest.mark.slow  # two workers in subprocesses
def test_two_workers_share_one_look(crawl_setup):
    """Two workers started together on a look that is due: one claims it, both crawl its
    rounds, each look-back day is counted once, and both exit 0 caught up."""
    setup = crawl_setup(
        "patent",
        IPC,
        "sqlite",
        START.isoformat(),
        "",
        site=SITE,
        day_census="on",
        task_keys={**FOLLOW, "follow_every": "1h"},
    )
    setup.run_ok("run", "--until-idle", timeout=240)
    setup.site.control(as_of=TODAY.isoformat(), reset_stats=True)
    _an_hour_later(setup)
    workers = [setup.spawn("run", "--until-idle") for _ in range(2)]
    try:
        outputs = [w.communicate(timeout=480)[0] for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    assert [w.returncode for w in workers] == [0, 0], outputs
    _caught_up(setup)
    assert setup.query(sa.select(task.c.looks))[0][0] == 2
    assert setup.site.stats()["searches"]["first"] == days(WINDOW, TODAY)


@pytest.mark.slow  # `cnkispider status` and `cnkispider web` in subprocesses
def test_status_and_the_web_page_say_it_follows_today_and_when_it_looks_next(crawl_setup):
    from tests.fixtures.webserver import WebServer

    setup = crawl_setup("patent", IPC, "sqlite", START.isoformat(), "", task_keys=FOLLOW)
    setup.write()
    engine = open_database(setup.db_url)
    store = TaskStore(engine, day_census=True)
    current, _ = store.register(setup.task, "patent", START.isoformat(), "", IPC, follow=True)
    report = json.loads(launcher.run(setup.command("status", "--json"), **RUN).stdout)
    assert report["tasks"][0]["follow"] == {
        "looks": 0,
        "last_look": None,
        "next_look_due": None,
        "last_counts_refresh": None,
        "next_counts_refresh_due": None,
        # config.ini's window and tiers (issue 46): look_tiers off, every day at every look
        "look_back_days": LOOK_BACK,
        "tiers": [{"days_back": [0, LOOK_BACK - 1], "every_days": 0}],
        # issue 46.3: nothing listed yet, no lag measured (tests/test_lag.py measures it)
        "entry_lag": {
            "documents": 0,
            "late": 0,
            "median_days": None,
            "p90_days": None,
            "p99_days": None,
            "window_99_days": None,
        },
    }
    while store.claim(current.id, "w") is not None:
        pass
    look = store.claim_look(current.id, LOOK_BACK, 3600, store.database_now())
    assert look is not None
    engine.dispose()
    text = launcher.run(setup.command("status"), **RUN).stdout
    assert "follows today: look 1 at " in text and "next look due" in text, text
    assert "looks over 10 days: days 0-9 back at every look" in text, text
    assert "entry lag: nothing measured yet" in text, text
    report = json.loads(launcher.run(setup.command("status", "--json"), **RUN).stdout)
    follow = report["tasks"][0]["follow"]
    assert follow["looks"] == 1
    due = dt.datetime.fromisoformat(follow["next_look_due"].rstrip("Z"))
    last = dt.datetime.fromisoformat(follow["last_look"].rstrip("Z"))
    assert due - last == dt.timedelta(hours=1)
    web = WebServer(setup)
    try:
        page = web.get(f"/tasks/{setup.task}")
    finally:
        web.stop()
    assert "follows today" in page and "next look due" in page
    assert "looks over 10 days: days 0-9 back at every look" in page


def test_export_since_takes_a_day_or_a_time():
    from cnkispider.output.export import since_value

    assert since_value("2026-11-20") == "2026-11-20"
    assert since_value("2026-11-20 08:30") == "2026-11-20 08:30:00"
    with pytest.raises(InputError, match="YYYY-MM-DD HH:MM"):
        since_value("2026-11-20 25:00")


@pytest.mark.slow  # crawls in worker subprocesses against a stand-in that checks for a person
def test_a_look_that_needs_a_persons_pass_waits_and_says_so(verified_crawl):
    """A task that follows today, its look due and no passed session left: the look waits
    (status says so, nothing is listed), and goes on once a person passes; caught up after."""
    from tests.fixtures.verified import add_passed, status_json

    setup, pool = verified_crawl(
        "patent",
        IPC,
        start=START.isoformat(),
        end="",
        site=SITE,
        day_census="on",
        task_keys=FOLLOW,
    )
    site = setup.site
    session, _ = add_passed(site, pool)
    setup.run_ok("run", "--until-idle", timeout=240)
    pool.remove(session.id)  # the pass is gone; a week later CNKI added more
    site.control(as_of=TODAY.isoformat(), reset_stats=True)
    worker = setup.spawn("run", "--until-idle", "-s", "SESSIONS_POLL=1")
    try:
        waiting = wait_until(
            lambda: status_json(setup)["tasks"][0].get("waiting"),
            120,
            what="the look waiting for a person",
            workers=[worker],
            log=setup.log,
        )
        assert "person" in waiting
        assert _look_rounds(setup, 2) and "done" not in _look_rounds(setup, 2)
        assert site.stats()["pages"]["list"] == 0  # nothing listed without a pass
        add_passed(site, pool)
        out, _ = worker.communicate(timeout=480)
        assert worker.returncode == 0, out[-3000:] + setup.log()[-3000:]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    _caught_up(setup)


@pytest.mark.slow  # crawls in worker subprocesses
def test_refresh_counts_of_a_task_that_follows_today(crawl_setup):
    """`refresh-counts` of a follow task crawls its own days once (its ~counts task does not
    follow today), and ends."""
    day = TODAY - dt.timedelta(days=2)
    setup = crawl_setup(
        "paper",
        "A,B",
        "sqlite",
        day.isoformat(),
        "",
        site={**SITE, "as_of": None},
        task_keys=FOLLOW,
    )
    setup.run_ok("run", "--until-idle", timeout=240)
    result = setup.run("refresh-counts", setup.task, "--from", day.isoformat(), timeout=240)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "counts read again from" in result.stdout


@pytest.mark.slow  # crawls in worker subprocesses
def test_a_document_no_longer_listed_stays_stored_and_the_ledger_counts_it(crawl_setup):
    """CNKI takes three documents of a look-back day back: the look walks that day again, the
    round balances with them counted as no longer listed (since when), and they stay stored;
    listed again later, they are listed again in the ledger."""
    from cnkispider.store.schema import ledger

    setup = crawl_setup(
        "patent",
        IPC,
        "sqlite",
        START.isoformat(),
        "",
        site={**SITE, "as_of": None},
        day_census="on",
        task_keys=FOLLOW,
    )
    setup.run_ok("run", "--until-idle", timeout=240)
    day = (TODAY - dt.timedelta(days=3)).isoformat()
    gone = sorted(r["filename"] for r in setup.stored() if str(r["date"])[:10] == day)[:3]
    assert len(gone) == 3
    setup.site.control(withdrawn=gone)
    setup.run_ok("run", "--until-idle", timeout=240)

    def unlisted():
        rows = setup.query(
            sa.select(ledger.c.doc_key, ledger.c.unlisted_since).where(
                ledger.c.unlisted_since.is_not(None)
            )
        )
        return sorted(key.split("/", 1)[1] for key, _ in rows)

    assert unlisted() == gone
    (state, total, stored) = setup.query(
        sa.select(round_.c.state, round_.c.total, round_.c.stored).where(round_.c.day == day)
    )[0]
    assert state == "done" and stored == total  # balanced without them
    assert set(gone) <= {r["filename"] for r in setup.stored()}  # never deleted
    setup.site.control(withdrawn=[])  # listed again
    setup.run_ok("run", "--until-idle", timeout=240)
    assert unlisted() == []
    _caught_up(setup)


def test_the_task_commands_follow_today(ini, capsys):
    """`task add --follow`, `task extend` (it already follows today), `task set --follow
    off|on` and `task stop`, as an operator types them."""
    from tests.fixtures.commands import cli

    start = START.isoformat()
    assert cli(ini, "task", "add", "w", "--type", "patent", "--start", start, "--follow") == 0
    assert "(today)" in capsys.readouterr().out
    assert cli(ini, "task", "show", "w") == 0
    assert ", follows today" in capsys.readouterr().out
    assert cli(ini, "task", "extend", "w", (TODAY + dt.timedelta(days=9)).isoformat()) == 2
    assert "already follows today" in capsys.readouterr().err
    assert cli(ini, "task", "set", "w", "--follow", "off") == 0
    out = capsys.readouterr().out
    assert f"..{TODAY.isoformat()}" in out and "follows today" not in out
    assert cli(ini, "task", "set", "w", "--follow", "on") == 0
    assert "follows today" in capsys.readouterr().out
    assert cli(ini, "task", "stop", "w") == 0
    out = capsys.readouterr().out
    assert f"..{TODAY.isoformat()}" in out and "follows today" not in out


def test_a_look_s_end_is_told_once_by_whichever_worker_finds_it_closed(db_url):
    """task.look_told: not while the look's rounds are crawled; then one claim of two wins
    (two real connections), and a look that re-opened nothing is marked told silently."""
    engine = open_database(db_url)
    store = TaskStore(engine)
    current, _ = store.register("told", "patent", START.isoformat(), "", "G06", follow=True)
    day = START.isoformat()
    with engine.begin() as conn:
        conn.execute(task.update().where(task.c.id == current.id).values(looks=2, look_told=1))
        for state, before, total in (("done", 3, 5), ("claimed", 4, None)):
            conn.execute(
                round_.insert().values(
                    task_id=current.id,
                    day=day,
                    category=f"G06{state}",
                    state=state,
                    look=2,
                    listed_before=before,
                    total=total,
                )
            )
    assert store.claim_look_told(current.id) is None  # a round of the look is still crawled
    with engine.begin() as conn:
        conn.execute(
            round_.update().where(round_.c.state == "claimed").values(state="done", total=4)
        )
    other = TaskStore(open_database(db_url))
    told = [store.claim_look_told(current.id), other.claim_look_told(current.id)]
    assert told.count(None) == 1, told
    (won,) = [t for t in told if t is not None]
    assert won["number"] == 2 and won["gained"] == 2 and won["days"] == 1
    with engine.begin() as conn:  # look 3 re-opened no round: told, with nothing to tell
        conn.execute(task.update().where(task.c.id == current.id).values(looks=3))
    assert store.claim_look_told(current.id) is None
    with engine.connect() as conn:
        assert (
            conn.execute(sa.select(task.c.look_told).where(task.c.id == current.id)).scalar() == 3
        )
    other.engine.dispose()
    engine.dispose()


def test_the_upgrade_to_14_counts_the_looks_before_it_as_told(db_url):
    """A task that had looks before version 14 told them itself: the upgrade marks them told,
    so no worker tells an old look again after it."""
    from cnkispider.store import schema

    engine = open_database(db_url)
    current, _ = TaskStore(engine).register("old", "patent", START.isoformat(), "", "G06")
    with engine.begin() as conn:  # what version 13 left behind
        conn.execute(task.update().where(task.c.id == current.id).values(looks=4))
        conn.exec_driver_sql("ALTER TABLE task DROP COLUMN look_told")
        conn.execute(schema.schema_version.update().values(version=13))
    engine.dispose()
    upgraded = open_database(db_url)
    with upgraded.connect() as conn:
        assert (
            conn.execute(sa.select(schema.schema_version.c.version)).scalar()
            == schema.SCHEMA_VERSION
        )
        told = conn.execute(sa.select(task.c.look_told).where(task.c.id == current.id)).scalar()
    assert told == 4
    assert TaskStore(upgraded).claim_look_told(current.id) is None
    upgraded.dispose()
