"""The report's times: ISO 8601 UTC text and ages in seconds, on the database's clock.

Every time the status compares (heartbeats, round completions) was stamped with the database's
clock (:func:`cnkispider.store.db.db_now`), so the ``now`` it is compared with is the database's clock
too, never this machine's: a PC whose clock is off still sees the right ages.
"""

from __future__ import annotations

import datetime as dt


def iso(value: dt.datetime | None) -> str | None:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else None


def age(now: dt.datetime, then: dt.datetime | None) -> float | None:
    return round((now - then).total_seconds(), 1) if then is not None else None
