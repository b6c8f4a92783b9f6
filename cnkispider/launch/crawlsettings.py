"""The settings of a crawl: the project's static ones and config.ini's, mapped onto them.

:func:`crawler_settings` is the one mapping of a loaded config.ini (:mod:`cnkispider.config`)
onto Scrapy settings, for both ways of starting a crawl: `cnkispider run` (the file of
``--config``) and `scrapy crawl` (config.ini, or the file ``CNKI_CONFIG`` names; the project's
crawl command, :mod:`cnkispider.commands.crawl`), so both behave the same. The defaults of every
setting live in :mod:`cnkispider.default_settings`, installed by the add-on in ``ADDONS``.

It starts from :mod:`cnkispider.settings`, which names the crawl's components in their order
(one table; config.ini's keys switch them on and off, never move them), so this module sits
above the crawl layer, with the checks before a crawl (:mod:`cnkispider.launch.preflight`), and below
the entry points that use both.
"""

from __future__ import annotations

from cnkispider import settings as _project
from cnkispider.config import Config

#: Settings of Scrapy's command line, not of a crawler: `cnkispider run` builds its crawler
#: without them.
COMMAND_LINE_ONLY = frozenset({"COMMANDS_MODULE"})


def project_settings() -> dict:
    """The project's static settings: the upper-case names of :mod:`cnkispider.settings`."""
    return {
        name: value
        for name, value in vars(_project).items()
        if name.isupper() and name[0] != "_" and name not in COMMAND_LINE_ONLY
    }


def crawler_settings(config: Config) -> dict:
    """Every Scrapy setting the crawler needs: the project's (cnkispider/settings.py) and
    config.ini's.

    The defaults of the rest are installed by the add-on in ``ADDONS`` when the crawler is built.
    """
    crawl, cnki, proxy, task = config.crawl, config.cnki, config.proxy, config.task
    data_dir = config.data_dir
    settings = {
        **project_settings(),
        "CONCURRENT_REQUESTS": crawl["concurrent_requests"],
        "CONCURRENT_REQUESTS_PER_DOMAIN": crawl["concurrent_requests"],
        "DOWNLOAD_DELAY": crawl["download_delay"],
        "DOWNLOAD_TIMEOUT": crawl["download_timeout"],
        "RETRY_TIMES": crawl["retry_times"],
        "LOG_LEVEL": crawl["log_level"].upper(),
        # storage and shared state
        "DATABASE_URL": config.database_url,
        "DATABASE_OUTAGE_SECONDS": config.raw["database"]["outage_seconds"],
        "DATABASE_LEDGER_DAYS": config.raw["database"]["ledger_days"],
        "REDIS_URL": config.redis_url,
        "REDIS_KEY_PREFIX": config.redis_prefix,
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
        "CNKI_EXPORT_BATCH": cnki["export_batch"],
        "SESSION_TURN_LIMIT": cnki["turn_limit"],
        "SESSIONS_MODE": cnki["sessions"],
        "SESSIONS_ON_CHECK": cnki["on_check"],
        "SESSIONS_PACE_MAX": cnki["session_pace"],
        "NOTIFY_WEBHOOKS": config.raw["notify"]["webhook"],
        "NOTIFY_FORMAT": config.raw["notify"]["format"],
        "WEB_PUBLIC_URL": config.raw.get("web", {}).get("public_url", ""),
        # flow control
        "TASKS_NAME": task.name,
        "TASKS_TYPE": task.type,
        "TASKS_START_DATE": task.start_date,
        "TASKS_END_DATE": task.end_date,
        "TASKS_CATEGORIES": task.categories,
        "TASKS_DAY_CENSUS": task.day_census,
        "TASKS_DEPTH": task.depth,
        "TASKS_QUERY": task.query,
        "TASKS_FOLLOW": task.follow,
        "TASKS_LOOK_BACK_DAYS": task.look_back_days,
        "TASKS_FOLLOW_EVERY": task.follow_every,
        "TASKS_REFRESH_COUNTS_EVERY": task.refresh_counts_every,
        "TASKS_LOOK_TIERS": task.look_tiers,
        "TASKS_FACET_COUNTS": task.facet_counts,
        # the file a worker's counts refresh (a child `refresh-counts`) reads, as this one did
        "CNKI_CONFIG_FILE": str(config.path) if config.path else "",
        "TASKS_BASE_DIR": str(config.base_dir),
        "TASKS_ROUND_LEASE": crawl["round_lease_seconds"],
        "TASKS_ROUND_ATTEMPTS": crawl["round_attempts"],
        "TASKS_HEARTBEAT": crawl["heartbeat_seconds"],
        "TASKS_RECRAWL": crawl["recrawl"],
        # when CNKI keeps saying no (cnkispider/watch/halting.py)
        "TASKS_HALT_AFTER": crawl["halt_after"],
        "TASKS_HALT_WINDOW": crawl["halt_window"],
        "RETRY_CHALLENGE_SESSIONS": crawl["challenge_sessions"],
        "RETRY_CHALLENGE_COOLDOWN": crawl["challenge_cooldown"],
        # Redis scheduling
        "SCHEDULER_NAMESPACE": f"{config.redis_prefix}{task.name}",
        "SCHEDULER_LEASE_SECONDS": crawl["lease_seconds"],
        "SCHEDULER_MAX_ATTEMPTS": crawl["max_attempts"],
        "REDIS_UNREADABLE_KEPT": config.raw["redis"]["unreadable_kept"],
        "REDIS_REMOVE_FINISHED": config.raw["redis"]["remove_finished"],
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
        "RATELIMIT_KEY_PREFIX": f"{config.redis_prefix}ratelimit",
        # CNKI's "come back later" without Retry-After: 5, 15, 45 s... up to this
        "RATELIMIT_MAX_BACKOFF": crawl["max_backoff"],
        # one learned pace per CNKI session and per IP, in the same middleware
        "PACE_ENABLED": crawl["pace"],
        "PACE_START": crawl["pace_start"],
        "PACE_STEP": crawl["pace_step"],
        "PACE_MAX": crawl["pace_max"],
        "PACE_COOLDOWN": crawl["pace_cooldown"],
        "PACE_DIRECT_NAME": proxy["direct_name"],
        # a paper's reference list after its detail page (cnkispider/spiders/references.py)
        "CNKI_REFERENCES": crawl["references"],
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
        # switches on the archive middleware (its place: cnkispider/settings.py)
        settings["ARCHIVE_DIR"] = str(data_dir / "archive")
    return settings
