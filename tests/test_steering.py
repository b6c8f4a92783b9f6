"""Steering (issue 28): what `task move`, pause, resume, stop and extend do to real crawls and to
the task table, from the command line (the web page's steering is in tests/test_web.py)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from cnkispider.db import open_database
from cnkispider.schema import documents, round_
from tests.crawl_harness import CrawlSetup, compare

# the stand-in's realistic year, small: Fri 1 March has rows, Sat 2 March none
YEAR = {"profile": "realistic-year", "scale": 0.002, "surge_rows": 300, "cap_rows": 250}


@pytest.fixture
def crawl(tmp_path, cnki_site, sqlite_url):
    made = []

    def make(categories, census, start="2024-03-01", end="2024-03-02"):
        setup = CrawlSetup(
            tmp_path / f"c{len(made)}",
            cnki_site(**YEAR),
            sqlite_url,
            "patent",
            start,
            end,
            categories,
            day_census=census,
            cnki={"cap_rows": 250},
        )
        setup.tmp_path.mkdir()
        made.append(setup)
        return setup

    yield make
    for setup in made:
        setup.cleanup_redis()


def _run(setup, *args):
    result = setup.run(*args)
    assert result.returncode == 0, (
        result.stdout[-2000:] + result.stderr[-2000:] + setup.log()[-2000:]
    )
    return result


@pytest.mark.parametrize("census", ["on", "off"])
@pytest.mark.parametrize("categories", ["G,H", "A,B,C,D,E,F,G,H"])
def test_a_move_brings_back_every_deleted_document(crawl, census, categories):
    """The operator deletes what was stored and moves the cursor back to the first day: the next
    run crawls every round from that day on again, census or not, whole tree or some categories."""
    setup = crawl(categories, census)
    _run(setup)
    truth = setup.truth()
    assert len(truth) >= 10
    assert compare(setup.stored(), truth, "patent")["missing"] == []
    engine = open_database(setup.db_url)
    with engine.begin() as conn:
        conn.execute(documents["patent"].delete())
    engine.dispose()
    assert setup.stored() == []

    _run(setup, "task", "move", setup.task, setup.start)
    _run(setup)
    diff = compare(setup.stored(), truth, "patent")
    assert diff["missing"] == [], f"{len(diff['missing'])} of {len(truth)} never came back"
    states = {r.state for r in setup.query(sa.select(round_.c.state))}
    assert states == {"done"}
