"""The one way a typed day is read: ISO ``YYYY-MM-DD``, strictly. Python's own reader also takes
``20240301`` (while ``2024-1-5`` is refused), so a day would be read one way here and another
there; every date an operator types (the command line, the page, config.ini) comes through
:func:`iso_day`, and is refused with the same words everywhere."""

from __future__ import annotations

import datetime as dt
import re

ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def iso_day(text: str) -> dt.date:
    """The day ``text`` (``YYYY-MM-DD``) names; ValueError for any other spelling or a day
    that does not exist (2024-02-30)."""
    text = text.strip()
    if not ISO_DAY.fullmatch(text):
        raise ValueError(text)
    return dt.date.fromisoformat(text)
