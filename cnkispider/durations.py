"""How long something took or will take, as the operator reads it: one formatter for the
status page, the web page, the progress log and the session list.

Each place kept the form its readers (and its tests) know, so :func:`duration` has a ``style``
for each; what is shared is written once (None, the units, the rounding down).
"""

from __future__ import annotations

from typing import Literal

Style = Literal["status", "web", "log", "compact"]


def duration(seconds: float | None, style: Style = "status", *, unknown: str = "-") -> str:
    """``seconds`` in words (``unknown`` for None). The styles, for 5,000 s:

    - ``status`` (``cnkispider status``): "83 min"; whole units, two of them past 2 h
      ("2 h 05 min", "3 d 4 h"), seconds below 2 min.
    - ``web`` (the web page): "1.4 h"; one decimal in the largest unit that fits.
    - ``log`` (the progress log's ETA): "83 min"; rounded, not cut, seconds below 90 s, hours
      with one decimal from 90 min.
    - ``compact`` (``session list``): "1h"; the largest unit that fits, no space.
    """
    if seconds is None:
        return unknown
    if style == "web":
        whole = int(seconds)  # negative stays negative: a clock skew shows, not hidden
        for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
            if whole >= size:
                return f"{whole / size:.1f} {unit}"
        return f"{whole} s"
    if style == "log":
        whole = int(round(seconds))
        if whole < 90:
            return f"{whole} s"
        if whole < 5400:
            return f"{whole // 60} min"
        return f"{whole / 3600:.1f} h"
    whole = max(0, int(seconds))
    if style == "compact":
        for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
            if whole >= size:
                return f"{whole // size}{unit}"
        return f"{whole}s"
    if whole < 120:
        return f"{whole} s"
    minutes = whole // 60
    if minutes < 120:
        return f"{minutes} min"
    hours = minutes // 60
    if hours < 48:
        return f"{hours} h {minutes % 60:02d} min"
    return f"{hours // 24} d {hours % 24} h"
