"""Tiered looks (issue 46): a look counts the recent days at every look and older days rarely.

The pieces (``[task] look_tiers``, the rule, which rounds a look re-opens), the cost model's
figures, and ten days of following on the stand-in: the worker's clock (the database's,
``CNKI_TEST_CLOCK_DAYS``) and the site's (``as_of``) moved a day apart, one ``run --until-idle``
a day, counted by the site's own /_stats."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pytest
import sqlalchemy as sa

from cnkispider.clock import BEIJING, cnki_today
from cnkispider.config import load_config
from cnkispider.config.looktiers import DEFAULT_TIERS, Tier, due, parse_tiers, period_of, spans
from cnkispider.exceptions import ConfigError, InputError
from cnkispider.launch.settingcheck import check_setting
from cnkispider.status.plan import Costs, counted_days, follow_day
from cnkispider.store.db import CLOCK_DAYS_ENV, open_database
from cnkispider.store.schema import round_, task
from tasks.flow import TaskStore
from tests.fixtures import launcher
from tests.fixtures.crawl_harness import ROOT
from tests.fixtures.crawls import IPC

TODAY = cnki_today()
TIERS = parse_tiers(DEFAULT_TIERS)

# -- the pieces -------------------------------------------------------------------------------


def test_the_tiers_spelling_and_rule():
    assert TIERS == (Tier(7, 0), Tier(30, 7), Tier(60, 30))
    assert parse_tiers("off") == parse_tiers("") == parse_tiers("0") == ()
    assert parse_tiers(" 3 : every , 14d : 5d ") == (Tier(3, 0), Tier(14, 5))
    for bad in ("7d", "7d:weekly", "0d:every", "30d:7d, 7d:every", "7d:every,"):
        with pytest.raises(ValueError):
            parse_tiers(bad)
    assert [period_of(TIERS, a) for a in (0, 6, 7, 29, 30, 59, 90)] == [0, 0, 7, 7, 30, 30, 30]
    assert spans(TIERS, 60) == [(0, 6, 0), (7, 29, 7), (30, 59, 30)]
    assert spans(TIERS, 10) == [(0, 6, 0), (7, 9, 7)]
    assert spans((), 10) == [(0, 9, 0)]
    # a day last counted at age 6 is next counted at 13; at 28, next at 58
    assert due(TIERS, 6, 5) and not due(TIERS, 12, 6) and due(TIERS, 13, 6)
    assert not due(TIERS, 57, 28) and due(TIERS, 58, 28) and due(TIERS, 40, None)


def _config(tmp_path, line: str):
    path = tmp_path / "config.ini"
    path.write_text(f"[task]\nname = t\ntype = patent\nfollow = on\n{line}", encoding="utf-8")
    return path


def test_look_tiers_in_config_ini(tmp_path):
    assert load_config(_config(tmp_path, ""), environ={}).task.look_tiers == DEFAULT_TIERS
    config = load_config(_config(tmp_path, "look_tiers = 3d:every, 14d:5d\n"), environ={})
    assert parse_tiers(config.task.look_tiers) == (Tier(3, 0), Tier(14, 5))
    assert load_config(_config(tmp_path, "look_tiers = off\n"), environ={}).task.look_tiers == "off"
    path = _config(tmp_path, "look_tiers = 7d:weekly\n")
    with pytest.raises(ConfigError) as raised:
        load_config(path, environ={})
    assert str(path) in str(raised.value) and "[task] look_tiers" in str(raised.value)


def test_a_bad_look_tiers_setting_on_the_command_line_is_one_line():
    check_setting("TASKS_LOOK_TIERS", "3d:every, 14d:5d")
    check_setting("TASKS_LOOK_TIERS", "off")
    with pytest.raises(InputError, match=r"-s TASKS_LOOK_TIERS='7d': expected tiers such as"):
        check_setting("TASKS_LOOK_TIERS", "7d")


def test_a_look_reopens_only_the_rounds_their_tier_makes_due(db_url):
    """Tiers 3d:every, 14d:5d over 14 days, every round counted on its own day (the crawl),
    one of them again yesterday (a look): the look re-opens days 0-2 back, and of days 3-13
    those last counted 5 days ago or more."""
    engine = open_database(db_url)
    store = TaskStore(engine, day_census=True)
    start = TODAY - dt.timedelta(days=13)
    current, _ = store.register("tiers", "patent", start.isoformat(), "", IPC, follow=True)
    while store.claim(current.id, "w") is not None:  # the cursor walks to today
        pass
    yesterday_counted = TODAY - dt.timedelta(days=9)
    with engine.begin() as conn:
        for rid, day in conn.execute(sa.select(round_.c.id, round_.c.day)).all():
            counted = dt.date.fromisoformat(day)
            if counted == yesterday_counted:
                counted = TODAY - dt.timedelta(days=1)
            at = dt.datetime.combine(counted, dt.time(0, 1)) - BEIJING  # its Beijing day
            conn.execute(
                round_.update()
                .where(round_.c.id == rid)
                .values(state="done", total=3, updated_at=at)
            )
    tiers = parse_tiers("3d:every, 14d:5d")
    look = store.claim_look(current.id, 14, 60, store.database_now(), tiers=tiers)
    assert look is not None
    with engine.connect() as conn:
        reopened = set(
            conn.execute(sa.select(round_.c.day).where(round_.c.look == look.number)).scalars()
        )
    ages = sorted((TODAY - dt.date.fromisoformat(d)).days for d in reopened)
    assert ages == [0, 1, 2, 5, 6, 7, 8, 10, 11, 12, 13]  # not 3, 4 (too fresh), nor 9
    engine.dispose()


# -- what following costs ---------------------------------------------------------------------


def _bench(*args: str) -> dict:
    run = subprocess.run(
        [sys.executable, "bench/follow_cost.py", "--json", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return json.loads(run.stdout)


@pytest.mark.slow  # the realistic year's lags, three times (about 25 s)
def test_the_cost_model_meets_the_figures_and_gives_today_s_rule_with_tiers_off():
    default = _bench()
    assert default["patent"]["list"] <= 2000 and default["paper"]["list"] <= 900, default
    assert set(default["patent"]) == {"list", "export", "detail"}
    # today's rule (every day at every look, each part's first page): issue 38's figures
    off = _bench("--tiers", "off", "--facets", "off")
    assert off["patent"]["list"] == 10050 and off["paper"]["list"] == 4378, off
    # a split day recounted by one group/result (issue 46.2): never more than without
    no_facets = _bench("--facets", "off")
    for doc_type in ("patent", "paper"):
        assert default[doc_type]["list"] <= no_facets[doc_type]["list"], (default, no_facets)
    assert default["patent"]["list"] < no_facets["patent"]["list"], (default, no_facets)


def test_what_a_day_of_following_costs_at_most():
    """100 documents a day (2 list pages), the default tiers over 60 days: a daily look counts
    7 + 23/7 + 30/30 days, each assumed grown and walked (2 pages), plus the new documents."""
    costs = Costs(
        page_size=50, cap_rows=6000, export_batch=50, roots=8, pass_requests=280.0, pace=0.0
    )
    assert counted_days(TIERS, 60) == pytest.approx(7 + 23 / 7 + 1)
    assert counted_days((), 60) == 60
    day = follow_day(100, costs, TIERS, 60)
    walk = (7 + 23 / 7 + 1) * 2
    assert day["days_counted"] == 11.3 and day["documents_a_day"] == 100
    assert day["depths"]["list"] == {"requests": round(walk), "passes": 1}
    assert day["depths"]["export"]["requests"] == round(walk + 2)
    assert day["depths"]["detail"]["requests"] == round(walk + 101.5)


# -- ten days on the stand-in -----------------------------------------------------------------

DAYS = 10
#: the first crawl's day: a month and more of days before the ten looks
FIRST = TODAY - dt.timedelta(days=DAYS)
START = FIRST - dt.timedelta(days=30)
SITE = {"seed": 5, "scale": 0.005, "late_arrivals": True, "as_of": FIRST.isoformat()}


def _run_on(setup, day: dt.date) -> int:
    """One `run --until-idle` on ``day`` (the site's and the worker's clock); its list requests."""
    setup.site.control(as_of=day.isoformat(), reset_stats=True)
    setup.write()
    offset = (day - TODAY).days
    result = launcher.run(
        setup.command("run", "--until-idle"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, CLOCK_DAYS_ENV: str(offset)},
    )
    assert result.returncode == 0, (
        result.stdout[-3000:] + result.stderr[-3000:] + setup.log()[-3000:]
    )
    return setup.site.stats()["kinds"]["grid"]


def _truth(site, as_of: dt.date, today: dt.date) -> dict[str, dict]:
    site.control(as_of=as_of.isoformat())
    rows = site.truth("patent", START.isoformat(), today.isoformat(), IPC.split(","))
    site.control(as_of=today.isoformat())
    return {r["filename"]: r for r in rows}


def _stored(setup) -> dict[str, str]:
    return {r["filename"]: str(r["date"])[:10] for r in setup.stored()}


def _check_day(setup, today: dt.date, tiers: tuple[Tier, ...]) -> set[str]:
    """After the run of ``today``: nothing stored CNKI does not list; every document of a day
    of a tier of ``p`` days that CNKI entered ``p`` days ago or earlier is stored (caught
    within its tier's delay; ``p`` 0: entered by today); the days the look counted equal the
    truth."""
    stored = _stored(setup)
    truth = _truth(setup.site, today, today)
    assert set(stored) <= set(truth)
    for first_age, last_age, period in spans(tiers, (today - START).days + 1):
        oldest = (today - dt.timedelta(days=last_age)).isoformat()
        newest = (today - dt.timedelta(days=first_age)).isoformat()
        entered = _truth(setup.site, today - dt.timedelta(days=period), today)
        owed = {f for f, r in entered.items() if oldest <= str(r["date"])[:10] <= newest}
        assert owed <= set(stored), (today, period, sorted(owed - set(stored))[:5])
    (looks,) = setup.query(sa.select(task.c.looks).where(task.c.name == setup.task))[0]
    counted = {
        day
        for (day,) in setup.query(
            sa.select(round_.c.day).where(round_.c.look == looks, round_.c.state == "done")
        )
    }
    for day in counted:
        assert {f for f, d in stored.items() if d == day} == {
            f for f, r in truth.items() if str(r["date"])[:10] == day
        }, day
    return counted


def _ten_days(setup, tiers: tuple[Tier, ...]) -> list[int]:
    """The first crawl on FIRST, then a look a day for ten days: each look's list requests."""
    _run_on(setup, FIRST)
    # each day's last count, by the pure rule the cost model (bench/follow_cost.py) applies
    last = {START + dt.timedelta(days=n): FIRST for n in range((FIRST - START).days + 1)}
    grid = []
    for k in range(1, DAYS + 1):
        day = FIRST + dt.timedelta(days=k)
        grid.append(_run_on(setup, day))
        counted = _check_day(setup, day, tiers)
        # the look re-opened exactly the days the model's rule says are due
        expected = {d for d, c in last.items() if due(tiers, (day - d).days, (c - d).days)}
        assert counted == {d.isoformat() for d in expected}, (day, sorted(counted))
        last.update(dict.fromkeys(expected, day))
        last[day] = day  # the run's crawl of its new day
    return grid


@pytest.mark.slow  # 22 crawls in worker subprocesses
def test_ten_days_of_tiered_looks_cost_at_most_half_of_today_s_rule(crawl_setup):
    """The same follow task, default settings, followed for ten days twice: with today's rule
    (``look_tiers = off``: every day at every look) and with the default tiers. Each look
    catches every late document within its tier's delay, and the days it counts equal the
    truth; the ten looks' list requests with tiers are at most half of today's rule's."""
    base = dict(site=SITE, day_census="on", depth="list")
    today_rule = crawl_setup("patent", IPC, "sqlite", START.isoformat(), "", **base)
    today_rule.task_keys = {"follow": "on", "look_tiers": "off"}
    every_day = _ten_days(today_rule, ())
    tiered = crawl_setup(
        "patent", IPC, "sqlite", START.isoformat(), "", **{**base, "site": today_rule.site}
    )
    tiered.db_url = f"sqlite:///{tiered.tmp_path / 'tiered.db'}"  # documents of its own
    tiered.task_keys = {"follow": "on"}  # the defaults: 60 days, 6h, the default tiers
    with_tiers = _ten_days(tiered, TIERS)
    print("list requests a look: today's rule", every_day, "tiers", with_tiers)
    assert 2 * sum(with_tiers) <= sum(every_day), (every_day, with_tiers)
    # task plan: at most what a day of following costs, above what the looks took (median)
    plan = json.loads(tiered.run_ok("task", "plan", tiered.task, "--json").stdout)
    print("task plan, a day of following:", plan["follow"])
    assert plan["follow"]["depths"]["list"]["requests"] >= sorted(with_tiers)[DAYS // 2]
    text = tiered.run_ok("task", "plan", tiered.task).stdout
    assert f"task {tiered.task} follows today: at most " in text, text
