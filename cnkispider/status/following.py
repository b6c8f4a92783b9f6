"""What ``cnkispider status`` and the task page say of a task that follows today: its looks,
its tiers, the entry lag measured, the refresh of its counts (docs/FOLLOW.md). Pure, like
:mod:`cnkispider.status.rendering`, which puts these lines in a task's block.
"""

from __future__ import annotations

from cnkispider.words import i18n
from cnkispider.words.i18n import _, ngettext


def clock(iso: str | None) -> str:
    """A moment of the report (UTC) as the locale writes it (cnkispider.words.i18n.moment)."""
    return i18n.moment(iso)


def follow_line(follow: dict) -> str:
    """``follows today: look 3 at 08:00 UTC, next look due 14:00 UTC`` (docs/FOLLOW.md)."""
    if not follow["looks"]:
        return _("follows today: the first look when the crawl reaches today")
    return _("follows today: look {n} at {last} UTC, next look due {due} UTC").format(
        n=follow["looks"],
        last=clock(follow["last_look"]),
        due=clock(follow["next_look_due"]),
    )


def tiers_line(follow: dict) -> str:
    """``looks over 60 days: days 0-6 back at every look; days 7-29 back every 7 days; ...``
    (config.ini's [task] look_back_days and look_tiers, cnkispider/config/looktiers.py)."""
    return _("looks over %(n)d days: %(tiers)s") % {
        "n": follow["look_back_days"],
        "tiers": tier_words(follow["tiers"]),
    }


def tier_words(tiers: list[dict]) -> str:
    """The tiers of a report's ``follow.tiers`` in words (status and the task page)."""
    words = []
    for tier in tiers:
        first, last = tier["days_back"]
        period = tier["every_days"]
        if period == 0:
            words.append(
                _("days %(first)d-%(last)d back at every look") % {"first": first, "last": last}
            )
        else:
            words.append(
                ngettext(
                    "days %(first)d-%(last)d back every %(n)d day",
                    "days %(first)d-%(last)d back every %(n)d days",
                    period,
                )
                % {"first": first, "last": last, "n": period}
            )
    return i18n.mark("semicolon").join(words)


def lag_line(entry_lag: dict) -> str:
    """``entry lag of 812 documents: median 2 days, p90 9, p99 41; a look-back of 42 days would
    have caught 99%`` (issue 46.3, tasks/lag.py)."""
    if not entry_lag.get("documents"):
        return _("entry lag: nothing measured yet")
    return ngettext(
        "entry lag of %(n)d document: median %(median)d days, p90 %(p90)d, p99 %(p99)d; a "
        "look-back of %(window)d days would have caught 99%%",
        "entry lag of %(n)d documents: median %(median)d days, p90 %(p90)d, p99 %(p99)d; a "
        "look-back of %(window)d days would have caught 99%%",
        entry_lag["documents"],
    ) % {
        "n": entry_lag["documents"],
        "median": entry_lag["median_days"],
        "p90": entry_lag["p90_days"],
        "p99": entry_lag["p99_days"],
        "window": entry_lag["window_99_days"],
    }


def counts_line(follow: dict) -> str:
    """``counts of the look-back read again at 08:00 UTC, next due 14:00 UTC`` ([task]
    refresh_counts_every, docs/FOLLOW.md)."""
    return _("counts of the look-back read again at %(last)s UTC, next due %(due)s UTC") % {
        "last": clock(follow["last_counts_refresh"]),
        "due": clock(follow["next_counts_refresh_due"]),
    }
