"""The stand-in's realistic year (``--profile realistic-year``, issue 21 point 4): patents on
CNIPA's two publication weekdays only, papers every day, Zipf-skewed class sizes, a few surge
days over the cap; the ground truth and /_rounds follow it; /_stats counts requests by kind and
searches (first pages, without a category, with no result, page turns)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from datetime import date

import pytest

from standin.catalogue import CorpusOptions, parse_day
from standin.client import REPO
from standin.corpus import Corpus
from tests.fixtures import launcher

YEAR = [parse_day("2024-01-01") + k for k in range(366)]
TUESDAY, FRIDAY = 1, 4


def year_corpus(**options) -> Corpus:
    return Corpus(CorpusOptions(profile="realistic-year", **options))


def day_totals(corpus: Corpus, doc_type: str) -> dict[int, int]:
    return {d: sum(corpus.counts(doc_type, d)) for d in YEAR}


def test_patents_are_published_on_tuesdays_and_fridays_only():
    totals = day_totals(year_corpus(scale=0.002), "patent")
    published = {d for d, n in totals.items() if n}
    assert {date.fromordinal(d).weekday() for d in published} == {TUESDAY, FRIDAY}
    # every Tuesday and Friday of 2024 has patents (105 of them), no other day has any
    assert len(published) == sum(date.fromordinal(d).weekday() in (1, 4) for d in YEAR) == 105


def test_papers_appear_every_day_fewer_at_weekends():
    totals = day_totals(year_corpus(scale=0.01), "paper")
    assert all(totals.values())
    weekday = [n for d, n in totals.items() if date.fromordinal(d).weekday() < 5]
    weekend = [n for d, n in totals.items() if date.fromordinal(d).weekday() >= 5]
    assert sorted(weekend)[len(weekend) // 2] < 0.6 * sorted(weekday)[len(weekday) // 2]


@pytest.mark.parametrize(("doc_type", "surges"), [("patent", 3), ("paper", 2)])
def test_a_few_surge_days_pass_the_cap_whatever_the_scale(doc_type, surges):
    for scale in (0.001, 0.003):
        corpus = year_corpus(scale=scale, surge_rows=1250)
        totals = day_totals(corpus, doc_type)
        over = sorted(n for n in totals.values() if n > 1000)
        assert len(over) == surges, over
        ordinary = max(n for n in totals.values() if n <= 1000)
        assert ordinary < 1000 * scale / 0.003  # the ordinary days scale, the surge days do not
    # the largest surge day is big enough that its largest class passes the cap too
    big = max(totals, key=totals.get)
    tree = corpus.trees[doc_type]
    per_top = Counter()
    for li, n in enumerate(corpus.counts(doc_type, big)):
        per_top[tree.top_of(tree.leaves[li])] += n
    assert max(per_top.values()) > 1000
    small = min((d for d in totals if totals[d] > 1000), key=totals.get)
    per_top = Counter()
    for li, n in enumerate(corpus.counts(doc_type, small)):
        per_top[tree.top_of(tree.leaves[li])] += n
    assert max(per_top.values()) <= 1000  # the others split by their classes


def test_class_sizes_are_skewed_like_zipf():
    corpus = year_corpus(scale=0.01)
    tree = corpus.trees["patent"]
    per_top = Counter()
    for d in YEAR:
        for li, n in enumerate(corpus.counts("patent", d)):
            per_top[tree.top_of(tree.leaves[li])] += n
    ranked = [code for code, _ in per_top.most_common()]
    assert ranked[:2] == ["G", "H"] and ranked[-1] == "D"
    assert per_top["G"] > 6 * per_top["D"]  # Zipf: the first of 8 is 8 times the last
    # most (day x section) cells of the year are empty: what a round per cell wastes
    cells = [
        sum(1 for li in tree.leaves_under(top) if corpus.counts("patent", d)[li])
        for d in YEAR
        for top in tree.top
    ]
    assert cells.count(0) > 0.7 * len(cells)


def test_the_default_profile_is_unchanged():
    plain, year = Corpus(CorpusOptions(seed=4)), Corpus(CorpusOptions(seed=4, profile=""))
    day = parse_day("2024-03-02")  # a Saturday: the realistic year has no patents on it
    assert plain.counts("patent", day) == year.counts("patent", day)
    assert sum(plain.counts("patent", day)) > 0
    with pytest.raises(ValueError, match="unknown corpus profile"):
        Corpus(CorpusOptions(profile="busy-year"))


def test_truth_and_rounds_follow_the_profile_and_stats_count_by_kind(cnki_site):
    site = cnki_site(profile="realistic-year", scale=0.002, surge_rows=300, cap_rows=250)
    start, end = "2024-03-01", "2024-03-10"  # Fri 1, Tue 5, Fri 8 published
    rounds = site.rounds("patent", start, end)
    truth = site.truth("patent", start, end)
    by_day = Counter()
    for row in rounds:
        by_day[row["date"]] += row["count"]
    assert {d for d, n in by_day.items() if n} == {"2024-03-01", "2024-03-05", "2024-03-08"}
    assert sum(by_day.values()) == len(truth)
    assert Counter(t["date"] for t in truth) == +by_day
    corpus = year_corpus(scale=0.002, surge_rows=300)
    assert len(truth) == sum(sum(corpus.counts("patent", parse_day(d))) for d in by_day)

    site.control(reset_stats=True)
    client = site.client()
    client.warmup()  # a warm-up page and a client id
    busy = max(by_day, key=by_day.get)
    status, _, body = client.grid("patent", busy)  # a day census: no category
    assert status == 200 and b"pagerTitleCell" in body
    client.grid("patent", busy, page=2)
    client.grid("patent", "2024-03-02", code="G")  # a Saturday: nothing
    stats = site.stats()
    assert stats["kinds"]["warmup"] == 1 and stats["kinds"]["client_id"] == 1
    assert stats["kinds"]["grid"] == 3 and stats["kinds"]["detail"] == 0
    assert sum(stats["kinds"].values()) == stats["requests"] == 5
    assert stats["searches"] == {"first": 2, "uncategorised": 1, "zero": 1, "turns": 1}
    state = site.control()
    assert state["profile"] == "realistic-year" and state["surge_rows"] == 300


@pytest.mark.slow  # over a second alone: the stand-in's truth command in a subprocess
def test_the_truth_command_takes_the_profile():
    run = launcher.run(
        [sys.executable, "-m", "standin", "truth", "--type", "patent", "--start", "2024-03-02"]
        + ["--end", "2024-03-05", "--profile", "realistic-year", "--scale", "0.002"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    rows = [json.loads(line) for line in run.stdout.splitlines()]
    assert rows and {r["date"] for r in rows} == {"2024-03-05"}  # Sat, Sun, Mon: none
