"""What the commands share: config.ini (its option, accepted anywhere on the line, and its
loading), the log a short command writes, and the options of a crawl (-v, -s, -o).

``--config`` after the command: every command's parser is a :class:`CommandParser`, which has
it (SUPPRESS as its default, so an absent one keeps the value given before); argparse makes the
parsers of a command's own subcommands (``task list``, ``session add``) of their parent's class,
so they have it too, and a subcommand added later cannot forget it.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from cnkispider.cli import failing
from cnkispider.config import Config, load_config
from cnkispider.exceptions import ConfigError
from cnkispider.words import i18n
from cnkispider.words.i18n import N_, _

#: translated where used (:class:`CommandParser`, cli.build_parser): at parser-build time
CONFIG_HELP = N_("config.ini to use (default: ./config.ini, then beside the program)")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class CommandParser(argparse.ArgumentParser):
    """The parser of a command or of one of its subcommands: ``--config`` among its options."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.add_argument("--config", default=argparse.SUPPRESS, help=_(CONFIG_HELP))


def add_command(sub, name: str, **kw) -> argparse.ArgumentParser:
    """The parser of one command (`cnkispider NAME`), ``--config`` among its options."""
    return sub.add_parser(name, **kw)


def command_config(args, *, short: bool) -> Config:
    """config.ini for the command of ``args``: a short command logs to its file from now on;
    ``--processes 0`` (not given) becomes [crawl] processes."""
    config = load_config(args.config)
    if config.raw["ui"]["language"]:  # else the locale's, chosen at start (cli.main)
        i18n.activate(config.raw["ui"]["language"])
    failing.log_path.append(check_log_file(config))
    if short:
        log_to_file(config)
    if getattr(args, "processes", None) == 0:
        args.processes = config.crawl["processes"]
    return config


def crawl_options(p) -> None:
    p.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help=_("Scrapy's own log lines too (banner, stats dump)"),
    )
    p.add_argument(
        "-s",
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help=_("a Scrapy setting, as in scrapy crawl"),
    )
    p.add_argument(
        "-o",
        "--output",
        action="append",
        metavar="FILE",
        help=_("also write the items to FILE (.jsonl, .csv, .json; UTF-8), as in scrapy crawl"),
    )


def check_log_file(config: Config) -> Path:
    """The command's log file; a ``[crawl] log_file`` that cannot be written (a read-only
    folder, a file where a folder should be) is refused now, in one line, before Scrapy or the
    logging module would fail on it with a traceback."""
    if not config.crawl["log_file"]:
        return config.data_dir / "cnkispider.log"
    path = config.resolve(config.crawl["log_file"])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise ConfigError(
            config.path or "config.ini",
            "crawl",
            "log_file",
            _("%(path)s cannot be written (%(cause)s): choose a folder you can write to")
            % {"path": path, "cause": exc.strerror or exc},
        ) from None
    return path


def log_to_file(config: Config) -> None:
    """A short command's INFO lines (the embedded Redis starting, a browser opening) go to the
    log ([crawl] log_file, else cnkispider.log in the data folder), opened only when a line
    comes; the console shows warnings and errors, and the command's own output."""
    path = config.resolve(config.crawl["log_file"]) if config.crawl["log_file"] else None
    path = path or (config.data_dir / "cnkispider.log")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return  # no log folder: the INFO lines are dropped, the warnings still show
    handler = logging.FileHandler(path, encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    for existing in root.handlers:
        existing.setLevel(logging.WARNING)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
