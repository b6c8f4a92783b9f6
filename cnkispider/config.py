"""config.ini: found, layered, validated once into one typed :class:`Config`.

Lookup order for the file: ``--config PATH``; else ``config.ini`` in the working directory;
else ``config.ini`` beside the executable (the frozen .exe) or the project folder. Values
from the file are overridden by environment variables ``CNKI_<SECTION>_<KEY>`` (for example
``CNKI_DATABASE_URL``), and every key has a default (that of the Scrapy setting it maps onto,
from :mod:`cnkispider.default_settings`), so a missing file is fine.

Every value is checked at start. A wrong section, an unknown key (a typo) or a malformed
value raises one :class:`ConfigError` naming the file, the section, the key and what was
expected; nothing half-configured ever starts crawling. The environment is checked the same
way: ``CNKI_<SECTION>_<KEY>`` naming a known section but no key of it (``CNKI_DATABASE_URLL``)
is an error like the typo in the file, and any other unknown ``CNKI_*`` variable is a warning
naming it and the nearest known one (a ``CNKI_`` prefix is generic enough that other tools may
use it; only the names in ``OTHER_ENV`` are ours without being config keys).

A value shown in an error never shows a password: URLs go through
:func:`cnkispider.masking.mask_url`.

Relative paths (the SQLite file, the data folder, the log file) are relative to the folder
of the config file, so the .exe and `scrapy crawl` find the same data wherever they start.
"""

from __future__ import annotations

import configparser
import difflib
import logging
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cnkispider import default_settings
from cnkispider.cnki.export_batch import MAX_EXPORT_BATCH
from cnkispider.days import iso_day
from cnkispider.durations import parse_span
from cnkispider.exceptions import ConfigError
from cnkispider.i18n import _
from cnkispider.inifile import read_ini, ui_language
from cnkispider.items import DEPTHS, DOC_TYPES, has_counts
from cnkispider.looktiers import DEFAULT_TIERS, parse_tiers
from cnkispider.masking import install_log_filter, mask_url
from cnkispider.vocabulary import word

logger = logging.getLogger(__name__)

CONFIG_NAME = "config.ini"
ENV_PREFIX = "CNKI_"
# CNKI_* variables that are ours but no config key: read elsewhere, never warned about.
OTHER_ENV = frozenset({"CNKI_CONFIG", "CNKI_RELOAD_WATCH"})
OTHER_ENV_PREFIXES = ("CNKI_TEST_",)  # the test suite's own (services, injected failures)
_warned_env: set[str] = set()
FROZEN_LOG_FILE = "cnkispider.log"  # [crawl] log_file of the .exe when empty


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


def _database_url(raw: str) -> str:
    value = raw.strip()
    if not value.startswith(("sqlite://", "mysql+pymysql://", "mysql://", "mariadb+pymysql://")):
        raise ValueError(
            _("expected a database URL such as %(sqlite)s or %(mysql)s, got %(value)r")
            % {
                "sqlite": "sqlite:///data/cnki.db",
                "mysql": "mysql+pymysql://user:password@host:3306/cnki",
                "value": mask_url(value),
            }
        )
    return value


def _redis_url(raw: str) -> str:
    value = raw.strip()
    if value and not value.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(
            _(
                "expected empty (embedded Redis) or %(redis)s, %(rediss)s or %(unix)s URL, "
                "got %(value)r"
            )
            % {
                "redis": "redis://",
                "rediss": "rediss://",
                "unix": "unix://",
                "value": mask_url(value),
            }
        )
    return value


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


def _default(setting: str) -> str:
    """The default of ``setting`` (its one home: :mod:`cnkispider.default_settings`) as
    config.ini would write it, for the key that maps onto that setting."""
    value = getattr(default_settings, setting)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)


# (section, key) -> (parser, default). The one table of every key config.ini may hold;
# config.ini documents each of them in place. A key that maps onto a Scrapy setting (in
# cnkispider.crawlsettings.crawler_settings) takes that setting's default; the rest are
# config.ini's own.
def _span_or_off(raw) -> int:
    """A duration as ``follow_every`` takes it, or empty: 0, off."""
    return parse_span(raw) if str(raw).strip() else 0


def _look_tiers(raw: str) -> str:
    """``look_tiers`` as written, once it parses (cnkispider/looktiers.py); empty: off."""
    parse_tiers(str(raw))
    return str(raw).strip() or "off"


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
        # issue 46: how often a look counts a day again, by its age (cnkispider/looktiers.py)
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


@dataclass(frozen=True)
class TaskConfig:
    name: str
    type: str
    start_date: str
    end_date: str
    categories: str
    day_census: bool = True
    depth: str = "detail"
    query: str = ""
    follow: bool = False
    look_back_days: int = 60
    follow_every: int = 6 * 3600  # seconds
    refresh_counts_every: int = 0  # seconds; 0: off
    look_tiers: str = DEFAULT_TIERS  # cnkispider/looktiers.py; "off": every day at every look
    facet_counts: bool = True  # a look's parts recounted by one group/result a day


@dataclass(frozen=True)
class Config:
    """Every setting, validated. ``path`` is the file read (None when only defaults applied)."""

    path: Path | None
    base_dir: Path
    database_url: str
    redis_url: str
    task: TaskConfig
    cnki: dict[str, Any]
    proxy: dict[str, Any]
    crawl: dict[str, Any]
    raw: dict[str, dict[str, Any]] = field(repr=False, default_factory=dict)
    #: where each (section, key) came from: the file, or ``$CNKI_<SECTION>_<KEY>``
    sources: dict[tuple[str, str], Path] = field(repr=False, default_factory=dict)

    def source(self, section: str, key: str) -> Path:
        """The file (or environment variable) ``[section] key`` came from, for its ConfigError."""
        return self.sources.get((section, key)) or self.path or Path(CONFIG_NAME)

    @property
    def redis_prefix(self) -> str:
        """[redis] prefix: the start of every Redis key the crawler writes (``cnki:``)."""
        return self.raw["redis"]["prefix"]

    @property
    def data_dir(self) -> Path:
        return self.base_dir / self.crawl["data_dir"]

    def resolve(self, relative: str) -> Path:
        path = Path(relative)
        return path if path.is_absolute() else self.base_dir / path


def _ini_problem(exc: configparser.Error) -> str:
    """What is wrong with the file, from the error's fields: configparser's own message names
    the file by its repr (``While reading from PosixPath('c4.ini')``), which ConfigError has
    already named as the operator typed it."""
    if isinstance(exc, configparser.DuplicateOptionError):
        where = {"key": exc.option, "section": exc.section, "line": exc.lineno}
        if exc.lineno:
            return _("line %(line)s: key %(key)r appears twice in [%(section)s]") % where
        return _("key %(key)r appears twice in [%(section)s]") % where
    if isinstance(exc, configparser.DuplicateSectionError):
        where = {"section": exc.section, "line": exc.lineno}
        if exc.lineno:
            return _("line %(line)s: section [%(section)s] appears twice") % where
        return _("section [%(section)s] appears twice") % where
    if isinstance(exc, configparser.MissingSectionHeaderError):
        return _("line %(line)s: %(text)r comes before any [section]") % {
            "line": exc.lineno,
            "text": exc.line.strip(),
        }
    if isinstance(exc, configparser.ParsingError):
        # each error is (line number, the line's repr)
        lines = "; ".join(
            _("line %(line)s: %(text)s") % {"line": n, "text": text.replace(chr(92) + "n", "")}
            for n, text in exc.errors[:5]
        )
        return _("not %(form)s: %(lines)s") % {"form": _("key = value"), "lines": lines}
    # configparser's own words (English) for what it found
    return _("not a valid ini file: %(problem)s") % {"problem": exc.message}


def executable_dir() -> Path:
    """The folder of the frozen .exe (never PyInstaller's temporary unpack folder)."""
    if getattr(sys, "frozen", False):
        return Path(sys.executable).resolve().parent
    return Path(__file__).resolve().parent.parent


def find_config(explicit: str | os.PathLike | None = None) -> Path | None:
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(
                path, "-", None, _("no such file (given with %(option)s)") % {"option": "--config"}
            )
        return path
    for candidate in (Path.cwd() / CONFIG_NAME, executable_dir() / CONFIG_NAME):
        if candidate.is_file():
            return candidate
    return None


def language_hint(argv: list[str], environ=None) -> str | None:
    """``[ui] language`` (or ``CNKI_UI_LANGUAGE``) of the config.ini the command line ``argv``
    will read, before it is parsed: ``--help`` and argparse's own errors are printed while
    parsing, before config.ini is loaded (and checked). None when there is none, or it cannot
    be read: the locale's language then, and ``load_config`` reports the file's problems."""
    environ = os.environ if environ is None else environ
    if environ.get(f"{ENV_PREFIX}UI_LANGUAGE"):
        return environ[f"{ENV_PREFIX}UI_LANGUAGE"]
    explicit = None
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            explicit = argv[i + 1]
        elif arg.startswith("--config="):
            explicit = arg.split("=", 1)[1]
    try:
        path = find_config(explicit)
        if path is None:
            return None
        # read leniently: a file configparser refuses is load_config's error to say, in it
        return ui_language(path)
    except OSError:
        return None


def load_config(explicit: str | os.PathLike | None = None, environ=None) -> Config:
    """Find, read, override from the environment, and validate the configuration."""
    environ = os.environ if environ is None else environ
    path = find_config(explicit)
    parser = configparser.ConfigParser(interpolation=None, default_section="__none__")
    parser.optionxform = str  # keep the key as written, so an error names it as the user typed it
    shown = path if path is not None else Path(CONFIG_NAME)
    if path is not None:
        try:
            read_ini(parser, path)  # UTF-8 with or without a BOM, else GBK/GB18030 (said)
        except configparser.Error as exc:
            raise ConfigError(path, "-", None, _ini_problem(exc)) from None

    install_log_filter()  # from here on the process holds the URLs' secrets: keep them out of logs
    check_environment(environ)
    values: dict[str, dict[str, Any]] = {}
    sources: dict[tuple[str, str], Path] = {}
    for section in parser.sections():
        if section not in SCHEMA:
            raise ConfigError(
                shown,
                section,
                None,
                _("unknown section; expected one of %(sections)s")
                % {"sections": ", ".join(SCHEMA)},
            )
        for key in parser[section]:
            if key not in SCHEMA[section]:
                raise ConfigError(
                    shown,
                    section,
                    key,
                    _("unknown key; expected one of %(keys)s")
                    % {"keys": ", ".join(SCHEMA[section])},
                )

    for section, keys in SCHEMA.items():
        values[section] = {}
        for key, (parse, default) in keys.items():
            env_name = f"{ENV_PREFIX}{section.upper()}_{key.upper()}"
            source = shown
            if env_name in environ:
                raw, source = environ[env_name], Path(f"${env_name}")
            elif parser.has_option(section, key):
                raw = parser.get(section, key)
            else:
                raw = default
            sources[(section, key)] = source
            try:
                values[section][key] = parse(raw)
            except ValueError as exc:
                raise ConfigError(source, section, key, str(exc)) from None

    base_dir = path.resolve().parent if path is not None else Path.cwd()
    if not values["crawl"]["log_file"] and getattr(sys, "frozen", False):
        # the .exe's console window is no place to keep a log: beside config.ini instead
        values["crawl"]["log_file"] = FROZEN_LOG_FILE
    task = values["task"]
    if task["end_date"] and not task["start_date"]:
        # an empty start is "today": the range would start after it ends, or change each day
        raise ConfigError(
            sources[("task", "start_date")],
            "task",
            "start_date",
            _("must be set when %(key)s is") % {"key": "end_date"},
        )
    if task["start_date"] and task["end_date"] and task["end_date"] < task["start_date"]:
        raise ConfigError(shown, "task", "end_date", _("is before %(key)s") % {"key": "start_date"})
    if task["query"]:
        # a query is read for its task's type (a patent's fields are not a paper's): checked
        # here, with both known, and kept in its one spelling
        from cnkispider.cnki.query import QueryError, normalize

        try:
            task["query"] = normalize(task["query"], task["type"])
        except QueryError as exc:
            raise ConfigError(sources[("task", "query")], "task", "query", str(exc)) from None
    if task["follow"] and task["end_date"]:
        raise ConfigError(
            shown,
            "task",
            "end_date",
            _("must be empty when %(key)s is on (the end date is today)") % {"key": "follow"},
        )
    if task["refresh_counts_every"] and not has_counts(task["type"]):
        raise ConfigError(
            sources[("task", "refresh_counts_every")],
            "task",
            "refresh_counts_every",
            _("%(type)s rows carry no counts on CNKI's list: leave it empty or 0")
            % {"type": word(task["type"])},
        )
    tls = TlsFiles(values, sources, base_dir)
    return Config(
        path=path,
        base_dir=base_dir,
        database_url=tls.database_url(_absolute_sqlite(values["database"]["url"], base_dir)),
        redis_url=tls.redis_url(values["redis"]["url"]),
        task=TaskConfig(**task),
        cnki=values["cnki"],
        proxy=values["proxy"],
        crawl=values["crawl"],
        raw=values,
        sources=sources,
    )


def env_names() -> dict[str, tuple[str, str]]:
    """Every ``CNKI_<SECTION>_<KEY>`` variable that overrides a key, with its (section, key)."""
    return {
        f"{ENV_PREFIX}{section.upper()}_{key.upper()}": (section, key)
        for section, keys in SCHEMA.items()
        for key in keys
    }


def check_environment(environ) -> None:
    """Refuse or warn about ``CNKI_*`` variables that override nothing (see the module's doc)."""
    known = env_names()
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name in known or name in OTHER_ENV:
            continue
        if name.startswith(OTHER_ENV_PREFIXES):
            continue
        rest = name[len(ENV_PREFIX) :]
        # The section left out (CNKI_BASE_URL for CNKI_CNKI_BASE_URL) first, then spelling.
        nearest = [k for k in known if k.endswith(f"_{rest}")] or difflib.get_close_matches(
            name, [*known, *OTHER_ENV], n=1, cutoff=0.6
        )
        hint = f"; did you mean {nearest[0]}?" if nearest else ""  # the log's, in English
        section = next((s for s in SCHEMA if rest.startswith(f"{s.upper()}_")), None)
        if section is not None:
            key = rest[len(section) + 1 :].lower()
            words = {"keys": ", ".join(SCHEMA[section]), "name": nearest[0] if nearest else ""}
            if nearest:
                problem = _("unknown key; expected one of %(keys)s; did you mean %(name)s?") % words
            else:
                problem = _("unknown key; expected one of %(keys)s") % words
            raise ConfigError(Path(f"${name}"), section, key, problem)
        if name not in _warned_env:
            _warned_env.add(name)
            logger.warning(
                "environment variable %s is not a cnkispider setting and is ignored%s "
                "(settings are CNKI_<SECTION>_<KEY>, for example CNKI_DATABASE_URL)",
                name,
                hint,
            )


def _absolute_sqlite(url: str, base_dir: Path) -> str:
    """sqlite:///relative/path is taken relative to the config file's folder, not the cwd."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/") and url != "sqlite:///:memory:":
        relative = url[len(prefix) :]
        if not Path(relative).is_absolute():  # a Windows path like C:/... is already absolute
            return prefix + (base_dir / relative).as_posix()
    return url


class TlsFiles:
    """The ``ssl_ca``/``ssl_cert``/``ssl_key`` keys of [database] and [redis], checked (each file
    exists; a certificate comes with its key) and written into the URL's query, where the
    drivers read them: SQLAlchemy hands ``ssl_ca``/``ssl_cert``/``ssl_key`` to pymysql, redis-py
    takes ``ssl_ca_certs``/``ssl_certfile``/``ssl_keyfile`` of a ``rediss://`` URL. Every
    consumer of the URL (the crawl, status, web, the .exe) then speaks TLS alike. A URL that
    already carries these parameters keeps them."""

    REDIS_NAMES = {"ssl_ca": "ssl_ca_certs", "ssl_cert": "ssl_certfile", "ssl_key": "ssl_keyfile"}

    def __init__(self, values, sources, base_dir: Path):
        self.values, self.sources, self.base_dir = values, sources, base_dir

    def _files(self, section: str) -> dict[str, str]:
        files = {}
        for key in ("ssl_ca", "ssl_cert", "ssl_key"):
            raw = self.values[section][key].strip()
            if not raw:
                continue
            path = Path(raw).expanduser()
            path = path if path.is_absolute() else self.base_dir / path
            if not path.is_file():
                raise ConfigError(
                    self.sources[(section, key)],
                    section,
                    key,
                    _("no such file: %(path)s") % {"path": path},
                )
            files[key] = str(path)
        if ("ssl_cert" in files) != ("ssl_key" in files):
            given, missing = (
                ("ssl_cert", "ssl_key") if "ssl_cert" in files else ("ssl_key", "ssl_cert")
            )
            raise ConfigError(
                self.sources[(section, missing)],
                section,
                missing,
                _(
                    "is empty but %(given)s is set: a client certificate needs its key and the "
                    "key its certificate"
                )
                % {"given": given},
            )
        return files

    def database_url(self, url: str) -> str:
        files = self._files("database")
        if not files:
            return url
        if url.startswith("sqlite"):
            key = next(iter(files))
            raise ConfigError(
                self.sources[("database", key)],
                "database",
                key,
                _("TLS is for a MySQL/MariaDB server; the %(setting)s is SQLite (a file)")
                % {"setting": "[database] url"},
            )
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
        return parsed.update_query_dict(
            {k: v for k, v in files.items() if k not in parsed.query}
        ).render_as_string(hide_password=False)

    def redis_url(self, url: str) -> str:
        files = self._files("redis")
        if not files:
            return url
        if not url.startswith("rediss://"):
            key = next(iter(files))
            raise ConfigError(
                self.sources[("redis", key)],
                "redis",
                key,
                _("TLS needs a %(scheme)s URL in %(setting)s (%(plain)s is plain text)")
                % {"scheme": "rediss://", "setting": "[redis] url", "plain": "redis://"},
            )
        from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        for key, path in files.items():
            query.setdefault(self.REDIS_NAMES[key], path)
        return urlunsplit(parts._replace(query=urlencode(query)))
