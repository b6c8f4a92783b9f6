"""config.ini found, read and validated once into one typed :class:`Config`.

Lookup order for the file: ``--config PATH``; else ``config.ini`` in the working directory;
else ``config.ini`` beside the executable (the frozen .exe) or the project folder. Values
from the file are overridden by environment variables ``CNKI_<SECTION>_<KEY>``
(:mod:`cnkispider.config.environment`), and every key has a default
(:mod:`cnkispider.config.keys`), so a missing file is fine. A wrong section, an unknown key (a
typo) or a malformed value raises one :class:`ConfigError` naming the file, the section, the key
and what was expected; nothing half-configured ever starts crawling.

Relative paths (the SQLite file, the data folder, the log file) are relative to the folder
of the config file, so the .exe and `scrapy crawl` find the same data wherever they start.
"""

from __future__ import annotations

import configparser
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cnkispider.config.environment import ENV_PREFIX, check_environment
from cnkispider.config.inifile import read_ini, ui_language
from cnkispider.config.keys import SCHEMA
from cnkispider.config.masking import install_log_filter
from cnkispider.config.task import TaskConfig, check_task
from cnkispider.config.urls import TlsFiles, absolute_sqlite
from cnkispider.exceptions import ConfigError
from cnkispider.words.i18n import _

CONFIG_NAME = "config.ini"
FROZEN_LOG_FILE = "cnkispider.log"  # [crawl] log_file of the .exe when empty


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
    return Path(__file__).resolve().parents[2]  # cnkispider/config/reader.py: the project


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
    check_task(task, sources, shown)
    tls = TlsFiles(values, sources, base_dir)
    return Config(
        path=path,
        base_dir=base_dir,
        database_url=tls.database_url(absolute_sqlite(values["database"]["url"], base_dir)),
        redis_url=tls.redis_url(values["redis"]["url"]),
        task=TaskConfig(**task),
        cnki=values["cnki"],
        proxy=values["proxy"],
        crawl=values["crawl"],
        raw=values,
        sources=sources,
    )
