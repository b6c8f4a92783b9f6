"""`cnkispider task plan`: what a task's remaining days need at each depth, from the census
totals its first days saw, against what a crawl of those days then really took (the stand-in's
own request counts), within 15%."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter

import pytest

from cnkispider.status.plan import Costs, day_totals, estimate, sample_days
from tests.fixtures.crawls import CAP, IPC, YEAR
from tests.fixtures.verified import add_passed

#: the stand-in's requests that the plan counts (warm-ups, client ids and checks are a pass's own)
COUNTED = ("grid", "export", "detail")


def test_an_unseen_day_is_planned_as_the_seen_days_of_its_weekday():
    seen = {"2024-03-04": 10, "2024-03-05": 300, "2024-03-06": 20}  # Mon, Tue, Wed
    totals = day_totals(["2024-03-11", "2024-03-12", "2024-03-16"], seen)
    assert totals == {"2024-03-11": 10.0, "2024-03-12": 300.0, "2024-03-16": 110.0}
    assert day_totals(["2024-03-11"], {}) is None


def test_the_figures_follow_the_depth_and_the_pass():
    costs = Costs(page_size=50, cap_rows=250, export_batch=50, roots=8, pass_requests=300, pace=0.5)
    plan = estimate(["2024-03-05"], {"2024-03-05": 200}, costs)["depths"]
    assert plan["list"] == {"requests": 4, "passes": 1, "hours": 0.0}
    assert plan["export"]["requests"] == 8
    assert plan["detail"]["requests"] == round(4 + 200 * 1.015)
    assert plan["detail"]["passes"] == 1
    assert plan["detail"]["hours"] == pytest.approx(207 / 0.5 / 3600, abs=0.01)
    assert estimate(["2024-03-05"], {}, costs)["depths"]["list"] is None


@pytest.mark.slow  # two crawls in worker subprocesses
@pytest.mark.parametrize("depth", ["list", "export", "detail"])
def test_the_plan_is_within_15_percent_of_what_the_crawl_took(census_crawl, depth):
    """Two weeks crawled; the task extended by two more; their plan, from the first two's
    census totals, against the stand-in's count of the second crawl's requests. (Weeks after
    5 March: that day is the year's surge, a day no plan foresees from ordinary ones.)"""
    setup = census_crawl("2024-03-08", end="2024-03-21", categories=IPC, depth=depth)
    setup.cnki = {**CAP}
    setup.run_ok(timeout=240)
    setup.end = "2024-04-04"
    setup.run_ok("task", "extend", setup.task, "2024-04-04")
    plan = json.loads(setup.run_ok("task", "plan", setup.task, "--json").stdout)
    assert plan["days"] == 14 and plan["seen_days"] == 0
    before = setup.site.stats()["kinds"]
    run = setup.run_ok(timeout=240)
    after = setup.site.stats()["kinds"]
    kinds = {k: after[k] - before[k] for k in after if after[k] != before[k]}
    took = sum(kinds.values())  # every request the stand-in saw: the sessions' start-ups too
    planned = plan["depths"][depth]["requests"]
    print(f"task plan at {depth}: planned {planned} requests, the crawl took {took}: {kinds}")
    assert abs(planned - took) <= 0.15 * took, (depth, planned, took, kinds, plan)
    # the run's summary: the plan it started from beside what it sent (its sessions' own
    # requests too: warm-ups, client ids), and no day left
    line = re.search(
        rf"plan +{planned:,} requests at {depth} depth for the 14 days left at the start; this "
        r"worker sent ([\d,]+) \((\d+)% of the plan\), 0 days left",
        run.stdout,
    )
    assert line is not None, run.stdout[-3000:]
    sent = int(line[1].replace(",", ""))
    assert sent == took
    assert 85 <= int(line[2]) <= 115 and int(line[2]) == round(100 * sent / planned)
    done = json.loads(setup.run_ok("task", "plan", setup.task, "--json").stdout)
    assert done["days"] == 0 and done["depths"][depth]["requests"] == 0


def test_plan_says_when_no_day_was_seen(crawl_setup):
    setup = crawl_setup("patent", "G06", start="2024-03-01", end="2024-03-03", site=YEAR)
    add_task(setup, "G06")
    out = setup.run_ok("task", "plan", setup.task).stdout
    assert "3 days to go, none seen yet" in out


# -- --sample N: census totals of unseen days, asked of the stand-in -----------------------------


def test_the_sample_covers_distinct_weekdays_spread_over_the_days():
    """Mon 1 to Sun 14 April 2024: three samples are three weekdays, one from each third;
    seven are the seven weekdays; a weekday the seen days showed comes last; seen days and
    days beyond the remaining ones are never asked."""
    days = [f"2024-04-{d:02d}" for d in range(1, 15)]
    three = sample_days(days, {}, 3)
    assert len({dt.date.fromisoformat(d).weekday() for d in three}) == 3
    assert three[0] <= "2024-04-05" and "2024-04-10" <= three[-1]
    seven = sample_days(days, {}, 7)
    assert sorted(dt.date.fromisoformat(d).weekday() for d in seven) == list(range(7))
    seen = {"2024-04-02": 66}  # a Tuesday
    chosen = sample_days(days, seen, 6)
    assert "2024-04-02" not in chosen and "2024-04-09" not in chosen
    assert sample_days(days[:2], {}, 5) == days[:2] and sample_days(days, {}, 0) == []


def test_a_sampled_total_counts_as_seen_and_a_seen_one_wins():
    costs = Costs(page_size=50, cap_rows=250, export_batch=50, roots=8, pass_requests=300, pace=0.5)
    days = ["2024-04-02", "2024-04-09", "2024-04-06"]  # Tue, Tue, Sat
    plan = estimate(days, {"2024-04-09": 80}, costs, {"2024-04-02": 60, "2024-04-09": 1})
    assert plan["sampled"] == {"2024-04-02": 60}
    assert plan["seen_days"] == 1
    assert plan["documents"] == 60 + 80 + 70  # the Saturday: the mean of every day known


def plan_sample(setup, n: int, *more: str) -> tuple[dict, int]:
    """`task plan --sample n --json` of the setup's task, and the grid requests the stand-in
    saw meanwhile (the census searches: a passed session sends no warm-up)."""
    before = setup.site.stats()["kinds"]["grid"]
    out = setup.run_ok("task", "plan", setup.task, "--sample", str(n), "--json", *more)
    return json.loads(out.stdout), setup.site.stats()["kinds"]["grid"] - before


def add_task(setup, categories: str = IPC) -> None:
    """The task of ``setup`` in the task table (its days), not crawled yet."""
    setup.run_ok(
        "task",
        "add",
        setup.task,
        "--type",
        "patent",
        "--start",
        setup.start,
        "--end",
        setup.end,
        "--categories",
        categories,
    )


@pytest.mark.slow  # the command in subprocesses, against a stand-in that checks for a person
@pytest.mark.parametrize(
    "start, end, n",
    [
        ("2024-04-01", "2024-04-07", 3),  # a week: Tue, Thu and Sat asked
        ("2024-04-01", "2024-04-14", 7),  # two weeks: every weekday asked once
    ],
)
def test_a_sample_plans_a_task_no_day_of_which_was_seen(verified_crawl, start, end, n):
    setup, pool = verified_crawl(
        "patent", IPC, start=start, end=end, site=YEAR, cnki=CAP, day_census="on"
    )
    add_passed(setup.site, pool)
    add_task(setup)
    plan, grids = plan_sample(setup, n)
    truth = Counter(d["publication_date"] for d in setup.truth())
    assert plan["seen_days"] == 0 and len(plan["sampled"]) == n, plan
    assert plan["sampled"] == {d: truth.get(d, 0) for d in plan["sampled"]}
    assert plan["not_sampled"] == {}
    assert grids == n and plan["sample_requests"] == n
    documents = sum(truth.values())
    print(f"--sample {n} of {start}..{end}: {plan['documents']} planned, {documents} true")
    assert abs(plan["documents"] - documents) <= 0.15 * documents, (plan, documents)
    # the sample is counted on the passed session, as the crawler counts its requests
    assert [s.requests for s in pool.list()] == [n]
    text = setup.run_ok("task", "plan", setup.task, "--sample", "2").stdout
    assert "census sample: 2 of 2 days sampled; requests to CNKI: 2" in text, text
    assert "none seen yet" not in text


@pytest.mark.slow  # the command in subprocesses, against a stand-in that checks for a person
def test_a_check_during_the_sample_is_not_a_zero(verified_crawl):
    setup, pool = verified_crawl(
        "patent", IPC, start="2024-04-01", end="2024-04-07", site=YEAR, cnki=CAP
    )
    session, cookies = add_passed(setup.site, pool)
    add_task(setup)
    setup.site.expire_session(cookies)  # CNKI checks the passed session again
    before = setup.site.stats()["kinds"]["grid"]
    done = setup.run_ok("task", "plan", setup.task, "--sample", "3")
    out = done.stdout
    first = sample_days([f"2024-04-0{d}" for d in range(1, 8)], {}, 3)[0]
    assert f"{first}: verify (CNKI's check): not sampled" in out, out
    assert "census sample: 0 of 3 days sampled; requests to CNKI: 1" in out, out
    assert "2 more days not asked" in out, out
    assert "none seen yet: no census total to plan from" in out, out  # not a zero
    assert setup.site.stats()["kinds"]["grid"] - before == 1  # the check ended the sample
    assert pool.get(session.id).state == "needs-person"
    # the pool has no passed session left, and a plain one is checked: nothing sampled
    plan, grids = plan_sample(setup, 3)
    assert plan["sampled"] == {} and plan["documents"] is None
    assert set(plan["not_sampled"].values()) == {"checked-plain"} and grids == 0
    assert plan["sample_requests"] == 1  # the plain session's warm-up, sent to the check


@pytest.mark.slow  # the command in a subprocess, against a stand-in
def test_a_sample_without_a_session_samples_nothing_and_says_why(crawl_setup):
    """No passed session in the pool, and the plain one cannot be opened (the stand-in issues
    no client id): nothing sampled, no day counted, exit 0, the reason on stderr."""
    setup = crawl_setup(
        "patent", IPC, start="2024-04-01", end="2024-04-07", site={**YEAR, "break_": ["client-id"]}
    )
    add_task(setup)
    done = setup.run_ok("task", "plan", setup.task, "--sample", "3")
    assert "nothing sampled: no CNKI session could be opened" in done.stdout, done.stdout
    assert "none seen yet" in done.stdout
    assert "Ecp_ClientId" in done.stderr, done.stderr
    plan, grids = plan_sample(setup, 3)
    assert plan["sampled"] == {} and plan["documents"] is None and grids == 0
    assert set(plan["not_sampled"].values()) == {"no-session"} and len(plan["not_sampled"]) == 3


def test_days_of_weekdays_nothing_shows_are_counted_and_said():
    """A plan from a Tuesday alone plans the week's other days at the Tuesday's mean: the plan
    says how many days rest on that (the weak part of a small sample)."""
    costs = Costs(page_size=50, cap_rows=6000, export_batch=50, roots=8, pass_requests=300, pace=0)
    week = [f"2024-03-{d:02d}" for d in range(11, 18)]  # Mon 11 .. Sun 17
    plan = estimate(week, {"2024-03-05": 300}, costs)  # a Tuesday seen
    assert plan["days_of_unshown_weekdays"] == 6  # the week's Tuesday has its weekday's mean
    plan = estimate(week, {"2024-03-05": 300}, costs, sampled={"2024-03-16": 2})  # and a Saturday
    assert plan["days_of_unshown_weekdays"] == 5  # Mon, Wed, Thu, Fri, Sun
    assert estimate(week, {}, costs)["days_of_unshown_weekdays"] == 0  # nothing to plan from


def test_a_day_split_into_its_root_rounds_is_seen_as_its_roots_together(sqlite_url):
    """A census split by its roots (facet counts, or a task of some categories) lists 0: the
    day's documents are its root rounds' totals together, not the census's 0; a census that
    walked its day is its total; an empty day is 0."""
    import sqlalchemy as sa

    from cnkispider.status.plan import task_days
    from cnkispider.store.db import open_database
    from cnkispider.store.schema import round_
    from tasks.flow import TaskStore

    engine = open_database(sqlite_url)
    store = TaskStore(engine, day_census=True)
    current, _ = store.register("seen", "patent", "2024-03-04", "2024-03-08", "builtin")
    now = dt.datetime(2024, 3, 9)
    rows = [
        ("2024-03-04", "*", 0, "empty day"),
        ("2024-03-05", "*", 0, "categories: census 307: split by group/result"),
        ("2024-03-05", "G", 111, None),
        ("2024-03-05", "H", 56, None),
        ("2024-03-05", "D", 0, "empty part"),
        ("2024-03-06", "*", 72, None),
    ]
    with engine.begin() as conn:
        for day, code, total, note in rows:
            conn.execute(
                round_.insert().values(
                    task_id=current.id,
                    day=day,
                    category=code,
                    state="done",
                    total=total,
                    note=note,
                    attempts=1,
                    created_at=now,
                    updated_at=now,
                )
            )
        assert conn.execute(sa.select(sa.func.count()).select_from(round_)).scalar() == 6
    _row, days, seen = task_days(engine, "seen", today=dt.date(2024, 3, 9))
    assert seen == {"2024-03-04": 0, "2024-03-05": 111 + 56, "2024-03-06": 72}
    assert days == ["2024-03-07", "2024-03-08"]
    engine.dispose()
