"""`scrapy crawl patent|paper|achievement`: Scrapy's own crawl command, with config.ini.

Scrapy reads the project's static settings (cnkispider/settings.py, data only); before it builds
the crawler, this command loads config.ini (``CNKI_CONFIG`` names another file), maps it with
:func:`cnkispider.crawlsettings.crawler_settings` and makes the checks `cnkispider run` makes
(:func:`cnkispider.preflight.preflight`, with the task of ``-a task=NAME``), with its lines and
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

from cnkispider import logs
from cnkispider.config import load_config
from cnkispider.crawlsettings import crawler_settings
from cnkispider.exceptions import CnkiSpiderError
from cnkispider.preflight import preflight
from cnkispider.settingcheck import check_setting

if TYPE_CHECKING:
    import argparse


class Command(ScrapyCrawlCommand):
    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        super().process_options(args, opts)  # -s, -o, -a (opts.spargs), logging options
        assert self.settings is not None
        verbose = logs.verbose_from_env()
        try:
            config = load_config(os.environ.get("CNKI_CONFIG") or None)
            settings = crawler_settings(config)
            # Scrapy's -s, checked as `cnkispider run` checks its own, before anything is written
            for pair in opts.set or []:
                check_setting(*(part.strip() for part in pair.split("=", 1)))
            # the checks `cnkispider run` makes before Scrapy starts, with its lines and codes
            preflight(config, task_arg=opts.spargs.get("task"))
        except CnkiSpiderError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        except (LookupError, ValueError) as exc:  # a bad [task], -a task=NOSUCH
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        verbose = not logs.is_quiet(verbose, settings.get("LOG_FILE"))
        settings.update(logs.quiet_settings(verbose))
        self.settings.setdict(settings, priority="project")
        logs.apply(verbose)
