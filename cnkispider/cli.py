"""The `cnkispider` command line (and the .exe's entry): ``main(argv=None)``.

    cnkispider [--config PATH] init-db
    cnkispider task add NAME --type patent --start 2024-01-01 [--end 2024-01-31] [--categories SPEC]
    cnkispider task list | show NAME | stop NAME | extend NAME END | resume NAME [--end DATE]
    cnkispider task move NAME DATE [CODE]

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
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config)
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
