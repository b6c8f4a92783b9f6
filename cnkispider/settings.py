"""Scrapy settings, derived from config.ini.

`scrapy crawl patent` reads this module; it loads config.ini (``CNKI_CONFIG`` names another
file) and maps it with :func:`crawler_settings`, the same function `cnkispider run` uses, so
both ways of starting a crawl behave the same. A bad config.ini stops here with its one-line
message, not a traceback.
"""

from __future__ import annotations

import os
import sys

from cnkispider.config import Config, load_config
from cnkispider.exceptions import ConfigError


def crawler_settings(config: Config) -> dict:
    """Every Scrapy setting the crawler needs, from the validated configuration."""
    from cnkispider.middlewares import SETTINGS as MIDDLEWARE_SETTINGS

    crawl, cnki, proxy, task = config.crawl, config.cnki, config.proxy, config.task
    data_dir = config.data_dir
    settings = {
        **MIDDLEWARE_SETTINGS,  # the middlewares' own recommendations (retry priority, cookies)
        "BOT_NAME": "cnkispider",
        "SPIDER_MODULES": ["cnkispider.spiders"],
        "NEWSPIDER_MODULE": "cnkispider.spiders",
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "COOKIES_ENABLED": True,
        "CONCURRENT_REQUESTS": crawl["concurrent_requests"],
        "CONCURRENT_REQUESTS_PER_DOMAIN": crawl["concurrent_requests"],
        "DOWNLOAD_DELAY": crawl["download_delay"],
        "DOWNLOAD_TIMEOUT": crawl["download_timeout"],
        "RETRY_TIMES": crawl["retry_times"],
        "LOG_LEVEL": crawl["log_level"].upper(),
        "LOGSTATS_INTERVAL": 60.0,
        # storage and shared state
        "DATABASE_URL": config.database_url,
        "REDIS_URL": config.redis_url,
        "CNKI_DATA_DIR": str(data_dir),
        # the site
        "CNKI_BASE_URL": cnki["base_url"],
        "CNKI_PAGE_SIZE": cnki["page_size"],
        "CNKI_MAX_PAGES": cnki["max_pages"],
        "CNKI_CATEGORY_FIELD": cnki["category_field"],
        "SESSION_TURN_LIMIT": cnki["turn_limit"],
        # flow control
        "TASKS_NAME": task.name,
        "TASKS_TYPE": task.type,
        "TASKS_START_DATE": task.start_date,
        "TASKS_END_DATE": task.end_date,
        "TASKS_CATEGORIES": task.categories,
        "TASKS_BASE_DIR": str(config.base_dir),
        "TASKS_ROUND_LEASE": crawl["round_lease_seconds"],
        "TASKS_HEARTBEAT": crawl["heartbeat_seconds"],
        "TASKS_RECRAWL": crawl["recrawl"],
        # Redis scheduling: one key namespace per task
        "SCHEDULER": "cnkispider.scheduling.scheduler.LeasedScheduler",
        "DUPEFILTER_CLASS": "cnkispider.scheduling.dupefilter.BloomDupeFilter",
        "REQUEST_FINGERPRINTER_CLASS": "cnkispider.scheduling.fingerprint.DocKeyFingerprinter",
        "SCHEDULER_NAMESPACE": f"cnki:{task.name}",
        "SCHEDULER_LEASE_SECONDS": crawl["lease_seconds"],
        "SCHEDULER_MAX_ATTEMPTS": crawl["max_attempts"],
        # proxies
        "PROXY_ENABLED": proxy["enabled"],
        "PROXY_API_URL": proxy["api_url"],
        "PROXY_API_FORMAT": proxy["format"],
        "PROXY_API_JSON_PATH": proxy["json_path"],
        "PROXY_REUSE": proxy["reuse"],
        "PROXY_FETCH_INTERVAL": proxy["fetch_interval"],
        "PROXY_BAN_TIME": proxy["ban_seconds"],
        "PROXY_STATIC": [p.strip() for p in proxy["static"].split(",") if p.strip()],
        # one rate limit per site and per proxy for the whole cluster (middlewares/ratelimit.py)
        "RATELIMIT_RATE": crawl["rate_limit"],
        "RATELIMIT_PROXY_RATE": proxy["rate_limit"],
        "RATELIMIT_BURST": crawl["rate_burst"],
        # components
        "SPIDER_MIDDLEWARES": {"errors.middleware.ErrorRecordingMiddleware": 60},
        "ITEM_PIPELINES": {"cnkispider.pipelines.DocumentPipeline": 800},
        "EXTENSIONS": {"tasks.feeder.RoundFeeder": 500, "cnkispider.progress.ProgressLog": 600},
    }
    if crawl["log_file"]:
        settings["LOG_FILE"] = str(config.resolve(crawl["log_file"]))
    if crawl["feed"]:
        feed = config.resolve(crawl["feed"])
        settings["FEEDS"] = {str(feed): {"format": "csv" if feed.suffix == ".csv" else "jsonlines", "encoding": "utf-8"}}
    if crawl["archive_html"]:
        settings["ARCHIVE_DIR"] = str(data_dir / "archive")
        # below the retry middleware (610): it sees only pages that passed the refusal check
        settings["DOWNLOADER_MIDDLEWARES"] = {
            **settings["DOWNLOADER_MIDDLEWARES"],
            "cnkispider.archive.HtmlArchiveMiddleware": 605,
        }
    # after the session and proxy middlewares, last before the wire (see its module for why);
    # it switches itself off (NotConfigured) while both rates are 0
    settings["DOWNLOADER_MIDDLEWARES"] = {
        **settings["DOWNLOADER_MIDDLEWARES"],
        "cnkispider.middlewares.ratelimit.RateLimitMiddleware": 760,
    }
    return settings


def _load() -> dict:
    try:
        return crawler_settings(load_config(os.environ.get("CNKI_CONFIG") or None))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


globals().update(_load())
