"""What following today costs a day in CNKI requests, for a realistic year (issue 38).

The stand-in's realistic year (``--profile realistic-year``: patents on CNIPA's Tuesdays and
Fridays, papers every day, surge days over the cap) with its late arrivals (``--late-arrivals``:
a lag drawn per document, most within a week, a tail of weeks to four months). A task follows
today with a daily look (``follow_every = 1d``) over ``--look-back`` days (60). For each day of
``--days`` (June 2024), the look's requests are counted by the rule the crawler applies
(tasks/lookback.py), which tests/test_follow.py measures on real crawls of the stand-in:

- every look-back day: its census, one list request, plus one per root category when the day
  lists more than the cap (a split census: its parts);
- a day whose listing grew since yesterday's look: its list pages walked again (the first is
  the census already counted; a split day's parts each from their first page);
- with facets (``--facets on``, the default: ``[task] facet_counts``, issue 46.2), a day split
  at its last count is recounted by one group/result request instead of its census and its
  parts' first pages, and only its parts whose count changed are walked, each from its first
  page (a part: the documents of one top-level category);
- its new documents at the task's depth: detail, a detail page each; export, an export request
  per list page holding new rows (a page's new rows go in one request); list, nothing more.

"documents/day" is the mean a day of the year has when all are in. Runs in seconds; no crawl,
no network.

    python bench/follow_cost.py [--look-back 60] [--tiers ...] [--facets on|off] [--json]
                                [--scale 1.0] [--days 2024-06-01:2024-06-30]
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cnkispider.config.looktiers import DEFAULT_TIERS, due, parse_tiers, spans
from cnkispider.items import DEPTHS
from standin.corpus import Corpus, CorpusOptions, parse_day

CAP = 6000
PAGE = 50
WARM_UP = 90  # days of daily looks before the first day measured
DOC_TYPES = ("patent", "paper")


def lags_of(corpus: Corpus, doc_type: str, day: int) -> list[int]:
    """The entry lags of every document of ``day``, sorted."""
    lag = corpus.entry_lag
    out = [
        lag(doc_type, day, li, i)
        for li, n in enumerate(corpus.counts(doc_type, day))
        for i in range(n)
    ]
    out.sort()
    return out


def part_lags(corpus: Corpus, doc_type: str, day: int) -> list[list[int]]:
    """The entry lags of ``day``'s documents by part (top-level category), each sorted."""
    tree, lag = corpus.trees[doc_type], corpus.entry_lag
    parts: dict[str, list[int]] = {}
    for li, n in enumerate(corpus.counts(doc_type, day)):
        into = parts.setdefault(tree.top_of(tree.leaves[li]), [])
        into.extend(lag(doc_type, day, li, i) for i in range(n))
    return [sorted(v) for v in parts.values()]


def listed(lags: list[int], day: int, as_of: int) -> int:
    """Documents of ``day`` listed as of ``as_of`` (entered by then)."""
    return bisect.bisect_right(lags, as_of - day) if as_of >= day else 0


def look_cost(
    corpus, doc_type, today: int, look_back: int, lags: dict, counted: dict, tiers=(), facets=False
):
    """One daily look on ``today``: the days its tier makes due (cnkispider/config/looktiers.py, the
    rule tasks/tiers.py applies) are counted; a counted day whose listing changed since its last
    count is walked again (``facets``: a split day by one group/result, and only its parts
    that changed). ``counted``: day -> the day it was last counted (updated here)."""
    roots = len(corpus.trees[doc_type].top)
    census = walk = new = pages_with_new = 0
    for day in range(today - look_back + 1, today + 1):
        last = counted.get(day, day)  # the crawl of a day counts it on its day
        if day != today and not due(tiers, today - day, last - day):
            continue
        counted[day] = today
        now = listed(lags[day], day, today)
        before = listed(lags[day], day, last) if day != today else 0
        if facets and before > CAP:  # split at its last count: one recount, the grown parts
            census += 1
            for part in part_lags(corpus, doc_type, day):
                part_now, part_before = listed(part, day, today), listed(part, day, last)
                if part_now != part_before:
                    walk += max(1, math.ceil(part_now / PAGE))
            gained = max(0, now - before)
            new += gained
            pages_with_new += min(math.ceil(now / PAGE), gained)
            continue
        split = now > CAP
        census += 1 + (roots if split else 0)
        if now != before:
            pages = math.ceil(now / PAGE) + (roots if split else 0)
            walk += max(0, pages - 1 - (roots if split else 0))
            gained = max(0, now - before)
            new += gained
            pages_with_new += min(math.ceil(now / PAGE), gained)
    return {
        "census": census,
        "walk": walk,
        "new": new,
        "list": census + walk,
        "export": census + walk + pages_with_new,
        "detail": census + walk + new,
    }


def costs(
    corpus, doc_type, first: int, last: int, look_back: int, tiers, facets=False
) -> list[dict]:
    """The daily looks' costs from ``first`` to ``last``, after a warm-up of ``WARM_UP`` days
    of daily looks (each day's last count then is what it would be on a task followed long)."""
    warm = first - WARM_UP
    lags = {day: lags_of(corpus, doc_type, day) for day in range(warm - look_back, last + 1)}
    counted: dict = {}
    for day in range(warm, first):
        look_cost(corpus, doc_type, day, look_back, lags, counted, tiers, facets)
    out = [
        look_cost(corpus, doc_type, d, look_back, lags, counted, tiers, facets)
        for d in range(first, last + 1)
    ]
    for c, d in zip(out, range(first, last + 1), strict=True):
        c["documents"] = len(lags[d])
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--look-back", type=int, default=60)
    parser.add_argument("--tiers", default=DEFAULT_TIERS, help="[task] look_tiers ('off': none)")
    parser.add_argument("--facets", choices=("on", "off"), default="on", help="[task] facet_counts")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--days", default="2024-06-01:2024-06-30")
    parser.add_argument("--json", action="store_true", help="the medians as JSON")
    args = parser.parse_args(argv)
    tiers = parse_tiers(args.tiers)
    first, _, last = args.days.partition(":")
    first, last = parse_day(first), parse_day(last or first)
    corpus = Corpus(CorpusOptions(seed=1, profile="realistic-year", scale=args.scale, late=True))
    facets = args.facets == "on"
    per_type = {t: costs(corpus, t, first, last, args.look_back, tiers, facets) for t in DOC_TYPES}
    if args.json:
        print(
            json.dumps(
                {
                    t: {k: round(statistics.median(c[k] for c in per_day)) for k in DEPTHS}
                    for t, per_day in per_type.items()
                }
            )
        )
        return 0
    print(
        f"a daily look over {args.look_back} days, tiers {args.tiers!r}, facets {args.facets},"
        f" {args.days}, realistic"
        f" year (scale {args.scale}), CNKI requests a day (median over the days; max in brackets)"
    )
    header = f"{'type':8} {'documents/day':>14} {'census':>8} {'re-walk':>8} {'new':>7}"
    header += f" {'list':>14} {'export':>14} {'detail':>16}"
    print(header)
    for doc_type, per_day in per_type.items():
        docs = statistics.mean(c["documents"] for c in per_day)

        def cell(key, width, per_day=per_day):
            values = [c[key] for c in per_day]
            text = f"{statistics.median(values):,.0f} ({max(values):,})"
            return f"{text:>{width}}"

        print(
            f"{doc_type:8} {docs:>14,.0f} {cell('census', 8)} {cell('walk', 8)} {cell('new', 7)}"
            f" {cell('list', 14)} {cell('export', 14)} {cell('detail', 16)}"
        )
    for first_age, last_age, period in spans(tiers, args.look_back):
        print(
            f"days {first_age}-{last_age} back: counted every {period or 1} day(s), so a late"
            f" document of such a day is caught within {period or 1} day(s) of its entry"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
