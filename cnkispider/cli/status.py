"""`cnkispider status | web | probe`: what the crawl is doing (a report, or the operator's page)
and whether CNKI still is what the crawler believes (the live probe, docs/PROBE.md)."""

from __future__ import annotations

from pathlib import Path

from cnkispider.cli.common import add_command
from cnkispider.config import Config
from cnkispider.launch.preflight import parse_day
from cnkispider.words.i18n import _


def cmd_status(config: Config, args) -> int:
    from cnkispider.status import status_command

    return status_command(config, task_name=args.task, every=args.watch, as_json=args.json)


def cmd_web(config: Config, args) -> int:
    # imported here: a crawl never loads Starlette, Jinja2 or uvicorn
    from cnkispider.web.serve import serve

    return serve(
        config,
        host=args.host,
        port=args.port,
        browser=args.browser,
        desk_idle=args.desk_idle,
        desk_cdp=args.desk_cdp,
    )


def cmd_probe(config: Config, args) -> int:
    import datetime as dt

    from cnkispider.probe import probe_from_config

    day = dt.date.fromisoformat(parse_day(args.day, "--day")) if args.day else None
    save = Path(args.save) if args.save else None
    return probe_from_config(
        config,
        day=day,
        delay=args.delay,
        save_dir=save,
        session_id=getattr(args, "session", None),
        session_budget=getattr(args, "session_budget", 0) or 0,
    ).run()


def add_status(sub) -> None:
    """`status`."""
    status_parser = add_command(
        sub, "status", help=_("every task: rounds, ETA, documents, errors, workers, queue")
    )
    status_parser.add_argument("--task", help=_("only this task (name or id)"))
    status_parser.add_argument(
        "--watch",
        nargs="?",
        type=float,
        const=5.0,
        metavar="SECONDS",
        help=_("redraw in place every SECONDS (default 5) until Ctrl-C"),
    )
    status_parser.add_argument(
        "--json", action="store_true", help=_("JSON for scripts (--watch: one report a line)")
    )
    status_parser.set_defaults(func=cmd_status)


def add_probe(sub) -> None:
    """`probe`."""
    probe = add_command(
        sub, "probe", help=_("check the crawler's assumptions against the live CNKI (~30 requests)")
    )
    probe.add_argument(
        "--day",
        metavar="DATE",
        help=_("a busy day to search (default: a Wednesday four weeks back)"),
    )
    probe.add_argument(
        "--delay", type=float, default=3.0, help=_("seconds between requests (default 3)")
    )
    probe.add_argument(
        "--save", metavar="DIR", help=_("keep every raw answer here (gzip) with an index.json")
    )
    probe.add_argument(
        "--session",
        metavar="ID",
        help=_(
            "when CNKI checks for a person: the pool's session to probe with (default: a ready one)"
        ),
    )
    probe.add_argument(
        "--session-budget",
        type=int,
        default=0,
        metavar="N",
        help=_(
            "measure how long a verified session lasts at [cnki] session_pace, spending up to N "
            "requests of it (it may then need a person again; default 0: not measured)"
        ),
    )
    probe.set_defaults(func=cmd_probe)


def add_web(sub) -> None:
    """`web`."""
    web = add_command(
        sub,
        "web",
        help=_("the operator's page: tasks, coverage grid, workers, errors, /metrics, actions"),
    )
    web.add_argument("--host", help=_("address to listen on (default [web] host: 127.0.0.1)"))
    web.add_argument("--port", type=int, help=_("port (default [web] port: 8700)"))
    web.add_argument(
        "--browser",
        metavar="PATH",
        help=_(
            "the pass desk's browser (default: Chrome, Edge or Chromium, as session login finds them)"
        ),
    )
    web.add_argument(
        "--desk-idle",
        type=float,
        default=None,
        metavar="SECONDS",
        help=_("close the pass desk's browser after this long without anyone at it (default 60)"),
    )
    web.add_argument(
        "--desk-cdp",
        type=int,
        default=None,
        metavar="PORT",
        help=_(
            "the pass desk opens a tab in the browser already running with "
            "--remote-debugging-port=PORT, instead of starting one"
        ),
    )
    web.set_defaults(func=cmd_web)
