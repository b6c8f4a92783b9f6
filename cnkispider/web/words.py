"""The web page's language: Chinese or English (its words: the ``cnkispider`` gettext catalogue,
cnkispider/words/i18n.py).

The language is the one the page was asked in (``?lang=zh`` or ``?lang=en``, kept in a cookie
for the next pages: the switch in the header), else the browser's first choice
(``Accept-Language``: a ``zh`` tag gives Chinese), else English. Every word of the page goes
through the catalogue, the internal names through cnkispider/words/vocabulary.py; what comes from the
database or CNKI (names, reasons, notes, titles) is shown as it is.
"""

from __future__ import annotations

LANGUAGES = ("zh", "en")
COOKIE = "lang"


def language(query: dict, cookies: dict, accept_language: str | None) -> str:
    """The page's language: ``?lang=``, then the cookie, then the browser's first choice."""
    for chosen in (query.get("lang"), cookies.get(COOKIE)):
        if chosen in LANGUAGES:
            return chosen
    first = (accept_language or "").split(",")[0].split(";")[0].strip().lower()
    return "zh" if first.startswith("zh") else "en"


def page_language(request) -> str:
    """:func:`language` of a Starlette request."""
    return language(
        dict(request.query_params), request.cookies, request.headers.get("accept-language")
    )
