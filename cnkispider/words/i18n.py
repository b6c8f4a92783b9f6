"""The operator's words, through gettext: one catalogue for the command line and the web page.

Every word an operator reads is marked once where it is written (``_("...")``, ``ngettext`` for
counts, ``N_`` where a word is defined apart from where it is shown) and looked up in the
``cnkispider`` catalogue: ``locale/<lang>/LC_MESSAGES/cnkispider.mo`` beside this module, made
with Babel's ``pybabel extract/update/compile`` (``make catalogue``, docs/TRANSLATING.md). A word
missing from a catalogue reads as the English it was written in, never as an error.

Two ways to choose the language, because the readers differ:

- the command line has one reader per process: :func:`activate` once at start (``[ui] language``
  or the locale, ``LANG=zh_CN.UTF-8``), then ``_`` and ``ngettext`` read that catalogue;
- the web page has one reader per request: :func:`using` makes the request's language the one
  ``_`` reads for that request only (a context variable: each request, and the threads Starlette
  runs its handlers in, sees its own), so a sentence written by a module below the page (an
  action's plan, a task's description) is in the page's language too.

Numbers, durations and "ago" go through Babel's CLDR data for the same language
(:func:`number`, :func:`percent`, :func:`duration`, :func:`ago`): "39,213" and "83 min" in
English, "39,213" and "83分钟" in Chinese, the same in every view.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import gettext
import os
from functools import cache
from pathlib import Path

from babel.dates import format_datetime, format_timedelta
from babel.numbers import format_decimal, format_percent

DOMAIN = "cnkispider"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
LANGUAGES = ("zh_CN", "en")

#: The command line's language (``activate``); a request's (``using``) overrides it.
_process: list[str] = ["en"]
_request: contextvars.ContextVar[str | None] = contextvars.ContextVar("language", default=None)


def normalize(language: str | None) -> str:
    """A language tag or locale (``zh``, ``zh-CN``, ``zh_CN.UTF-8``, ``en_US``) as one of
    :data:`LANGUAGES`; anything else (or nothing) is English."""
    tag = (language or "").strip().replace("-", "_").split(".")[0].lower()
    return "zh_CN" if tag.startswith("zh") else "en"


def from_environment(environ=None) -> str:
    """The language the process's locale asks for (``LANGUAGE``, ``LC_ALL``, ``LC_MESSAGES``,
    ``LANG``: the first one set, as gettext reads them)."""
    environ = os.environ if environ is None else environ
    for name in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"):
        value = environ.get(name)
        if value:
            return normalize(value.split(":")[0])
    return "en"


@cache
def translation(language: str | None) -> gettext.NullTranslations:
    """The catalogue of ``language`` (normalized), or the English text itself where none is
    compiled."""
    return gettext.translation(DOMAIN, LOCALE_DIR, languages=[normalize(language)], fallback=True)


def activate(language: str | None) -> None:
    """Make ``language`` the command line's language for the rest of the process (None, empty
    or a language we have no words for: the locale's, :func:`from_environment`)."""
    _process[0] = normalize(language) if is_known(language) else from_environment()


def is_known(language: str | None) -> bool:
    """``language`` names one of :data:`LANGUAGES` (``fr`` does not: config.ini's check says
    so, in the locale's language rather than in English)."""
    tag = (language or "").strip().lower()
    return tag.startswith(("zh", "en"))


def current() -> str:
    """The language ``_`` answers in here: the request's, else the process's."""
    return _request.get() or _process[0]


@contextlib.contextmanager
def using(language: str | None):
    """``_`` answers in ``language`` inside the block (and in what it starts with a copy of the
    context: Starlette's thread pool), the rest of the process keeps its own."""
    token = _request.set(normalize(language))
    try:
        yield
    finally:
        _request.reset(token)


def _(message: str) -> str:
    return translation(current()).gettext(message)


def ngettext(singular: str, plural: str, count: int) -> str:
    return translation(current()).ngettext(singular, plural, count)


def N_(message: str) -> str:
    """Marks ``message`` for the catalogue where it is defined; it is translated where shown."""
    return message


# -- punctuation between the parts of a line: not words, the language's marks -------------------

_MARKS = {
    "zh_CN": {"list": "、", "clause": "，", "semicolon": "；", "open": "（", "close": "）"},
    "en": {"list": ", ", "clause": ", ", "semicolon": "; ", "open": " (", "close": ")"},
}


def mark(kind: str) -> str:
    """The mark of ``kind`` in the reader's language: "list" (a, b: 甲、乙), "clause" (，),
    "semicolon" (；), "open" and "close" (a bracket: （）)."""
    return _MARKS.get(current(), _MARKS["en"])[kind]


# -- numbers, durations, "ago": Babel's CLDR data for the same language -------------------------

#: A unit is used up to twice its size before the next one ("83 min", not "1 hr", for 5,000 s;
#: "36 hr", not "2 days"): an ETA rounded to the next unit would read up to 40% off.
THRESHOLD = 2


def number(
    value: float | int | None, decimals: int = 0, *, unknown: str = "-", language=None
) -> str:
    """``value`` with the locale's grouping, ``decimals`` digits after the point. ``language``
    (every formatter takes it): this one rather than the reader's (the logs: English)."""
    if value is None:
        return unknown
    pattern = "#,##0" + ("." + "0" * decimals if decimals else "")
    return format_decimal(value, format=pattern, locale=language or current())


def percent(fraction: float | None, decimals: int = 1, *, unknown: str = "-", language=None) -> str:
    if fraction is None:
        return unknown
    pattern = "#,##0" + ("." + "0" * decimals if decimals else "") + "%"
    return format_percent(fraction, format=pattern, locale=language or current())


def duration(
    seconds: float | None, *, unknown: str = "-", format: str = "short", language=None
) -> str:
    """How long, in the locale's words ("83 min", "83分钟"); ``unknown`` for None. ``format``
    "narrow" for a tight column ("83m")."""
    if seconds is None:
        return unknown
    return format_timedelta(
        max(float(seconds), 0.0), threshold=THRESHOLD, format=format, locale=language or current()
    )


def moment(value: dt.datetime | str | None, *, unknown: str = "-") -> str:
    """A moment (a datetime, or ISO text as the status report holds it; UTC when naive) as the
    locale writes it: "Nov 27, 2026, 6:35:00 PM", "2026年11月27日 18:35:00", in UTC."""
    if not value:
        return unknown
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value  # not a moment after all: shown as it is
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    # CLDR puts a narrow no-break space before AM/PM: a GBK console (Chinese Windows) cannot
    # print it, a plain space reads the same
    text = format_datetime(value, format="medium", tzinfo=dt.UTC, locale=current())
    return text.replace("\u202f", " ")


def ago(seconds: float | None, *, unknown: str | None = None) -> str:
    """How long ago, in the locale's words ("4 min ago", "4分钟前"); ``unknown`` (default: the
    word "never") for None."""
    if seconds is None:
        return _("never") if unknown is None else unknown
    return format_timedelta(
        -max(float(seconds), 0.001),  # -0.0 is not below zero: Babel would say "in 0 sec."
        threshold=THRESHOLD,
        add_direction=True,
        format="short",
        locale=current(),
    )
