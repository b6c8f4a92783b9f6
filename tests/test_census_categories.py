"""The census of a task limited to some categories (issue 28): one search over exactly its
categories, their 分类号 rows OR'd in one group as the search form sends several, which is also
the day's listing when it fits under the cap. The stand-in answers exactly that form."""

from __future__ import annotations

import json
import math

import pytest
import sqlalchemy as sa

from cnkispider.cnki.protocol import Protocol
from cnkispider.cnki.search import Search
from cnkispider.store.schema import round_
from tests.fixtures.crawl_harness import compare
from tests.fixtures.site_rounds import DAY, crawl_round

WITHIN, OVER = "2024-03-01", "2024-03-05"  # whole tree 72 and 307 patents at this scale


def _keys(rows):
    return {(r["dbname"], r["filename"]) for r in rows}


def test_the_search_form_s_or_d_rows_list_the_union_and_and_d_rows_the_intersection(cnki_site):
    site = cnki_site(seed=2)
    client = site.client()
    g = {(t["dbname"], t["filename"]) for t in site.truth("patent", DAY, categories=["G06"])}
    h = {(t["dbname"], t["filename"]) for t in site.truth("patent", DAY, categories=["H04"])}
    assert g and h
    first, rows = crawl_round(client, "patent", DAY, rows=(("G06", 0), ("H04", 1)))
    assert first["total"] == len(g | h) and _keys(rows) == g | h
    _, both = crawl_round(client, "patent", DAY, rows=(("G06", 0), ("H04", 0)))
    assert _keys(both) == g & h  # AND: only what carries both (never the union)
    assert site.stats()["searches"]["uncategorised"] == 0


@pytest.mark.parametrize("logic", ["1", 7, None, 1.0])
def test_a_malformed_logic_is_refused_in_cnki_s_words(cnki_site, logic):
    site = cnki_site(seed=2)
    client = site.client()
    client.warmup()
    status, _, body = client.grid("patent", DAY, rows=(("G06", 0), ("H04", logic)))
    assert status == 200
    assert "参数校验;字段【Logic】校验失败" in body.decode("utf-8")
    assert site.stats()["rejections"]["logic"] == 1


def test_the_crawler_sends_the_task_s_categories_or_d_in_the_subject_group():
    protocol = Protocol("https://kns.cnki.net")
    search = Search.for_day("patent", WITHIN, None, any_of=("G", "H"))
    groups = json.loads(protocol.query_json(search, True))["QNode"]["QGroup"]
    subject = next(g for g in groups if g["Key"] == "Subject")
    assert [(i["Field"], i["Value"], i["Operator"], i["Logic"]) for i in subject["Items"]] == [
        ("CLC", "G", "SUFFIX", 0),
        ("CLC", "H", "SUFFIX", 1),
    ]
    assert Search.from_dict(json.loads(json.dumps(search.to_dict()))) == search
    with pytest.raises(ValueError, match="any_of"):
        Search.for_day("patent", WITHIN, "G", any_of=("H",))


def _rounds(setup):
    return setup.query(
        sa.select(
            round_.c.day, round_.c.category, round_.c.state, round_.c.total, round_.c.note
        ).order_by(round_.c.id)
    )


def test_a_day_within_the_cap_is_one_census_round_over_the_task_s_categories(census_crawl):
    # debug: a round's done line is a DEBUG line since issue 41 (logs: a line a minute)
    setup = census_crawl(WITHIN, categories="G,H", crawl={"log_level": "debug"})
    result = setup.run_ok(timeout=240)
    truth = setup.truth()
    assert 0 < len(truth) < 72
    assert compare(setup.stored(), truth, "patent") == {"missing": [], "extra": [], "differing": {}}
    stats = setup.site.stats()
    assert stats["searches"]["first"] == 1 and stats["searches"]["uncategorised"] == 0
    assert stats["kinds"]["grid"] == math.ceil(len(truth) / 50)
    assert [(r.category, r.state, r.total) for r in _rounds(setup)] == [("*", "done", len(truth))]
    # the operator's words: a "day" round, never `*`
    assert f"done: {WITHIN} day, listed {len(truth)}" in setup.log()
    assert " * " not in result.stdout + setup.log() and "listed 0" not in setup.log()


def test_a_day_over_the_cap_crawls_a_round_per_category(census_crawl):
    setup = census_crawl(OVER, categories="A,B,C,D,E,F,G")  # 7 of 8 roots: over the cap that day
    setup.run_ok(timeout=240)
    truth = setup.truth()
    assert len(truth) > 250
    assert compare(setup.stored(), truth, "patent")["missing"] == []
    rounds = {r.category: r for r in _rounds(setup)}
    assert rounds["*"].note.startswith("categories: census ")
    assert set(rounds) == {"*", "A", "B", "C", "D", "E", "F", "G"}
    assert {r.state for r in rounds.values()} == {"done"}
