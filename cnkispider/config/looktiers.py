"""Look tiers: how often a look counts a day of the look-back again, by the day's age (issue 46).

CNKI enters most late documents within days of their date and almost none after weeks
(PROTOCOL.md point 21; the stand-in's ``--late-arrivals``), so a look counts the recent days at
every look and older days rarely: ``[task] look_tiers = 7d:every, 30d:7d, 60d:30d`` says a day
younger than 7 days is counted at every look, one younger than 30 days when its last count is 7
days old, any older day of the window when its last count is 30 days old. ``[task]
look_back_days`` stays the window; a day older than the last tier's bound is of the last tier.

A tier's delay is its period: a document CNKI enters for a day of that tier is caught at most
``period`` days (plus ``follow_every``) after it is entered. Pure: no state; the rule the
crawler applies (tasks/lookback.py) and the cost model (bench/follow_cost.py) both read it here.
"""

from __future__ import annotations

from dataclasses import dataclass

from cnkispider.words.i18n import _

#: The default: the last week at every look, the month weekly, the rest of the window monthly.
DEFAULT_TIERS = "7d:every, 30d:7d, 60d:30d"
OFF = ("", "off", "0")


@dataclass(frozen=True)
class Tier:
    """Days younger than ``below`` days (and not of an earlier tier) are counted again when
    their last count is ``period`` days old (0: at every look)."""

    below: int
    period: int


def _days(text: str, what: str, value: str) -> int:
    raw = text.strip().lower()
    if raw.endswith("d"):
        raw = raw[:-1]
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(
            _("expected %(what)s as a number of days such as 7d, got %(value)r")
            % {"what": what, "value": value}
        )
    return int(raw)


def parse_tiers(text: str) -> tuple[Tier, ...]:
    """``7d:every, 30d:7d, 60d:30d`` -> tiers (ascending ``below``); empty, ``off`` or ``0``:
    no tiers (every day of the window at every look). ValueError naming what was expected."""
    if text.strip().lower() in OFF:
        return ()
    tiers = []
    for part in text.split(","):
        below, sep, period = part.partition(":")
        if not sep:
            raise ValueError(
                _("expected tiers such as %(example)s (or off), got %(value)r")
                % {"example": DEFAULT_TIERS, "value": text}
            )
        every = period.strip().lower() == "every"
        tiers.append(
            Tier(
                _days(below, _("a tier's age"), part.strip()),
                0 if every else _days(period, _("a tier's period"), part.strip()),
            )
        )
    for a, b in zip(tiers, tiers[1:], strict=False):
        if b.below <= a.below:
            raise ValueError(_("expected tiers in ascending age, got %(value)r") % {"value": text})
    return tuple(tiers)


def period_of(tiers: tuple[Tier, ...], age: int) -> int:
    """The period (days; 0: every look) of a day ``age`` days old (today: 0)."""
    for tier in tiers:
        if age < tier.below:
            return tier.period
    return tiers[-1].period if tiers else 0


def due(tiers: tuple[Tier, ...], age: int, counted_age: int | None) -> bool:
    """Is a day ``age`` days old, last counted when it was ``counted_age`` days old (None:
    never), to be counted by a look today? (The crawler's rule, in days: a day last counted
    on day D is due on day D + period.)"""
    period = period_of(tiers, age)
    return counted_age is None or period == 0 or age - counted_age >= period


def spans(tiers: tuple[Tier, ...], window: int) -> list[tuple[int, int, int]]:
    """The tiers over a window of ``window`` days: ``(first age, last age, period)`` each,
    the last stretched or cut to the window."""
    out = []
    lo = 0
    for i, tier in enumerate(tiers):
        hi = window if i == len(tiers) - 1 else min(tier.below, window)
        if lo < hi:
            out.append((lo, hi - 1, tier.period))
        lo = hi
    return out or [(0, window - 1, 0)]
