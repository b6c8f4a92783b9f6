"""Whole crawls of the stand-in, compared with its ground truth field by field (issue: spiders).

The site caps a search at 60 rows (3 pages of 20) and the crawler knows it, so the cap
is 60 documents a search: rounds overflow and are split along the category tree, leaves that
still overflow are walked in both sort orders, and one round is beyond even that.
"""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa

from cnkispider.store.schema import error_code, error_link, round_
from tests.fixtures.crawl_harness import compare

pytestmark = pytest.mark.slow  # every test crawls the stand-in in a worker subprocess

SITE = {
    "seed": 5,
    "cap_rows": 60,
    "overflow": ["patent:2024-01-02:H04:150", "patent:2024-01-01:G06F:70"],
}
SMALL_CAP = {"page_size": 20, "cap_rows": 60}

CASES = [
    # doc_type, categories, database
    ("patent", "G06,H04", "mysql"),
    ("paper", "TP3,F0", "sqlite"),
    ("achievement", "TP3,O1", "mysql"),
]


@pytest.fixture
def setup_crawl(crawl_setup):
    """tests/fixtures/crawls.py's crawl_setup, against SITE unless told otherwise."""

    def make(doc_type, categories, db, site=None, **kw):
        return crawl_setup(doc_type, categories, db, site=site or SITE, **kw)

    return make


@pytest.mark.parametrize(("doc_type", "categories", "db"), CASES)
def test_crawl_equals_ground_truth_and_a_second_crawl_adds_no_row(
    setup_crawl, doc_type, categories, db
):
    setup = setup_crawl(doc_type, categories, db, cnki=SMALL_CAP)
    result = setup.run()
    assert result.returncode == 0, (
        result.stdout[-3000:] + result.stderr[-3000:] + setup.log()[-3000:]
    )
    truth = setup.truth()
    assert len(truth) > 100
    diff = compare(setup.stored(), truth, doc_type)
    assert diff == {"missing": [], "extra": [], "differing": {}}
    rounds = setup.query(sa.select(round_.c.state, round_.c.total))
    assert {state for state, _ in rounds} == {"done"} and len(rounds) == 4
    assert setup.query(sa.select(sa.func.count()).select_from(error_code))[0][0] == 0

    # The operator moves the cursor back to the start: every round is crawled again, no row is added.
    again = setup.run("task", "move", setup.task, "2024-01-01")
    assert again.returncode == 0, again.stderr
    rerun = setup.run()
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"documents       {len(truth)} stored" in rerun.stdout
    assert len(setup.stored()) == len(truth)


def test_a_round_beyond_both_sort_orders_is_recorded_as_overflow(setup_crawl):
    setup = setup_crawl("paper", "O1", "sqlite", end="2024-01-01", cnki=SMALL_CAP)
    result = setup.run()
    assert result.returncode == 0, result.stderr[-3000:]
    truth = setup.truth()
    assert len(truth) > 120
    diff = compare(setup.stored(), truth, "paper")
    assert diff["extra"] == [] and diff["differing"] == {}
    assert len(diff["missing"]) == len(truth) - 120  # both PT orders reach 60 each, no more
    rows = setup.query(sa.select(error_code.c.reason, error_code.c.detail, error_code.c.state))
    assert [r.reason for r in rows] == ["overflow"]
    assert f"at least {len(truth) - 120} unreachable" in rows[0].detail


def test_a_session_cut_off_after_15_page_turns_still_yields_every_document(setup_crawl):
    site = {"seed": 5, "turn_limit": 15}
    # 10 rows a page (CNKI's smallest): the search has about 19 pages; the crawler does not renew
    # its sessions in time (turn_limit 50), so the site cuts them off and the crawler must recover.
    setup = setup_crawl(
        "paper",
        "TP3",
        "sqlite",
        end="2024-01-01",
        site=site,
        cnki={"page_size": 10, "turn_limit": 50},
    )
    result = setup.run()
    assert result.returncode == 0, result.stderr[-3000:]
    truth = setup.truth()
    assert len(truth) > 16 * 10
    assert compare(setup.stored(), truth, "paper") == {"missing": [], "extra": [], "differing": {}}
    assert setup.site.stats()["turn_refusals"] >= 1  # the site really did cut sessions off
    assert setup.query(sa.select(sa.func.count()).select_from(error_link))[0][0] == 0


def test_sessions_are_renewed_before_cnki_cuts_them_off(setup_crawl):
    site = {"seed": 5, "turn_limit": 15}
    setup = setup_crawl(
        "paper",
        "TP3",
        "sqlite",
        end="2024-01-01",
        site=site,
        cnki={"page_size": 10, "turn_limit": 14},
    )
    result = setup.run()
    assert result.returncode == 0, result.stderr[-3000:]
    assert compare(setup.stored(), setup.truth(), "paper") == {
        "missing": [],
        "extra": [],
        "differing": {},
    }
    stats = setup.site.stats()
    assert stats["turn_refusals"] == 0 and stats["sessions_created"] >= 3


def test_scrapy_crawl_reads_config_ini_and_writes_the_feed_and_the_html_archive(setup_crawl):
    """A Scrapy user's `scrapy crawl paper` runs the same crawl as `cnkispider run`."""
    import gzip
    import json

    setup = setup_crawl(
        "paper",
        "F0",
        "sqlite",
        end="2024-01-01",
        site={"seed": 5},
        crawl={"feed": "items.jsonl", "archive_html": "true"},
    )
    result = setup.scrapy_crawl()
    assert result.returncode == 0, result.stderr[-3000:] + setup.log()[-3000:]
    truth = setup.truth()
    assert truth and compare(setup.stored(), truth, "paper") == {
        "missing": [],
        "extra": [],
        "differing": {},
    }
    lines = (setup.tmp_path / "items.jsonl").read_text(encoding="utf-8").splitlines()
    assert sorted(json.loads(line)["filename"] for line in lines) == sorted(
        d["filename"] for d in truth
    )
    archived = sorted((setup.tmp_path / "data" / "archive").rglob("*.html.gz"))
    assert len(archived) == len(truth)
    assert truth[0]["title"] in gzip.decompress(
        (
            setup.tmp_path
            / "data"
            / "archive"
            / truth[0]["dbname"]
            / f"{truth[0]['filename']}.html.gz"
        ).read_bytes()
    ).decode("utf-8")


def test_a_pager_shorter_than_the_total_is_recorded_not_done_quietly(setup_crawl):
    """The site caps a search at 60 rows while the crawler assumes 6,000: the 79 - 50 rows past
    the pager's last page are unreachable, and the round says so in errorCode."""
    setup = setup_crawl("paper", "F0", "sqlite", end="2024-01-01", site={"seed": 5, "cap_rows": 60})
    result = setup.run()
    assert result.returncode == 0, result.stderr[-3000:]
    truth = setup.truth()
    stored = setup.stored()
    assert len(truth) == 79 and len(stored) == 50
    rows = setup.query(sa.select(error_code.c.reason, error_code.c.detail, error_code.c.state))
    assert [r.reason for r in rows] == ["pager-short"]
    assert "at least 29 unreachable" in rows[0].detail


def test_a_stale_link_deep_in_its_common_titles_search_is_refreshed_and_stored(setup_crawl):
    """Loss path 4 of issue 13, end to end: every document of the day shares one title (as a
    common title does on CNKI), so refreshing a stale detail link by a title search lists the
    whole day, 10 rows a page. Before, only page 1 of that search was read: a document further
    down became a permanent `not-found-on-refresh`. Now the search's pages are walked."""
    setup = setup_crawl(
        "patent",
        "G06",
        "mysql",
        end="2024-01-01",
        site={"seed": 5, "title_variety": 1},
        cnki={"page_size": 10},
    )
    truth = setup.truth()
    assert len(truth) > 60 and len({d["title"] for d in truth}) == 1
    stale = [d["filename"] for d in truth[5::12]]  # spread over the list: most are past page 1
    setup.site.control(stale=stale)
    result = setup.run()
    assert result.returncode == 0, result.stderr[-3000:] + setup.log()[-3000:]
    assert setup.query(sa.select(error_link.c.filename, error_link.c.reason)) == []
    assert compare(setup.stored(), truth, "patent") == {"missing": [], "extra": [], "differing": {}}
    # each stale link was refused before its refresh found the new one: by its token (the verify
    # page), or, on a loaded machine, by a challenge on the way to it (a burst), which the spider
    # answers with the same refresh
    stats = setup.site.stats()
    refused = stats["token_refusals"]["expired"] + stats["challenged"]["total"]
    refreshed = re.search(r"'details/refreshed': (\d+)", setup.log())
    why = f"site: {stats['token_refusals']}, {stats['challenged']}; log: {setup.log()[-2000:]}"
    assert refused >= len(stale), why
    assert refreshed and int(refreshed.group(1)) >= len(stale), why


def test_an_open_ended_task_crawls_to_today_then_says_it_is_up_to_date(setup_crawl):
    """A task without end_date follows the calendar: it crawls every day up to its limit, then
    the run ends by itself, `up_to_date` (exit 0), with the task still in its crawl phase; the
    next run finds nothing due and adds nothing."""
    import datetime as dt

    from cnkispider.clock import BEIJING
    from cnkispider.store.schema import task as task_table

    today = (dt.datetime.now(dt.UTC) + BEIJING).date()
    start = (today - dt.timedelta(days=2)).isoformat()
    setup = setup_crawl(
        "patent", "G06", "sqlite", start=start, end="", site={"seed": 5, "scale": 0.1}
    )
    result = setup.run()
    assert result.returncode == 0, result.stderr[-3000:] + setup.log()[-3000:]
    assert "up to date" in setup.log()
    days = sorted({d for (d,) in setup.query(sa.select(round_.c.day))})
    assert days and str(days[0]) == start and str(days[-1]) <= today.isoformat()
    assert {s for (s,) in setup.query(sa.select(round_.c.state))} == {"done"}
    assert setup.query(sa.select(task_table.c.phase)) == [("crawl",)]
    stored = len(setup.stored())
    truth = setup.site.truth("patent", start, str(days[-1]), ["G06"])
    assert compare(setup.stored(), truth, "patent") == {"missing": [], "extra": [], "differing": {}}
    again = setup.run()
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(setup.stored()) == stored
    assert len(setup.query(sa.select(round_.c.id))) == len(days)
