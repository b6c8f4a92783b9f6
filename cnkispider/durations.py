"""How long something took or will take, as the operator reads it: the status page, the web
page, the progress log and the session list all say it through :func:`duration`.

Babel writes it for the reader's language (cnkispider.i18n.duration: "83 min", "83分钟"), so
every view says the same; ``style`` is kept for the callers that name one: ``compact`` is the
narrow form of a tight column ("83m"), every other style the short form.
"""

from __future__ import annotations

from typing import Literal

from cnkispider import i18n

Style = Literal["status", "web", "log", "compact"]


def duration(seconds: float | None, style: Style = "status", *, unknown: str = "-") -> str:
    """``seconds`` in words (``unknown`` for None)."""
    return i18n.duration(
        seconds, unknown=unknown, format="narrow" if style == "compact" else "short"
    )
