"""The stand-in's clock and late arrivals (issue 38): each document is entered days to months
after its own date, and the site shows only what was entered by its today (``--as-of``)."""

from __future__ import annotations

from collections import Counter
from datetime import date, timedelta

from standin.catalogue import CorpusOptions, parse_day
from standin.corpus import Corpus


def late_corpus(as_of: str = "", **options) -> Corpus:
    return Corpus(CorpusOptions(seed=3, late=True, as_of=as_of, **options))


def test_lags_are_mostly_days_with_a_tail_of_weeks_to_months():
    corpus = late_corpus()
    day = parse_day("2024-05-06")
    lags = Counter()
    for li, n in enumerate(corpus.counts("paper", day)):
        for i in range(n):
            lags[corpus.entry_lag("paper", day, li, i)] += 1
    total = sum(lags.values())
    assert total > 500
    within_week = sum(n for lag, n in lags.items() if lag <= 7)
    past_month = sum(n for lag, n in lags.items() if lag > 30)
    assert 0.6 < within_week / total < 0.8
    assert 0.05 < past_month / total < 0.15
    assert max(lags) > 60 and max(lags) <= 120


def test_without_late_arrivals_every_document_is_entered_on_its_day():
    corpus = Corpus(CorpusOptions(seed=3))
    assert corpus.entry_lag("patent", parse_day("2024-05-06"), 0, 0) == 0


def test_the_clock_shows_what_was_entered_by_its_day_and_moving_it_adds_documents():
    """As of a day, a search of that day lists fewer documents than a month later, which
    lists them all but the long tail; the truth follows the same clock; a document not yet
    entered has no detail page.

    A tenth of the day's papers (about 500): the whole day (5,000) made six corpora's worth of
    documents, 3 to 4 s of CPU against the fast tier's 4 s budget, and failed the tier now and
    then on CPU time alone."""
    day = "2024-05-06"
    whole = len(Corpus(CorpusOptions(seed=3, scale=0.1)).truth("paper", day, day))
    assert whole > 300
    counts = {}
    for later in (0, 7, 30, 200):
        as_of = (date.fromisoformat(day) + timedelta(days=later)).isoformat()
        counts[later] = len(late_corpus(as_of, scale=0.1).truth("paper", day, day))
    assert counts[0] < counts[7] < counts[30] < counts[200] == whole
    assert counts[0] > 0  # some are entered on their own day

    early = late_corpus(day, scale=0.1)
    hidden = [
        row
        for row in late_corpus(scale=0.1).truth("paper", day, day)
        if early.locate(row["dbname"], row["filename"]) is None
    ]
    assert len(hidden) == whole - counts[0]


def test_the_sites_clock_moves_through_control(cnki_site):
    """``--as-of`` starts the site at a day; ``/_control as_of`` moves it and the lists grow."""
    day = "2024-05-06"
    site = cnki_site(seed=3, late_arrivals=True, as_of=day)
    before = sum(r["count"] for r in site.rounds("paper", day, day))
    client = site.client()
    client.warmup()
    assert site.control()["as_of"] == day and site.control()["late"] is True
    site.control(as_of="2024-06-30")
    after = sum(r["count"] for r in site.rounds("paper", day, day))
    assert before < after
    assert len(site.truth("paper", day, day)) == len(
        late_corpus("2024-06-30").truth("paper", day, day)
    )
