"""CNKI's calendar: the day it is in Beijing (UTC+8, no daylight saving), whatever this machine's
time zone. A round's day, an open-ended task's last day and a new task's first day are days of
that calendar. This module imports nothing of the project, so any layer may use it."""

from __future__ import annotations

import datetime as dt

#: Beijing's offset from UTC, all year.
BEIJING = dt.timedelta(hours=8)


def cnki_today(now: dt.datetime | None = None) -> dt.date:
    """Today on CNKI's calendar at ``now`` (UTC: aware, or naive as the database's clock gives
    it; default: this machine's clock)."""
    return ((now or dt.datetime.now(dt.UTC)) + BEIJING).date()
