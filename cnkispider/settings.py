"""Scrapy settings: the project's static ones, and config.ini's.

The defaults of every setting live in :mod:`cnkispider.default_settings`, installed by the
add-on in ``ADDONS``; this module names the components and what never changes.
`scrapy crawl patent` reads this module; under Scrapy's command line (only) it also loads config.ini
(``CNKI_CONFIG`` names another file) and maps it with :func:`crawler_settings`, the same function
`cnkispider run` uses (with the file of ``--config``), so
both ways of starting a crawl behave the same. A bad config.ini stops here with its one-line
message, not a traceback.
"""

from __future__ import annotations

import os
import sys

from cnkispider import middlewares as _middlewares
from cnkispider.addon import ADDONS as ADDONS  # the defaults of every setting (default_settings)
from cnkispider.config import Config, load_config
from cnkispider.exceptions import CnkiSpiderError
from cnkispider.middlewares import ratelimit as _ratelimit

BOT_NAME = "cnkispider"
SPIDER_MODULES = ["cnkispider.spiders"]
NEWSPIDER_MODULE = "cnkispider.spiders"
ROBOTSTXT_OBEY = False
# Scrapy's telnet console and its remote-control HTTP server (2.14+) both run code sent to them
# inside the worker: never open either
TELNETCONSOLE_ENABLED = False
REMOTE_CONTROL_ENABLED = False
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
    # after the session and proxy middlewares, nothing that waits between it and the wire, and
    # after decompression on the way back (see its module for why); it switches itself off
    # (NotConfigured) while both rates are 0 and the pace is off
    "cnkispider.middlewares.ratelimit.RateLimitMiddleware": _ratelimit.ORDER,
}
SPIDER_MIDDLEWARES = {"errors.middleware.ErrorRecordingMiddleware": 60}
ITEM_PIPELINES = {"cnkispider.pipelines.DocumentPipeline": 800}
EXTENSIONS = {
    "tasks.feeder.RoundFeeder": 500,
    "cnkispider.progress.ProgressLog": 600,
    # the worker's side of the verified-session pool, and the webhooks (waiting, halt, finish)
    "cnkispider.sessions.runtime.VerifiedSessions": 510,
    "cnkispider.notify.Notifier": 520,
}

# The settings above, before `scrapy crawl` adds config.ini's to this module (at the bottom).
_static = {
    name: value for name, value in dict(globals()).items() if name.isupper() and name[0] != "_"
}


def crawler_settings(config: Config) -> dict:
    """Every Scrapy setting the crawler needs: the static ones above and config.ini's.

    The defaults of the rest are installed by the add-on in ``ADDONS`` when the crawler is built.
    """
    crawl, cnki, proxy, task = config.crawl, config.cnki, config.proxy, config.task
    data_dir = config.data_dir
    settings = {
        **_static,
        "CONCURRENT_REQUESTS": crawl["concurrent_requests"],
        "CONCURRENT_REQUESTS_PER_DOMAIN": crawl["concurrent_requests"],
        "DOWNLOAD_DELAY": crawl["download_delay"],
        "DOWNLOAD_TIMEOUT": crawl["download_timeout"],
        "RETRY_TIMES": crawl["retry_times"],
        "LOG_LEVEL": crawl["log_level"].upper(),
        # storage and shared state
        "DATABASE_URL": config.database_url,
        "DATABASE_OUTAGE_SECONDS": config.raw["database"]["outage_seconds"],
        "REDIS_URL": config.redis_url,
        "CNKI_DATA_DIR": str(data_dir),
        # the site
        "CNKI_BASE_URL": cnki["base_url"],
        "CNKI_CLIENT_ID_URL": cnki["client_id_url"],
        "SCHEDULER_ALLOWED_HOSTS": [
            h.strip() for h in cnki["allowed_hosts"].split(",") if h.strip()
        ],
        "CNKI_PAGE_SIZE": cnki["page_size"],
        "CNKI_CAP_ROWS": cnki["cap_rows"],
        "CNKI_MAX_PAGES": cnki["max_pages"],
        "CNKI_CATEGORY_MODE": cnki["category_mode"],
        "CNKI_CATEGORY_FIELD": cnki["category_field"],
        "CNKI_CATEGORY_OPERATOR": cnki["category_operator"],
        "SESSION_TURN_LIMIT": cnki["turn_limit"],
        "SESSIONS_MODE": cnki["sessions"],
        "SESSIONS_ON_CHECK": cnki["on_check"],
        "SESSIONS_PACE_MAX": cnki["session_pace"],
        "NOTIFY_WEBHOOKS": config.raw["notify"]["webhook"],
        "NOTIFY_FORMAT": config.raw["notify"]["format"],
        # flow control
        "TASKS_NAME": task.name,
        "TASKS_TYPE": task.type,
        "TASKS_START_DATE": task.start_date,
        "TASKS_END_DATE": task.end_date,
        "TASKS_CATEGORIES": task.categories,
        "TASKS_DAY_CENSUS": task.day_census,
        "TASKS_BASE_DIR": str(config.base_dir),
        "TASKS_ROUND_LEASE": crawl["round_lease_seconds"],
        "TASKS_ROUND_ATTEMPTS": crawl["round_attempts"],
        "TASKS_HEARTBEAT": crawl["heartbeat_seconds"],
        "TASKS_RECRAWL": crawl["recrawl"],
        # when CNKI keeps saying no (cnkispider/halting.py)
        "TASKS_HALT_AFTER": crawl["halt_after"],
        "TASKS_HALT_WINDOW": crawl["halt_window"],
        "RETRY_CHALLENGE_SESSIONS": crawl["challenge_sessions"],
        "RETRY_CHALLENGE_COOLDOWN": crawl["challenge_cooldown"],
        # Redis scheduling
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
        # one learned pace per CNKI session and per IP, in the same middleware
        "PACE_ENABLED": crawl["pace"],
        "PACE_START": crawl["pace_start"],
        "PACE_STEP": crawl["pace_step"],
        "PACE_MAX": crawl["pace_max"],
        "PACE_COOLDOWN": crawl["pace_cooldown"],
        "PACE_DIRECT_NAME": proxy["direct_name"],
    }
    if crawl["log_file"]:
        settings["LOG_FILE"] = str(config.resolve(crawl["log_file"]))
    if crawl["feed"]:
        feed = config.resolve(crawl["feed"])
        settings["FEEDS"] = {
            str(feed): {
                "format": "csv" if feed.suffix == ".csv" else "jsonlines",
                "encoding": "utf-8",
            }
        }
    if crawl["archive_html"]:
        settings["ARCHIVE_DIR"] = str(data_dir / "archive")
        # below the retry middleware (610): it sees only pages that passed the refusal check
        settings["DOWNLOADER_MIDDLEWARES"] = {
            **settings["DOWNLOADER_MIDDLEWARES"],
            "cnkispider.archive.HtmlArchiveMiddleware": 605,
        }
    return settings


def _load() -> dict:
    """The settings of `scrapy crawl`: the same config, console and checks as `cnkispider run`."""
    from cnkispider import logs

    verbose = logs.verbose_from_env()
    try:
        config = load_config(os.environ.get("CNKI_CONFIG") or None)
        settings = crawler_settings(config)
        if _scrapy_crawl_argv(sys.argv):
            # the checks `cnkispider run` makes before Scrapy starts, with its lines and codes
            from cnkispider.cli import preflight

            preflight(config, task_arg=_task_arg(sys.argv))
    except CnkiSpiderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except (LookupError, ValueError) as exc:  # a bad [task], -a task=NOSUCH
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    verbose = not logs.is_quiet(verbose, settings.get("LOG_FILE"))
    settings.update(logs.quiet_settings(verbose))
    if _scrapy_crawl_argv(sys.argv):  # not when `cnkispider` or a test imports this module
        logs.apply(verbose)
    return settings


def _scrapy_argv(argv: list[str]) -> bool:
    """Whether this process is Scrapy's command line (`scrapy crawl`, `scrapy list`, ...)."""
    if not argv:
        return False
    program = os.path.normpath(argv[0])
    # the `scrapy` script (scrapy.exe on Windows), or `python -m scrapy` (.../scrapy/__main__.py)
    return (
        os.path.basename(program).startswith("scrapy")
        or os.path.basename(os.path.dirname(program)) == "scrapy"
    )


def _scrapy_crawl_argv(argv: list[str]) -> bool:
    """Whether this process is `scrapy crawl ...` (not a test or `cnkispider` importing us)."""
    return _scrapy_argv(argv) and "crawl" in argv[1:3]


def _task_arg(argv: list[str]) -> str | None:
    """The value of `-a task=NAME` on the command line, if any."""
    for i, arg in enumerate(argv):
        value = None
        if arg == "-a" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("-a") and len(arg) > 2:
            value = arg[2:]
        if value and value.startswith("task="):
            return value.split("=", 1)[1]
    return None


# Only Scrapy's own command line reads its settings from this module. `cnkispider --config X`
# (and a test) imports it for crawler_settings and must not load ./config.ini on the way: a
# stray or broken file there would override --config, or stop the program naming the wrong file.
if _scrapy_argv(sys.argv):
    globals().update(_load())
