"""The one place that decides what of a URL may be shown: every URL printed anywhere goes here.

A database or Redis URL can carry its password in two places, and both work with the drivers:
the authority (``mysql+pymysql://user:secret@host/db``) and the query string
(``mysql+pymysql://user@host/db?password=secret``, ``redis://host:6379/0?password=secret``:
SQLAlchemy passes query parameters to pymysql as connect arguments, redis-py reads
``password=`` itself). :func:`mask_url` hides both, and any query parameter whose name says it
is a secret (``password``, ``passwd``, ``pwd``, ``token``, ``secret``, ``key``, ...).

:func:`mask_text` does the same to free text (an error message, the settings Scrapy logs at
start), for the URLs it finds in it, and :class:`SecretsFilter` applies it to log records of
the loggers that print settings, so a URL with a password never reaches a log file.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"

# Query parameter names that hold a secret (compared lower-case, "-" read as "_").
SECRET_PARAMS = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "pass",
        "secret",
        "token",
        "key",
        "apikey",
        "api_key",
        "access_key",
        "access_token",
        "auth",
        "authorization",
        "sig",
        "signature",
        "ssl_password",
        "ssl_key",  # a path, but nobody needs to see it
    }
)

# scheme://anything-up-to-whitespace-or-a-quote: what a URL looks like inside free text.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]+")


def _secret(name: str) -> bool:
    return name.strip().lower().replace("-", "_") in SECRET_PARAMS


def mask_url(url: str) -> str:
    """``url`` with its password (authority or query) and secret query values replaced by ``***``.

    ``mysql+pymysql://u:pw@h/db`` -> ``mysql+pymysql://u:***@h/db``;
    ``redis://h:6379/0?password=pw&db=1`` -> ``redis://h:6379/0?password=%2A%2A%2A&db=1``
    (the query is re-encoded, so the mark is percent-encoded there).
    A text too broken to parse as a URL is not shown at all.
    """
    if not url:
        return url
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        if ":" in userinfo:
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:{MASK}@{hostport}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_secret(k) for k, _ in pairs):
            query = urlencode([(k, MASK if _secret(k) else v) for k, v in pairs])
    if netloc == parts.netloc and query == parts.query:
        return url  # nothing secret: as given (urlunsplit would drop sqlite:////'s empty host)
    shown = (
        f"{parts.scheme}://{netloc}{parts.path}"
        if "://" in url
        else urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    )
    return shown + (f"?{query}" if query else "") + (f"#{parts.fragment}" if parts.fragment else "")


def mask_text(text: str, *urls: str) -> str:
    """``text`` with every URL in it masked, and the passwords of ``urls`` (URLs the caller knows
    the text may echo, such as the one it failed to connect to) replaced wherever they appear."""
    if not text:
        return text
    for url in urls:
        for secret in _secrets_of(url):
            text = text.replace(secret, MASK)
    return _URL_IN_TEXT.sub(lambda m: mask_url(m.group(0)), text)


def _secrets_of(url: str) -> list[str]:
    try:
        parts = urlsplit(url or "")
    except ValueError:
        return []
    found = []
    if parts.password:
        found.append(parts.password)
    found += [v for k, v in parse_qsl(parts.query, keep_blank_values=True) if _secret(k) and v]
    # the longest first, so that a password containing another is replaced whole
    return sorted({s for s in found if len(s) >= 3}, key=len, reverse=True)


class SecretsFilter(logging.Filter):
    """Masks the URLs in a record's message (Scrapy logs every overridden setting at start,
    DATABASE_URL, REDIS_URL and PROXY_API_URL among them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken record is the logging module's to report, not ours
            return True
        masked = mask_text(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


# Loggers that print settings or URLs we do not write ourselves.
FILTERED_LOGGERS = ("scrapy.crawler", "scrapy.middleware", "scrapy.utils.log", "scrapy.core.engine")


def install_log_filter() -> None:
    """Attach :class:`SecretsFilter` to the loggers that print settings (idempotent)."""
    for name in FILTERED_LOGGERS:
        target = logging.getLogger(name)
        if not any(isinstance(f, SecretsFilter) for f in target.filters):
            target.addFilter(SecretsFilter())
