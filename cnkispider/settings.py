"""Scrapy settings: the project's static ones (data only: no config file is read here).

The defaults of every setting live in :mod:`cnkispider.default_settings`, installed by the
add-on in ``ADDONS``; this module names the components, in the one table of their order, and
what never changes. Scrapy's command line reads it (scrapy.cfg); config.ini is mapped onto it by
:func:`cnkispider.launch.crawlsettings.crawler_settings`, which `cnkispider run` calls with the file of
``--config`` and `scrapy crawl` (the project's crawl command, ``COMMANDS_MODULE`` below) with
config.ini or the file ``CNKI_CONFIG`` names, so both ways of starting a crawl behave the same.
"""

from __future__ import annotations

from scrapy.settings import default_settings as _scrapy_defaults

from cnkispider.runtime.addon import (
    ADDONS as ADDONS,  # the defaults of every setting (default_settings)
)

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

# -- the crawl's components and their order: the one table ----------------------------------
# Every component of ours that Scrapy loads by name, at its place; nothing else sets an order
# (build_exe.spec lists the modules, tests/test_exe.py checks it against these tables). A
# component that is switched off raises NotConfigured and stays out of the crawl.
#
# Downloader middlewares: process_request runs in ascending order, process_response and
# process_exception in descending order (the highest number sees the response first).
#
#   480 Session       assigns the session (meta cnki_session + cookiejar) and warms it up; first,
#                     because UA, proxy and cookies are all chosen per session.
#   500 UserAgent     ours replaces Scrapy's (500 -> None): one UA per session, not one per crawl.
#   510 Referer       the search page of the document type, as a browser sends it.
#   600 Redirect      Scrapy's, unchanged.
#   605 HtmlArchive   [crawl] archive_html (off without ARCHIVE_DIR): below CnkiRetry, it sees
#                     only the pages that passed the refusal check.
#   610 CnkiRetry     replaces Scrapy's RetryMiddleware (550 -> None). Above Redirect, so that it
#                     sees CNKI's "302 -> /verify" before RedirectMiddleware follows it (followed,
#                     the verify page would look like a page of its own); other redirects pass on
#                     to RedirectMiddleware.
#   620 Proxy         above CnkiRetry, so that on the way back it releases or evicts the proxy
#                     before CnkiRetry turns the response into a retry (a middleware that returns
#                     a request stops the chain); on the way out it sets meta["proxy"] before
#                     HttpProxyMiddleware (750) moves the credentials into a header.
#   630 RateLimit     after Session and Proxy, so both are known when it reserves; nothing that
#                     waits between it and the wire but Scrapy's download slot (DOWNLOAD_HANDLERS
#                     below looks again at the wire); after decompression on the way back (see
#                     its module for why). Off (NotConfigured) while both rates are 0 and the
#                     pace is off.
#   640 HttpCompression  moved up from 590, so that the body is decompressed before RateLimit,
#                     Proxy and CnkiRetry read it to classify the page.
#   700 Cookies       Scrapy's, unchanged: reads meta cookiejar set by Session; stores the
#                     cookies of every response (a refused one only touches a retiring session).
#   750 HttpProxy     Scrapy's, unchanged: strips the credentials out of meta["proxy"].
DOWNLOADER_MIDDLEWARES = {
    "scrapy.downloadermiddlewares.useragent.UserAgentMiddleware": None,
    "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
    "scrapy.downloadermiddlewares.httpcompression.HttpCompressionMiddleware": 640,
    "cnkispider.middlewares.session.SessionMiddleware": 480,
    "cnkispider.middlewares.useragent.UserAgentMiddleware": 500,
    "cnkispider.middlewares.referer.RefererMiddleware": 510,
    "cnkispider.middlewares.archive.HtmlArchiveMiddleware": 605,
    "cnkispider.middlewares.retry.CnkiRetryMiddleware": 610,
    "cnkispider.middlewares.proxy.ProxyMiddleware": 620,
    "cnkispider.middlewares.ratelimit.RateLimitMiddleware": 630,
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
    "cnkispider.status.progress.ProgressLog": 600,
    # the worker's side of the verified-session pool, and the webhooks (waiting, halt, finish)
    "cnkispider.sessions.runtime.VerifiedSessions": 510,
    "cnkispider.watch.notify.Notifier": 520,
}
