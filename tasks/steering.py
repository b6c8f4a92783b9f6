"""Steering: what an operator does to a task row (add, set, stop, pause, extend, move, halt,
resume).

The operator steers a task by editing its row, from any MySQL client or the command line
(``cnkispider task ...``, which only parses arguments and calls these), while workers run:

- end_date earlier than cur_date: nothing more is handed out; in-flight rounds finish
  (``task stop``: end_date becomes the day before the cursor's day).
- a later end_date (or an empty one): the task goes on from its cursor (``task extend``).
- changing cur_date / cur_code moves the cursor (``task move``): done rounds are crawled again
  when it passes them; days it jumps forward past without a round are skipped (tasks/skips.py).
- categories, and the type while no round of the task exists (``task set``).
- a halt (``task.halt_reason``, set by the circuit breaker, cnkispider/watch/halting.py): nothing is
  claimed until ``task resume`` lifts it and re-opens what failed for it.
- following today (``task set --follow on|off``, tasks/lookback.py): the end date is today, moving;
  ``task stop`` ends it (the end date becomes today), ``task extend`` has nothing to do.
- a pause (``task pause``) is the operator's halt (reason ``paused``): the dates stay, and
  ``task resume`` goes on to the end date the task had. A stop is not a pause: it moves
  end_date, and only a later end date (``task extend``) undoes it. A finished task is
  extended or moved, never paused or resumed.

Every command is one transaction: the row read and locked (``FOR UPDATE``), the command's checks,
the row the edit makes checked as a worker reads it (:func:`checked_edit`: never a row workers
skip), then the write. A check that fails raises and rolls back: a failed command writes nothing.

An edit (:func:`edit_task`) is not a move: it is unconditional, the operator's word is the last,
and no worker races for it. Halting and resuming are moves of the task's state, and resuming
moves rounds too, so they go through tasks/roundstate.py's :func:`~tasks.roundstate.move` /
:func:`~tasks.roundstate.transition` like every other move; the errorCode rows they touch are the
error recorder's to write (errors/recorder.py).
"""

from __future__ import annotations

import datetime as dt
from contextlib import contextmanager
from types import SimpleNamespace

import sqlalchemy as sa

from cnkispider.clock import cnki_today
from cnkispider.exceptions import InputError, TaskRowError
from cnkispider.items import DEFAULT_DEPTH, DOC_TYPES, check_depth
from cnkispider.store.db import db_now
from cnkispider.store.schema import round_, task
from cnkispider.words.i18n import _
from cnkispider.words.vocabulary import halt_reason, word
from errors.recorder import ErrorRecorder
from tasks.categories import check_spec, load_tree
from tasks.phase import Phase
from tasks.roundstate import HALTED_NOTE, NOW, RoundState, move, transition
from tasks.rows import Task, TaskRows, check_name, read_row, task_days, validate_row
from tasks.selection import parse_selection
from tasks.skips import record_move


def check_query(query: str | None, doc_type: str) -> str | None:
    """A task's expression in its one spelling (None for none), or InputError saying where it
    fails (cnkispider/cnki/query.py)."""
    from cnkispider.cnki.query import QueryError, task_query

    try:
        return task_query(query, doc_type)
    except QueryError as exc:
        raise InputError(
            _("%(option)s: %(problem)s") % {"option": "--query", "problem": exc}
        ) from None


def finished_line(current: Task) -> str:
    """Why a finished task is not paused or resumed, and what crawls more of it."""
    return _(
        "task %(task)s is finished: `cnkispider task extend %(name)s YYYY-MM-DD` crawls later "
        "days, `cnkispider task move %(name)s YYYY-MM-DD` crawls again from a day"
    ) % {"task": repr(current.name), "name": current.name}


def edit_task(conn, task_id: int, **values) -> None:
    """An operator's edit of the task row: one unconditional UPDATE of ``values``, in their
    order (no ``updated_at`` unless given: each edit says whether it stamps it)."""
    conn.execute(task.update().where(task.c.id == task_id).values(**values))


def checked_edit(row, values: dict, base_dir=None) -> Task:
    """The task ``row`` would be after ``values`` are written, as a worker reads it; InputError
    (the row's problem, naming the task) if a worker would skip it (a BAD ROW)."""
    after = SimpleNamespace(**{**row._mapping, **values})
    try:
        return validate_row(after, base_dir)
    except TaskRowError as exc:
        raise InputError(
            _("task {name!r}: {problem} (nothing changed)").format(
                name=row.name, problem=exc.problem
            )
        ) from None


class Steering(TaskRows):
    """What an operator does to a task row (a part of :class:`tasks.flow.TaskStore`, which sets
    ``errors``, the :class:`~errors.recorder.ErrorRecorder` that re-opens error rows)."""

    errors: ErrorRecorder

    @contextmanager
    def _command(self, key: int | str):
        """One command on the task row of ``key``: ``(conn, row)`` in one transaction, the row
        locked until it ends. Raise to refuse: the transaction rolls back, nothing is written."""
        with self.engine.begin() as conn:
            yield conn, read_row(conn, key, lock=True)

    def _valid(self, row) -> Task:
        """The row as it is, for a command that needs it readable (else TaskRowError)."""
        return validate_row(row, self.base_dir)

    def register(
        self,
        name: str,
        doc_type: str,
        start_date: str,
        end_date: str = "",
        categories: str = "builtin",
        depth: str = DEFAULT_DEPTH,
        selection: str | None = None,
        query: str | None = None,
        follow: bool = False,
    ) -> tuple[Task, bool]:
        """Create the task if it is new; join it unchanged if it exists (returns created?).

        An existing row is never overwritten from a config file: the operator steers through
        the table, and a PC restarting with an old config.ini must not undo that.
        """
        if doc_type not in DOC_TYPES:
            raise InputError(_("type must be one of %(types)s") % {"types": ", ".join(DOC_TYPES)})
        check_name(name)
        start = dt.date.fromisoformat(start_date).isoformat()
        end = dt.date.fromisoformat(end_date).isoformat() if end_date else None
        if follow and end is not None:
            raise InputError(
                _("a task that follows today has no end date (it is today, moving with it)")
            )
        load_tree(categories, doc_type, self.base_dir)  # fail now on a bad category spec
        depth = check_depth(depth)
        parse_selection(selection)  # fail now on a bad rule
        query = check_query(query, doc_type)  # fail now on a bad expression
        with self.engine.begin() as conn:
            existing = conn.execute(sa.select(task.c.id).where(task.c.name == name)).first()
            if existing is None:
                now = db_now(conn)
                try:
                    conn.execute(
                        task.insert().values(
                            name=name,
                            type=doc_type,
                            start_date=start,
                            cur_date=start,
                            cur_code=None,
                            end_date=end,
                            categories=categories,
                            depth=depth,
                            selection=selection or None,
                            query=query,
                            follow=1 if follow else None,
                            phase=Phase.CRAWL,
                            created_at=now,
                            updated_at=now,
                        )
                    )
                    created = True
                except sa.exc.IntegrityError:  # another PC registered it a moment ago
                    created = False
            else:
                created = False
        return self.get(name), created

    def set_task(
        self,
        key: int | str,
        categories: str | None,
        doc_type: str | None,
        depth: str | None = None,
        query: str | None = None,
    ) -> Task:
        """Change what the task table allows to change: the categories, the depth (rounds
        handed out from now on are crawled at it; documents already stored keep theirs until a
        deeper pass fills them), the type and the query while nothing of the task is crawled
        (its rounds, documents and error rows belong to one type and one search; a changed
        search is a new task: ``task add NEW --like NAME --query ...``). Works on a row whose
        categories a worker cannot read (a category file gone): new categories repair it."""
        if categories is None and doc_type is None and depth is None and query is None:
            raise InputError(
                _("task set: give %(categories)s, %(type)s, %(depth)s and/or %(query)s")
                % {
                    "categories": "--categories",
                    "type": "--type",
                    "depth": "--depth",
                    "query": "--query",
                }
            )
        new_depth = check_depth(depth, "--depth") if depth is not None else None
        with self._command(key) as (conn, row):
            new_type = doc_type or row.type
            new_categories = categories if categories is not None else row.categories
            values = {}
            if categories is not None:
                values["categories"] = new_categories
            crawled = conn.execute(
                sa.select(sa.func.count()).select_from(round_).where(round_.c.task_id == row.id)
            ).scalar()
            current_query = getattr(row, "query", None) or None
            if query is not None:
                new_query = check_query(query, new_type)
                if new_query != current_query:
                    if crawled:
                        raise InputError(
                            _(
                                "task %(task)r: the query stays as it is because %(n)s rounds are "
                                "already crawled with it (add a new task: %(command)s)"
                            )
                            % {
                                "task": row.name,
                                "n": crawled,
                                "command": f"task add NEW --like {row.name} --query ...",
                            }
                        )
                    values["query"] = new_query
            elif doc_type is not None and current_query:
                check_query(current_query, new_type)  # the query's fields must exist for the type
            if doc_type is not None and doc_type != row.type:
                if crawled:
                    raise InputError(
                        _(
                            "task %(task)r: the type stays %(type)s because %(n)s rounds are "
                            "already crawled as %(type)s (add a new task for %(new_type)s)"
                        )
                        % {
                            "task": row.name,
                            "type": word(row.type),
                            "n": crawled,
                            "new_type": word(doc_type),
                        }
                    )
                values["type"] = doc_type
            # after the type: say the real obstacle
            tree = check_spec(new_categories, new_type, self.base_dir)
            if row.cur_code and values and row.cur_code not in tree:
                values["cur_code"] = None  # the cursor's category is gone: its day starts over
            if new_depth is not None and new_depth != (row.depth or DEFAULT_DEPTH):
                values["depth"] = new_depth
            if values:
                checked_edit(row, values, self.base_dir)
                edit_task(conn, row.id, **values)
        return self.get(row.id)

    def set_follow(self, key: int | str, on: bool) -> Task:
        """Follow today (the end date empty: today in Beijing, moving with it; the looks count
        the look-back again) or stop following (the end date becomes today, fixed)."""
        with self._command(key) as (conn, row):
            now = db_now(conn)
            if on:
                values = {"follow": 1, "end_date": None, "updated_at": now}
            else:
                values = {"follow": 0, "end_date": cnki_today(now).isoformat(), "updated_at": now}
            checked_edit(row, values, self.base_dir)
            edit_task(conn, row.id, **values)
        return self.get(row.id)

    def set_end_date(self, key: int | str, end_date: str | None) -> Task:
        """What an operator does by editing end_date: extend, resume (None = up to today)."""
        with self._command(key) as (conn, row):
            if getattr(row, "follow", None):
                raise InputError(
                    _(
                        "task {name!r} already follows today (its end date is today and moves "
                        "with it): nothing to extend"
                    ).format(name=row.name)
                )
            self._set_end(conn, row, end_date)
        return self.get(row.id)

    def _set_end(self, conn, row, end_date: str | None) -> None:
        value = self._end_value(row, end_date)
        values = {"end_date": value, "updated_at": db_now(conn)}
        checked_edit(row, values, self.base_dir)
        edit_task(conn, row.id, **values)

    @staticmethod
    def _end_value(row, end_date: str | None) -> str | None:
        """``end_date`` as the row's new end (None: up to today); InputError before its start
        (the day before the start is a stop's: ``task stop``)."""
        value = dt.date.fromisoformat(end_date).isoformat() if end_date else None
        if value is not None and value < str(row.start_date):
            raise InputError(
                _("end_date %(end)s is before the task's start_date %(start)s")
                % {"end": value, "start": row.start_date}
            )
        return value

    def stop(self, key: int | str) -> Task:
        """Stop handing out rounds: end_date becomes the day before the cursor's day. A task
        that follows today stops following: its end date becomes today, fixed."""
        if self.get(key).follow:
            return self.set_follow(key, False)
        with self._command(key) as (conn, row):
            current = self._valid(row)
            day = current.cur_date or current.start_date
            stop_at = day - dt.timedelta(days=1)
            values = {"end_date": stop_at.isoformat(), "updated_at": db_now(conn)}
            checked_edit(row, values, self.base_dir)
            edit_task(conn, row.id, **values)
        return self.get(row.id)

    def pause(self, key: int | str) -> Task:
        """Pause the task: nothing more is handed out, its dates stay as they are (a halt whose
        reason is the operator's: the rounds in flight drain and are crawled again on resume)."""
        from cnkispider.watch.halting import PAUSE_REASON, is_paused

        with self._command(key) as (conn, row):
            current = self._valid(row)
            if current.halt_reason:
                if is_paused(current.halt_reason):
                    raise InputError(_("task %(task)r is already paused") % {"task": current.name})
                raise InputError(
                    _("task %(task)r is halted (%(reason)s): nothing to pause")
                    % {"task": current.name, "reason": halt_reason(current.halt_reason)}
                )
            if current.phase == Phase.DONE:
                raise InputError(finished_line(current))
            where = [task.c.id == row.id, task.c.halt_reason.is_(None)]
            move(conn, task, where, db_now(conn), halt_reason=PAUSE_REASON, halted_at=NOW)
        return self.get(row.id)

    def resume(self, key: int | str, end_date: str | None = None) -> tuple[Task, dict | None]:
        """Go on after a pause or a halt (the end date stays unless ``end_date`` is given); a
        task neither paused nor halted takes ``end_date`` as a new end (``task extend``)."""
        with self._command(key) as (conn, row):
            current = self._valid(row)
            if current.halt_reason:
                reopened = self._resume_halted(conn, row, end_date)
            else:
                if current.phase == Phase.DONE:
                    raise InputError(finished_line(current))
                if not end_date:
                    raise InputError(
                        _(
                            "task %(task)r is not paused: nothing to resume (after a stop, "
                            "`cnkispider task extend %(name)s YYYY-MM-DD` sets a later end date)"
                        )
                        % {"task": current.name, "name": current.name}
                    )
                self._set_end(conn, row, end_date)
                reopened = None
        return self.get(row.id), reopened

    def move_cursor(self, key: int | str, cur_date: str, cur_code: str | None) -> Task:
        """Move the cursor to ``cur_date`` (``cur_code``: after that day's category): refused,
        with nothing written, for a day outside the task's days or a category not its own."""
        with self._command(key) as (conn, row):
            values = self._move_values(conn, row, cur_date, cur_code)
            edit_task(conn, row.id, **values)
            # days moved past without a round are skipped by the operator, and said (issue 47)
            record_move(
                conn,
                row.id,
                dt.date.fromisoformat(str(row.start_date)),
                dt.date.fromisoformat(values["cur_date"]),
                values["updated_at"],
            )
        return self.get(row.id)

    def check_move(self, key: int | str, cur_date: str, cur_code: str | None) -> Task:
        """The task as :meth:`move_cursor` would leave it, writing nothing (the web page's
        preview): the same refusals, in the same words."""
        with self.engine.connect() as conn:
            row = read_row(conn, key)
            return checked_edit(
                row, self._move_values(conn, row, cur_date, cur_code), self.base_dir
            )

    def _move_values(self, conn, row, cur_date: str, cur_code: str | None) -> dict:
        """The row's values after a move, checked (InputError: nothing is to be written)."""
        day = dt.date.fromisoformat(cur_date).isoformat()
        now = db_now(conn)
        first, last, open_end = task_days(row, now)
        if not first.isoformat() <= day <= last.isoformat():
            days = _("{first} .. {last}").format(first=first, last=last)
            if open_end:
                days = _("{first} .. today, {last} in Beijing").format(first=first, last=last)
            raise InputError(
                _("task {name!r}: {day} is not one of its days ({days}); nothing changed").format(
                    name=row.name, day=day, days=days
                )
            )
        values = {"cur_date": day, "cur_code": cur_code or None, "updated_at": now}
        checked_edit(row, values, self.base_dir)
        return values

    # -- halting -------------------------------------------------------------------------

    def halt(self, task_id: int, reason: str) -> bool:
        """Halt the task with ``reason``: True for the one caller that halted it (a task already
        halted keeps its first reason). One conditional UPDATE."""
        return transition(
            self.engine,
            task,
            [task.c.id == task_id, task.c.halt_reason.is_(None)],
            halt_reason=reason[:500],
            halted_at=NOW,
        )

    def resume_halted(self, key: int | str, end_date: str | None = None) -> tuple[Task, dict]:
        """Clear the task's halt and crawl again what failed for it.

        Rounds that drained while halted are re-opened (claimed with a lapsed lease: the next
        claim takes them over from their first page, deleting their errorCode rows); errorCode
        rows that failed for the halt's reason (for a network halt: any network reason) are
        opened again with their attempts reset, so the recrawl phase replays them.
        """
        with self._command(key) as (conn, row):
            reopened = self._resume_halted(conn, row, end_date)
        return self.get(row.id), reopened

    def _resume_halted(self, conn, row, end_date: str | None) -> dict:
        from cnkispider.watch.halting import NETWORK_REASONS, is_network, slug_of

        now = db_now(conn)
        slug = slug_of(row.halt_reason)
        values = {"halt_reason": None, "halted_at": None, "updated_at": now}
        if end_date:
            values["end_date"] = self._end_value(row, end_date)
            checked_edit(row, values, self.base_dir)
        move(conn, task, [task.c.id == row.id], now, **values)
        reasons: list[str] = []
        if slug is not None:
            reasons = list(NETWORK_REASONS) if is_network(slug) else [slug]
        failed_for_it = self.errors.rounds_failed_for(row.id, reasons)
        # rounds that drained while halted, and rounds marked done before the breaker tripped
        # whose list stage failed for the halt's reason: crawled again from their first page
        reopen = sa.or_(
            sa.and_(round_.c.state == RoundState.FAILED, round_.c.note == HALTED_NOTE),
            sa.and_(
                round_.c.state.in_((RoundState.DONE, RoundState.FAILED)),
                round_.c.id.in_(failed_for_it),
            ),
        )
        reopened = move(
            conn,
            round_,
            [round_.c.task_id == row.id, reopen],
            now,
            state=RoundState.CLAIMED,
            worker=None,
            lease_until=now - dt.timedelta(seconds=1),
            attempts=0,
            note=None,
        )
        replay = 0
        if reasons:  # the others (a replay's row, a round not re-opened): replayed by recrawl
            replay = self.errors.reopen_for(conn, row.id, reasons, now)
        if (replay or reopened) and row.phase != Phase.CRAWL:
            # what failed is crawled again: the task is not done, whatever phase it halted in
            move(conn, task, [task.c.id == row.id], now, phase=Phase.CRAWL)
        return {"rounds": reopened, "error_code": replay, "reason": row.halt_reason}

    # -- re-opening a round (issue 43) ---------------------------------------------------

    def reopen_rounds(self, key: int | str, day: str, category: str | None = None) -> int:
        """The operator's word: the task's rounds of ``day`` (of ``category`` only, if given)
        are crawled again from their first page, whatever their state, in flight included.

        What ``task move`` and ``task resume`` cannot do: the cursor re-opens only rounds done
        or failed, and resume only what failed for a halt; a round in flight whose Redis state
        is gone and that no worker takes over (a flaw, or a Redis restored from an old copy)
        needs a hand. Each round is claimed with a lapsed lease and no worker, so the next
        claim of any worker takes it over (its errorCode rows go then; its ledger rows stay):
        one conditional UPDATE on the states it expects, so a worker's move at the same
        moment either comes first (and this re-opens what it left) or finds the round
        claimed. A finished task goes back to its crawl phase. Returns the rounds re-opened."""
        day = dt.date.fromisoformat(day).isoformat()
        with self._command(key) as (conn, row):
            now = db_now(conn)
            which = [
                round_.c.task_id == row.id,
                round_.c.day == day,
                round_.c.state.in_(tuple(RoundState)),
            ]
            if category is not None:
                which.append(round_.c.category == category)
            reopened = move(
                conn,
                round_,
                which,
                now,
                state=RoundState.CLAIMED,
                worker=None,
                lease_until=now - dt.timedelta(seconds=1),
                attempts=0,
                epoch=None,
                note=None,
            )
            if reopened and row.phase != Phase.CRAWL:
                move(conn, task, [task.c.id == row.id], now, phase=Phase.CRAWL)
        return reopened
