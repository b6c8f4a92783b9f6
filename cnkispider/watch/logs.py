"""The console of a crawl: our lines, warnings and errors by default; Scrapy's own at --verbose.

A crawl's console is for the operator: what the task does (rounds seeded and done, the
per-minute progress, the crawl -> recrawl change, halts) and what goes wrong. Scrapy's banner
(versions, enabled components, overridden settings), its stats dump and its INFO chatter are
for debugging, so they appear only with ``--verbose`` (``cnkispider run --verbose``, or
``CNKI_VERBOSE=1`` for `scrapy crawl`). Both doors call :func:`quiet_settings` and
:func:`apply`, so they print the same lines.
"""

from __future__ import annotations

import logging
import os

# Logger -> the lowest level shown by default. tldextract (used by Scrapy's cookie handling)
# logs a warning with two tracebacks when it cannot download the public-suffix list (offline,
# or behind a firewall) and then uses the snapshot it ships: nothing for an operator to do.
# The scheduler's "Round N drained" repeats the feeder's "round N done" one moment later.
QUIET_LEVELS = {
    "scrapy": logging.WARNING,
    # Scrapy's logging setup (dictConfig) resets "scrapy" to DEBUG before its banner; levels set
    # on these children survive it, so the banner and "Enabled ..." lists stay out too
    "scrapy.utils.log": logging.WARNING,
    "scrapy.addons": logging.WARNING,
    "scrapy.middleware": logging.WARNING,
    "scrapy.crawler": logging.WARNING,
    "tldextract": logging.CRITICAL,
    "cnkispider.scheduling": logging.WARNING,
    "filelock": logging.WARNING,
}


def verbose_from_env(environ=None) -> bool:
    value = (environ if environ is not None else os.environ).get("CNKI_VERBOSE", "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def is_quiet(verbose: bool, log_file: str | None) -> bool:
    """Quiet only a console log: a log file (``[crawl] log_file``, the exe's) keeps every line,
    and then the console shows nothing of Scrapy's anyway."""
    return not verbose and not log_file


def quiet_settings(verbose: bool) -> dict:
    """Scrapy settings of the console: no versions banner or stats dump unless verbose."""
    if verbose:
        return {"CNKI_VERBOSE": True}
    return {"CNKI_VERBOSE": False, "STATS_DUMP": False, "LOG_VERSIONS": []}


def console_shows(record: logging.LogRecord) -> bool:
    """Whether a quiet console shows ``record`` (for a console handler of its own, the exe's)."""
    for name, level in QUIET_LEVELS.items():
        if (record.name == name or record.name.startswith(name + ".")) and record.levelno < level:
            return False
    return True


class _Below(logging.Filter):
    """Drops a logger's own records below a level. Scrapy's logging setup (dictConfig) resets
    the levels of existing child loggers just before it logs its banner, but keeps their
    filters, so the banner's loggers get this filter as well as a level."""

    def __init__(self, level: int):
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self.level


def apply(verbose: bool) -> None:
    """Set the loggers' levels and filters (before Scrapy logs its first line, and again per
    crawler, after Scrapy's logging setup has reset the levels)."""
    for name, level in QUIET_LEVELS.items():
        logger = logging.getLogger(name)
        logger.setLevel(logging.NOTSET if verbose else level)
        for old in [f for f in logger.filters if isinstance(f, _Below)]:
            logger.removeFilter(old)
        if not verbose:
            logger.addFilter(_Below(level))
