"""Scrapy settings: the project's static ones (data only: no config file is read here).

The defaults of every setting live in :mod:`cnkispider.default_settings`, installed by the
add-on in ``ADDONS``; this module names the components and what never changes. Scrapy's command
line reads it (scrapy.cfg); config.ini is mapped onto it by
:func:`cnkispider.crawlsettings.crawler_settings`, which `cnkispider run` calls with the file of
``--config`` and `scrapy crawl` (the project's crawl command, ``COMMANDS_MODULE`` below) with
config.ini or the file ``CNKI_CONFIG`` names, so both ways of starting a crawl behave the same.
"""

from __future__ import annotations

from scrapy.settings import default_settings as _scrapy_defaults

from cnkispider import middlewares as _middlewares
from cnkispider.addon import ADDONS as ADDONS  # the defaults of every setting (default_settings)
from cnkispider.middlewares import ratelimit as _ratelimit

BOT_NAME = "cnkispider"
SPIDER_MODULES = ["cnkispider.spiders"]
NEWSPIDER_MODULE = "cnkispider.spiders"
# `scrapy crawl`: Scrapy's own command, after it has loaded config.ini and made the checks
# `cnkispider run` makes (cnkispider/commands/crawl.py)
COMMANDS_MODULE = "cnkispider.commands"
ROBOTSTXT_OBEY = False
# Scrapy's telnet console and its remote-control HTTP server (2.14+) both run code sent to them
# inside the worker: never open either, nor load them (Scrapy imports every extension it lists,
# even one set to None: the remote control's aiohttp took 0.14 s of CPU of every worker's start)
TELNETCONSOLE_ENABLED = False
REMOTE_CONTROL_ENABLED = False
_REMOTE_SHELLS = (
    "scrapy.extensions.telnet.TelnetConsole",
    "scrapy.extensions.remote_control.RemoteControl",
)
EXTENSIONS_BASE = {
    path: order
    for path, order in _scrapy_defaults.EXTENSIONS_BASE.items()
    if path not in _REMOTE_SHELLS
}
LOGSTATS_INTERVAL = 60.0
# feeds (`-o x.jsonl`, [crawl] feed) in UTF-8: 中文 as it is, not \u escapes
FEED_EXPORT_ENCODING = "utf-8"

# Redis scheduling: one key namespace per task (SCHEDULER_NAMESPACE, from config.ini)
SCHEDULER = "cnkispider.scheduling.scheduler.LeasedScheduler"
DUPEFILTER_CLASS = "cnkispider.scheduling.dupefilter.BloomDupeFilter"
REQUEST_FINGERPRINTER_CLASS = "cnkispider.scheduling.fingerprint.DocKeyFingerprinter"

# components
DOWNLOADER_MIDDLEWARES = {
    **_middlewares.DOWNLOADER_MIDDLEWARES,  # their order and why: cnkispider/middlewares/__init__.py
    # after the session and proxy middlewares, nothing that waits between it and the wire but
    # Scrapy's download slot (DOWNLOAD_HANDLERS below looks again at the wire), and
    # after decompression on the way back (see its module for why); it switches itself off
    # (NotConfigured) while both rates are 0 and the pace is off
    "cnkispider.middlewares.ratelimit.RateLimitMiddleware": _ratelimit.ORDER,
}
# the rate limit looks once more just before a request goes on the wire: one that waited in
# Scrapy's download slot while a 429 closed its window is held there (issue 47.8)
DOWNLOAD_HANDLERS = {
    "http": "cnkispider.middlewares.wiregate.GatedHTTPHandler",
    "https": "cnkispider.middlewares.wiregate.GatedHTTPHandler",
}
SPIDER_MIDDLEWARES = {
    "errors.middleware.ErrorRecordingMiddleware": 60,
    # marks a callback's requests with the lease they were made from, so Redis refuses them
    # once that lease has gone to another worker (cnkispider/scheduling/outcome.py); any order
    "cnkispider.scheduling.outcome.LeaseLineage": 70,
}
ITEM_PIPELINES = {"cnkispider.pipelines.DocumentPipeline": 800}
EXTENSIONS = {
    "tasks.feeder.RoundFeeder": 500,
    "cnkispider.progress.ProgressLog": 600,
    # the worker's side of the verified-session pool, and the webhooks (waiting, halt, finish)
    "cnkispider.sessions.runtime.VerifiedSessions": 510,
    "cnkispider.notify.Notifier": 520,
}
