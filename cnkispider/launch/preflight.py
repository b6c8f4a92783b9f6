"""The checks before a crawl, the same for `cnkispider run` and `scrapy crawl`.

:func:`preflight` fails before Scrapy starts, with one line (a ``CnkiSpiderError``: ``ConfigError``
for config.ini, ``UnknownName`` for a missing task), when the [task] of config.ini is not valid
input (checked first, with the rest of config.ini: :func:`check_config`, before the database
file, the database or the embedded Redis folder is created), the database or Redis is unusable,
or a task named on the command line does not exist; it warns about a config.ini that drifted
from its task's row. The entry points call it: the
`cnkispider` command line (:mod:`cnkispider.cli`) and the project's `scrapy crawl`
(:mod:`cnkispider.commands.crawl`); what it needs to check a task (:func:`parse_day`,
:func:`check_task_input`, :func:`task_store`) is the command line's too.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from cnkispider.clock import cnki_today
from cnkispider.config import Config
from cnkispider.days import ISO_DAY, iso_day
from cnkispider.exceptions import ConfigError, InputError, UnknownName
from cnkispider.items import DEFAULT_DEPTH
from cnkispider.words.i18n import N_, _

# The database, Redis and flow control are imported where they are used, as the command line
# always did: `cnkispider --help` (and the .exe's start) need none of them.
if TYPE_CHECKING:
    from tasks.flow import TaskStore
    from tasks.rows import Task

logger = logging.getLogger("cnkispider.preflight")  # its name before the move: log lines keep it


def task_store(config: Config) -> TaskStore:
    """The task table of ``config``'s database (created with its tables if missing)."""
    from cnkispider.store.db import open_database
    from tasks.flow import TaskStore

    engine = open_database(config.database_url)
    return TaskStore(
        engine, round_lease=config.crawl["round_lease_seconds"], base_dir=config.base_dir
    )


DATE_FORM = N_("YYYY-MM-DD, e.g. 2024-01-31")
#: what parse_day's callers call the day they pass (translated where said)
DAY_WORDS = (N_("start date"), N_("end date"), N_("date"), N_("day"))


def parse_day(value: str | None, what: str) -> str | None:
    """``value`` as an ISO day, or InputError in one line naming the value and the expected form.

    Every date an operator types (task add/extend/resume/move, export --since, probe --day)
    goes through here, so "yesterday" and "2024-02-30" get the same message everywhere.
    """
    if value is None or not str(value).strip():
        return None
    text = str(value).strip()
    try:
        return iso_day(text).isoformat()
    except ValueError:
        pass
    if ISO_DAY.fullmatch(text):  # the right shape, an impossible day (2024-02-30)
        raise InputError(
            _("%(what)s %(text)r is not a real day (month or day out of range); expected %(form)s")
            % {"what": _(what), "text": text, "form": _(DATE_FORM)}
        )
    raise InputError(
        _("%(what)s %(text)r is not a date; expected %(form)s")
        % {"what": _(what), "text": text, "form": _(DATE_FORM)}
    ) from None


def check_task_input(
    doc_type: str, start: str | None, end: str | None, categories: str, base_dir
) -> None:
    """Everything a new or changed task row needs, checked before anything is written."""
    from tasks.categories import check_spec

    first = parse_day(start, "start date")
    last = parse_day(end, "end date")
    if first and last and last < first:
        raise InputError(
            _("end date %(end)s is before start date %(start)s") % {"end": last, "start": first}
        )
    check_start(first)
    check_spec(categories, doc_type, base_dir)


def check_start(first: str | None) -> None:
    """A new task's first day (ISO) is not after today on CNKI's calendar."""
    today = cnki_today()
    if first and first > today.isoformat():
        raise InputError(
            _(
                "start date %(start)s is after today (%(today)s in Beijing, CNKI's calendar): "
                "nothing is listed for it yet"
            )
            % {"start": first, "today": today}
        )


def config_drift(config: Config, row) -> list[str]:
    """One warning line per [task] key of config.ini that differs from the task's row.

    The row wins (the table is how a task is steered, and another PC may run an older
    config.ini), so a changed config.ini is said, with the command that applies it.
    """
    t = config.task
    name = t.name
    lines = []

    def warn(key, ini_value, row_value, command):
        lines.append(
            _(
                "warning: config.ini [task] %(key)s = %(ini)s but task %(name)r has %(row)s "
                "(the task row wins; to apply: %(command)s)"
            )
            % {
                "key": key,
                "ini": ini_value or _("(empty)"),
                "name": name,
                "row": row_value or _("(empty)"),
                "command": command,
            }
        )

    if t.categories.strip() != (row.categories or "").strip():
        warn(
            "categories",
            t.categories,
            row.categories,
            f"cnkispider task set {name} --categories {t.categories}",
        )
    if t.type != row.type:
        warn("type", t.type, row.type, f"cnkispider task set {name} --type {t.type}")
    row_end = row.end_date.isoformat() if row.end_date else ""
    if (t.end_date or "") != row_end:
        command = (
            f"cnkispider task extend {name} {t.end_date}"
            if t.end_date
            else f"cnkispider task extend {name}"
        )
        warn("end_date", t.end_date, row_end, command)
    if t.start_date and t.start_date != row.start_date.isoformat():
        warn(
            "start_date",
            t.start_date,
            row.start_date.isoformat(),
            f"cnkispider task add {name}-2 --start {t.start_date} (a task's start is fixed)",
        )
    if (t.query or None) != (getattr(row, "query", None) or None):
        warn(
            "query",
            t.query,
            getattr(row, "query", None),
            f'cnkispider task set {name} --query "{t.query}" (before its first round)',
        )
    return lines


def check_config(config: Config) -> None:
    """What load_config cannot check alone (it knows no category tree): the [task] of
    config.ini as the input of a new task, its name, days and categories. ConfigError naming
    the file, the key and the problem. Called before anything is created, and whether or not
    the task exists yet (a config.ini is right or wrong whatever the database holds)."""
    from tasks.categories import check_spec
    from tasks.rows import check_name

    t = config.task
    checks = (
        ("name", lambda: check_name(t.name)),
        ("start_date", lambda: check_start(t.start_date or None)),
        ("categories", lambda: check_spec(t.categories, t.type, config.base_dir)),
    )
    for key, check in checks:
        try:
            check()
        except InputError as exc:
            raise ConfigError(config.source("task", key), "task", key, str(exc)) from None


def preflight(config: Config, task_arg: str | None = None) -> Task | None:
    """The checks before a crawl, the same for `cnkispider run` and `scrapy crawl`: config.ini
    (first: nothing is created for a config.ini that is refused), the database and Redis
    answer, a named task exists (returned); a drifted config.ini is warned about. Raises
    CnkiSpiderError (one line)."""
    check_config(config)
    if task_arg:  # a task named that is not there: refused before anything is created
        _check_named(config, task_arg)
    _check_services(config)
    t = config.task
    store = task_store(config)
    if task_arg:
        try:
            return store.get(task_arg)
        except LookupError:
            raise _no_task(task_arg) from None
    try:
        row = store.get(t.name)
    except LookupError:
        from cnkispider.store import schema
        from cnkispider.store.rights import check_database

        # the worker adds it: its account needs INSERT on the task table (docs/WORKERS.md)
        check_database(store.engine, [schema.task], adding_task=True)
        return None
    for line in config_drift(config, row):
        print(line, file=sys.stderr)
    return None


def _no_task(name: str) -> UnknownName:
    return UnknownName(
        _("no task {name!r} in the task table (`cnkispider task list` lists them)").format(
            name=name
        )
    )


def _check_named(config: Config, name: str) -> None:
    """`run --task NAME` of a task the table does not hold: refused, with no database file or
    embedded Redis folder created for it (a database that does not exist holds no task). A
    table that cannot be read yet is left to the service checks that follow."""
    from cnkispider.exceptions import StorageError
    from cnkispider.store.db import open_database_readonly
    from tasks.rows import read_row

    try:
        engine = open_database_readonly(config.database_url)
    except StorageError:  # no SQLite file: no task either
        raise _no_task(name) from None
    try:
        with engine.connect() as conn:
            read_row(conn, name)
    except UnknownName:
        raise _no_task(name) from None
    except Exception:  # unreachable, no table yet, no right: the service checks say it
        logger.debug("run --task %s: the task table could not be read first", name, exc_info=True)
    finally:
        engine.dispose()


def _check_services(config: Config) -> None:
    """Fail before Scrapy starts, with one clear line, if the database or Redis is unusable."""
    from cnkispider.store import schema
    from cnkispider.store.db import open_database
    from cnkispider.store.redisconn import connect
    from cnkispider.store.rights import check_database, check_redis, redis_account

    engine = open_database(config.database_url)
    try:
        check_database(engine, schema.metadata.sorted_tables)
    finally:
        engine.dispose()
    client = connect(config.redis_url, config.data_dir)
    try:
        check_redis(client, redis_account(config.redis_url), config.redis_prefix)
    finally:
        client.close()


def query_spelling(query: str | None, doc_type: str) -> str | None:
    """The one spelling of ``query``, None for none given (its own text when it does not
    parse: it differs)."""
    from cnkispider.cnki.query import QueryError, task_query

    try:
        return task_query(query, doc_type)
    except QueryError:
        return query


def add_drift(args, row) -> list[str]:
    """`task add NAME ...` of a task that exists (``row``: its :class:`tasks.rows.Task`): the
    commands that would make each change its arguments ask for (empty: the same task). Only
    what was given is compared (no --end, no --categories: whatever the task has)."""
    name = row.name
    row_end = row.end_date.isoformat() if row.end_date else ""
    out = []
    if args.type and args.type != row.type:
        out.append(f"cnkispider task set {name} --type {args.type}")
    if args.categories and args.categories.strip() != (row.categories or "").strip():
        out.append(f"cnkispider task set {name} --categories {args.categories}")
    end = parse_day(args.end, "end date")
    if end and end != row_end:
        out.append(f"cnkispider task extend {name} {end}")
    depth = getattr(args, "depth", None)
    if depth and depth.strip().lower() != (row.depth or DEFAULT_DEPTH):
        out.append(f"cnkispider task set {name} --depth {depth}")
    query = query_spelling(getattr(args, "query", None), row.type)
    if query is not None and query != row.query:
        out.append(
            f"cnkispider task add {name}-2 --like {name} --query ... (a task's query is fixed once crawled)"
        )
    if getattr(args, "follow", False) and not row.follow:
        out.append(f"cnkispider task set {name} --follow on")
    start = parse_day(args.start, "start date")
    if start and start != row.start_date.isoformat():
        out.append(f"cnkispider task add {name}-2 --start {start} ... (a task's start is fixed)")
    return out
