"""Fewer requests per document (issue 21): the day census, rounds that fit the day, and sessions
that serve several rounds. Real crawls against the stand-in's realistic year, counted by its
own /_stats (requests by kind, searches: first pages, without a category, with no result)."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import sqlalchemy as sa

from cnkispider.store.schema import error_code, ledger, round_
from tasks.categories import covers, load_tree
from tasks.flow import TaskStore
from tests.fixtures.crawl_harness import compare, depth_fields
from tests.fixtures.crawls import CAP, IPC, YEAR
from tests.fixtures.gate import REJECTION_PAGE, RefusingGate

# at scale 0.002 (surge rows 300): Sat 2 March has no patent, Fri 1 March 72, Tue 5 March 307
EMPTY, WITHIN, OVER = "2024-03-02", "2024-03-01", "2024-03-05"


def _rounds(setup):
    return setup.query(
        sa.select(
            round_.c.day,
            round_.c.category,
            round_.c.state,
            round_.c.total,
            round_.c.stored,
            round_.c.beyond,
            round_.c.note,
        ).order_by(round_.c.id)
    )


def _equal_to_truth(setup) -> None:
    assert compare(setup.stored(), setup.truth(), "patent") == {
        "missing": [],
        "extra": [],
        "differing": {},
    }


# -- the task table: the cursor walks days -----------------------------------------------------


def test_the_cursor_walks_days_and_a_root_cursor_goes_on_through_the_day(sqlite_url):
    from cnkispider.store.db import open_database

    engine = open_database(sqlite_url)
    store = TaskStore(engine, day_census=True)
    task, _ = store.register("t", "patent", "2024-01-01", "2024-01-03", "G06,H04")
    claimed = [store.claim(task.id, "w") for _ in range(2)]
    assert [(r.day, r.category) for r in claimed] == [("2024-01-01", "*"), ("2024-01-02", "*")]
    store.move_cursor("t", "2024-01-02", "G06")  # steering by the table: that day's roots on
    nxt = [store.claim(task.id, "w") for _ in range(2)]
    assert [(r.day, r.category) for r in nxt] == [("2024-01-02", "H04"), ("2024-01-03", "*")]
    # off: a round per (day x root), as before
    plain = TaskStore(engine)
    other, _ = plain.register("u", "patent", "2024-01-01", "2024-01-01", "G06,H04")
    assert [plain.claim(other.id, "w").category for _ in range(2)] == ["G06", "H04"]
    assert plain.claim(other.id, "w") is None
    engine.dispose()


def test_a_task_covers_the_tree_only_with_all_the_roots():
    assert covers(load_tree("builtin", "patent"), "patent")
    assert covers(load_tree(IPC, "patent"), "patent")
    assert not covers(load_tree("G06,H04", "patent"), "patent")
    assert not covers(load_tree("A,B,C,D,E,F,G", "patent"), "patent")


# -- acceptance (issue 21) -------------------------------------------------------------------


@pytest.mark.slow  # a crawl in a worker subprocess
def test_an_empty_day_costs_one_request(census_crawl):
    setup = census_crawl(EMPTY)
    setup.run_ok(timeout=240)
    stats = setup.site.stats()
    assert stats["kinds"]["grid"] == 1, stats["kinds"]
    assert stats["kinds"]["detail"] == 0
    assert stats["searches"]["uncategorised"] == 1 and stats["searches"]["first"] == 1
    assert [(r.day, r.category, r.state, r.total, r.note) for r in _rounds(setup)] == [
        (EMPTY, "*", "done", 0, "empty day")
    ]


@pytest.mark.slow  # a crawl in a worker subprocess
def test_an_empty_day_answered_as_the_soft_block_asks_its_week_once(census_crawl):
    """CNKI may answer a genuine zero with the soft block's body: the census cannot be its own
    canary, so the week up to the day is asked on the same session (one request more)."""
    setup = census_crawl(EMPTY, site={**YEAR, "zero_as_soft_block": True})
    result = setup.run_ok(timeout=240)
    stats = setup.site.stats()
    assert stats["kinds"]["grid"] == 2, stats["kinds"]
    assert [(r.category, r.state, r.total, r.note) for r in _rounds(setup)] == [
        ("*", "done", 0, "empty day")
    ]
    assert "pauses for" not in setup.log(), result.stdout[-2000:]


@pytest.mark.slow  # a crawl in a worker subprocess
def test_a_day_within_the_cap_is_one_round_and_equals_the_truth(census_crawl):
    setup = census_crawl(WITHIN)
    setup.run_ok(timeout=240)
    truth = setup.truth()
    assert 50 < len(truth) <= 250
    _equal_to_truth(setup)
    stats = setup.site.stats()
    assert stats["searches"]["first"] == 1 and stats["searches"]["uncategorised"] == 1
    assert stats["kinds"]["grid"] == math.ceil(len(truth) / 50)
    assert stats["kinds"]["detail"] == len(truth)
    rounds = _rounds(setup)
    assert [(r.category, r.state, r.total, r.stored) for r in rounds] == [
        ("*", "done", len(truth), len(truth))
    ]


@pytest.mark.slow  # a crawl in a worker subprocess
def test_a_day_over_the_cap_splits_by_the_roots_and_equals_the_truth(census_crawl):
    """[task] facet_counts off: the whole tree's census splits inside its round, a search per
    root."""
    setup = census_crawl(OVER, task_keys={"facet_counts": "off"})
    setup.run_ok(timeout=240)
    truth = setup.truth()
    assert len(truth) > 250
    _equal_to_truth(setup)
    stats = setup.site.stats()
    assert stats["searches"]["uncategorised"] == 1
    assert stats["searches"]["first"] >= 1 + 8  # the census, then each root's search
    assert stats["kinds"].get("group", 0) == 0
    rounds = _rounds(setup)
    assert [(r.category, r.state, r.total, r.stored) for r in rounds] == [
        ("*", "done", len(truth), len(truth))
    ]
    assert setup.query(sa.select(sa.func.count()).select_from(error_code))[0][0] == 0
    report = _status(setup)
    assert report["rounds"]["total"] == report["rounds"]["finished"] == 1


# 22 March at scale 0.0003: 13 patents, none under C, D, E or F; over a cap of 10
SPARSE, SPARSE_SITE, SMALL_CAP = (
    "2024-03-22",
    {**YEAR, "scale": 0.0003},
    {"cap_rows": 10, "page_size": 10},
)


@pytest.mark.slow  # crawls in worker subprocesses
@pytest.mark.parametrize(
    "day,site,cap", [(OVER, YEAR, CAP), (SPARSE, SPARSE_SITE, SMALL_CAP)], ids=["over", "sparse"]
)
def test_a_day_over_the_cap_split_by_its_facet_counts_equals_the_truth(
    census_crawl, day, site, cap
):
    """[task] facet_counts on (the default): the census's page 1, then one group/result;
    the day becomes its root rounds (its parts, which later looks recount with one request);
    a root the facet counts 0 is closed at once (``empty part``) and never searched. The
    crawl equals the truth, every root round lists its facet count, no error is recorded."""
    setup = census_crawl(day, site=site, cnki=cap)
    setup.run_ok(timeout=240)
    truth = setup.truth()
    assert len(truth) > cap["cap_rows"]
    _equal_to_truth(setup)
    per_root = Counter(d["main_ipc"][0] for d in truth)
    assert max(per_root.values()) <= cap["cap_rows"]  # each root one search, no deeper split
    empty = sorted(set(IPC.split(",")) - set(per_root))
    assert (day == SPARSE) == bool(empty), empty  # the sparse day means something
    stats = setup.site.stats()
    assert stats["kinds"]["group"] == 1
    assert stats["searches"]["uncategorised"] == 1
    assert stats["searches"]["first"] == 1 + len(per_root)  # no search of an empty root
    rounds = {r.category: r for r in _rounds(setup)}
    census = rounds.pop("*")
    assert (census.state, census.total) == ("done", 0)
    assert census.note == f"categories: census {len(truth)}: split by group/result"
    assert {code: (r.state, r.total, r.stored or 0) for code, r in rounds.items()} == {
        code: ("done", per_root[code], per_root[code]) for code in IPC.split(",")
    }
    assert {code for code, r in rounds.items() if r.note == "empty part"} == set(empty)
    assert setup.query(sa.select(sa.func.count()).select_from(error_code))[0][0] == 0
    report = _status(setup)
    assert report["rounds"]["total"] == report["rounds"]["finished"] == 1 + 8


@pytest.mark.slow  # a crawl in a worker subprocess
@pytest.mark.parametrize(
    "answer,reason",
    [(REJECTION_PAGE, "rejected"), (b'<div class="resultlist"></div>', "")],
    ids=["refused", "odd"],
)
def test_a_refused_or_odd_split_walks_the_day_as_before(census_crawl, cnki_site, answer, reason):
    """The census's group/result refused (CNKI's rejection: it never halts the task) or
    answered oddly (no facet in it): never read as zero rows; the whole tree's census splits
    inside its round as with facets off, equal to the truth, and says so."""
    gate = RefusingGate(cnki_site(**YEAR), answer)
    try:
        setup = census_crawl(OVER, site=gate, depth="list")  # detail links name the site itself
        setup.run_ok(timeout=240)
        truth = setup.truth()
        assert compare(setup.stored(), truth, "patent", depth_fields("list", "patent")) == {
            "missing": [],
            "extra": [],
            "differing": {},
        }
    finally:
        gate.close()
    assert gate.group_posts >= 1
    rounds = _rounds(setup)
    assert [(r.category, r.state, r.total, r.stored) for r in rounds] == [
        ("*", "done", len(truth), len(truth))
    ]
    assert setup.query(sa.select(sa.func.count()).select_from(error_code))[0][0] == 0
    log = setup.log()
    assert "group/result refused or odd (" + reason in log, log[-3000:]
    assert "the day is split by probing" in log, log[-3000:]
    assert "'facets/fallback/" + reason in log, log[-3000:]


@pytest.mark.slow  # a crawl in a worker subprocess
def test_a_census_shortfall_is_recorded(census_crawl):
    """The stand-in's category searches lose one document in ten (break census-short): the
    roots add up to less than the census. The shortfall is an errorCode row ``census``
    (permanent), and the round is done with what the census saw beyond the roots as ``beyond``."""
    setup = census_crawl(OVER, site={**YEAR, "break_": "census-short"})
    setup.run_ok(timeout=240)
    codes = setup.query(sa.select(error_code.c.reason, error_code.c.state, error_code.c.detail))
    assert [(c.reason, c.state) for c in codes] == [("census", "permanent")], codes
    assert codes[0].detail.startswith("census 307, categories ")
    [r] = _rounds(setup)
    assert r.category == "*" and r.state == "done" and r.total == 307
    assert 0 < r.beyond < 307 and r.stored + r.beyond == 307
    stored = {d["filename"] for d in setup.stored()}
    assert stored < {d["filename"] for d in setup.truth()}
    pending = setup.query(
        sa.select(sa.func.count()).select_from(ledger).where(ledger.c.outcome == "pending")
    )[0][0]
    assert pending == 0


@pytest.mark.slow  # a crawl in a worker subprocess
def test_a_task_that_does_not_cover_the_tree_crawls_the_day_s_roots_after_its_census(
    census_crawl,
):
    """Its census searches its categories (issue 28); over the cap (A to G list 251 on 5 March)
    the day's root rounds follow it."""
    roots = "A,B,C,D,E,F,G"
    setup = census_crawl(EMPTY, categories=roots, end=WITHIN_NEXT)
    setup.run_ok(timeout=240)
    _equal_to_truth(setup)
    rounds = {(r.day, r.category): r for r in _rounds(setup)}
    assert rounds[(EMPTY, "*")].note == "empty day"
    assert (EMPTY, "G") not in rounds  # an empty day: no root round
    census = rounds[(WITHIN_NEXT, "*")]
    assert census.state == "done" and census.note.startswith("categories: census ")
    assert {rounds[(WITHIN_NEXT, root)].state for root in roots.split(",")} == {"done"}
    assert {r.state for r in rounds.values()} == {"done"}
    # status counts the census rounds as covering their days: 4 days, the last one split
    report = _status(setup)
    assert report["rounds"]["total"] == report["rounds"]["finished"] == 4 + 7
    assert report["progress"] == 1.0


def _status(setup) -> dict:
    from cnkispider.status.collecting import collect
    from cnkispider.store.db import open_database

    engine = open_database(setup.db_url)
    try:
        return collect(engine, None, task_name=setup.task)["tasks"][0]
    finally:
        engine.dispose()


# Tue 5 March is over the cap; Sat 2 to Mon 4 March have no patents: the task 2-4 March has
# three empty days; 2-5 March ends on a day with rows (the root rounds of a partial tree).
WITHIN_NEXT = "2024-03-05"


@pytest.mark.slow  # a crawl in a worker subprocess
def test_a_session_serves_several_rounds(crawl_setup, cnki_site):
    """Warm-up and client id once per session, not per round: 8 rounds of many pages (page
    size 10, more grid POSTs than the pool's sessions would take at 14 turns each) on the
    plain pool of 4 sessions, with no turn limit, cost at most one warm-up per session."""
    site = cnki_site(seed=5, turn_limit=0)  # CNKI with its person check has no fixed turn limit
    setup = crawl_setup(
        "patent",
        "G06,H04",
        "sqlite",
        "2024-01-01",
        "2024-01-04",
        site=site,
        day_census="off",
        cnki={"page_size": 10, "turn_limit": 1000, "sessions": "plain"},
    )
    setup.run_ok(timeout=240)
    _equal_to_truth(setup)
    stats = site.stats()
    rounds = _rounds(setup)
    assert len(rounds) == 8 and {r.state for r in rounds} == {"done"}
    grids = stats["kinds"]["grid"]
    assert grids > 4 * 14  # a turn limit of 14 would have renewed sessions
    assert stats["kinds"]["warmup"] == stats["kinds"]["client_id"]
    assert 1 <= stats["kinds"]["warmup"] <= 4  # SESSION_POOL_SIZE: once per session
    assert stats["kinds"]["warmup"] < len(rounds)
    assert stats["challenged"]["total"] == 0


def test_the_day_census_setting_is_validated(tmp_path):
    from cnkispider.config import ConfigError, load_config

    path = tmp_path / "config.ini"
    path.write_text("[task]\nday_census = off\n", encoding="utf-8")
    assert load_config(path).task.day_census is False
    path.write_text("[task]\n", encoding="utf-8")
    assert load_config(path).task.day_census is True
    path.write_text("[task]\nday_census = sometimes\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="day_census"):
        load_config(path)
