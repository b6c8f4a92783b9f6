"""`cnkispider init-db` and `cnkispider task add|set|list|show|stop|extend|pause|resume|move|reopen`:
the task table, steered by name (tasks/steering.py does the steering; here its words)."""

from __future__ import annotations

import argparse
import sys

from cnkispider.cli.common import add_command
from cnkispider.config import Config
from cnkispider.exceptions import InputError, StorageError, TaskRowError
from cnkispider.items import DEFAULT_DEPTH, DOC_TYPES, check_depth
from cnkispider.launch.preflight import add_drift, check_task_input, parse_day, task_store
from cnkispider.words.i18n import _
from cnkispider.words.vocabulary import halt_reason, word
from tasks.rows import check_name, describe


def cmd_init_db(config: Config, args) -> int:
    from cnkispider.store.db import mask_url

    task_store(config)
    print(_("database ready: %(url)s") % {"url": mask_url(config.database_url)})
    return 0


def cmd_task(config: Config, args) -> int:
    from tasks.rows import validate_row
    from tasks.steering import check_query

    if args.action == "plan":  # a plan writes nothing but a sample: no database made for it
        return _plan(config, args)
    store = task_store(config)
    action = args.action
    if action == "add":
        from tasks.selection import selection_text

        check_name(args.name)  # first: the name is what every later command types
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
            if args.query is None:
                args.query = like.query
        if not args.type or not args.start:
            raise InputError(_("task add: give --type and --start (or --like TASK)"))
        if args.categories is None:
            args.categories = "builtin"
        # every check first: an error leaves no row behind
        check_task_input(args.type, args.start, args.end, args.categories, store.base_dir)
        depth = check_depth(DEFAULT_DEPTH if args.depth is None else args.depth, "--depth")
        selection = selection_text(args.where, args.keys)
        query = check_query(args.query, args.type)
        current, created = store.register(
            args.name,
            args.type,
            parse_day(args.start, "start date"),
            parse_day(args.end, "end date") or "",
            args.categories,
            depth,
            selection,
            query,
            follow=args.follow,
        )
        changes = [] if created else add_drift(typed, current)
        if changes:
            # the row wins: a second `task add` never overwrites it; say what would change it
            print(
                _("error: task %(name)r exists with other arguments (%(task)s); to change it: ")
                % {"name": current.name, "task": describe(current)}
                + "; ".join(changes),
                file=sys.stderr,
            )
            return 2
        said = _("created %(task)s") if created else _("exists: %(task)s")
        print(said % {"task": describe(current)})
    elif action == "set":
        if args.follow is not None:
            changed = store.set_follow(args.name, args.follow == "on")
            if (args.categories, args.type, args.depth, args.query) == (None, None, None, None):
                print(_("changed: %(task)s") % {"task": describe(changed)})
                return 0
        changed = store.set_task(args.name, args.categories, args.type, args.depth, args.query)
        print(_("changed: %(task)s") % {"task": describe(changed)})
    elif action == "list":
        rows = store.rows()
        if not rows:
            print(_("no tasks"))
        for row in rows:
            try:
                print(describe(validate_row(row, store.base_dir)))
            except TaskRowError as exc:
                print(
                    _("%(task)s: BAD ROW, skipped by workers: %(problem)s")
                    % {
                        "task": _("task %(id)s %(name)r") % {"id": row.id, "name": row.name},
                        "problem": exc.problem,
                    }
                )
    elif action == "show":
        current = store.get(args.name)
        print(describe(current))
        progress = store.progress(current.id)
        rounds = ", ".join(f"{word(k)} {v}" for k, v in sorted(progress["rounds"].items()))
        print(
            _("rounds: %(rounds)s; errorCode %(codes)s; errorLink %(links)s")
            % {
                "rounds": rounds or _("none"),
                "codes": progress["error_code"],
                "links": progress["error_link"],
            }
        )
    elif action == "stop":
        print(_("stopped: %(task)s") % {"task": describe(store.stop(args.name))})
    elif action == "extend":
        extended = store.set_end_date(args.name, parse_day(args.end, "end date"))
        print(_("extended: %(task)s") % {"task": describe(extended)})
    elif action == "pause":
        print(_("paused: %(task)s") % {"task": describe(store.pause(args.name))})
    elif action == "resume":
        resumed, reopened = store.resume(args.name, parse_day(args.end, "end date"))
        if reopened is None:
            print(_("resumed: %(task)s") % {"task": describe(resumed)})
        else:  # a paused or halted task goes on where it stopped, its end date unchanged
            print(
                _(
                    "resumed: %(task)s (halt cleared: %(reason)s; %(rounds)s rounds re-opened, "
                    "%(codes)s errorCode rows to replay)"
                )
                % {
                    "task": describe(resumed),
                    "reason": halt_reason(reopened["reason"]),
                    "rounds": reopened["rounds"],
                    "codes": reopened["error_code"],
                }
            )
    elif action == "move":
        if args.code is not None and len(args.code) > 64:
            raise InputError(
                _("category code %(code)r... is longer than 64 characters")
                % {"code": args.code[:20]}
            )
        moved = store.move_cursor(args.name, parse_day(args.date, "date"), args.code)
        print(_("moved: %(task)s") % {"task": describe(moved)})
    elif action == "reopen":
        return cmd_task_reopen(store, args)
    return 0


def _plan(config: Config, args) -> int:
    """`task plan NAME [--sample N] [--delay S] [--json]`: what the task's remaining days need
    at each depth (``--sample``: from the census totals of N unseen days asked of CNKI too,
    kept in the database, made for them if missing). config.ini's task plans before its first
    run."""
    import json

    from cnkispider.sessions import SessionStore
    from cnkispider.status.plan import task_plan
    from cnkispider.store.db import open_database_readonly
    from cnkispider.words.i18n import _, ngettext

    if args.sample < 0:
        raise InputError(_("--sample: expected 0 or more days, got %(n)d") % {"n": args.sample})
    if args.delay is not None and args.delay < 0:
        raise InputError(_("--delay: expected 0 or more seconds, got %(s)g") % {"s": args.delay})
    try:
        pool = SessionStore.from_config(config)
        pool.client.ping()
    except Exception:  # no Redis: the configured figure stands in for the measured one
        pool = None
    sampler = None
    if args.sample:
        from cnkispider.probe.sample import sample_census

        pace = config.cnki["session_pace"]
        delay = args.delay if args.delay is not None else (1.0 / pace if pace > 0 else 3.0)

        def sampler(row, tree, days):
            return sample_census(config, row, tree, days, delay=delay).as_tuple()

    if args.sample:
        engine = task_store(config).engine
    else:
        try:
            engine = open_database_readonly(config.database_url)
        except StorageError:  # no database yet: config.ini's task plans from nothing seen
            engine = None
    try:
        plan = task_plan(config, engine, args.name, pool, sample=args.sample, sampler=sampler)
    except LookupError as exc:
        raise InputError(str(exc)) from None
    finally:
        if engine is not None:
            engine.dispose()
    if args.json:
        print(json.dumps(plan, indent=2))
        return 0
    days = ngettext("%(n)d day", "%(n)d days", plan["days"]) % {"n": plan["days"]}
    if args.sample:
        _print_sample(plan)
    if plan.get("follow"):
        _print_follow(plan)
    if plan["kept_samples"]:
        print(
            ngettext(
                "census sample kept from earlier: %(n)d day",
                "census sample kept from earlier: %(n)d days",
                len(plan["kept_samples"]),
            )
            % {"n": len(plan["kept_samples"])}
        )
    if plan.get("entry_lag"):  # a task that follows today: the lag its looks measured
        from cnkispider.status.following import lag_line

        print(lag_line(plan["entry_lag"]))
    if plan["documents"] is None:
        ask = max(1, min(7, plan["days"]))  # a day of each weekday, or every day left
        print(
            _("task %(task)s: %(days)s to go, none seen yet: no census total to plan from")
            % {"task": plan["task"], "days": days}
        )
        print(
            ngettext(
                "no census yet: `cnkispider task plan %(task)s --sample %(n)d` asks CNKI for "
                "%(n)d day's count",
                "no census yet: `cnkispider task plan %(task)s --sample %(n)d` asks CNKI for "
                "%(n)d days' counts",
                ask,
            )
            % {"task": plan["task"], "n": ask}
        )
        return 0
    if plan["measured_passes"]:
        basis = _("%(r).0f requests a pass (measured on %(n)d passes)") % {
            "r": plan["pass_requests"],
            "n": plan["measured_passes"],
        }
    else:
        basis = _("%(r).0f requests a pass ([cnki] pass_requests; none measured yet)") % {
            "r": plan["pass_requests"]
        }
    print(
        _("task %(task)s (depth %(depth)s): %(days)s to go, about %(docs)d documents; %(basis)s")
        % {
            "task": plan["task"],
            "depth": word(plan["depth"]),
            "days": days,
            "docs": plan["documents"],
            "basis": basis,
        }
    )
    if plan["days_of_unshown_weekdays"]:
        print(
            ngettext(
                "note: %(n)d day is of a weekday no seen or sampled day shows, planned at the "
                "mean of the others (CNKI publishes patents on fixed weekdays): "
                "`--sample 7` asks one day of each",
                "note: %(n)d days are of weekdays no seen or sampled day shows, planned at the "
                "mean of the others (CNKI publishes patents on fixed weekdays): "
                "`--sample 7` asks one day of each",
                plan["days_of_unshown_weekdays"],
            )
            % {"n": plan["days_of_unshown_weekdays"]}
        )
    for depth, figures in plan["depths"].items():
        hours = (
            _("no pace cap")
            if figures["hours"] is None
            else _("%(h).1f h at %(pace)s requests/s")
            % {"h": figures["hours"], "pace": plan["session_pace"]}
        )
        print(
            "  "
            + _("%(depth)-7s %(requests)8d requests  %(passes)5d passes  %(hours)s")
            % {
                "depth": word(depth),
                "requests": figures["requests"],
                "passes": figures["passes"],
                "hours": hours,
            }
        )
    return 0


def _print_follow(plan: dict) -> None:
    """`task plan` of a task that follows today: at most what a day of following costs."""
    from cnkispider.words.i18n import _

    follow = plan["follow"]
    figures = follow["depths"][plan["depth"]]
    print(
        _(
            "task %(task)s follows today: at most %(requests)d requests a day at depth "
            "%(depth)s, %(passes)d passes at %(r).0f requests a pass (about %(docs)d new "
            "documents a day; a daily look counts %(days)s days, each assumed grown)"
        )
        % {
            "task": plan["task"],
            "requests": figures["requests"],
            "depth": word(plan["depth"]),
            "passes": figures["passes"],
            "r": plan["pass_requests"],
            "docs": follow["documents_a_day"],
            "days": follow["days_counted"],
        }
    )


def _print_sample(plan: dict) -> None:
    """The sample's lines of `task plan --sample`: what it cost, and each day it could not
    sample, with why (a check or a refusal is not a zero)."""
    from cnkispider.cnki import refusals
    from cnkispider.probe.sample import CHECKED_PLAIN, NO_SESSION, SESSION_STATE, STOPPED
    from cnkispider.words.i18n import ngettext

    sampled, missed = plan["sampled"], plan["not_sampled"]
    asked = len(sampled) + len(missed)
    print(
        ngettext(
            "census sample: %(n)d of %(asked)d day sampled; requests to CNKI: %(r)d",
            "census sample: %(n)d of %(asked)d days sampled; requests to CNKI: %(r)d",
            asked,
        )
        % {"n": len(sampled), "asked": asked, "r": plan["sample_requests"]}
    )
    whys = set(missed.values())
    if CHECKED_PLAIN in whys:
        print(
            "  "
            + _(
                "nothing sampled: CNKI checks plain sessions and the pool has no session a "
                "person passed (cnkispider session login)"
            )
        )
    elif NO_SESSION in whys:
        print("  " + _("nothing sampled: no CNKI session could be opened (why: on stderr)"))
    for day, why in missed.items():
        if why in (CHECKED_PLAIN, NO_SESSION, STOPPED):
            continue
        if why.startswith(SESSION_STATE):
            text = _("the passed session is %(state)s in the pool") % {
                "state": why[len(SESSION_STATE) :]
            }
        elif refusals.kind_of(why.split(" ", 1)[0]) == refusals.CHALLENGE:
            text = _("%(reason)s (CNKI's check)") % {"reason": why}
        elif refusals.kind_of(why.split(" ", 1)[0]) == refusals.REJECTION:
            text = _("%(reason)s (CNKI refused the search)") % {"reason": why}
        else:
            text = why
        print("  " + _("%(day)s: %(why)s: not sampled") % {"day": day, "why": text})
    stopped = sum(1 for why in missed.values() if why == STOPPED)
    if stopped:
        print(
            "  "
            + ngettext(
                "%(n)d more day not asked: the sample stopped there",
                "%(n)d more days not asked: the sample stopped there",
                stopped,
            )
            % {"n": stopped}
        )


def cmd_task_reopen(store, args) -> int:
    """`task reopen NAME DAY [--category CODE]`: that day's rounds (or one) crawled again from
    their first page, in flight or not (tasks/steering.py ``reopen_rounds``)."""
    from cnkispider.words.i18n import ngettext

    if args.category is not None and len(args.category) > 64:
        raise InputError(
            _("category code %(code)r... is longer than 64 characters")
            % {"code": args.category[:20]}
        )
    current = store.get(args.name)
    day = parse_day(args.day, "day")
    reopened = store.reopen_rounds(current.id, day, args.category)
    which = day if args.category is None else f"{day} {args.category}"
    if not reopened:
        print(
            _("task %(name)s: no round of %(which)s to re-open (the cursor has not reached it)")
            % {"name": current.name, "which": which},
            file=sys.stderr,
        )
        return 2
    print(
        ngettext(
            "task %(name)s: %(n)d round of %(which)s re-opened: the next claim crawls it again "
            "from its first page",
            "task %(name)s: %(n)d rounds of %(which)s re-opened: the next claims crawl them "
            "again from their first page",
            reopened,
        )
        % {"name": current.name, "n": reopened, "which": which}
    )
    return 0


def add_task_reopen(actions) -> None:
    """`task reopen NAME DAY [--category CODE]`."""
    reopen = actions.add_parser(
        "reopen",
        help=_(
            "crawl a day's rounds (or one) again from their first page, rounds in flight "
            "included (a round stuck seeded)"
        ),
    )
    reopen.add_argument("name", help=_("the task's name or id"))
    reopen.add_argument("day", help=_("the day of the rounds, YYYY-MM-DD"))
    reopen.add_argument(
        "--category", help=_("only this category's round (a root code, or * for the census)")
    )


def add_init_db(sub) -> None:
    """`init-db`."""
    init = add_command(sub, "init-db", help=_("create the database and its tables if missing"))
    init.set_defaults(func=cmd_init_db)


def add_task(sub) -> None:
    """`task ACTION`: one subcommand an action."""
    task_parser = add_command(sub, "task", help=_("add, list, show and steer tasks"))
    actions = task_parser.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help=_("register a task (joins it unchanged if it exists)"))
    add.add_argument("name", help=_("the task's name (unique; steer it by this name later)"))
    add.add_argument("--type", choices=DOC_TYPES, help=_("required unless --like"))
    add.add_argument("--start", help=_("first day, YYYY-MM-DD (required unless --like)"))
    add.add_argument("--end", help=_("last day, YYYY-MM-DD (default: up to today)"))
    add.add_argument(
        "--categories", help=_("category spec (see config.ini; default builtin: the whole tree)")
    )
    add.add_argument(
        "--like", help=_("a deepening task: list TASK's rounds again (its type, days, categories)")
    )
    add.add_argument(
        "--where", help=_("crawl only rows where RULE holds, e.g. 'cited >= 10' (docs/DEPTH.md)")
    )
    add.add_argument(
        "--keys", help=_("crawl only the documents of this file (dbname/filename a line)")
    )
    add.add_argument(
        "--depth",
        help=_(
            "list | export | detail (default): what is fetched beyond the list rows (docs/DEPTH.md)"
        ),
    )
    add.add_argument(
        "--query",
        help=_(
            "a CNKI professional-search expression every search of the task carries, "
            "e.g. \"SU='碳中和' AND AF='清华大学'\" (docs/QUERY.md)"
        ),
    )
    add.add_argument(
        "--follow",
        action="store_true",
        help=_(
            "follow today: the end date is today and moves with it, and the last "
            "[task] look_back_days days are counted again for documents CNKI adds late "
            "(docs/FOLLOW.md)"
        ),
    )
    tset = actions.add_parser(
        "set", help=_("change a task's categories, or its type while nothing is crawled")
    )
    tset.add_argument("name", help=_("the task's name or id"))
    tset.add_argument(
        "--categories", help=_("new category spec (checked against the category tree)")
    )
    tset.add_argument("--type", choices=DOC_TYPES, help=_("new type (only before its first round)"))
    tset.add_argument("--depth", help=_("list | export | detail: the depth of rounds from now on"))
    tset.add_argument(
        "--query", help=_("the task's professional-search expression (only before its first round)")
    )
    tset.add_argument(
        "--follow",
        choices=("on", "off"),
        help=_(
            "on: follow today (docs/FOLLOW.md); off: stop following, the end date becomes today"
        ),
    )
    actions.add_parser("list", help=_("every task, bad rows flagged"))
    for name, text in (
        ("show", _("one task with its progress")),
        ("stop", _("stop after in-flight rounds (end_date becomes the day before the cursor)")),
        ("pause", _("hand out nothing more until `task resume` (the dates stay)")),
    ):
        p = actions.add_parser(name, help=text)
        p.add_argument("name", help=_("the task's name or id"))
    extend = actions.add_parser("extend", help=_("set a later end date (none: up to today)"))
    extend.add_argument("name", help=_("the task's name or id"))
    extend.add_argument(
        "end", nargs="?", help=_("the new last day, YYYY-MM-DD (default: up to today)")
    )
    resume = actions.add_parser(
        "resume",
        help=_(
            "go on after a pause or a halt (clears it, crawls again what failed for it); "
            "the end date stays unless --end"
        ),
    )
    resume.add_argument("name", help=_("the task's name or id"))
    resume.add_argument("--end", help=_("a new last day, YYYY-MM-DD"))
    plan = actions.add_parser(
        "plan",
        help=_("what the task's remaining days need at each depth: requests, passes, hours"),
    )
    plan.add_argument(
        "name", help=_("the task's name or id (config.ini's task: before its first run too)")
    )
    plan.add_argument("--json", action="store_true", help=_("as JSON"))
    plan.add_argument(
        "--sample",
        type=int,
        default=0,
        metavar="N",
        help=_(
            "ask CNKI the census total of N of the remaining days no round or sample has seen "
            "(N requests at the session pace, from a passed session's budget; kept for later "
            "plans and the run's summary; default 0: none)"
        ),
    )
    plan.add_argument(
        "--delay",
        type=float,
        default=None,
        metavar="SECONDS",
        help=_("seconds between the sample's requests (default: 1 / [cnki] session_pace)"),
    )
    move = actions.add_parser(
        "move", help=_("move the cursor: every round from DATE on is crawled again")
    )
    move.add_argument("name", help=_("the task's name or id"))
    move.add_argument("date", help=_("the first day to crawl again, YYYY-MM-DD"))
    move.add_argument(
        "code",
        nargs="?",
        help=_(
            "a root category of that day: its following categories are crawled again from there"
        ),
    )
    add_task_reopen(actions)
    task_parser.set_defaults(func=cmd_task)
