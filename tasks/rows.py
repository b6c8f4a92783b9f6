"""The task row: what a row of the task table means, checked, and reading it.

The operator steers a task by editing its row from any MySQL client while workers run, so a row
is read back as data to check, never trusted: :func:`validate_row` turns it into a :class:`Task`
or raises :class:`~cnkispider.exceptions.TaskRowError` naming the column and what is wrong with
it (a worker reports a bad row once, :meth:`TaskRows.report_bad_row`, and skips it).

Days are CNKI's calendar (Beijing time, :func:`cnkispider.clock.cnki_today`): an open-ended task (``end_date``
empty) is crawled up to today there, whatever the worker's clock says.

:class:`TaskRows` is the part of :class:`tasks.flow.TaskStore` that reads the task table; the
other parts (tasks/rounds.py, tasks/steering.py, tasks/workers.py) build on it.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from cnkispider.clock import cnki_today
from cnkispider.cnki.query import QueryError, task_query
from cnkispider.exceptions import InputError, TaskRowError, UnknownName
from cnkispider.items import DEFAULT_DEPTH, DOC_TYPES, check_depth

# Run again while the database is away: only for reads, and for moves that are one conditional
# UPDATE (run again after its commit was lost, it matches nothing and says False: another
# caller's move, which is what the callers already expect). Claims are run again too: a claim
# recognises the round its lost commit claimed (tasks/claims.py ``ClaimRounds._own_claim``), and a
# round's listed total is set, not added (``Rounds.set_total``).
from cnkispider.store.db import retried
from cnkispider.store.schema import task
from cnkispider.words.i18n import _, mark, moment
from cnkispider.words.vocabulary import halt_reason, word
from tasks.categories import (
    DAY,
    CategoryError,
    CategoryTree,
    load_tree,
    reload_if_changed,
    round_label,
)
from tasks.selection import Selection, SelectionError, parse_selection

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Task:
    """A task row that passed validation."""

    id: int
    name: str
    type: str
    start_date: dt.date
    cur_date: dt.date | None
    cur_code: str | None
    end_date: dt.date | None
    categories: str
    phase: str
    status: dt.datetime | None
    tree: CategoryTree
    halt_reason: str | None = None
    halted_at: dt.datetime | None = None
    depth: str = DEFAULT_DEPTH  # list | export | detail (cnkispider.items.DEPTHS)
    selection: Selection | None = None  # a deepening task's rule (tasks/selection.py)
    # the professional-search expression every search of the task carries (docs/QUERY.md);
    # None: every document of the task's categories
    query: str | None = None
    follow: bool = False  # follows today: end date today in Beijing, looks back (tasks/lookback.py)
    look_at: dt.datetime | None = None  # when its last look began
    look_due: dt.datetime | None = None  # when its next look is due (None: once at today)
    looks: int = 0  # how many looks it has had

    def limit(self, now: dt.datetime) -> dt.date:
        """The last day that may be handed out: end_date, or today on CNKI's calendar."""
        return self.end_date or cnki_today(now)

    def next_round(self, census: bool = False) -> tuple[dt.date, str]:
        """The round after the cursor. With the day census (``census``) the cursor walks days:
        ``(day, '*')``; a cursor an operator set on a root goes on through that day's roots,
        then by days again, so steering by the table keeps its meaning."""
        if census:
            if self.cur_date is None:
                return self.start_date, DAY
            if self.cur_code in (None, DAY):
                if self.cur_code is None:
                    return self.cur_date, DAY
                return self.cur_date + dt.timedelta(days=1), DAY
            following = self.tree.next_root(self.cur_code)
            if following is None:
                return self.cur_date + dt.timedelta(days=1), DAY
            return self.cur_date, following
        if self.cur_date is None:
            return self.start_date, self.tree.roots[0]
        if self.cur_code == DAY:  # the census was switched off on a census cursor
            return self.cur_date + dt.timedelta(days=1), self.tree.roots[0]
        following = self.tree.next_root(self.cur_code)
        if following is None:
            return self.cur_date + dt.timedelta(days=1), self.tree.roots[0]
        return self.cur_date, following


def _parse_day(value, what: str, task_id: int, required: bool) -> dt.date | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise TaskRowError(task_id, _("%(column)s is empty") % {"column": what})
        return None
    try:
        return dt.date.fromisoformat(str(value).strip())
    except ValueError:
        raise TaskRowError(
            task_id,
            _("%(column)s %(value)r is not a date (YYYY-MM-DD)") % {"column": what, "value": value},
        ) from None


def task_days(row, now: dt.datetime) -> tuple[dt.date, dt.date, bool]:
    """The first and the last day of the raw task ``row`` at ``now`` (the database's clock),
    and whether the last is today's (an open end: today in Beijing); TaskRowError for a date
    that is not one."""
    start = _parse_day(row.start_date, "start_date", row.id, required=True)
    end = _parse_day(row.end_date, "end_date", row.id, required=False)
    return start, end or cnki_today(now), end is None


def validate_row(row, base_dir: Path | None = None) -> Task:
    """Turn a task row into a Task, or raise TaskRowError saying what is wrong with it."""
    tid = row.id
    if row.type not in DOC_TYPES:
        raise TaskRowError(
            tid,
            _("type %(type)r is unknown; expected one of %(types)s")
            % {"type": row.type, "types": ", ".join(DOC_TYPES)},
        )
    start = _parse_day(row.start_date, "start_date", tid, required=True)
    cur = _parse_day(row.cur_date, "cur_date", tid, required=False)
    end = _parse_day(row.end_date, "end_date", tid, required=False)
    # end_date = the day before start_date is how `task stop` stops a task still on its first
    # day; anything earlier is a typo.
    if end is not None and end < start - dt.timedelta(days=1):
        raise TaskRowError(
            tid, _("end_date %(end)s is before start_date %(start)s") % {"end": end, "start": start}
        )
    # the cursor is the last round handed out: a cursor before the start would crawl days that
    # are not the task's (every round from it on, and call the task finished after)
    if cur is not None and cur < start:
        raise TaskRowError(
            tid, _("cur_date {cur} is before start_date {start}").format(cur=cur, start=start)
        )
    try:
        reload_if_changed(row.categories, base_dir)
        tree = load_tree(row.categories, row.type, base_dir)
    except CategoryError as exc:
        raise TaskRowError(tid, _("categories: %(problem)s") % {"problem": exc}) from None
    code = row.cur_code or None
    if code is not None and code != DAY and code not in tree:
        raise TaskRowError(
            tid, _("cur_code %(code)r is not one of the task's categories") % {"code": code}
        )
    if cur is None and code is not None:
        raise TaskRowError(tid, _("cur_code is set but cur_date is empty"))
    raw_depth = getattr(row, "depth", None)  # NULL (and a database before v7): detail
    try:
        depth = check_depth(raw_depth) if raw_depth not in (None, "") else DEFAULT_DEPTH
    except ValueError as exc:
        raise TaskRowError(tid, str(exc)) from None
    try:
        selection = parse_selection(getattr(row, "selection", None))
    except SelectionError as exc:
        raise TaskRowError(tid, _("selection: %(problem)s") % {"problem": exc}) from None
    raw_query = getattr(row, "query", None)  # NULL (and a database before v9): no query
    try:
        query = task_query(raw_query, row.type)
    except QueryError as exc:  # a hand-edited row: reported and skipped, as any bad column
        raise TaskRowError(tid, _("query: %(problem)s") % {"problem": exc}) from None
    return Task(
        id=tid,
        name=row.name,
        type=row.type,
        start_date=start,
        cur_date=cur,
        cur_code=code,
        end_date=end,
        categories=row.categories,
        phase=row.phase,
        status=row.status,
        tree=tree,
        halt_reason=getattr(row, "halt_reason", None) or None,
        halted_at=getattr(row, "halted_at", None),
        depth=depth,
        selection=selection,
        query=query,
        # a database before schema 9 has none of these: not following
        follow=bool(getattr(row, "follow", None)),
        look_at=getattr(row, "look_at", None),
        look_due=getattr(row, "look_due", None),
        looks=getattr(row, "looks", None) or 0,
    )


def read_row(conn, key: int | str, *, lock: bool = False):
    """The raw task row of ``key`` (its id, or its name), or UnknownName. ``lock``: held until
    the transaction ends (``FOR UPDATE``; SQLite serialises writers itself), so that a command's
    checks and its write see the same row."""
    where = task.c.id == int(key) if str(key).isdigit() else task.c.name == key
    query = sa.select(task).where(where)
    row = conn.execute(query.with_for_update() if lock else query).first()
    if row is None:
        raise UnknownName(_("no task %(name)r") % {"name": key})
    return row


NAME_LENGTH = task.c.name.type.length


def check_name(name: str | None) -> str:
    """``name`` as a new task's name, or InputError in one line. Every command finds a task by
    the name the operator types again, and the web page links to it (``/tasks/<name>``): so
    never blank, no space at either end, not a number (a number is read as the task's id), no
    ``/`` (it would split the page's address) and no control character."""
    text = name or ""
    if not text.strip():
        raise InputError(_("a task's name cannot be blank"))
    if text != text.strip():
        raise InputError(
            _("task name {name!r} begins or ends with a space; give it without").format(name=text)
        )
    if text.isdigit():
        raise InputError(
            _(
                "task name {name!r} is a number, which every command reads as a task's id; "
                "give a name with a letter in it"
            ).format(name=text)
        )
    if "/" in text or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise InputError(
            _("task name {name!r} holds a '/' or a control character").format(name=text)
        )
    if len(text) > NAME_LENGTH:
        raise InputError(
            _("task name {name!r}... is longer than {n} characters").format(
                name=text[:20], n=NAME_LENGTH
            )
        )
    return text


def iso(day: dt.date | None) -> str | None:
    return day.isoformat() if day is not None else None


def rounds_between(current: Task, upto: dt.date, census: bool = False) -> int:
    """How many rounds the task has from its start to ``upto`` (for progress bars); with the
    day census, the census rounds (one a day: the root rounds of a split day come on top)."""
    days = max((upto - current.start_date).days + 1, 0)
    return days if census else days * len(current.tree.roots)


class TaskRows:
    """Reading the task table (a part of :class:`tasks.flow.TaskStore`, which sets
    ``engine``, ``base_dir`` and ``_reported``)."""

    engine: Engine
    base_dir: Path | None
    _reported: set[tuple[int, str]]

    def _row(self, conn, key: int | str):
        return read_row(conn, key)

    @retried("reading a task")
    def get(self, key: int | str) -> Task:
        with self.engine.connect() as conn:
            return validate_row(self._row(conn, key), self.base_dir)

    def rows(self) -> list:
        """Every task row, unvalidated (for listing, where a bad row is shown, not hidden)."""
        with self.engine.connect() as conn:
            return list(conn.execute(sa.select(task).order_by(task.c.id)))

    @retried("reading a task's halt")
    def halt_of(self, task_id: int) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(sa.select(task.c.halt_reason).where(task.c.id == task_id)).scalar()

    def report_bad_row(self, error: TaskRowError) -> None:
        """Log a bad task row once per process (the same problem is not repeated every claim)."""
        key = (error.task_id, error.problem)
        if key not in self._reported:
            self._reported.add(key)
            logger.error("skipping %s (fix the row in the task table)", error)


def describe(t: Task) -> str:
    """One line of a task for the operator: type, days, cursor, categories, phase, heartbeat, halt."""
    end = t.end_date.isoformat() if t.end_date else _("(today)")
    cur = f"{t.cur_date or '-'} {word(round_label(t.cur_code))}"
    status = moment(t.status) if t.status else _("never")  # the locale's form, in UTC
    return (
        _(
            "task %(id)s %(name)r: %(type)s %(start)s..%(end)s, cursor %(cursor)s, "
            "%(categories)s categories, depth %(depth)s, phase %(phase)s, last heartbeat %(seen)s"
        )
        % {
            "id": t.id,
            "name": t.name,
            "type": word(t.type),
            "start": t.start_date,
            "end": end,
            "cursor": cur,
            "categories": len(t.tree.roots),
            "depth": word(t.depth),
            "phase": word(t.phase),
            "seen": status,
        }
        + (
            mark("clause") + _("selects %(rule)s") % {"rule": t.selection.text}
            if t.selection
            else ""
        )
        + (mark("clause") + _("query %(query)s") % {"query": t.query} if t.query else "")
        + (mark("clause") + _("follows today") if t.follow else "")
        + (_halt_words(t.halt_reason) if t.halt_reason else "")
    )


def _halt_words(reason: str) -> str:
    if reason.split(":", 1)[0].strip() == "paused":  # cnkispider.watch.halting.PAUSE_REASON
        return mark("clause") + word("paused")
    return mark("clause") + _("halted: %(reason)s") % {"reason": halt_reason(reason)}
