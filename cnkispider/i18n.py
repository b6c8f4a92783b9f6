"""The operator's words, through gettext: one catalogue for the command line and the web page.

Every word an operator reads is marked once where it is written (``_("...")``, ``ngettext`` for
counts) and looked up in the ``cnkispider`` catalogue (the ``locale`` folder beside this module,
made with Babel's ``pybabel extract/update/compile``: ``make catalogue``). A word missing from a
catalogue reads as the English it was written in, never as an error.

Two ways to choose the language, because the readers differ:

- the command line has one reader per process: :func:`activate` once at start (``[ui] language``
  or the locale, ``LANG=zh_CN.UTF-8``), then ``_`` and ``ngettext`` read the active catalogue;
- the web page has one reader per request: :func:`translation` gives that request's catalogue
  (``.gettext``, ``.ngettext``), and the module's active one is left alone.
"""

from __future__ import annotations

import gettext
import os
from functools import cache
from pathlib import Path

DOMAIN = "cnkispider"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
LANGUAGES = ("zh_CN", "en")

_active: gettext.NullTranslations = gettext.NullTranslations()


def normalize(language: str | None) -> str:
    """A language tag or locale (``zh``, ``zh-CN``, ``zh_CN.UTF-8``, ``en_US``) as one of
    :data:`LANGUAGES`; anything else (or nothing) is English."""
    tag = (language or "").strip().replace("-", "_").split(".")[0].lower()
    return "zh_CN" if tag.startswith("zh") else "en"


def from_environment() -> str:
    """The language the process's locale asks for (``LANGUAGE``, ``LC_ALL``, ``LC_MESSAGES``,
    ``LANG``: the first one set, as gettext reads them)."""
    for name in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(name)
        if value:
            return normalize(value.split(":")[0])
    return "en"


@cache
def translation(language: str | None) -> gettext.NullTranslations:
    """The catalogue of ``language`` (normalized), or the English text itself where none is
    compiled."""
    return gettext.translation(DOMAIN, LOCALE_DIR, languages=[normalize(language)], fallback=True)


def activate(language: str | None) -> None:
    """Make ``language`` the command line's language for the rest of the process."""
    global _active
    _active = translation(language)


def _(message: str) -> str:
    return _active.gettext(message)


def ngettext(singular: str, plural: str, count: int) -> str:
    return _active.ngettext(singular, plural, count)


def N_(message: str) -> str:
    """Marks ``message`` for the catalogue where it is defined; it is translated where shown."""
    return message
