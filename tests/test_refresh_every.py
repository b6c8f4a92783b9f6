"""`[task] refresh_counts_every` (issue 38, point 4): a task that follows today has its counts
(被引, 下载) read again over its look-back, at most once an interval per task, claimed in the
database (tasks/lookback.py Looks.claim_counts), crawled as ``NAME~counts`` by the worker that
claimed it (tasks/feeder.py). Real crawls against the stand-in, whose counts /_control
``count_shift`` changes."""

from __future__ import annotations

import datetime as dt
import json
import subprocess

import pytest
import sqlalchemy as sa

from cnkispider.config import load_config
from cnkispider.exceptions import ConfigError
from cnkispider.store.db import open_database
from cnkispider.store.schema import round_, task
from tasks.flow import TaskStore
from tasks.lookback import look_window
from tests.fixtures import launcher
from tests.fixtures.follow import RUN, TODAY
from tests.fixtures.waiting import wait_until

# -- config.ini ---------------------------------------------------------------------------------


def _config(tmp_path, doc_type: str, every: str | None):
    path = tmp_path / "config.ini"
    line = f"refresh_counts_every = {every}\n" if every is not None else ""
    path.write_text(f"[task]\nname = t\ntype = {doc_type}\nfollow = on\n{line}", encoding="utf-8")
    return path


def test_refresh_counts_every_is_off_by_default_and_takes_a_span(tmp_path):
    assert load_config(_config(tmp_path, "paper", None), environ={}).task.refresh_counts_every == 0
    for text, seconds in (
        ("", 0),
        ("0", 0),
        ("30s", 30),
        ("10m", 600),
        ("6h", 21600),
        ("1d", 86400),
    ):
        config = load_config(_config(tmp_path, "paper", text), environ={})
        assert config.task.refresh_counts_every == seconds, text
    with pytest.raises(ConfigError, match=r"\[task\] refresh_counts_every"):
        load_config(_config(tmp_path, "paper", "6 hours"), environ={})


def test_refresh_counts_every_is_refused_for_a_type_without_counts(tmp_path):
    path = _config(tmp_path, "patent", "6h")
    with pytest.raises(ConfigError) as raised:
        load_config(path, environ={})
    message = str(raised.value)
    assert str(path) in message and "[task] refresh_counts_every" in message
    assert "patent rows carry no counts" in message
    # off, it is no matter for a patent task
    assert load_config(_config(tmp_path, "patent", "0"), environ={}).task.refresh_counts_every == 0


# -- the claim: once an interval per task, across workers and restarts --------------------------

START = TODAY - dt.timedelta(days=3)
LOOK_BACK = 2


def _at_today(store: TaskStore, name: str):
    current, _ = store.register(name, "paper", START.isoformat(), "", "A,B", follow=True)
    while store.claim(current.id, "w") is not None:  # the cursor walks to today
        pass
    return current


def test_one_counts_refresh_per_interval_per_task(db_url):
    """A refresh is due at once; the claim forgets the last ``~counts`` task; until that task
    is done a claim joins it (a worker killed during it: the next one goes on with it, nothing
    skipped); once done, nothing is due before the interval is over; then one claim wins."""
    engine = open_database(db_url)
    store = TaskStore(engine, day_census=True)
    assert store.claim_counts(_at_today(store, "n").id, LOOK_BACK, 0) is None  # off
    current = _at_today(store, "f")
    window = look_window(START, TODAY, TODAY, LOOK_BACK)
    with engine.begin() as conn:  # a ~counts task of a refresh long ago, done
        conn.execute(
            task.insert().values(
                name="f~counts", type="paper", start_date="2000-01-01", phase="done"
            )
        )
    first = store.claim_counts(current.id, LOOK_BACK, 3600)
    assert first is not None and first.claimed_now and first.task_name == "f~counts"
    assert (first.first_day, first.last_day) == window
    with engine.connect() as conn:  # forgotten in the claim's transaction
        assert conn.execute(sa.select(task.c.id).where(task.c.name == "f~counts")).first() is None
        stamp = conn.execute(
            sa.select(task.c.counts_at, task.c.counts_due).where(task.c.id == current.id)
        ).first()
    assert stamp.counts_due - stamp.counts_at == dt.timedelta(hours=1)
    # in flight (its ~counts not done): joined, not claimed again
    joined = store.claim_counts(current.id, LOOK_BACK, 3600)
    assert joined is not None and not joined.claimed_now
    assert (joined.claimed_at, joined.first_day, joined.last_day) == (stamp.counts_at, *window)
    with engine.begin() as conn:
        conn.execute(
            task.insert().values(
                name="f~counts",
                type="paper",
                start_date=window[0].isoformat(),
                end_date=window[1].isoformat(),
                phase="crawl",
            )
        )
    assert not store.claim_counts(current.id, LOOK_BACK, 3600).claimed_now
    with engine.begin() as conn:  # done: nothing due within the hour
        conn.execute(task.update().where(task.c.name == "f~counts").values(phase="done"))
    assert store.claim_counts(current.id, LOOK_BACK, 3600) is None
    with engine.begin() as conn:  # the hour is over
        conn.execute(
            task.update()
            .where(task.c.id == current.id)
            .values(counts_due=stamp.counts_due - dt.timedelta(hours=2))
        )
    again = store.claim_counts(current.id, LOOK_BACK, 3600)
    assert again is not None and again.claimed_now  # (the clock may be in whole seconds)
    with engine.connect() as conn:  # the done ~counts forgotten by the new claim
        assert conn.execute(sa.select(task.c.id).where(task.c.name == "f~counts")).first() is None
    second = store.claim_counts(current.id, LOOK_BACK, 3600)
    assert second is not None and not second.claimed_now  # the other worker joins it
    store.pause("f")
    with engine.begin() as conn:
        conn.execute(task.update().where(task.c.id == current.id).values(counts_at=None))
    assert store.claim_counts(current.id, LOOK_BACK, 3600) is None  # paused: nothing
    engine.dispose()


# -- on the stand-in: `run --until-idle`, refreshed when due and only then ------------------------

SITE = {"seed": 5, "scale": 0.005, "late_arrivals": True}
FOLLOW = {
    "follow": "on",
    "look_back_days": LOOK_BACK,
    "follow_every": "1h",
    "refresh_counts_every": "1h",
}
WINDOW = look_window(START, TODAY, TODAY, LOOK_BACK)


def _counts(setup) -> dict[str, tuple]:
    return {
        r["filename"]: (r["cited"], r["downloads"], r["counted_at"], str(r["date"])[:10])
        for r in setup.stored()
    }


def _an_hour_later(setup) -> None:
    """The task's next look and next counts refresh due two hours earlier than they say."""
    engine = open_database(setup.db_url)
    with engine.begin() as conn:
        for tid, look_due, counts_due in conn.execute(
            sa.select(task.c.id, task.c.look_due, task.c.counts_due)
        ).all():
            hour = dt.timedelta(hours=2)
            conn.execute(
                task.update()
                .where(task.c.id == tid)
                .values(
                    look_due=look_due and look_due - hour,
                    counts_due=counts_due and counts_due - hour,
                )
            )
        for rid, when in conn.execute(sa.select(round_.c.id, round_.c.updated_at)).all():
            conn.execute(
                round_.update()
                .where(round_.c.id == rid)
                .values(updated_at=when - dt.timedelta(hours=2))
            )
    engine.dispose()


def _counts_task(setup):
    rows = setup.query(
        sa.select(task.c.start_date, task.c.end_date, task.c.phase).where(
            task.c.name == f"{setup.task}~counts"
        )
    )
    return rows[0] if rows else None


@pytest.mark.slow  # crawls in worker subprocesses
def test_a_follow_task_refreshes_its_counts_over_the_look_back_when_due(crawl_setup):
    """First `run --until-idle`: the crawl, then the counts of the look-back read again (its
    ~counts task over exactly the window). CNKI's counts grow: a run within the hour reads no
    counts; a run after it reads the window's counts again (they are the stand-in's), and
    leaves the days before the window as they were."""
    setup = crawl_setup(
        "paper", "A,B", "sqlite", START.isoformat(), "", site=SITE, task_keys=FOLLOW
    )
    first = setup.run_ok("run", "--until-idle", timeout=240)
    assert "counts read again from" in first.stdout, first.stdout[-3000:]
    shadow = _counts_task(setup)
    assert shadow is not None and shadow.phase == "done"
    assert (str(shadow.start_date)[:10], str(shadow.end_date)[:10]) == tuple(
        d.isoformat() for d in WINDOW
    )
    (counts_at,) = setup.query(sa.select(task.c.counts_at).where(task.c.name == setup.task))[0]
    before = _counts(setup)
    inside = {f for f, c in before.items() if c[3] >= WINDOW[0].isoformat()}
    outside = set(before) - inside
    assert inside and outside, before
    assert all(before[f][2] >= counts_at for f in inside)  # counted by the refresh

    setup.site.control(count_shift=7, reset_stats=True)  # CNKI's counts grow
    second = setup.run_ok("run", "--until-idle", timeout=240)
    assert "counts read again from" not in second.stdout
    assert setup.site.stats()["pages"]["list"] == 0  # neither a look nor a refresh was due
    assert _counts(setup) == before
    assert setup.query(sa.select(task.c.counts_at).where(task.c.name == setup.task))[0][0] == (
        counts_at
    )

    _an_hour_later(setup)
    third = setup.run_ok("run", "--until-idle", timeout=240)
    assert "counts read again from" in third.stdout, third.stdout[-3000:]
    after = _counts(setup)
    truth = {
        r["filename"]: r
        for r in setup.site.truth("paper", WINDOW[0].isoformat(), TODAY.isoformat(), ["A", "B"])
    }
    for name in inside:
        cited, downloads, counted_at, _ = after[name]
        assert (cited, downloads) == (int(truth[name]["cited"]), int(truth[name]["downloads"]))
        assert cited == before[name][0] + 7 and counted_at > before[name][2]
    for name in outside:  # before the window: not read again
        assert after[name] == before[name]
    (again,) = setup.query(sa.select(task.c.counts_at).where(task.c.name == setup.task))[0]
    assert again > counts_at
    # status says when, and when the next is due (the database's times, as stored)
    report = json.loads(launcher.run(setup.command("status", "--json"), **RUN).stdout)
    (entry,) = [t for t in report["tasks"] if t["name"] == setup.task]
    last = dt.datetime.fromisoformat(entry["follow"]["last_counts_refresh"].rstrip("Z"))
    due = dt.datetime.fromisoformat(entry["follow"]["next_counts_refresh_due"].rstrip("Z"))
    assert last == again and due - last == dt.timedelta(hours=1)
    text = launcher.run(setup.command("status"), **RUN).stdout
    assert "counts of the look-back read again at" in text, text


def _refresh_state(setup) -> tuple:
    """(the task's counts_at: when its last refresh was claimed, the ~counts task's created_at
    and phase, its rounds by state); a refresh started afresh has a new claim and a new row."""
    (counts_at,) = setup.query(sa.select(task.c.counts_at).where(task.c.name == setup.task))[0]
    found = setup.query(
        sa.select(task.c.id, task.c.created_at, task.c.phase).where(
            task.c.name == f"{setup.task}~counts"
        )
    )
    if not found:
        return counts_at, None, None, {}
    shadow, created, phase = found[0]
    rows = setup.query(
        sa.select(round_.c.state, sa.func.count())
        .where(round_.c.task_id == shadow)
        .group_by(round_.c.state)
    )
    return counts_at, created, phase, dict(rows)


@pytest.mark.slow  # crawls in worker subprocesses
def test_a_refresh_killed_halfway_is_taken_up_not_skipped_nor_restarted(crawl_setup):
    """The machine dies during a counts refresh (the worker and its refresh-counts child, both
    killed): the next `run --until-idle` joins the refresh in flight (the same claim, the same
    ~counts task), finishes it, and the look-back's counts are CNKI's."""
    setup = crawl_setup(
        "paper",
        "A,B",
        "sqlite",
        START.isoformat(),
        "",
        site=SITE,
        task_keys=FOLLOW,
        crawl={"round_lease_seconds": 5},
    )
    setup.run_ok("run", "--until-idle", timeout=240)
    setup.site.control(count_shift=7, latency="3")  # CNKI's counts grow; slow: a kill lands
    _an_hour_later(setup)
    first = _refresh_state(setup)[0]  # the first run's refresh, claimed then

    def halfway() -> bool:  # the second refresh claimed, its crawl under way
        counts_at, _created, phase, rounds = _refresh_state(setup)
        return counts_at != first and phase == "crawl" and sum(rounds.values()) >= 1

    worker = setup.spawn("run", "--until-idle")
    try:
        wait_until(
            halfway,
            240,
            what="the second refresh's first round claimed",
            workers=[worker],
            log=setup.log,
            every=0.1,
        )
    finally:
        worker.kill()  # the worker, then the refresh it started: a machine gone
        subprocess.run(["pkill", "-KILL", "-f", f"refresh-counts {setup.task} "], check=False)
        worker.wait(60)
    claimed, created, phase, rounds = _refresh_state(setup)
    assert phase == "crawl", rounds  # killed halfway
    setup.site.control(latency="0")
    setup.run_ok("run", "--until-idle", timeout=240)
    assert "joining the refresh of" in setup.log()
    after = _refresh_state(setup)
    # taken up, not started afresh: the same claim, the same ~counts task, now done
    assert after[:3] == (claimed, created, "done") and set(after[3]) == {"done"}, after
    truth = {
        r["filename"]: r
        for r in setup.site.truth("paper", WINDOW[0].isoformat(), TODAY.isoformat(), ["A", "B"])
    }
    counts = _counts(setup)
    inside = [f for f, c in counts.items() if c[3] >= WINDOW[0].isoformat()]
    assert inside
    for name in inside:
        assert counts[name][:2] == (int(truth[name]["cited"]), int(truth[name]["downloads"]))
