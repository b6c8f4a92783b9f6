"""How long something took or will take, as the operator reads it: the status page, the web
page, the progress log and the session list all say it through :func:`duration`.

Babel writes it for the reader's language (cnkispider.words.i18n.duration: "83 min", "83分钟"), so
every view says the same; ``style`` is kept for the callers that name one: ``compact`` is the
narrow form of a tight column ("83m"), every other style the short form.
"""

from __future__ import annotations

from typing import Literal

from cnkispider.words import i18n
from cnkispider.words.i18n import _

Style = Literal["status", "web", "log", "compact"]


def duration(seconds: float | None, style: Style = "status", *, unknown: str = "-") -> str:
    """``seconds`` in words (``unknown`` for None)."""
    return i18n.duration(
        seconds, unknown=unknown, format="narrow" if style == "compact" else "short"
    )


#: The units a span of time may be written in (``[task] follow_every``): seconds each.
SPAN_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_span(text: str) -> int:
    """``0``, ``30s``, ``10m``, ``6h``, ``1d`` (a bare number: seconds) -> seconds; ValueError
    naming what was expected."""
    raw = text.strip().lower()
    number, unit = (raw[:-1], raw[-1]) if raw[-1:] in SPAN_UNITS else (raw, "s")
    try:
        value = int(number.strip())
    except ValueError:
        raise ValueError(
            _("expected a duration such as %(examples)s or %(last)s, got %(value)r")
            % {"examples": "0, 30s, 10m, 6h", "last": "1d", "value": text}
        ) from None
    if value < 0:
        raise ValueError(_("expected a duration >= 0, got %(value)r") % {"value": text})
    return value * SPAN_UNITS[unit]
