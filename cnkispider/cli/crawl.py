"""`cnkispider run | recrawl | refresh-counts | export`: a crawl in this process (or N worker
processes), its summary, its exit status (a halted task: one line and EXIT_HALTED), and the
export of what crawls stored."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cnkispider.cli.common import add_command, crawl_options
from cnkispider.clock import cnki_today
from cnkispider.config import Config
from cnkispider.exceptions import CnkiSpiderError, InputError, UnknownName
from cnkispider.items import DOC_TYPES
from cnkispider.launch.preflight import parse_day, preflight, task_store
from cnkispider.words import i18n
from cnkispider.words.i18n import _
from cnkispider.words.vocabulary import word
from tasks.phase import Phase


def crawl(
    config: Config,
    *,
    recrawl_only: bool = False,
    settings_overrides: dict | None = None,
    task: str | None = None,
) -> dict:
    """Run one worker's crawl in this process; return its stats and finish reason. ``task``:
    the task of the task table to crawl (`run --task NAME`, as `scrapy crawl TYPE -a
    task=NAME`), else config.ini's [task] (registered if new)."""
    import time

    from scrapy.crawler import CrawlerProcess

    from cnkispider.launch.crawlsettings import crawler_settings
    from cnkispider.watch import logs

    named = preflight(config, task_arg=task)
    settings = crawler_settings(config)
    if named is not None:  # the row's name and type, for whatever names the task (notify)
        settings.update({"TASKS_NAME": named.name, "TASKS_TYPE": named.type})
    overrides = settings_overrides or {}
    verbose = not logs.is_quiet(
        bool(overrides.get("CNKI_VERBOSE")), overrides.get("LOG_FILE", settings.get("LOG_FILE"))
    )
    logs.apply(verbose)
    settings.update(logs.quiet_settings(verbose))
    settings.update(overrides)
    settings["CNKI_VERBOSE"] = verbose
    if recrawl_only:
        store = task_store(config)
        current = (
            named
            or store.register(
                config.task.name,
                config.task.type,
                config.task.start_date or cnki_today().isoformat(),
                config.task.end_date,
                config.task.categories,
                config.task.depth,
                None,
                config.task.query or None,
                follow=config.task.follow,
            )[0]
        )
        store.set_phase(current.id, Phase.RECRAWL)
    name = named.name if named is not None else config.task.name
    plan = _plan_now(config, name)  # the summary shows it beside what the run took
    process = CrawlerProcess(settings)
    started = time.monotonic()
    failures: list = []  # the crawl could not start (Redis unreachable when the scheduler opened)
    # the spider of the task's type; a named task is the spider's argument, as `-a task=NAME`
    spider_args = {"task": named.name} if named is not None else {}
    # the crawler built here, not looked up after crawl(): a crawler that fails to build leaves
    # process.crawlers empty, and its own error was lost behind a StopIteration
    crawler = process.create_crawler(named.type if named else config.task.type)
    process.crawl(crawler, **spider_args).addErrback(failures.append)
    try:
        process.start()
    finally:
        logs.apply(True)  # the loggers as they were, for whatever runs next in this process
    if failures:  # a CnkiSpiderError is main's one line (exit 2); anything else is a bug
        failures[0].raiseException()
    stats = dict(crawler.stats.get_stats())
    # a second Ctrl-C stops the reactor before the spider closes: Scrapy never sets a reason
    if not stats.get("finish_reason"):
        from cnkispider.status import FORCED_STOP

        stats["finish_reason"] = FORCED_STOP
    stats["elapsed_seconds"] = time.monotonic() - started
    if plan is not None:
        stats["plan/at_start"] = plan
        after = _plan_now(config, name)
        stats["plan/days_left_at_end"] = after["days"] if after is not None else plan["days"]
    return stats


def _plan_now(config: Config, name: str) -> dict | None:
    """`task plan`'s figures for task ``name`` now (None: no such task yet, or nothing to plan
    from). A hint for the summary: a failure to make it never stops the run."""
    from cnkispider.status.plan import task_plan
    from cnkispider.store.db import open_database_readonly

    try:
        engine = open_database_readonly(config.database_url)
    except Exception:
        return None
    try:
        plan = task_plan(config, engine, name)
    except Exception:  # no such task yet (the spider registers it), a row a worker skips
        return None
    finally:
        engine.dispose()
    return plan if plan["documents"] is not None else None


def print_summary(config: Config, stats: dict, name: str | None = None) -> None:
    """Rounds, documents, errors by reason, time and rate, from the database and this run's
    stats, of task ``name`` (default: config.ini's)."""
    from cnkispider.status import run_summary
    from cnkispider.store.db import open_database_readonly

    engine = open_database_readonly(config.database_url)
    try:
        print(
            run_summary(
                engine,
                name or config.task.name,
                stats,
                heartbeat_seconds=config.crawl["heartbeat_seconds"],
            ),
            end="",
        )
    finally:
        engine.dispose()


def cmd_run(config: Config, args) -> int:
    if getattr(args, "reload", False):  # workers as children, restarted on a code change
        from cnkispider.launch.reload import supervise

        return supervise(args.config, args.command, args.processes or 1, task=args.task)
    if args.processes and args.processes > 1:
        return run_processes(args)
    stats = crawl(
        config,
        recrawl_only=args.command == "recrawl",
        settings_overrides=run_overrides(args),
        task=args.task,
    )
    name = args.task or config.task.name
    print_summary(config, stats, name)
    if stats.get("finish_reason") == "halted":
        return report_halt(config, name)
    if stats.get("finish_reason") == "local_fault":  # tasks.feeder: this worker's own fault
        from cnkispider.watch.halting import EXIT_LOCAL_FAULT, local_fault_line

        print(local_fault_line(name, stats.get("local_fault", "")), file=sys.stderr)
        return EXIT_LOCAL_FAULT
    if stats.get("finish_reason") == "needs_person":  # [cnki] on_check = fail
        from cnkispider.sessions.pool import WAITING_MESSAGE
        from cnkispider.watch.halting import EXIT_HALTED

        print(
            _("task %(name)s: stopped: %(why)s") % {"name": name, "why": _(WAITING_MESSAGE)},
            file=sys.stderr,
        )
        return EXIT_HALTED
    return 0 if stats.get("finish_reason") in ("finished", "up_to_date", "shutdown") else 1


def process_count(text: str) -> int:
    """``--processes N``: a whole number of at least 1 (not given: [crawl] processes)."""
    import argparse

    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(
            _("%(value)r: expected a whole number of at least 1") % {"value": text}
        )
    return number


def run_overrides(args) -> dict:
    """Scrapy settings from `run`'s -s KEY=VALUE, -o FILE and --verbose (as `scrapy crawl` has)."""
    from cnkispider.launch.settingcheck import check_setting

    overrides: dict = {"CNKI_VERBOSE": bool(getattr(args, "verbose", False))}
    for pair in getattr(args, "set", None) or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(
                _("-s %(pair)r: expected KEY=VALUE, e.g. -s DOWNLOAD_DELAY=2") % {"pair": pair}
            )
        check_setting(key.strip(), value)  # one line (exit 2), not the crawler's traceback
        overrides[key.strip()] = value
    feeds = {}
    for target in getattr(args, "output", None) or []:
        path, _colon, fmt = target.partition(":")
        suffix = Path(path).suffix.lower().lstrip(".")
        fmt = fmt or {
            "jsonl": "jsonlines",
            "jl": "jsonlines",
            "csv": "csv",
            "json": "json",
            "xml": "xml",
        }.get(suffix)
        if fmt is None:
            raise InputError(
                _(
                    "-o %(target)r: unknown feed format; use .jsonl, .csv, .json or .xml (or FILE:FORMAT)"
                )
                % {"target": target}
            )
        feeds[path] = {"format": fmt, "encoding": "utf-8"}
    if feeds:
        overrides["FEEDS"] = feeds
    if getattr(args, "until_idle", False):
        overrides["TASKS_UNTIL_IDLE"] = True  # a follow task's run ends once nothing is due
    return overrides


def report_halt(config: Config, name: str | None = None) -> int:
    """The one line of a halted task (``name``, default config.ini's: its reason and the fix)
    on standard error; EXIT_HALTED."""
    from cnkispider.watch.halting import EXIT_HALTED, halt_line

    name = name or config.task.name
    try:
        reason = task_store(config).get(name).halt_reason or "unknown reason"
    except CnkiSpiderError:  # no such task (UnknownName) or no database
        reason = "unknown reason"
    print(halt_line(name, reason), file=sys.stderr)
    return EXIT_HALTED


def run_processes(args) -> int:
    """N full workers on this machine, each its own process sharing Redis and the database; one
    that dies is started again (cnkispider/launch/workers.py)."""
    # Frozen (the .exe), the program is the command itself: `-m` would mean nothing to it.
    frozen = getattr(sys, "frozen", False)
    base = [sys.executable] if frozen else [sys.executable, "-m", "cnkispider.cli"]
    if args.config:
        base += ["--config", args.config]
    if getattr(args, "output", None):
        raise InputError(
            _(
                "-o FILE takes one process (every worker would write the same file); add --processes 1"
            )
        )
    run_overrides(args)  # a bad -s is one line here, not the same line from every worker
    extra = [arg for pair in (getattr(args, "set", None) or []) for arg in ("-s", pair)]
    if getattr(args, "task", None):
        extra += ["--task", args.task]
    if getattr(args, "verbose", False):
        extra.append("--verbose")
    if getattr(args, "until_idle", False):
        extra.append("--until-idle")
    # --processes 1: each is one worker (else each would read [crawl] processes and fork again)
    from cnkispider.launch.workers import Workers

    return Workers([*base, args.command, "--processes", "1", *extra], args.processes).run()


def cmd_refresh_counts(config: Config, args) -> int:
    """``refresh-counts TASK [--from DAY --to DAY]``: 被引/下载 read again from the list pages
    (cnkispider/watch/refresh.py); only cited, downloads and counted_at change."""
    import dataclasses

    import sqlalchemy as sa

    from cnkispider.store.db import open_database
    from cnkispider.store.schema import task as task_table
    from cnkispider.watch import refresh

    first, last = parse_day(args.from_day, "--from"), parse_day(args.to_day, "--to")
    engine = open_database(config.database_url)
    try:
        with engine.connect() as conn:
            row = conn.execute(sa.select(task_table).where(task_table.c.name == args.task)).first()
        if row is None:
            raise UnknownName(_("refresh-counts: no task %(name)r") % {"name": args.task})
        if not refresh.has_counts(row.type):
            raise InputError(
                _("refresh-counts: %(type)s rows carry no counts on CNKI's list")
                % {"type": word(row.type)}
            )
        start = first or row.start_date
        end = last or row.end_date or row.cur_date or start
        if end < start:
            raise InputError(
                _("refresh-counts: --to %(end)s is before --from %(start)s")
                % {"end": end, "start": start}
            )
        name = refresh.counts_task_name(row.name)
        if not getattr(args, "claimed", False):  # (claimed: a follow task's refresh, joined)
            refresh.reset(engine, name)
    finally:
        engine.dispose()
    shadow = dataclasses.replace(
        config,
        task=dataclasses.replace(
            config.task,
            name=name,
            type=row.type,
            start_date=start,
            end_date=end,
            categories=row.categories,
            follow=False,  # its own days, once: never a task that follows today
        ),
    )
    overrides = {**run_overrides(args), "CNKI_COUNTS_ONLY": True}
    stats = crawl(shadow, settings_overrides=overrides)
    updated = stats.get("counts/updated", 0)
    requests = stats.get("downloader/request_count", 0)
    values = {
        "name": row.name,
        "rows": i18n.number(updated),
        "start": start,
        "end": end,
        "unstored": i18n.number(stats.get("counts/not-stored", 0)),
        "requests": i18n.number(requests),
        "per": i18n.number(requests / updated, 3) if updated else "",
    }
    if updated:
        line = _(
            "task %(name)s: counts read again from %(rows)s listed rows (%(start)s .. %(end)s; "
            "a document in two categories is listed twice), %(unstored)s listed rows not "
            "stored; %(requests)s requests, %(per)s a row"
        )
    else:
        line = _(
            "task %(name)s: counts read again from %(rows)s listed rows (%(start)s .. %(end)s; "
            "a document in two categories is listed twice), %(unstored)s listed rows not "
            "stored; %(requests)s requests"
        )
    print(line % values)
    if stats.get("finish_reason") == "halted":
        return report_halt(shadow)
    return 0 if stats.get("finish_reason") in ("finished", "up_to_date", "shutdown") else 1


def _has_time(value: str | None) -> bool:
    return bool(value) and len(value.strip()) > 10 and value.strip()[10] in " T"


def cmd_export(config: Config, args) -> int:
    from cnkispider.output.export import export_command

    return export_command(
        config,
        doc_type=args.type or config.task.type,
        fmt=args.format,
        out=args.out,
        # a time ("YYYY-MM-DD HH:MM"): cnkispider.output.export.since_value reads it; a day: as every
        # day an operator types
        since=args.since if _has_time(args.since) else parse_day(args.since, "--since"),
        task=args.task,
        batch=args.batch,
        raw_cells=args.raw_cells,
    )


def add_run(sub) -> None:
    """`run` and `recrawl`."""
    for name, text in (
        ("run", _("crawl the task of config.ini (or --task), then recrawl its errors")),
        ("recrawl", _("only replay errorCode and errorLink")),
    ):
        p = add_command(sub, name, help=text)
        p.add_argument(
            "--task",
            metavar="NAME",
            help=_("a task of the task table, by name or id (default: [task] of config.ini)"),
        )
        p.add_argument(
            "--processes",
            type=process_count,
            default=0,
            help=_("worker processes (default [crawl] processes)"),
        )
        p.add_argument(
            "--reload",
            action="store_true",
            help=_("restart the workers when the project's code changes"),
        )
        if name == "run":
            p.add_argument(
                "--until-idle",
                action="store_true",
                help=_(
                    "a task that follows today: crawl until nothing is due (every day up to "
                    "today done, the look-back counted within [task] follow_every), then exit 0 "
                    "(for cron and timers: docs/FOLLOW.md)"
                ),
            )
        crawl_options(p)
        p.set_defaults(func=cmd_run)


def add_export(sub) -> None:
    """`export`."""
    export_parser = add_command(
        sub,
        "export",
        help=_(
            "stored documents as CSV, JSON lines, Excel, or for reference managers RIS, BibTeX, "
            "EndNote, CSL JSON"
        ),
    )
    export_parser.add_argument(
        "--type", choices=DOC_TYPES, help=_("document type (default: [task] type)")
    )
    export_parser.add_argument(
        "--format",
        choices=("csv", "jsonl", "ris", "bibtex", "endnote", "csljson", "xlsx"),
        default="csv",
        help=_(
            "csv, jsonl, or for reference managers ris, bibtex, endnote; csljson (CSL JSON, "
            "for pandoc, Zotero and word processors' citation plug-ins); xlsx (Excel, needs --out)"
        ),
    )
    export_parser.add_argument(
        "--since",
        metavar="DATE",
        help=_(
            "only documents dated DATE (YYYY-MM-DD) or later; with a time, "
            '"YYYY-MM-DD HH:MM" (UTC), only documents stored or changed since then'
        ),
    )
    export_parser.add_argument(
        "--task",
        help=_("only the documents this task found, whichever task stored them (name or id)"),
    )
    export_parser.add_argument(
        "--out", metavar="PATH", help=_("file to write (default, or -: standard output)")
    )
    export_parser.add_argument(
        "--raw-cells",
        action="store_true",
        help=_(
            "CSV: write cells starting with = + - @ exactly (default: prefix a ' "
            "so that Excel shows them as text instead of running them)"
        ),
    )
    export_parser.add_argument(
        "--batch", type=int, default=1000, help=argparse.SUPPRESS
    )  # rows a query
    export_parser.set_defaults(func=cmd_export)


def add_refresh_counts(sub) -> None:
    """`refresh-counts`."""
    refresh_parser = add_command(
        sub,
        "refresh-counts",
        help=_("read 被引/下载 again from the task's list pages (no detail page; docs/FIELDS.md)"),
    )
    refresh_parser.add_argument("task", help=_("the task whose documents' counts to refresh"))
    refresh_parser.add_argument("--from", dest="from_day", metavar="DAY", help=_("first day"))
    refresh_parser.add_argument("--to", dest="to_day", metavar="DAY", help=_("last day"))
    # a follow task's worker, for its [task] refresh_counts_every (tasks/feeder.py): the refresh
    # was claimed, and the last one forgotten, in the database; one in flight is joined
    refresh_parser.add_argument("--claimed", action="store_true", help=argparse.SUPPRESS)
    crawl_options(refresh_parser)
    refresh_parser.set_defaults(func=cmd_refresh_counts)
