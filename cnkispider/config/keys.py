"""config.ini's keys: the one table of every key a section may hold (:data:`SCHEMA`), with the
parser that checks its value and its default.

A key that maps onto a Scrapy setting (in :func:`cnkispider.launch.crawlsettings.crawler_settings`)
takes that setting's default, from :mod:`cnkispider.default_settings`; the rest are config.ini's
own. A parser takes the raw text and returns the value, or raises ValueError saying what was
expected (the reader, :mod:`cnkispider.config.reader`, names the file, section and key). A value
shown in an error never shows a password: URLs go through :func:`cnkispider.config.masking.mask_url`.
"""

from __future__ import annotations

import math
import re
from typing import Any

from cnkispider import default_settings
from cnkispider.cnki.export_batch import MAX_EXPORT_BATCH
from cnkispider.config.durations import parse_span
from cnkispider.config.looktiers import parse_tiers
from cnkispider.config.masking import mask_url
from cnkispider.days import iso_day
from cnkispider.items import DEPTHS, DOC_TYPES
from cnkispider.words.i18n import _

# -- the values ----------------------------------------------------------------------------------


def _text(raw: str) -> str:
    return raw.strip()


def _int(lo: int | None = None, hi: int | None = None):
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(_("expected a whole number, got %(value)r") % {"value": raw}) from None
        if lo is not None and value < lo:
            raise ValueError(
                _("expected a number >= %(min)s, got %(value)s") % {"min": lo, "value": value}
            )
        if hi is not None and value > hi:
            raise ValueError(
                _("expected a number <= %(max)s, got %(value)s") % {"max": hi, "value": value}
            )
        return value

    return parse


def _float(lo: float = 0.0):
    def parse(raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ValueError(_("expected a number, got %(value)r") % {"value": raw}) from None
        if not math.isfinite(value):  # nan passes every comparison, inf every lower bound
            raise ValueError(_("expected a finite number, got %(value)r") % {"value": raw})
        if value < lo:
            raise ValueError(
                _("expected a number >= %(min)s, got %(value)s") % {"min": lo, "value": value}
            )
        return value

    return parse


def _bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(_("expected true or false, got %(value)r") % {"value": raw})


def _date_or_empty(raw: str) -> str:
    raw = raw.strip()
    if not raw:
        return ""
    try:
        return iso_day(raw).isoformat()
    except ValueError:
        raise ValueError(
            _("expected a date as %(form)s (or empty), got %(value)r")
            % {"form": "YYYY-MM-DD", "value": raw}
        ) from None


def _choice(*choices: str):
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in choices:
            raise ValueError(_one_of(choices, repr(raw)))
        return value

    return parse


def _one_of(choices, shown: str) -> str:
    """The problem of a value that is none of ``choices``; ``shown`` is the value as the
    message writes it (a word quoted, a number bare)."""
    return _("expected one of %(choices)s, got %(value)s") % {
        "choices": ", ".join(map(str, choices)),
        "value": shown,
    }


def _language(raw: str) -> str:
    """[ui] language: zh_CN or en (zh, zh-CN, en_US... are read as those), empty for the
    locale's."""
    value = raw.strip()
    if not value:
        return ""
    tag = value.replace("-", "_").lower()
    if tag in ("zh", "zh_cn", "zh_hans", "zh_hans_cn"):
        return "zh_CN"
    if tag == "en" or tag.startswith("en_"):
        return "en"
    raise ValueError(
        _("expected %(chinese)s, %(english)s or nothing (the locale's language), got %(value)r")
        % {"chinese": "zh_CN", "english": "en", "value": raw}
    )


def _url_of(schemes: tuple[str, ...], expected, empty: bool = False):
    """A URL of one of ``schemes`` (or nothing, where ``empty``); else ``expected(shown)`` is
    the problem, ``shown`` the value without its password."""

    def parse(raw: str) -> str:
        value = raw.strip()
        if (value or not empty) and not value.startswith(schemes):
            raise ValueError(expected(mask_url(value)))
        return value

    return parse


_database_url = _url_of(
    ("sqlite://", "mysql+pymysql://", "mysql://", "mariadb+pymysql://"),
    lambda shown: (
        _("expected a database URL such as %(sqlite)s or %(mysql)s, got %(value)r")
        % {
            "sqlite": "sqlite:///data/cnki.db",
            "mysql": "mysql+pymysql://user:password@host:3306/cnki",
            "value": shown,
        }
    ),
)
_redis_url = _url_of(
    ("redis://", "rediss://", "unix://"),
    lambda shown: (
        _("expected empty (embedded Redis) or %(redis)s, %(rediss)s or %(unix)s URL, got %(value)r")
        % {"redis": "redis://", "rediss": "rediss://", "unix": "unix://", "value": shown}
    ),
    empty=True,
)


def _key_prefix(raw: str) -> str:
    """[redis] prefix: the start of every key name, and of the worker ACL's ``~prefix*``."""
    value = raw.strip()
    if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", value):
        raise ValueError(
            _(
                "expected 1 to 64 letters, digits and %(marks)s such as %(example)s "
                "(got %(value)r); it starts every Redis key name and the worker ACL pattern "
                "%(pattern)s"
            )
            % {"marks": "_ . : -", "example": "cnki:", "value": raw, "pattern": "~PREFIX*"}
        )
    return value


def _optional_http_url(raw: str) -> str:
    """An http(s) URL, or empty (not set)."""
    return _http_url(raw).rstrip("/") if raw.strip() else ""


def _http_url(raw: str) -> str:
    value = raw.strip().rstrip("/")
    if value and not value.startswith(("http://", "https://")):
        raise ValueError(
            _("expected an %(http)s or %(https)s URL, got %(value)r")
            % {"http": "http://", "https": "https://", "value": mask_url(raw.strip())}
        )
    return value


def _http_urls(raw: str) -> list[str]:
    """Several http(s) URLs, separated by commas, spaces or new lines (indented lines go on)."""
    return [_http_url(part) for part in re.split(r"[\s,]+", raw.strip()) if part]


def _int_choice(*choices: int):
    def parse(raw: str) -> int:
        value = _int()(raw)
        if value not in choices:
            raise ValueError(_one_of(choices, str(value)))
        return value

    return parse


def _required(parse_inner):
    def parse(raw: str) -> str:
        value = parse_inner(raw)
        if not value:
            raise ValueError(_("must not be empty"))
        return value

    return parse


def _token(raw: str) -> str:
    """A QueryJson code (field or operator): letters and digits, upper-cased."""
    value = raw.strip().upper()
    if not value or not value.replace("_", "").isalnum() or not value[0].isalpha():
        raise ValueError(
            _(
                "expected a code of letters and digits such as %(field)s or %(operator)s, "
                "got %(value)r"
            )
            % {"field": "CLC", "operator": "SUFFIX", "value": raw}
        )
    return value


def _span_or_off(raw) -> int:
    """A duration as ``follow_every`` takes it, or empty: 0, off."""
    return parse_span(raw) if str(raw).strip() else 0


def _look_tiers(raw: str) -> str:
    """``look_tiers`` as written, once it parses (cnkispider/config/looktiers.py); empty: off."""
    parse_tiers(str(raw))
    return str(raw).strip() or "off"


def _default(setting: str) -> str:
    """The default of ``setting`` (its one home: :mod:`cnkispider.default_settings`) as
    config.ini would write it, for the key that maps onto that setting."""
    value = getattr(default_settings, setting)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)


# -- the keys ------------------------------------------------------------------------------------

# (section, key) -> (parser, default). The one table of every key config.ini may hold;
# config.ini documents each of them in place.
SCHEMA: dict[str, dict[str, tuple[Any, str]]] = {
    "database": {
        "url": (_database_url, _default("DATABASE_URL")),
        "outage_seconds": (_float(0.0), _default("DATABASE_OUTAGE_SECONDS")),
        "ledger_days": (_int(0, 36500), _default("DATABASE_LEDGER_DAYS")),
        # TLS to MySQL/MariaDB (docs/WORKERS.md): PEM files, relative to config.ini's folder
        "ssl_ca": (_text, ""),
        "ssl_cert": (_text, ""),
        "ssl_key": (_text, ""),
    },
    "redis": {
        "url": (_redis_url, _default("REDIS_URL")),
        "prefix": (_key_prefix, _default("REDIS_KEY_PREFIX")),
        # retention: requests refused as unreadable kept, a finished task's keys removed
        "unreadable_kept": (_int(1, 1_000_000), _default("REDIS_UNREADABLE_KEPT")),
        "remove_finished": (_bool, _default("REDIS_REMOVE_FINISHED")),
        # TLS to Redis (a rediss:// URL): the CA, and a client certificate where the server asks
        "ssl_ca": (_text, ""),
        "ssl_cert": (_text, ""),
        "ssl_key": (_text, ""),
    },
    "task": {
        "name": (_text, _default("TASKS_NAME")),
        "type": (_choice(*DOC_TYPES), _default("TASKS_TYPE")),
        "start_date": (_date_or_empty, _default("TASKS_START_DATE")),
        "end_date": (_date_or_empty, _default("TASKS_END_DATE")),
        "categories": (_text, _default("TASKS_CATEGORIES")),
        "day_census": (_bool, _default("TASKS_DAY_CENSUS")),
        "depth": (_choice(*DEPTHS), _default("TASKS_DEPTH")),
        "query": (_text, _default("TASKS_QUERY")),
        # issue 38: follow today (docs/FOLLOW.md)
        "follow": (_bool, _default("TASKS_FOLLOW")),
        "look_back_days": (_int(1, 3660), _default("TASKS_LOOK_BACK_DAYS")),
        "follow_every": (parse_span, _default("TASKS_FOLLOW_EVERY")),
        "refresh_counts_every": (_span_or_off, _default("TASKS_REFRESH_COUNTS_EVERY")),
        # issue 46: how often a look counts a day again, by its age (cnkispider/config/looktiers.py)
        "look_tiers": (_look_tiers, _default("TASKS_LOOK_TIERS")),
        # issue 46.2: a look recounts a split day's parts with one group/result (docs/FOLLOW.md)
        "facet_counts": (_bool, _default("TASKS_FACET_COUNTS")),
    },
    "cnki": {
        "base_url": (_http_url, _default("CNKI_BASE_URL")),
        "client_id_url": (_required(_http_url), _default("CNKI_CLIENT_ID_URL")),
        "page_size": (_int_choice(10, 20, 50), _default("CNKI_PAGE_SIZE")),
        "export_batch": (_int(1, MAX_EXPORT_BATCH), _default("CNKI_EXPORT_BATCH")),
        "cap_rows": (_int(10, 1_000_000), _default("CNKI_CAP_ROWS")),
        "max_pages": (_int(0, 100_000), _default("CNKI_MAX_PAGES")),
        "turn_limit": (_int(1, 1000), _default("SESSION_TURN_LIMIT")),
        "category_mode": (_choice("subject", "facet"), _default("CNKI_CATEGORY_MODE")),
        "category_field": (_token, _default("CNKI_CATEGORY_FIELD")),
        "category_operator": (_token, _default("CNKI_CATEGORY_OPERATOR")),
        # comma list of URLs or host[:port]; everything else is refused, unfetched
        "allowed_hosts": (_text, _default("SCHEDULER_ALLOWED_HOSTS")),
        # sessions a person verified (cnkispider/sessions/): auto | verified | plain
        "sessions": (_choice("auto", "verified", "plain"), _default("SESSIONS_MODE")),
        "on_check": (_choice("wait", "prompt", "fail"), _default("SESSIONS_ON_CHECK")),
        "session_pace": (_float(0.0), _default("SESSIONS_PACE_MAX")),
        "pass_requests": (_int(1, 1_000_000), _default("SESSIONS_PASS_REQUESTS")),
    },
    "notify": {
        "webhook": (_http_urls, _default("NOTIFY_WEBHOOKS")),
        "format": (_choice("json", "dingtalk", "wecom", "feishu"), _default("NOTIFY_FORMAT")),
    },
    "web": {
        "host": (_required(_text), _default("WEB_HOST")),
        "port": (_int(1, 65535), _default("WEB_PORT")),
        "token": (_text, _default("WEB_TOKEN")),
        "public_url": (_optional_http_url, _default("WEB_PUBLIC_URL")),
    },
    "ui": {
        "language": (_language, _default("UI_LANGUAGE")),
    },
    "proxy": {
        "enabled": (_bool, _default("PROXY_ENABLED")),
        "api_url": (_http_url, _default("PROXY_API_URL")),
        "format": (_choice("lines", "json"), _default("PROXY_API_FORMAT")),
        "json_path": (_text, _default("PROXY_API_JSON_PATH")),
        "reuse": (_int(1), _default("PROXY_REUSE")),
        "fetch_interval": (_float(0.0), _default("PROXY_FETCH_INTERVAL")),
        "static": (_text, _default("PROXY_STATIC")),
        "ban_seconds": (_float(0.0), _default("PROXY_BAN_TIME")),
        "rate_limit": (_float(0.0), _default("RATELIMIT_PROXY_RATE")),
        "direct_name": (_text, _default("PACE_DIRECT_NAME")),
    },
    "crawl": {
        "data_dir": (_text, _default("CNKI_DATA_DIR")),
        "concurrent_requests": (_int(1, 512), _default("CONCURRENT_REQUESTS")),
        "download_delay": (_float(0.0), _default("DOWNLOAD_DELAY")),
        "download_timeout": (_float(1.0), _default("DOWNLOAD_TIMEOUT")),
        "retry_times": (_int(0, 100), _default("RETRY_TIMES")),
        "rate_limit": (_float(0.0), _default("RATELIMIT_RATE")),
        "rate_burst": (_int(1, 1000), _default("RATELIMIT_BURST")),
        "pace": (_bool, _default("PACE_ENABLED")),
        "pace_start": (_float(0.001), _default("PACE_START")),
        "pace_step": (_float(0.001), _default("PACE_STEP")),
        "pace_max": (_float(0.0), _default("PACE_MAX")),
        "pace_cooldown": (_float(0.0), _default("PACE_COOLDOWN")),
        "max_backoff": (_float(1.0), _default("RATELIMIT_MAX_BACKOFF")),
        "lease_seconds": (_int(1), _default("SCHEDULER_LEASE_SECONDS")),
        "round_lease_seconds": (_int(1), _default("TASKS_ROUND_LEASE")),
        "round_attempts": (_int(1, 100), _default("TASKS_ROUND_ATTEMPTS")),
        "max_attempts": (_int(1), _default("SCHEDULER_MAX_ATTEMPTS")),
        "heartbeat_seconds": (_int(1), _default("TASKS_HEARTBEAT")),
        "processes": (_int(1, 64), "1"),
        "recrawl": (_bool, _default("TASKS_RECRAWL")),
        "halt_after": (_int(1, 10000), _default("TASKS_HALT_AFTER")),
        "halt_window": (_int(2, 100000), _default("TASKS_HALT_WINDOW")),
        "challenge_sessions": (_int(1, 1000), _default("RETRY_CHALLENGE_SESSIONS")),
        "challenge_cooldown": (_float(0.0), _default("RETRY_CHALLENGE_COOLDOWN")),
        "archive_html": (_bool, "false"),
        "references": (_bool, _default("CNKI_REFERENCES")),
        "feed": (_text, ""),
        "log_file": (_text, ""),
        "log_level": (_choice("debug", "info", "warning", "error"), _default("LOG_LEVEL")),
    },
}
