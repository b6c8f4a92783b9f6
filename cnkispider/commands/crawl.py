"""`scrapy crawl patent|paper|achievement`: Scrapy's own crawl command, with config.ini.

Scrapy reads the project's static settings (cnkispider/settings.py, data only); before it builds
the crawler, this command loads config.ini (``CNKI_CONFIG`` names another file), maps it with
:func:`cnkispider.launch.crawlsettings.crawler_settings` and makes the checks `cnkispider run` makes
(:func:`cnkispider.launch.preflight.preflight`, with the task of ``-a task=NAME``), with its lines and
exit codes: a bad config.ini, an unusable database or Redis, a bad [task] stops here with one
line and exit status 2, not a traceback. So both ways of starting a crawl behave the same.

``-s``, ``-o`` and ``-L`` still win over config.ini (Scrapy's ``cmdline`` priority over the
``project`` one config.ini's settings get, as when they were the settings module's own).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from scrapy.commands.crawl import Command as ScrapyCrawlCommand

from cnkispider.config import language_hint, load_config
from cnkispider.exceptions import CnkiSpiderError, InputError
from cnkispider.items import DOC_TYPES
from cnkispider.launch.crawlsettings import crawler_settings
from cnkispider.launch.preflight import preflight
from cnkispider.launch.settingcheck import check_setting
from cnkispider.watch import logs
from cnkispider.words import i18n
from cnkispider.words.i18n import _
from cnkispider.words.vocabulary import word

if TYPE_CHECKING:
    import argparse


def check_spider_type(spider: str | None, task) -> None:
    """``scrapy crawl patent -a task=T`` of a task of another type: refused (the spider would
    find no round of its type to crawl, log an error and exit 0)."""
    if task is not None and spider in DOC_TYPES and task.type != spider:
        raise InputError(
            _("task %(task)r is a %(type)s task: crawl it with `scrapy crawl %(code)s`")
            % {"task": task.name, "type": word(task.type), "code": task.type}
        )


class Command(ScrapyCrawlCommand):
    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        super().process_options(args, opts)  # -s, -o, -a (opts.spargs), logging options
        assert self.settings is not None
        verbose = logs.verbose_from_env()
        explicit = os.environ.get("CNKI_CONFIG")
        # the refusals below in [ui] language
        i18n.activate(language_hint(["--config", explicit] if explicit else []))
        try:
            config = load_config(os.environ.get("CNKI_CONFIG") or None)
            settings = crawler_settings(config)
            # Scrapy's -s, checked as `cnkispider run` checks its own, before anything is written
            for pair in opts.set or []:
                check_setting(*(part.strip() for part in pair.split("=", 1)))
            # the checks `cnkispider run` makes before Scrapy starts, with its lines and codes
            named = preflight(config, task_arg=opts.spargs.get("task"))
            check_spider_type(args[0] if args else None, named)
        except (CnkiSpiderError, LookupError, ValueError) as exc:  # a bad [task], -a task=NOSUCH
            print(_("error: %(problem)s") % {"problem": exc}, file=sys.stderr)
            raise SystemExit(2) from None
        verbose = not logs.is_quiet(verbose, settings.get("LOG_FILE"))
        settings.update(logs.quiet_settings(verbose))
        self.settings.setdict(settings, priority="project")
        logs.apply(verbose)
