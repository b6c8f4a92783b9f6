"""A ``-s NAME=VALUE`` of the command line, checked against the setting's declared type and range.

Why: a setting typed on one worker's command line reaches every component of its crawl, and a
bad one used to cost more than that worker. ``-s DOWNLOAD_TIMEOUT=nan`` failed every request and
halted the task in the shared database for every worker; ``SCHEDULER_BATCH_SIZE=inf`` and
``CONCURRENT_REQUESTS=2.5`` were tracebacks, ``CONCURRENT_REQUESTS=-3`` idled until killed,
``NO_SUCH_SETTING=1`` and ``DOWNLOAD_DELAY=-1`` ran as if fine. Every value is checked here, before
anything starts (no task registered, nothing written), and a bad one is one line in the
operator's language (:class:`~cnkispider.exceptions.InputError`, exit status 2).

What a setting may be comes from its default (the project's, :mod:`cnkispider.default_settings`,
else Scrapy's documented one): a switch, a number or a text; then the rules below, written once
for every setting of their kind: numbers are finite and not negative (priorities aside); counts
are whole numbers of at least 1; some durations must be above 0; a log level is one of Python's;
the two service addresses parse. A name no setting has is refused, with the nearest names.
"""

from __future__ import annotations

import difflib
import math

from scrapy.settings import default_settings as _scrapy_defaults

from cnkispider import default_settings as _defaults
from cnkispider import settings as _project
from cnkispider.config.looktiers import parse_tiers
from cnkispider.exceptions import InputError
from cnkispider.words.i18n import _

#: Settings the code reads that have no default (None unless given).
NO_DEFAULT = frozenset({"ARCHIVE_DIR", "TASKS_BASE_DIR", "CNKI_VERBOSE"})

#: Whole numbers of at least 1: a count of 0 or less makes a crawl that never sends (or a
#: traceback when a component is built).
COUNTS = frozenset(
    {
        "CONCURRENT_REQUESTS",
        "CONCURRENT_REQUESTS_PER_DOMAIN",
        "CONCURRENT_ITEMS",
        "SCHEDULER_MAX_ATTEMPTS",
        "SCHEDULER_BATCH_SIZE",
        "TASKS_ROUNDS_IN_FLIGHT",
        "TASKS_ROUND_ATTEMPTS",
        "ERRORS_MAX_ATTEMPTS",
        "DATABASE_BATCH_SIZE",
        "SESSION_POOL_SIZE",
        "CNKI_PAGE_SIZE",
    }
)
#: The most requests one worker may have in flight: CNKI's sessions tolerate a person's pace.
MAX_CONCURRENCY = 1000

#: Durations that must be above 0 (0 would be a lease that has always run out, a timeout that
#: fires at once, a poll loop that spins).
POSITIVE = frozenset(
    {
        "SCHEDULER_LEASE_SECONDS",
        "SCHEDULER_FLUSH_INTERVAL",
        "SCHEDULER_IDLE_POLL",
        "DOWNLOAD_TIMEOUT",
        "DNS_TIMEOUT",
        "TASKS_HEARTBEAT",
        "SESSIONS_LEASE",
        "DATABASE_BATCH_SECONDS",
    }
)

#: Settings with a whole-number default that are read as any number (``getfloat``): a
#: whole-number default does not make a whole number required.
READ_AS_FLOAT = frozenset(
    {
        "AUTOTHROTTLE_MAX_DELAY",
        "AUTOTHROTTLE_START_DELAY",
        "CLOSESPIDER_TIMEOUT",
        "DNS_TIMEOUT",
        "DOWNLOAD_DELAY",
        "DOWNLOAD_DELAY_JITTER",
        "DOWNLOAD_TIMEOUT",
        "LOGSTATS_INTERVAL",
        "DATABASE_BATCH_SECONDS",
        "DATABASE_FOLD_EVERY",
        "DATABASE_OUTAGE_SECONDS",
        "NOTIFY_TIMEOUT",
        "PROGRESS_INTERVAL",
        "PROXY_API_TIMEOUT",
        "PROXY_BAN_TIME",
        "PROXY_FETCH_INTERVAL",
        "PROXY_MAX_AGE",
        "PROXY_WAIT_MAX",
        "RETRY_BACKOFF_BASE",
        "RETRY_BACKOFF_MAX",
        "RETRY_CHALLENGE_COOLDOWN",
        "SCHEDULER_FLUSH_INTERVAL",
        "SCHEDULER_IDLE_POLL",
        "SCHEDULER_LEASE_SECONDS",
        "SESSIONS_LEASE",
        "SESSIONS_PACE_MAX",
        "SESSIONS_POLL",
        "SESSIONS_TTL",
        "SESSION_JAR_GRACE",
        "SESSION_MAX_AGE",
        "TASKS_HEARTBEAT",
    }
)

LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")
SQL_SCHEMES = ("sqlite", "mysql", "mysql+pymysql", "mariadb", "mariadb+pymysql")
REDIS_SCHEMES = ("redis", "rediss", "unix")

#: The words Scrapy's ``getbool`` reads (besides whole numbers: 0 is false, any other true).
_BOOLEANS = frozenset({"true", "True", "false", "False"})
_MISSING = object()


def _upper_names(module) -> dict:
    return {name: value for name, value in vars(module).items() if name.isupper()}


def known_settings() -> dict:
    """Every setting name a crawl reads, with its default (the project's over Scrapy's)."""
    known = {**_upper_names(_scrapy_defaults), **_upper_names(_project)}
    known.update(_upper_names(_defaults))
    known.update(dict.fromkeys(NO_DEFAULT))
    return known


def check_setting(name: str, value: str) -> None:
    """Raise one :class:`InputError` naming ``-s NAME=VALUE`` if the value is not what the
    setting takes (the module's docstring); the value itself is passed on as typed (Scrapy's
    getters read the text)."""
    known = known_settings()
    default = known.get(name, _MISSING)
    if default is _MISSING:
        raise InputError(_unknown(name, known))
    text = value.strip()
    if name == "LOG_LEVEL":
        if text.upper() not in LOG_LEVELS and not _is_number(text, whole=True):
            raise InputError(
                _("-s %(name)s=%(value)r: expected one of %(choices)s")
                % {"name": name, "value": value, "choices": ", ".join(LOG_LEVELS)}
            )
        return
    if name in ("DATABASE_URL", "REDIS_URL"):
        _check_url(name, value)
        return
    if name == "TASKS_LOOK_TIERS":  # issue 46: the spelling [task] look_tiers takes
        try:
            parse_tiers(text)
        except ValueError as exc:
            raise InputError(
                _("-s %(name)s=%(value)r: %(problem)s")
                % {"name": name, "value": value, "problem": exc}
            ) from None
        return
    if isinstance(default, bool):
        if text not in _BOOLEANS and not _is_number(text, whole=True):
            raise InputError(
                _("-s %(name)s=%(value)r: expected true or false") % {"name": name, "value": value}
            )
        return
    if name in COUNTS:
        _check_count(name, value)
    elif isinstance(default, int | float):
        _check_number(name, value, whole=isinstance(default, int) and name not in READ_AS_FLOAT)


def _unknown(name: str, known: dict) -> str:
    near = difflib.get_close_matches(name.upper(), list(known), n=1, cutoff=0.75)
    if near:
        return _("-s %(name)s: no such setting; did you mean %(near)s?") % {
            "name": name,
            "near": near[0],
        }
    return _(
        "-s %(name)s: no such setting (the settings are listed in "
        "cnkispider/default_settings.py and Scrapy's documentation)"
    ) % {"name": name}


def _number(name: str, value: str, *, whole: bool) -> float:
    text = value.strip()
    try:
        number = int(text) if whole else float(text)
    except ValueError:
        raise InputError(
            (
                _("-s %(name)s=%(value)r: expected a whole number")
                if whole
                else _("-s %(name)s=%(value)r: expected a number")
            )
            % {"name": name, "value": value}
        ) from None
    if not math.isfinite(number):
        raise InputError(
            _("-s %(name)s=%(value)r: expected a finite number") % {"name": name, "value": value}
        )
    return number


def _check_number(name: str, value: str, *, whole: bool) -> None:
    number = _number(name, value, whole=whole)
    if number < 0 and "PRIORITY" not in name:
        raise InputError(
            _("-s %(name)s=%(value)r: expected 0 or more") % {"name": name, "value": value}
        )
    if name in POSITIVE and number <= 0:
        raise InputError(
            _("-s %(name)s=%(value)r: expected more than 0") % {"name": name, "value": value}
        )


def _check_count(name: str, value: str) -> None:
    number = _number(name, value, whole=True)
    if number < 1:
        raise InputError(
            _("-s %(name)s=%(value)r: expected a whole number of at least 1")
            % {"name": name, "value": value}
        )
    if name.startswith("CONCURRENT_") and number > MAX_CONCURRENCY:
        raise InputError(
            _("-s %(name)s=%(value)r: expected at most %(most)s")
            % {"name": name, "value": value, "most": MAX_CONCURRENCY}
        )


def _check_url(name: str, value: str) -> None:
    text = value.strip()
    if name == "REDIS_URL":
        if not text:
            return  # the embedded Redis
        scheme, sep, rest = text.partition("://")
        if not sep or scheme not in REDIS_SCHEMES or not rest:
            raise InputError(
                _("-s %(name)s=%(value)r: expected redis://HOST:PORT/DB (or rediss://, unix://)")
                % {"name": name, "value": value}
            )
        return
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(text)
    except ArgumentError:
        url = None
    if url is None or url.drivername not in SQL_SCHEMES:
        raise InputError(
            _("-s %(name)s=%(value)r: expected sqlite:///PATH or mysql+pymysql://USER@HOST/DB")
            % {"name": name, "value": value}
        )


def _is_number(text: str, *, whole: bool = False) -> bool:
    try:
        (int if whole else float)(text)
    except ValueError:
        return False
    return True
