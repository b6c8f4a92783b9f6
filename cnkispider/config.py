"""config.ini: found, layered, validated once into one typed :class:`Config`.

Lookup order for the file: ``--config PATH``; else ``config.ini`` in the working directory;
else ``config.ini`` beside the executable (the frozen .exe) or the project folder. Values
from the file are overridden by environment variables ``CNKI_<SECTION>_<KEY>`` (for example
``CNKI_DATABASE_URL``), and every key has a default here, so a missing file is fine.

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
import datetime as dt
import difflib
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cnkispider.exceptions import ConfigError
from cnkispider.items import DOC_TYPES
from cnkispider.masking import install_log_filter, mask_url

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
            raise ValueError(f"expected a whole number, got {raw!r}") from None
        if lo is not None and value < lo:
            raise ValueError(f"expected a number >= {lo}, got {value}")
        if hi is not None and value > hi:
            raise ValueError(f"expected a number <= {hi}, got {value}")
        return value

    return parse


def _float(lo: float = 0.0):
    def parse(raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ValueError(f"expected a number, got {raw!r}") from None
        if value < lo:
            raise ValueError(f"expected a number >= {lo}, got {value}")
        return value

    return parse


def _bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {raw!r}")


def _date_or_empty(raw: str) -> str:
    raw = raw.strip()
    if not raw:
        return ""
    try:
        return dt.date.fromisoformat(raw).isoformat()
    except ValueError:
        raise ValueError(f"expected a date as YYYY-MM-DD (or empty), got {raw!r}") from None


def _choice(*choices: str):
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {raw!r}")
        return value

    return parse


def _database_url(raw: str) -> str:
    value = raw.strip()
    if not value.startswith(("sqlite://", "mysql+pymysql://", "mysql://", "mariadb+pymysql://")):
        raise ValueError(
            "expected a database URL such as sqlite:///data/cnki.db or "
            f"mysql+pymysql://user:password@host:3306/cnki, got {mask_url(value)!r}"
        )
    return value


def _redis_url(raw: str) -> str:
    value = raw.strip()
    if value and not value.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(
            "expected empty (embedded Redis) or redis://, rediss:// or unix:// URL, "
            f"got {mask_url(value)!r}"
        )
    return value


def _http_url(raw: str) -> str:
    value = raw.strip().rstrip("/")
    if value and not value.startswith(("http://", "https://")):
        raise ValueError(f"expected an http:// or https:// URL, got {mask_url(raw.strip())!r}")
    return value


def _int_choice(*choices: int):
    def parse(raw: str) -> int:
        value = _int()(raw)
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(map(str, choices))}, got {value}")
        return value

    return parse


def _required(parse_inner):
    def parse(raw: str) -> str:
        value = parse_inner(raw)
        if not value:
            raise ValueError("must not be empty")
        return value

    return parse


def _token(raw: str) -> str:
    """A QueryJson code (field or operator): letters and digits, upper-cased."""
    value = raw.strip().upper()
    if not value or not value.replace("_", "").isalnum() or not value[0].isalpha():
        raise ValueError(
            f"expected a code of letters and digits such as CLC or SUFFIX, got {raw!r}"
        )
    return value


# (section, key) -> (parser, default). The one table of every key config.ini may hold;
# config.ini documents each of them in place.
SCHEMA: dict[str, dict[str, tuple[Any, str]]] = {
    "database": {
        "url": (_database_url, "sqlite:///data/cnki.db"),
        # seconds a worker waits out an unreachable database (with backoff, a log line per
        # attempt) before it gives up; minutes, so a restart or failover does not stop a crawl
        "outage_seconds": (_float(0.0), "600"),
    },
    "redis": {
        "url": (_redis_url, ""),
    },
    "task": {
        "name": (_text, "default"),
        "type": (_choice(*DOC_TYPES), "patent"),
        "start_date": (_date_or_empty, ""),
        "end_date": (_date_or_empty, ""),
        "categories": (_text, "builtin"),
    },
    "cnki": {
        "base_url": (_http_url, "https://kns.cnki.net"),
        "client_id_url": (
            _required(_http_url),
            "https://recsys.cnki.net/RCDService/api/UtilityOpenApi/GenerateClientID",
        ),
        "page_size": (_int_choice(10, 20, 50), "50"),
        "cap_rows": (_int(10, 1_000_000), "6000"),
        "max_pages": (_int(0, 100_000), "0"),
        "turn_limit": (_int(1, 1000), "14"),
        "category_mode": (_choice("subject", "facet"), "subject"),
        "category_field": (_token, "CLC"),
        "category_operator": (_token, "SUFFIX"),
        # Hosts besides base_url and client_id_url that a request read back from the shared Redis
        # may go to (comma list of URLs or host[:port]); everything else is refused, unfetched.
        "allowed_hosts": (_text, ""),
    },
    "proxy": {
        "enabled": (_bool, "false"),
        "api_url": (_http_url, ""),
        "format": (_choice("lines", "json"), "lines"),
        "json_path": (_text, "data"),
        "reuse": (_int(1), "10"),
        "fetch_interval": (_float(0.0), "5"),
        "static": (_text, ""),
        "ban_seconds": (_float(0.0), "300"),
        "rate_limit": (_float(0.0), "0"),
        "direct_name": (_text, "direct"),
    },
    "crawl": {
        "data_dir": (_text, "data"),
        "concurrent_requests": (_int(1, 512), "16"),
        "download_delay": (_float(0.0), "0"),
        "download_timeout": (_float(1.0), "30"),
        "retry_times": (_int(0, 100), "5"),
        "rate_limit": (_float(0.0), "0"),
        "rate_burst": (_int(1, 1000), "1"),
        "pace": (_bool, "false"),
        "pace_start": (_float(0.001), "0.5"),
        "pace_step": (_float(0.001), "0.5"),
        "pace_max": (_float(0.0), "0"),
        "pace_cooldown": (_float(0.0), "30"),
        "lease_seconds": (_int(1), "60"),
        "round_lease_seconds": (_int(1), "300"),
        "max_attempts": (_int(1), "5"),
        "heartbeat_seconds": (_int(1), "15"),
        "processes": (_int(1, 64), "1"),
        "recrawl": (_bool, "true"),
        "halt_after": (_int(1, 10000), "10"),
        "halt_window": (_int(2, 100000), "50"),
        "challenge_sessions": (_int(1, 1000), "4"),
        "challenge_cooldown": (_float(0.0), "300"),
        "archive_html": (_bool, "false"),
        "feed": (_text, ""),
        "log_file": (_text, ""),
        "log_level": (_choice("debug", "info", "warning", "error"), "info"),
    },
}


@dataclass(frozen=True)
class TaskConfig:
    name: str
    type: str
    start_date: str
    end_date: str
    categories: str


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

    @property
    def data_dir(self) -> Path:
        return self.base_dir / self.crawl["data_dir"]

    def resolve(self, relative: str) -> Path:
        path = Path(relative)
        return path if path.is_absolute() else self.base_dir / path


def executable_dir() -> Path:
    """The folder of the frozen .exe (never PyInstaller's temporary unpack folder)."""
    if getattr(sys, "frozen", False):
        return Path(sys.executable).resolve().parent
    return Path(__file__).resolve().parent.parent


def find_config(explicit: str | os.PathLike | None = None) -> Path | None:
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(path, "-", None, "no such file (given with --config)")
        return path
    for candidate in (Path.cwd() / CONFIG_NAME, executable_dir() / CONFIG_NAME):
        if candidate.is_file():
            return candidate
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
            parser.read(path, encoding="utf-8-sig")  # utf-8-sig: Notepad on Windows writes a BOM
        except configparser.Error as exc:
            raise ConfigError(path, "-", None, f"not a valid ini file: {exc}") from None

    install_log_filter()  # from here on the process holds the URLs' secrets: keep them out of logs
    check_environment(environ)
    values: dict[str, dict[str, Any]] = {}
    for section in parser.sections():
        if section not in SCHEMA:
            raise ConfigError(
                shown, section, None, f"unknown section; expected one of {', '.join(SCHEMA)}"
            )
        for key in parser[section]:
            if key not in SCHEMA[section]:
                raise ConfigError(
                    shown,
                    section,
                    key,
                    f"unknown key; expected one of {', '.join(SCHEMA[section])}",
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
            try:
                values[section][key] = parse(raw)
            except ValueError as exc:
                raise ConfigError(source, section, key, str(exc)) from None

    base_dir = path.resolve().parent if path is not None else Path.cwd()
    if not values["crawl"]["log_file"] and getattr(sys, "frozen", False):
        # the .exe's console window is no place to keep a log: beside config.ini instead
        values["crawl"]["log_file"] = FROZEN_LOG_FILE
    task = values["task"]
    if task["start_date"] and task["end_date"] and task["end_date"] < task["start_date"]:
        raise ConfigError(shown, "task", "end_date", "is before start_date")
    return Config(
        path=path,
        base_dir=base_dir,
        database_url=_absolute_sqlite(values["database"]["url"], base_dir),
        redis_url=values["redis"]["url"],
        task=TaskConfig(**task),
        cnki=values["cnki"],
        proxy=values["proxy"],
        crawl=values["crawl"],
        raw=values,
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
        hint = f"; did you mean {nearest[0]}?" if nearest else ""
        section = next((s for s in SCHEMA if rest.startswith(f"{s.upper()}_")), None)
        if section is not None:
            key = rest[len(section) + 1 :].lower()
            raise ConfigError(
                Path(f"${name}"),
                section,
                key,
                f"unknown key; expected one of {', '.join(SCHEMA[section])}{hint}",
            )
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
