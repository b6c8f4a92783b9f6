"""The `cnkispider` command line (and the .exe's entry): ``main(argv=None)``.

    cnkispider [--config PATH] init-db
    cnkispider task add NAME --type patent --start 2024-01-01 [--end 2024-01-31] [--categories SPEC]
    cnkispider task list | show NAME | stop NAME | extend NAME END | resume NAME [--end DATE]
    cnkispider task move NAME DATE [CODE]
    cnkispider run [--processes N]       crawl the task of config.ini, then its recrawl phase
    cnkispider recrawl                   only the recrawl phase (replay errorCode, errorLink)
    cnkispider demo                      the offline demo: the local stand-in site, crawled
    cnkispider status [--task NAME] [--watch [SECONDS]] [--json]   progress, errors, workers, queue
    cnkispider export [--type T] [--format csv|jsonl] [--since DATE] [--task NAME] [--out PATH]

Every error the crawler raises on purpose (a bad config key, an unreachable database, a bad task
row) is printed as one line and the exit status is 2; a traceback means a bug.
"""

from __future__ import annotations

import argparse
import logging
import sys

from cnkispider.config import Config, load_config
from cnkispider.exceptions import CnkiSpiderError
from cnkispider.items import DOC_TYPES

logger = logging.getLogger("cnkispider")


def _store(config: Config):
    from cnkispider.db import open_database
    from tasks.flow import TaskStore

    engine = open_database(config.database_url)
    return TaskStore(
        engine, round_lease=config.crawl["round_lease_seconds"], base_dir=config.base_dir
    )


def _describe(t) -> str:
    end = t.end_date.isoformat() if t.end_date else "(today)"
    cur = f"{t.cur_date or '-'} {t.cur_code or '-'}"
    status = t.status.strftime("%Y-%m-%d %H:%M:%S") if t.status else "never"
    return (
        f"task {t.id} {t.name!r}: {t.type} {t.start_date}..{end}, cursor {cur}, "
        f"{len(t.tree.roots)} categories, phase {t.phase}, last heartbeat {status}"
    )


def cmd_init_db(config: Config, args) -> int:
    from cnkispider.db import mask_url

    _store(config)
    print(f"database ready: {mask_url(config.database_url)}")
    return 0


def cmd_task(config: Config, args) -> int:
    from cnkispider.exceptions import TaskRowError
    from tasks.flow import validate_row

    store = _store(config)
    action = args.action
    if action == "add":
        current, created = store.register(
            args.name, args.type, args.start, args.end or "", args.categories
        )
        print(("created " if created else "exists: ") + _describe(current))
    elif action == "list":
        rows = store.rows()
        if not rows:
            print("no tasks")
        for row in rows:
            try:
                print(_describe(validate_row(row, store.base_dir)))
            except TaskRowError as exc:
                print(f"task {row.id} {row.name!r}: BAD ROW, skipped by workers: {exc.problem}")
    elif action == "show":
        current = store.get(args.name)
        print(_describe(current))
        progress = store.progress(current.id)
        rounds = ", ".join(f"{k} {v}" for k, v in sorted(progress["rounds"].items())) or "none"
        print(f"rounds: {rounds}; errorCode {progress['error_code']}; errorLink {progress['error_link']}")
    elif action == "stop":
        print("stopped: " + _describe(store.stop(args.name)))
    elif action == "extend":
        print("extended: " + _describe(store.set_end_date(args.name, args.end)))
    elif action == "resume":
        print("resumed: " + _describe(store.set_end_date(args.name, args.end or None)))
    elif action == "move":
        print("moved: " + _describe(store.move_cursor(args.name, args.date, args.code)))
    return 0


def _check_services(config: Config) -> None:
    """Fail before Scrapy starts, with one clear line, if the database or Redis is unusable."""
    from cnkispider.db import open_database
    from cnkispider.redisconn import connect

    open_database(config.database_url).dispose()
    connect(config.redis_url, config.data_dir).close()


def crawl(config: Config, *, recrawl_only: bool = False, settings_overrides: dict | None = None) -> dict:
    """Run one worker's crawl in this process; return its stats and finish reason."""
    import time

    from scrapy.crawler import CrawlerProcess

    from cnkispider.settings import crawler_settings

    _check_services(config)
    settings = crawler_settings(config)
    settings.update(settings_overrides or {})
    if recrawl_only:
        store = _store(config)
        current, _ = store.register(
            config.task.name, config.task.type, config.task.start_date or _today(), config.task.end_date, config.task.categories
        )
        store.set_phase(current.id, "recrawl")
    process = CrawlerProcess(settings)
    started = time.monotonic()
    process.crawl(config.task.type)
    crawler = next(iter(process.crawlers))
    process.start()
    stats = dict(crawler.stats.get_stats())
    stats["elapsed_seconds"] = time.monotonic() - started
    return stats


def _today() -> str:
    import datetime as dt

    return (dt.datetime.now(dt.UTC) + dt.timedelta(hours=8)).date().isoformat()


def print_summary(config: Config, stats: dict) -> None:
    """Rounds, documents, errors by reason, time and rate, from the database and this run's stats."""
    from cnkispider.status import open_database_readonly, run_summary

    engine = open_database_readonly(config.database_url)
    try:
        print(run_summary(engine, config.task.name, stats, heartbeat_seconds=config.crawl["heartbeat_seconds"]), end="")
    finally:
        engine.dispose()


def cmd_run(config: Config, args) -> int:
    if getattr(args, "reload", False):  # workers as children, restarted on a code change
        from cnkispider.reload import supervise

        return supervise(args.config, args.command, args.processes or 1)
    if args.processes and args.processes > 1:
        return run_processes(args)
    stats = crawl(config, recrawl_only=args.command == "recrawl")
    print_summary(config, stats)
    return 0 if stats.get("finish_reason") in ("finished", "up_to_date", "shutdown") else 1


def run_processes(args) -> int:
    """N full workers on this machine, each its own process sharing Redis and the database."""
    import subprocess

    # Frozen (the .exe), the program is the command itself: `-m` would mean nothing to it.
    frozen = getattr(sys, "frozen", False)
    base = [sys.executable] if frozen else [sys.executable, "-m", "cnkispider.cli"]
    if args.config:
        base += ["--config", args.config]
    # --processes 1: each is one worker (else each would read [crawl] processes and fork again)
    workers = [subprocess.Popen([*base, args.command, "--processes", "1"]) for _ in range(args.processes)]
    try:
        codes = [w.wait() for w in workers]
    except KeyboardInterrupt:
        try:  # the workers got the same Ctrl-C (one console) and are stopping gracefully
            codes = [w.wait() for w in workers]
        except KeyboardInterrupt:  # a second Ctrl-C: stop them now
            for w in workers:
                w.terminate()
            codes = [w.wait() for w in workers]
    return max(codes)


def cmd_demo(config: Config, args) -> int:
    """The offline demo: start the local stand-in of CNKI and crawl a small task from it."""
    import subprocess
    from pathlib import Path

    from cnkispider.config import load_config

    root = Path(__file__).resolve().parent.parent
    if not (root / "tests" / "cnki_site").is_dir():
        print("error: the demo needs the repository checkout (tests/cnki_site)", file=sys.stderr)
        return 2
    site = subprocess.Popen(
        [sys.executable, "-m", "tests.cnki_site", "--port", "0", "--seed", "7"],
        cwd=root,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        base_url = site.stdout.readline().strip().rsplit(" ", 1)[-1]
        demo_dir = root / "data" / "demo"
        demo_dir.mkdir(parents=True, exist_ok=True)
        ini = demo_dir / "config.ini"
        ini.write_text(
            "[database]\nurl = sqlite:///cnki-demo.db\n"
            "[task]\nname = demo\ntype = patent\nstart_date = 2024-01-01\nend_date = 2024-01-02\n"
            "categories = G06,H04\n"
            f"[cnki]\nbase_url = {base_url}\n"
            "[crawl]\ndata_dir = .\nlease_seconds = 30\nheartbeat_seconds = 2\nlog_level = info\n",
            encoding="utf-8",
        )
        print(f"demo: stand-in CNKI at {base_url}; config {ini}")
        demo = load_config(ini)
        stats = crawl(demo)
        print_summary(demo, stats)
        print(f"demo data: {demo.database_url}")
        return 0 if stats.get("finish_reason") == "finished" else 1
    finally:
        site.terminate()
        site.wait(10)


def cmd_status(config: Config, args) -> int:
    from cnkispider.status import status_command

    return status_command(config, task_name=args.task, every=args.watch, as_json=args.json)


def cmd_export(config: Config, args) -> int:
    from cnkispider.export import export_command

    return export_command(config, doc_type=args.type or config.task.type, fmt=args.format, out=args.out,
                          since=args.since, task=args.task, batch=args.batch)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cnkispider", description="Distributed CNKI crawler")
    parser.add_argument("--config", help="config.ini to use (default: ./config.ini, then beside the program)")
    sub = parser.add_subparsers(dest="command")

    init = sub.add_parser("init-db", help="create the database and its tables if missing")
    init.set_defaults(func=cmd_init_db)

    task_parser = sub.add_parser("task", help="add, list, show and steer tasks")
    actions = task_parser.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="register a task (joins it unchanged if it exists)")
    add.add_argument("name")
    add.add_argument("--type", required=True, choices=DOC_TYPES)
    add.add_argument("--start", required=True, help="first day, YYYY-MM-DD")
    add.add_argument("--end", help="last day, YYYY-MM-DD (default: up to today)")
    add.add_argument("--categories", default="builtin", help="category spec (see config.ini)")
    actions.add_parser("list", help="every task, bad rows flagged")
    for name, text in (("show", "one task with its progress"), ("stop", "stop after in-flight rounds")):
        p = actions.add_parser(name, help=text)
        p.add_argument("name")
    extend = actions.add_parser("extend", help="set a later end date")
    extend.add_argument("name")
    extend.add_argument("end")
    resume = actions.add_parser("resume", help="go on after a stop (default: up to today)")
    resume.add_argument("name")
    resume.add_argument("--end")
    move = actions.add_parser("move", help="move the cursor (the next round follows it)")
    move.add_argument("name")
    move.add_argument("date")
    move.add_argument("code", nargs="?")
    task_parser.set_defaults(func=cmd_task)

    for name, text in (("run", "crawl the task of config.ini, then recrawl its errors"),
                       ("recrawl", "only replay errorCode and errorLink")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--processes", type=int, default=0, help="worker processes (default [crawl] processes)")
        p.add_argument("--reload", action="store_true", help="restart the workers when the project's code changes")
        p.set_defaults(func=cmd_run)
    demo = sub.add_parser("demo", help="offline demo against the local CNKI stand-in")
    demo.set_defaults(func=cmd_demo)
    status_parser = sub.add_parser("status", help="every task: rounds, ETA, documents, errors, workers, queue")
    status_parser.add_argument("--task", help="only this task (name or id)")
    status_parser.add_argument("--watch", nargs="?", type=float, const=5.0, metavar="SECONDS",
                               help="redraw in place every SECONDS (default 5) until Ctrl-C")
    status_parser.add_argument("--json", action="store_true", help="JSON for scripts (--watch: one report a line)")
    status_parser.set_defaults(func=cmd_status)
    export_parser = sub.add_parser("export", help="stored documents as CSV (opens in Excel) or JSON lines")
    export_parser.add_argument("--type", choices=DOC_TYPES, help="document type (default: [task] type)")
    export_parser.add_argument("--format", choices=("csv", "jsonl"), default="csv")
    export_parser.add_argument("--since", metavar="DATE", help="only documents dated DATE (YYYY-MM-DD) or later")
    export_parser.add_argument("--task", help="only documents stored by this task (name or id)")
    export_parser.add_argument("--out", metavar="PATH", help="file to write (default, or -: standard output)")
    export_parser.add_argument("--batch", type=int, default=1000, help=argparse.SUPPRESS)  # rows a query
    export_parser.set_defaults(func=cmd_export)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command not in ("run", "recrawl", "demo"):  # a crawl's logging is Scrapy's
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config)
        if getattr(args, "processes", None) == 0:
            args.processes = config.crawl["processes"]
        return args.func(config, args)
    except CnkiSpiderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (LookupError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
