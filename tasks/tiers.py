"""Which rounds of the look-back a look re-opens, by their day's tier (issue 46).

The pure rule is :mod:`cnkispider.looktiers` (``[task] look_tiers``); this module turns it into
the condition of the look's one UPDATE (tasks/lookback.py ``claim_look``), so "due" stays a
fact of the round rows: a round of a tier of ``period`` days whose last count (``updated_at``:
the crawl that walked it, or the last look that closed it) was on Beijing day D is due again on
day D + period. No state of its own.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from cnkispider.clock import BEIJING
from cnkispider.looktiers import Tier, spans
from cnkispider.schema import round_


def _beijing_midnight(day: dt.date) -> dt.datetime:
    """The database's (naive UTC) time at which ``day`` begins in Beijing."""
    return dt.datetime.combine(day, dt.time()) - BEIJING


def tier_condition(tiers: tuple[Tier, ...], today: dt.date, window: int):
    """The rounds of the last ``window`` days a look on ``today`` counts again by their tier
    (None: no tiers, every round of the window)."""
    if not tiers:
        return None
    parts = []
    for first_age, last_age, period in spans(tiers, window):
        newest = today - dt.timedelta(days=first_age)
        oldest = today - dt.timedelta(days=last_age)
        in_span = [round_.c.day >= oldest.isoformat(), round_.c.day <= newest.isoformat()]
        if period:  # last counted on a Beijing day before today - period + 1
            counted = _beijing_midnight(today - dt.timedelta(days=period - 1))
            in_span.append(round_.c.updated_at < counted)
        parts.append(sa.and_(*in_span))
    return sa.or_(*parts)
