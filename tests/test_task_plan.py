"""`cnkispider task plan`: what a task's remaining days need at each depth, from the census
totals its first days saw, against what a crawl of those days then really took (the stand-in's
own request counts), within 15%."""

from __future__ import annotations

import json
import re

import pytest

from cnkispider.status.plan import Costs, day_totals, estimate
from tests.fixtures.crawls import CAP, IPC, YEAR

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
    took = sum(after[k] - before[k] for k in COUNTED)
    planned = plan["depths"][depth]["requests"]
    print(f"task plan at {depth}: planned {planned} requests, the crawl took {took}")
    assert abs(planned - took) <= 0.15 * took, (depth, planned, took, plan)
    # the run's summary: the plan it started from beside what it sent (its sessions' own
    # requests too: warm-ups, client ids), and no day left
    line = re.search(
        rf"plan +{planned:,} requests at {depth} depth for the 14 days left at the start; this "
        r"worker sent ([\d,]+) \((\d+)% of the plan\), 0 days left",
        run.stdout,
    )
    assert line is not None, run.stdout[-3000:]
    sent = int(line[1].replace(",", ""))
    assert took <= sent <= sum(after.values()) - sum(before.values())
    assert int(line[2]) == round(100 * sent / planned)
    done = json.loads(setup.run_ok("task", "plan", setup.task, "--json").stdout)
    assert done["days"] == 0 and done["depths"][depth]["requests"] == 0


def test_plan_says_when_no_day_was_seen(crawl_setup):
    setup = crawl_setup("patent", "G06", start="2024-03-01", end="2024-03-03", site=YEAR)
    setup.run_ok(
        "task",
        "add",
        setup.task,
        "--type",
        "patent",
        "--start",
        "2024-03-01",
        "--end",
        "2024-03-03",
        "--categories",
        "G06",
    )
    out = setup.run_ok("task", "plan", setup.task).stdout
    assert "3 days to go, none seen yet" in out
