"""`cnkispider task plan` knows what it can (issue 48.4): it says how to get a census when it has
none, plans config.ini's task before its first run (writing nothing), keeps a `--sample` so the
run's summary compares its plan with what it sent, and counts the sessions' start-ups."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from cnkispider.status.plan import Costs, estimate
from cnkispider.status.plan_inputs import keep_samples, kept_samples, with_cursor_days
from cnkispider.status.plan_startups import startup_requests
from cnkispider.store.db import open_database
from cnkispider.store.schema import census_sample
from tests.fixtures.crawls import CAP, IPC, YEAR
from tests.fixtures.verified import add_passed


def test_a_plain_session_opens_with_two_requests_and_renews_after_its_turns():
    # 4 sessions opened at once, each renewed after 15 grid requests
    assert startup_requests(10, turn_limit=14, pool_size=4) == 2 * 4
    assert startup_requests(60, turn_limit=14, pool_size=4) == 2 * (4 + 4)
    assert startup_requests(2, turn_limit=14, pool_size=4) == 2 * 2  # a session a request
    assert startup_requests(0, turn_limit=14, pool_size=4) == 0
    # a passed session needs its client id once a pass, no warm-up
    assert startup_requests(60, turn_limit=14, pool_size=4, mode="verified", passes=2) == 2


def test_the_plan_counts_the_start_ups_at_every_depth():
    """A week of two classes at list depth: 7 days x 1 page, and 4 sessions' warm-ups and client
    ids (the run sent 19 where the pages alone planned 9)."""
    week = [f"2024-03-{d:02d}" for d in range(11, 18)]
    seen = dict.fromkeys(week, 20)
    costs = Costs(
        page_size=50, cap_rows=250, export_batch=50, roots=2, pass_requests=300, pace=0, pool_size=4
    )
    plan = estimate(week, seen, costs)["depths"]
    assert plan["list"]["requests"] == 7 + 8
    assert plan["export"]["requests"] == 7 + 7 + 8
    assert plan["detail"]["requests"] == round(7 + 140 * 1.015 + 8)


def test_a_sample_is_kept_by_task_name_a_day_sampled_again_replaced(db_url):
    engine = open_database(db_url)
    try:
        keep_samples(engine, "t1", {"2024-04-02": 60, "2024-04-06": 1})
        keep_samples(engine, "t1", {"2024-04-02": 61})
        keep_samples(engine, "t2", {"2024-04-02": 5})
        assert kept_samples(engine, "t1") == {"2024-04-02": 61, "2024-04-06": 1}
        assert kept_samples(engine, "t3") == {} and kept_samples(None, "t1") == {}
    finally:
        engine.dispose()


def test_the_cursor_s_next_day_and_those_after_it_are_left():
    from tasks.categories import load_tree

    tree = load_tree("G06,H04", "patent", Path("."))
    row = {"end_date": "2024-03-14", "cur_date": "2024-03-11", "cur_code": None}
    days = ["2024-03-08"]  # a day not done before the cursor stays
    assert with_cursor_days(row, days, tree) == ["2024-03-08"] + [
        f"2024-03-{d}" for d in range(11, 15)
    ]
    # the census of the 11th, or its last root, handed out: the 12th is next
    for code in ("*", tree.roots[-1]):
        left = with_cursor_days({**row, "cur_code": code}, [], tree)
        assert left[0] == "2024-03-12", code
    assert with_cursor_days({**row, "cur_code": tree.roots[0]}, [], tree)[0] == "2024-03-11"
    assert with_cursor_days({**row, "cur_date": "2024-03-14", "cur_code": "*"}, [], tree) == []
    assert with_cursor_days({**row, "cur_date": None}, days, tree) == days


def test_config_task_plans_before_its_first_run_and_writes_nothing(crawl_setup):
    setup = crawl_setup("patent", "G06", start="2024-03-01", end="2024-03-03", site=YEAR)
    database = Path(setup.db_url.removeprefix("sqlite:///"))
    out = setup.run_ok("task", "plan", setup.task).stdout
    assert "3 days to go, none seen yet" in out, out
    assert (
        f"no census yet: `cnkispider task plan {setup.task} --sample 3` asks CNKI for 3 days' "
        "counts" in out
    ), out
    plan = json.loads(setup.run_ok("task", "plan", setup.task, "--json").stdout)
    assert plan["task"] == setup.task and plan["days"] == 3 and plan["documents"] is None
    assert not database.exists()  # the plan made no database
    done = setup.run("task", "plan", "nosuch")
    assert done.returncode == 2 and "nosuch" in done.stderr


@pytest.mark.slow  # a sample and a crawl in subprocesses, on a stand-in that checks for a person
def test_a_kept_sample_plans_the_first_run_and_its_summary_compares(verified_crawl):
    """config.ini's task, never run: `--sample 3` asks CNKI for three days and keeps them; a
    later plan (the run's own, at its start) plans from them, and the run's summary line says
    what it sent against that plan."""
    setup, pool = verified_crawl(
        "patent", IPC, start="2024-04-01", end="2024-04-07", site=YEAR, cnki=CAP, day_census="on"
    )
    setup.depth = "list"
    add_passed(setup.site, pool)
    sampled = json.loads(setup.run_ok("task", "plan", setup.task, "--sample", "3", "--json").stdout)
    assert len(sampled["sampled"]) == 3 and sampled["kept_samples"] == {}, sampled
    engine = sa.create_engine(setup.db_url)
    with engine.connect() as conn:
        kept = dict(
            conn.execute(
                sa.select(census_sample.c.day, census_sample.c.total).where(
                    census_sample.c.task == setup.task
                )
            ).all()
        )
    engine.dispose()
    assert kept == sampled["sampled"]
    plan = json.loads(setup.run_ok("task", "plan", setup.task, "--json").stdout)
    assert plan["kept_samples"] == kept and plan["sampled"] == {}
    assert plan["documents"] == sampled["documents"]
    text = setup.run_ok("task", "plan", setup.task).stdout
    assert "census sample kept from earlier: 3 days" in text, text
    planned = plan["depths"]["list"]["requests"]
    before = sum(setup.site.stats()["kinds"].values())
    run = setup.run_ok(timeout=240)
    sent = sum(setup.site.stats()["kinds"].values()) - before
    line = re.search(
        rf"plan +{planned:,} requests at list depth for the 7 days left at the start; this "
        r"worker sent ([\d,]+) \((\d+)% of the plan\), 0 days left",
        run.stdout,
    )
    assert line is not None, run.stdout[-3000:]
    print(f"kept sample at list depth: planned {planned}, the run sent {sent}")
    assert int(line[1].replace(",", "")) == sent
    assert abs(planned - sent) <= 0.15 * sent, (planned, sent, plan)


@pytest.mark.slow  # two crawls in worker subprocesses
def test_a_moved_cursor_plans_the_days_crawled_again(census_crawl):
    """A week crawled at list depth, the cursor moved back to its Monday: the plan has the four
    days crawled again (their census totals seen), and the second run sends within 15% of it."""
    setup = census_crawl("2024-03-08", end="2024-03-14", categories=IPC, depth="list")
    setup.cnki = {**CAP}
    setup.run_ok(timeout=240)
    done = json.loads(setup.run_ok("task", "plan", setup.task, "--json").stdout)
    assert done["days"] == 0
    setup.run_ok("task", "move", setup.task, "2024-03-11")
    plan = json.loads(setup.run_ok("task", "plan", setup.task, "--json").stdout)
    assert plan["days"] == 4 and plan["seen_days"] == 4, plan
    planned = plan["depths"]["list"]["requests"]
    before = sum(setup.site.stats()["kinds"].values())
    run = setup.run_ok(timeout=240)
    sent = sum(setup.site.stats()["kinds"].values()) - before
    print(f"moved cursor at list depth: planned {planned}, the run sent {sent}")
    assert abs(planned - sent) <= 0.15 * sent, (planned, sent, plan)
    assert re.search(
        rf"plan +{planned:,} requests at list depth for the 4 days left at the start; this "
        rf"worker sent {sent:,} ",
        run.stdout,
    ), run.stdout[-3000:]
