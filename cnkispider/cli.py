"""The `cnkispider` command line (and the .exe's entry): ``main(argv=None)``.

    cnkispider [--config PATH] init-db
    cnkispider task add NAME --type patent --start 2024-01-01 [--end 2024-01-31] [--categories SPEC]
                    [--depth list|export|detail]
    cnkispider task list | show NAME | stop NAME | pause NAME | resume NAME [--end DATE]
    cnkispider task extend NAME [END]     a later end date (none: up to today)
    cnkispider task move NAME DATE [CODE]
    cnkispider run [--processes N]       crawl the task of config.ini, then its recrawl phase
    cnkispider recrawl                   only the recrawl phase (replay errorCode, errorLink)
    cnkispider task set NAME [--categories SPEC] [--type T] [--depth D]   (type: only before its first round)
    cnkispider run|recrawl [--verbose] [-s KEY=VALUE] [-o FILE]
    cnkispider demo                      the offline demo: the local stand-in site, crawled
    cnkispider status [--task NAME] [--watch [SECONDS]] [--json]   progress, errors, workers, queue
    cnkispider probe [--day DATE] [--delay 3] [--save DIR]   check CNKI's assumptions live (docs/PROBE.md)
    cnkispider export [--type T] [--format csv|jsonl] [--since DATE] [--task NAME] [--out PATH]
    cnkispider session login [--browser PATH | --cdp PORT]   pass CNKI's check in a browser, keep it
    cnkispider session add --from-curl FILE|- | --cookie-string "a=1; b=2" | --cookie-file FILE
    cnkispider session list | remove ID | check [ID]
    cnkispider web [--host 127.0.0.1] [--port 8700]   the operator's page (cnkispider/web/)
    cnkispider admin grant-worker NAME [--apply]   a worker's database account and Redis user

Every error the crawler raises on purpose (a bad config key, an unreachable database, a bad task
row) is printed as one line and the exit status is 2; a traceback means a bug.

Exit status of `run` / `recrawl` (and of the .exe): 0 finished (or up to date, or shut down on
request); 1 the crawl stopped for another reason; 2 an error before crawling (above); 3 the task
is halted (CNKI rejected a query, one failure repeats, CNKI cannot be reached): one line on
standard error says why and how to go on (`cnkispider task resume NAME`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from cnkispider.clock import cnki_today
from cnkispider.config import Config, load_config
from cnkispider.durations import duration
from cnkispider.exceptions import CnkiSpiderError
from cnkispider.items import DEFAULT_DEPTH, DOC_TYPES, check_depth
from cnkispider.preflight import add_drift, check_task_input, parse_day, preflight, task_store
from cnkispider.sessions.waysin import added_line, cnki_site_of
from cnkispider.version import __version__
from tasks.phase import Phase
from tasks.rows import describe

logger = logging.getLogger("cnkispider")


def cmd_init_db(config: Config, args) -> int:
    from cnkispider.db import mask_url

    task_store(config)
    print(f"database ready: {mask_url(config.database_url)}")
    return 0


def cmd_task(config: Config, args) -> int:
    from cnkispider.exceptions import TaskRowError
    from tasks.rows import validate_row

    store = task_store(config)
    action = args.action
    if action == "add":
        from tasks.selection import selection_text

        typed = argparse.Namespace(**vars(args))  # as given: a second add compares only these
        if args.like:
            # a deepening task: the other task's rounds again (their links died with their
            # sessions), with its type, days and categories unless given here
            like = store.get(args.like)
            args.type = args.type or like.type
            args.start = args.start or like.start_date.isoformat()
            args.end = args.end or (like.end_date.isoformat() if like.end_date else None)
            if args.categories is None:
                args.categories = like.categories
        if not args.type or not args.start:
            raise ValueError("task add: give --type and --start (or --like TASK)")
        if args.categories is None:
            args.categories = "builtin"
        # every check first: an error leaves no row behind
        check_task_input(args.type, args.start, args.end, args.categories, store.base_dir)
        depth = check_depth(DEFAULT_DEPTH if args.depth is None else args.depth, "--depth")
        selection = selection_text(args.where, args.keys)
        current, created = store.register(
            args.name,
            args.type,
            parse_day(args.start, "start date"),
            parse_day(args.end, "end date") or "",
            args.categories,
            depth,
            selection,
        )
        changes = [] if created else add_drift(typed, current)
        if changes:
            # the row wins: a second `task add` never overwrites it; say what would change it
            print(
                f"error: task {current.name!r} exists with other arguments "
                f"({describe(current)}); to change it: " + "; ".join(changes),
                file=sys.stderr,
            )
            return 2
        print(("created " if created else "exists: ") + describe(current))
    elif action == "set":
        print(
            "changed: "
            + describe(store.set_task(args.name, args.categories, args.type, args.depth))
        )
    elif action == "list":
        rows = store.rows()
        if not rows:
            print("no tasks")
        for row in rows:
            try:
                print(describe(validate_row(row, store.base_dir)))
            except TaskRowError as exc:
                print(f"task {row.id} {row.name!r}: BAD ROW, skipped by workers: {exc.problem}")
    elif action == "show":
        current = store.get(args.name)
        print(describe(current))
        progress = store.progress(current.id)
        rounds = ", ".join(f"{k} {v}" for k, v in sorted(progress["rounds"].items())) or "none"
        print(
            f"rounds: {rounds}; errorCode {progress['error_code']}; errorLink {progress['error_link']}"
        )
    elif action == "stop":
        print("stopped: " + describe(store.stop(args.name)))
    elif action == "extend":
        print(
            "extended: " + describe(store.set_end_date(args.name, parse_day(args.end, "end date")))
        )
    elif action == "pause":
        print("paused: " + describe(store.pause(args.name)))
    elif action == "resume":
        resumed, reopened = store.resume(args.name, parse_day(args.end, "end date"))
        if reopened is None:
            print("resumed: " + describe(resumed))
        else:  # a paused or halted task goes on where it stopped, its end date unchanged
            print(
                f"resumed: {describe(resumed)} (halt cleared: {reopened['reason']}; "
                f"{reopened['rounds']} rounds re-opened, {reopened['error_code']} errorCode rows to replay)"
            )
    elif action == "move":
        if args.code is not None and len(args.code) > 64:
            raise ValueError(f"category code {args.code[:20]!r}... is longer than 64 characters")
        print(
            "moved: "
            + describe(store.move_cursor(args.name, parse_day(args.date, "date"), args.code))
        )
    return 0


def crawl(
    config: Config, *, recrawl_only: bool = False, settings_overrides: dict | None = None
) -> dict:
    """Run one worker's crawl in this process; return its stats and finish reason."""
    import time

    from scrapy.crawler import CrawlerProcess

    from cnkispider import logs
    from cnkispider.crawlsettings import crawler_settings

    preflight(config)
    settings = crawler_settings(config)
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
        current, _ = store.register(
            config.task.name,
            config.task.type,
            config.task.start_date or cnki_today().isoformat(),
            config.task.end_date,
            config.task.categories,
            config.task.depth,
        )
        store.set_phase(current.id, Phase.RECRAWL)
    process = CrawlerProcess(settings)
    started = time.monotonic()
    process.crawl(config.task.type)
    crawler = next(iter(process.crawlers))
    try:
        process.start()
    finally:
        logs.apply(True)  # the loggers as they were, for whatever runs next in this process
    stats = dict(crawler.stats.get_stats())
    # a second Ctrl-C stops the reactor before the spider closes: Scrapy never sets a reason
    if not stats.get("finish_reason"):
        from cnkispider.status import FORCED_STOP

        stats["finish_reason"] = FORCED_STOP
    stats["elapsed_seconds"] = time.monotonic() - started
    return stats


def print_summary(config: Config, stats: dict) -> None:
    """Rounds, documents, errors by reason, time and rate, from the database and this run's stats."""
    from cnkispider.db import open_database_readonly
    from cnkispider.status import run_summary

    engine = open_database_readonly(config.database_url)
    try:
        print(
            run_summary(
                engine, config.task.name, stats, heartbeat_seconds=config.crawl["heartbeat_seconds"]
            ),
            end="",
        )
    finally:
        engine.dispose()


def cmd_run(config: Config, args) -> int:
    if getattr(args, "reload", False):  # workers as children, restarted on a code change
        from cnkispider.reload import supervise

        return supervise(args.config, args.command, args.processes or 1)
    if args.processes and args.processes > 1:
        return run_processes(args)
    stats = crawl(
        config, recrawl_only=args.command == "recrawl", settings_overrides=run_overrides(args)
    )
    print_summary(config, stats)
    if stats.get("finish_reason") == "halted":
        return report_halt(config)
    if stats.get("finish_reason") == "needs_person":  # [cnki] on_check = fail
        from cnkispider.halting import EXIT_HALTED
        from cnkispider.sessions.pool import WAITING_MESSAGE

        print(f"task {config.task.name}: stopped: {WAITING_MESSAGE}", file=sys.stderr)
        return EXIT_HALTED
    return 0 if stats.get("finish_reason") in ("finished", "up_to_date", "shutdown") else 1


def run_overrides(args) -> dict:
    """Scrapy settings from `run`'s -s KEY=VALUE, -o FILE and --verbose (as `scrapy crawl` has)."""
    overrides: dict = {"CNKI_VERBOSE": bool(getattr(args, "verbose", False))}
    for pair in getattr(args, "set", None) or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"-s {pair!r}: expected KEY=VALUE, e.g. -s DOWNLOAD_DELAY=2")
        overrides[key.strip()] = value
    feeds = {}
    for target in getattr(args, "output", None) or []:
        path, _, fmt = target.partition(":")
        suffix = Path(path).suffix.lower().lstrip(".")
        fmt = fmt or {
            "jsonl": "jsonlines",
            "jl": "jsonlines",
            "csv": "csv",
            "json": "json",
            "xml": "xml",
        }.get(suffix)
        if fmt is None:
            raise ValueError(
                f"-o {target!r}: unknown feed format; use .jsonl, .csv, .json or .xml (or FILE:FORMAT)"
            )
        feeds[path] = {"format": fmt, "encoding": "utf-8"}
    if feeds:
        overrides["FEEDS"] = feeds
    return overrides


def report_halt(config: Config) -> int:
    """The one line of a halted task (its reason and the fix) on standard error; EXIT_HALTED."""
    from cnkispider.halting import EXIT_HALTED, halt_line

    try:
        reason = task_store(config).get(config.task.name).halt_reason or "unknown reason"
    except (CnkiSpiderError, LookupError):
        reason = "unknown reason"
    print(halt_line(config.task.name, reason), file=sys.stderr)
    return EXIT_HALTED


def run_processes(args) -> int:
    """N full workers on this machine, each its own process sharing Redis and the database; one
    that dies is started again (cnkispider/workers.py)."""
    # Frozen (the .exe), the program is the command itself: `-m` would mean nothing to it.
    frozen = getattr(sys, "frozen", False)
    base = [sys.executable] if frozen else [sys.executable, "-m", "cnkispider.cli"]
    if args.config:
        base += ["--config", args.config]
    if getattr(args, "output", None):
        raise ValueError(
            "-o FILE takes one process (every worker would write the same file); add --processes 1"
        )
    extra = [arg for pair in (getattr(args, "set", None) or []) for arg in ("-s", pair)]
    if getattr(args, "verbose", False):
        extra.append("--verbose")
    # --processes 1: each is one worker (else each would read [crawl] processes and fork again)
    from cnkispider.workers import Workers

    return Workers([*base, args.command, "--processes", "1", *extra], args.processes).run()


FROZEN_NO_DEMO = (
    "the demo is not part of the program: it needs the stand-in site of the repository "
    "(standin/); run it from a checkout: cnkispider demo"
)


def cmd_demo(config: Config, args) -> int:
    """The offline demo: start the local stand-in of CNKI and crawl a small task from it."""
    import subprocess
    from pathlib import Path

    from cnkispider.cnki.protocol import CLIENT_ID_PATH
    from cnkispider.config import load_config

    root = Path(__file__).resolve().parent.parent
    if getattr(sys, "frozen", False):  # the stand-in (standin/) is not bundled
        print(f"error: {FROZEN_NO_DEMO}", file=sys.stderr)
        return 2
    if not (root / "standin").is_dir():
        print("error: the demo needs the repository checkout (standin/)", file=sys.stderr)
        return 2
    site = subprocess.Popen(
        # a fifth of the natural counts: at a person's pace (about a request a second per session)
        # the demo's two days then take a couple of minutes, not a quarter of an hour
        [sys.executable, "-m", "standin", "--port", "0", "--seed", "7", "--scale", "0.2"],
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
            f"client_id_url = {base_url}{CLIENT_ID_PATH}\n"
            # the stand-in checks for a person, as CNKI does; the demo's passes crawl at 1
            # request/s each (the shipped 0.5 is the polite pace for the live site; faster, a
            # pass used at once after the person's own page would draw 4 requests in 2 s)
            "sessions = verified\nsession_pace = 1.0\n"
            "[crawl]\ndata_dir = .\nlease_seconds = 30\nheartbeat_seconds = 2\nlog_level = info\n",
            encoding="utf-8",
        )
        print(f"demo: stand-in CNKI at {base_url}; config {ini}")
        demo = load_config(ini)
        with _DemoPerson(demo, site, base_url):
            stats = crawl(
                demo,
                settings_overrides={
                    "CNKI_VERBOSE": bool(getattr(args, "verbose", False)),
                    "SESSIONS_POLL": 1.0,
                },
            )
        print_summary(demo, stats)
        db_path = demo.database_url.split(":///", 1)[1]
        print(
            f"demo data: {db_path} (SQLite; look: cnkispider --config {ini} status; "
            f"export: cnkispider --config {ini} export --out demo.csv)"
        )
        return 0 if stats.get("finish_reason") == "finished" else 1
    finally:
        site.terminate()
        site.wait(10)
        site.stdout.close()


class _DemoPerson:
    """Plays the person of the demo: passes the stand-in's check with its test-only control and
    adds each session to the pool (on CNKI a person does it in a browser: `session login`),
    once before the crawl and again whenever the crawl waits for a person."""

    def __init__(self, config: Config, process, base_url: str):
        import threading
        from urllib.parse import urlsplit

        from cnkispider.sessions import SessionStore
        from standin.client import SiteHandle

        self.site = SiteHandle(process, base_url)
        self.store = SessionStore.from_config(config)
        self.task = config.task.name
        self.host = urlsplit(base_url).hostname or ""
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        for session in self.store.list():  # an earlier demo's sessions died with its stand-in
            self.store.remove(session.id)

    def pass_check(self, why: str) -> None:
        cookies = self.site.pass_check()
        session = self.store.add(
            [{"name": k, "value": v, "domain": self.host, "path": "/"} for k, v in cookies.items()],
            source="standin",
        )
        print(
            f"demo: {why}: the demo plays the person with the stand-in's test-only pass control "
            f"and adds session {session.id} to the pool (on CNKI: `cnkispider session login`)",
            flush=True,
        )

    def _watch(self) -> None:
        while not self.done.wait(1.0):
            try:
                if self.store.waiting(self.task):
                    self.pass_check(
                        "the crawl waits for a person (a pass lasts a few hundred requests)"
                    )
                    self.done.wait(5.0)  # the worker sees it at its next look at the pool
            except Exception:  # the demo's Redis going away at the end
                return

    def __enter__(self):
        self.pass_check("the stand-in checks for a person, as CNKI does")
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(10)


def cmd_status(config: Config, args) -> int:
    from cnkispider.status import status_command

    return status_command(config, task_name=args.task, every=args.watch, as_json=args.json)


def cmd_web(config: Config, args) -> int:
    # imported here: a crawl never loads Starlette, Jinja2 or uvicorn
    from cnkispider.web.serve import serve

    return serve(config, host=args.host, port=args.port)


def cmd_refresh_counts(config: Config, args) -> int:
    """``refresh-counts TASK [--from DAY --to DAY]``: 被引/下载 read again from the list pages
    (cnkispider/refresh.py); only cited, downloads and counted_at change."""
    import dataclasses

    import sqlalchemy as sa

    from cnkispider import refresh
    from cnkispider.db import open_database
    from cnkispider.schema import task as task_table

    first, last = parse_day(args.from_day, "--from"), parse_day(args.to_day, "--to")
    engine = open_database(config.database_url)
    try:
        with engine.connect() as conn:
            row = conn.execute(sa.select(task_table).where(task_table.c.name == args.task)).first()
        if row is None:
            raise LookupError(f"refresh-counts: no task {args.task!r}")
        if not refresh.has_counts(row.type):
            raise ValueError(f"refresh-counts: {row.type} rows carry no counts on CNKI's list")
        start = first or row.start_date
        end = last or row.end_date or row.cur_date or start
        if end < start:
            raise ValueError(f"refresh-counts: --to {end} is before --from {start}")
        name = refresh.counts_task_name(row.name)
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
        ),
    )
    overrides = {**run_overrides(args), "CNKI_COUNTS_ONLY": True}
    stats = crawl(shadow, settings_overrides=overrides)
    updated = stats.get("counts/updated", 0)
    requests = stats.get("downloader/request_count", 0)
    per = f", {requests / updated:.3f} a row" if updated else ""
    print(
        f"task {row.name}: counts read again from {updated:,} listed rows ({start} .. {end}; a "
        f"document in two categories is listed twice), {stats.get('counts/not-stored', 0):,} "
        f"listed rows not stored; {requests:,} requests{per}"
    )
    if stats.get("finish_reason") == "halted":
        return report_halt(shadow)
    return 0 if stats.get("finish_reason") in ("finished", "up_to_date", "shutdown") else 1


def cmd_export(config: Config, args) -> int:
    from cnkispider.export import export_command

    return export_command(
        config,
        doc_type=args.type or config.task.type,
        fmt=args.format,
        out=args.out,
        since=parse_day(args.since, "--since"),
        task=args.task,
        batch=args.batch,
        raw_cells=args.raw_cells,
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


# -- cnkispider session: the ways in for a session a person passed (issue 19, point 3) --------


def _sessions(config: Config):
    from cnkispider.sessions import SessionStore

    return SessionStore.from_config(config)


def cmd_session(config: Config, args) -> int:
    """login | add | list | remove | check: cookie values never reach the output."""
    import time

    from cnkispider.sessions.waysin import PasteError

    action = args.action
    home_url, hosts = cnki_site_of(config.cnki["base_url"])
    if action in ("add", "login"):
        if action == "login":
            from cnkispider.sessions.login import login

            paste = login(
                home_url,
                hosts,
                browser=args.browser,
                cdp_port=args.cdp,
                headless=args.headless,
                port=args.port,
                timeout=args.timeout,
            )
            source = "browser"
        else:
            paste, source = _paste(args, home_url, hosts)
        egress = _egress(args.egress) if getattr(args, "egress", None) else ""
        session = _sessions(config).add(
            paste.cookies, source=source, user_agent=paste.user_agent, egress=egress
        )
        print(added_line(session, paste, source))
        return 0
    store = _sessions(config)
    if action == "list":
        sessions = store.list()
        if not sessions:
            print("no sessions (add one: cnkispider session login, or session add --from-curl -)")
            return 0
        now = time.time()
        rows = [("id", "source", "age", "requests", "state", "note")]
        for s in sessions:
            state = s.state + (f" by {s.worker}" if s.state == "leased" and s.worker else "")
            rows.append(
                (
                    s.id,
                    s.source,
                    duration(now - s.created_at, "compact"),
                    str(s.requests),
                    state,
                    s.note or "",
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        for r in rows:
            print("  ".join(r[i].ljust(widths[i]) for i in range(5)) + "  " + r[5])
        return 0
    if action == "remove":
        found = store.get(args.id)
        if found is None or not store.remove(found.id):
            raise LookupError(f"no session {args.id!r} (see: cnkispider session list)")
        print(f"removed session {found.id}")
        return 0
    if action == "check":
        return _check_sessions(store, args.id, home_url)
    raise PasteError(f"unknown session action {action!r}")


def _paste(args, home_url: str, hosts: tuple[str, ...]):
    """(the paste, its source) of `session add`: cookies for the host the crawler searches."""
    from urllib.parse import urlsplit

    from cnkispider.sessions import waysin

    site = (urlsplit(home_url).hostname or "").lower()

    if args.from_curl:
        if args.from_curl == "-" and sys.stdin is not None and sys.stdin.isatty():
            print(
                "Paste the request copied with DevTools' Copy as cURL, then press Enter and "
                + ("Ctrl-Z, Enter" if sys.platform == "win32" else "Ctrl-D")
                + ":",
                file=sys.stderr,
            )
        text = waysin.read_paste(args.from_curl, sys.stdin)
        paste = waysin.from_curl(text, cnki_hosts=hosts)
        if paste.host != site:  # e.g. www.cnki.net: its cookies never go to the search's host
            raise waysin.PasteError(
                f"the paste is a request to {paste.host}, but the crawler searches {site}: "
                f"copy a request to {site} (its search page, or brief/grid after a search)"
            )
        return paste, "curl"
    if args.cookie_string is not None:
        host = args.host or site
        if not waysin.host_matches(host, hosts):
            raise waysin.PasteError(f"--host {host} is not CNKI's ({', '.join(hosts)})")
        return waysin.from_cookie_string(args.cookie_string, host=host), "cookie-string"
    paste = waysin.from_cookie_file(args.cookie_file, cnki_hosts=hosts, host=site)
    return paste, "cookie-file"


def _egress(value: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(value if "://" in value else f"http://{value}")
    if parts.username or parts.password:
        raise ValueError("--egress: give the proxy's address without its user and password")
    if not parts.hostname:
        raise ValueError(f"--egress {value!r}: expected host:port of the proxy")
    return f"{parts.scheme}://{parts.netloc}"


def _check_sessions(store, session_id: str | None, home_url: str) -> int:
    """One GET of CNKI's search page per session: passed -> ready (if a person had to pass it
    again), checked -> needs-person (unless a worker holds it). Exit 0 if every one passed."""
    from cnkispider.sessions import EXPIRED, LEASED, NEEDS_PERSON, READY
    from cnkispider.sessions.waysin import CHECKED, PASSED, check

    if session_id:
        found = store.get(session_id)
        if found is None:
            raise LookupError(f"no session {session_id!r} (see: cnkispider session list)")
        sessions = [found]
    else:
        sessions = store.list()
        if not sessions:
            print("no sessions to check (add one: cnkispider session login)")
            return 1
    all_passed = True
    for s in sessions:
        try:
            verdict, detail = check(s.cookies, home_url, user_agent=s.user_agent)
        except OSError as exc:
            print(f"{s.id}: not checked: cannot reach {home_url} ({exc})")
            all_passed = False
            continue
        if verdict == PASSED:
            if s.state == NEEDS_PERSON:
                store.mark(s.id, READY, "passed `session check` again")
            print(
                f"{s.id}: passed ({detail}); state {READY if s.state == NEEDS_PERSON else s.state}"
            )
            continue
        all_passed = False
        if verdict == CHECKED:
            if s.state in (LEASED, EXPIRED):
                print(f"{s.id}: checked by CNKI ({detail}); state {s.state} left as it is")
            else:
                store.mark(s.id, NEEDS_PERSON, f"checked by CNKI at `session check` ({detail})")
                print(
                    f"{s.id}: checked by CNKI ({detail}); now {NEEDS_PERSON}: pass the check again "
                    "(cnkispider session login) or remove it"
                )
        else:
            print(f"{s.id}: unclear ({detail}); state {s.state} left as it is")
    return 0 if all_passed else 1


CONFIG_HELP = "config.ini to use (default: ./config.ini, then beside the program)"


def _crawl_options(p) -> None:
    p.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="Scrapy's own log lines too (banner, stats dump)",
    )
    p.add_argument(
        "-s",
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="a Scrapy setting, as in scrapy crawl",
    )
    p.add_argument(
        "-o",
        "--output",
        action="append",
        metavar="FILE",
        help="also write the items to FILE (.jsonl, .csv, .json; UTF-8), as in scrapy crawl",
    )


def build_parser() -> argparse.ArgumentParser:
    # --config is accepted before the subcommand and after it (`cnkispider run --config x.ini`):
    # every subparser inherits it, with SUPPRESS so an absent one keeps the top-level value.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS, help=CONFIG_HELP)
    parser = argparse.ArgumentParser(prog="cnkispider", description="Distributed CNKI crawler")
    parser.add_argument("--config", help=CONFIG_HELP)
    parser.add_argument("--version", action="version", version=f"cnkispider {__version__}")
    sub = parser.add_subparsers(dest="command")
    _add_parser = sub.add_parser

    def add_parser(name, **kw):
        return _add_parser(name, parents=[common], **kw)

    sub.add_parser = add_parser

    init = sub.add_parser("init-db", help="create the database and its tables if missing")
    init.set_defaults(func=cmd_init_db)

    task_parser = sub.add_parser("task", help="add, list, show and steer tasks")
    actions = task_parser.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="register a task (joins it unchanged if it exists)")
    add.add_argument("name", help="the task's name (unique; steer it by this name later)")
    add.add_argument("--type", choices=DOC_TYPES, help="required unless --like")
    add.add_argument("--start", help="first day, YYYY-MM-DD (required unless --like)")
    add.add_argument("--end", help="last day, YYYY-MM-DD (default: up to today)")
    add.add_argument(
        "--categories", help="category spec (see config.ini; default builtin: the whole tree)"
    )
    add.add_argument(
        "--like", help="a deepening task: list TASK's rounds again (its type, days, categories)"
    )
    add.add_argument(
        "--where", help="crawl only rows where RULE holds, e.g. 'cited >= 10' (docs/DEPTH.md)"
    )
    add.add_argument(
        "--keys", help="crawl only the documents of this file (dbname/filename a line)"
    )
    add.add_argument(
        "--depth",
        help="list | export | detail (default): what is fetched beyond the list rows (docs/DEPTH.md)",
    )
    tset = actions.add_parser(
        "set", help="change a task's categories, or its type while nothing is crawled"
    )
    tset.add_argument("name", help="the task's name or id")
    tset.add_argument("--categories", help="new category spec (checked against the category tree)")
    tset.add_argument("--type", choices=DOC_TYPES, help="new type (only before its first round)")
    tset.add_argument("--depth", help="list | export | detail: the depth of rounds from now on")
    actions.add_parser("list", help="every task, bad rows flagged")
    for name, text in (
        ("show", "one task with its progress"),
        ("stop", "stop after in-flight rounds (end_date becomes the day before the cursor)"),
        ("pause", "hand out nothing more until `task resume` (the dates stay)"),
    ):
        p = actions.add_parser(name, help=text)
        p.add_argument("name", help="the task's name or id")
    extend = actions.add_parser("extend", help="set a later end date (none: up to today)")
    extend.add_argument("name", help="the task's name or id")
    extend.add_argument(
        "end", nargs="?", help="the new last day, YYYY-MM-DD (default: up to today)"
    )
    resume = actions.add_parser(
        "resume",
        help="go on after a pause or a halt (clears it, crawls again what failed for it); "
        "the end date stays unless --end",
    )
    resume.add_argument("name", help="the task's name or id")
    resume.add_argument("--end", help="a new last day, YYYY-MM-DD")
    move = actions.add_parser(
        "move", help="move the cursor: every round from DATE on is crawled again"
    )
    move.add_argument("name", help="the task's name or id")
    move.add_argument("date", help="the first day to crawl again, YYYY-MM-DD")
    move.add_argument(
        "code",
        nargs="?",
        help="a root category of that day: its following categories are crawled again from there",
    )
    task_parser.set_defaults(func=cmd_task)

    for name, text in (
        ("run", "crawl the task of config.ini, then recrawl its errors"),
        ("recrawl", "only replay errorCode and errorLink"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument(
            "--processes", type=int, default=0, help="worker processes (default [crawl] processes)"
        )
        p.add_argument(
            "--reload",
            action="store_true",
            help="restart the workers when the project's code changes",
        )
        _crawl_options(p)
        p.set_defaults(func=cmd_run)
    if not getattr(sys, "frozen", False):  # the exe lists only what it can run (no stand-in site)
        demo = sub.add_parser("demo", help="offline demo against the local CNKI stand-in")
        demo.add_argument("--verbose", action="store_true", help="Scrapy's own log lines too")
        demo.set_defaults(func=cmd_demo)
    status_parser = sub.add_parser(
        "status", help="every task: rounds, ETA, documents, errors, workers, queue"
    )
    status_parser.add_argument("--task", help="only this task (name or id)")
    status_parser.add_argument(
        "--watch",
        nargs="?",
        type=float,
        const=5.0,
        metavar="SECONDS",
        help="redraw in place every SECONDS (default 5) until Ctrl-C",
    )
    status_parser.add_argument(
        "--json", action="store_true", help="JSON for scripts (--watch: one report a line)"
    )
    status_parser.set_defaults(func=cmd_status)
    export_parser = sub.add_parser(
        "export", help="stored documents as CSV (opens in Excel) or JSON lines"
    )
    export_parser.add_argument(
        "--type", choices=DOC_TYPES, help="document type (default: [task] type)"
    )
    export_parser.add_argument(
        "--format",
        choices=("csv", "jsonl", "ris", "bibtex", "endnote", "xlsx"),
        default="csv",
        help="csv, jsonl, or for reference managers ris, bibtex, endnote; xlsx (Excel, needs --out)",
    )
    export_parser.add_argument(
        "--since", metavar="DATE", help="only documents dated DATE (YYYY-MM-DD) or later"
    )
    export_parser.add_argument("--task", help="only documents stored by this task (name or id)")
    export_parser.add_argument(
        "--out", metavar="PATH", help="file to write (default, or -: standard output)"
    )
    export_parser.add_argument(
        "--raw-cells",
        action="store_true",
        help="CSV: write cells starting with = + - @ exactly (default: prefix a ' "
        "so that Excel shows them as text instead of running them)",
    )
    export_parser.add_argument(
        "--batch", type=int, default=1000, help=argparse.SUPPRESS
    )  # rows a query
    export_parser.set_defaults(func=cmd_export)
    refresh_parser = sub.add_parser(
        "refresh-counts",
        help="read 被引/下载 again from the task's list pages (no detail page; docs/FIELDS.md)",
    )
    refresh_parser.add_argument("task", help="the task whose documents' counts to refresh")
    refresh_parser.add_argument("--from", dest="from_day", metavar="DAY", help="first day")
    refresh_parser.add_argument("--to", dest="to_day", metavar="DAY", help="last day")
    _crawl_options(refresh_parser)
    refresh_parser.set_defaults(func=cmd_refresh_counts)
    probe = sub.add_parser(
        "probe", help="check the crawler's assumptions against the live CNKI (~30 requests)"
    )
    probe.add_argument(
        "--day", metavar="DATE", help="a busy day to search (default: a Wednesday four weeks back)"
    )
    probe.add_argument(
        "--delay", type=float, default=3.0, help="seconds between requests (default 3)"
    )
    probe.add_argument(
        "--save", metavar="DIR", help="keep every raw answer here (gzip) with an index.json"
    )
    probe.add_argument(
        "--session",
        metavar="ID",
        help="when CNKI checks for a person: the pool's session to probe with (default: a ready one)",
    )
    probe.add_argument(
        "--session-budget",
        type=int,
        default=0,
        metavar="N",
        help="measure how long a verified session lasts at [cnki] session_pace, spending up to N "
        "requests of it (it may then need a person again; default 0: not measured)",
    )
    probe.set_defaults(func=cmd_probe)
    _session_parser(sub)
    web = sub.add_parser(
        "web", help="the operator's page: tasks, coverage grid, workers, errors, /metrics, actions"
    )
    web.add_argument("--host", help="address to listen on (default [web] host: 127.0.0.1)")
    web.add_argument("--port", type=int, help="port (default [web] port: 8700)")
    web.set_defaults(func=cmd_web)
    _admin_parser(sub)
    return parser


def _session_parser(sub) -> None:
    session = sub.add_parser(
        "session",
        help="sessions a person passed CNKI's check with: login, add, list, remove, check",
    )
    actions = session.add_subparsers(dest="action", required=True)
    login = actions.add_parser(
        "login",
        help="open CNKI in Chrome, Edge or Chromium; when you have passed its check, keep the session",
    )
    login.add_argument("--browser", metavar="PATH", help="the browser program (default: found)")
    login.add_argument(
        "--cdp",
        type=int,
        metavar="PORT",
        help="use your running browser, started with --remote-debugging-port=PORT",
    )
    login.add_argument(
        "--headless",
        action="store_true",
        help="no window: no person can pass a real CNKI check this way (tests, scripts)",
    )
    login.add_argument(
        "--port", type=int, default=0, help="DevTools port to open (default: any free one)"
    )
    login.add_argument(
        "--timeout", type=float, default=300.0, help="seconds to wait for the pass (default 300)"
    )
    add = actions.add_parser("add", help="add a session from a browser's request or cookies")
    given = add.add_mutually_exclusive_group(required=True)
    given.add_argument(
        "--from-curl",
        metavar="FILE",
        help="DevTools -> Network -> a kns.cnki.net request -> Copy as cURL (bash or cmd); - reads it from standard input",
    )
    given.add_argument("--cookie-string", metavar='"a=1; b=2"', help="a Cookie header's value")
    given.add_argument("--cookie-file", metavar="FILE", help="a Netscape cookies.txt")
    add.add_argument(
        "--host", help="--cookie-string: the host the cookies are for (default: [cnki] base_url's)"
    )
    add.add_argument(
        "--egress",
        metavar="HOST:PORT",
        help="the proxy the check was passed through (default: direct)",
    )
    actions.add_parser("list", help="every session: id, source, age, requests, state")
    remove = actions.add_parser("remove", help="drop a session (an id or its unique start)")
    remove.add_argument("id", help="the session's id, or its unique start (session list)")
    check = actions.add_parser(
        "check", help="one request per session: passed (ready) or checked (needs a person)"
    )
    check.add_argument("id", nargs="?", help="only this session")
    session.set_defaults(func=cmd_session)


def cmd_admin(config: Config, args) -> int:
    """`admin grant-worker`: print (or with --apply run) a worker's grants (docs/WORKERS.md)."""
    from cnkispider.admin import grant_worker

    return grant_worker(config, args)


def _admin_parser(sub) -> None:
    admin = sub.add_parser("admin", help="the administrator's tools: grant-worker")
    actions = admin.add_subparsers(dest="action", required=True)
    grant = actions.add_parser(
        "grant-worker",
        help="print (or --apply) the SQL and the Redis ACL line for a worker with row rights only",
    )
    grant.add_argument("name", help="the worker's account name (database account, Redis user)")
    grant.add_argument("--password", help="its password (default: a new random one)")
    grant.add_argument("--host", default="%", help="hosts it connects from (default: %%, any)")
    grant.add_argument(
        "--prefix", default=None, help="Redis key and channel prefix (default: cnki:)"
    )
    grant.add_argument(
        "--add-tasks",
        action="store_true",
        help="let it add the task of its config.ini (INSERT on table task; default: join only)",
    )
    grant.add_argument(
        "--require-tls", action="store_true", help="the database account must connect over TLS"
    )
    grant.add_argument(
        "--apply",
        action="store_true",
        help="run them with the database and Redis accounts of this config.ini (an administrator's)",
    )
    admin.set_defaults(func=cmd_admin)


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _log_to_file(config: Config) -> None:
    """A short command's INFO lines (the embedded Redis starting, a browser opening) go to the
    log ([crawl] log_file, else cnkispider.log in the data folder), opened only when a line
    comes; the console shows warnings and errors, and the command's own output."""
    path = config.resolve(config.crawl["log_file"]) if config.crawl["log_file"] else None
    path = path or (config.data_dir / "cnkispider.log")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return  # no log folder: the INFO lines are dropped, the warnings still show
    handler = logging.FileHandler(path, encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    for existing in root.handlers:
        existing.setLevel(logging.WARNING)
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    if getattr(sys, "frozen", False) and (argv if argv is not None else sys.argv[1:])[:1] == [
        "demo"
    ]:
        print(f"error: {FROZEN_NO_DEMO}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    short = args.command not in ("run", "recrawl", "demo")  # a crawl's logging is Scrapy's
    if short:  # until the config says where the log goes: warnings only
        logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    try:
        config = load_config(args.config)
        if short:
            _log_to_file(config)
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
