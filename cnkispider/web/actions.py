"""The actions of the web page: the ONLY module of cnkispider.web that steers anything.

Each is one the command line has, called the way the command line calls it (the task store's
steering, tasks/steering.py; the checks of cnkispider/launch/preflight.py; the session pool's ways in,
cnkispider/sessions/paste.py and waysin.py), so the page can never do what the CLI cannot:

    pause    cnkispider task pause NAME                  hand out nothing more; dates stay
    resume   cnkispider task resume NAME [--end DATE]   go on after a pause or a halt
    stop     cnkispider task stop NAME                   end_date = the day before the cursor
    extend   cnkispider task extend NAME END             a later end date
    move     cnkispider task move NAME DATE [CODE]       the cursor back: re-crawl from DATE
    recrawl  the phase to recrawl (what `cnkispider recrawl` sets before it crawls): the
             task's workers replay errorCode and errorLink
    session  cnkispider session add --from-curl -        a pasted "Copy as cURL" joins the pool

:func:`plan` reads the task and says what the action will do ("will set end_date of task X
from A to B") without changing anything; :func:`carry_out` does it and records who and when in
the ``audit`` table. No action runs a program, reads a path or takes a file.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import sqlalchemy as sa

from cnkispider.store.db import db_now
from cnkispider.store.schema import audit
from cnkispider.words.i18n import _
from cnkispider.words.vocabulary import halt_reason, word
from tasks.phase import Phase

TASK_ACTIONS = ("pause", "resume", "stop", "extend", "move", "recrawl")
#: The form fields each action takes (anything else is ignored).
FIELDS = {
    "pause": (),
    "resume": ("end",),
    "stop": (),
    "extend": ("end",),
    "move": ("date", "code"),
    "recrawl": (),
}


@dataclass
class Plan:
    action: str
    task: str | None
    says: str  # what it will do, in words
    values: dict = field(default_factory=dict)  # the checked parameters, carried to the confirm
    ready: bool = True  # False: the plan itself says why it cannot be done (missing value)


def _store(config, engine):
    from tasks.flow import TaskStore

    return TaskStore(
        engine, round_lease=config.crawl["round_lease_seconds"], base_dir=config.base_dir
    )


def _day(value, what: str) -> str | None:
    from cnkispider.launch.preflight import parse_day

    return parse_day(value, what)


def _end(value) -> str:
    return value.isoformat() if value else _("(up to today)")


def offered(halt_reason: str | None, phase: str) -> tuple[str, ...]:
    """The actions that mean something for a task now (its halt reason and phase): a finished
    task is extended or moved (nothing to pause or resume); a paused or halted one is resumed,
    not paused again."""
    if halt_reason:
        return ("resume", "stop", "extend", "move")
    if phase == Phase.DONE:
        return ("extend", "move")
    return ("pause", "stop", "extend", "move", "recrawl")


def _not_offered(current, action: str) -> str:
    from tasks.steering import finished_line

    if current.halt_reason:
        if current.halt_reason.startswith("paused"):
            return _("task %(name)r is paused: resume it first") % {"name": current.name}
        return _("task %(name)r is halted: resume it first") % {"name": current.name}
    if current.phase == Phase.DONE:
        return finished_line(current)
    return _("task %(name)r is not paused: nothing to resume") % {"name": current.name}


def plan(config, engine, action: str, name: str, form: dict) -> Plan:
    """What ``action`` on task ``name`` will do with ``form``'s values; changes nothing.

    LookupError: no such task; ValueError: a value the CLI would refuse (same words)."""
    if action not in TASK_ACTIONS:
        raise LookupError(
            _("no action %(action)r; one of %(actions)s")
            % {"action": action, "actions": ", ".join(word(a) for a in TASK_ACTIONS)}
        )
    store = _store(config, engine)
    current = store.get(name)
    values = {k: (form.get(k) or "").strip() for k in FIELDS[action]}
    label = _("task %(name)r") % {"name": current.name}
    if action not in offered(current.halt_reason, current.phase):
        raise ValueError(_not_offered(current, action))
    if action == "pause":
        return Plan(
            action,
            current.name,
            _(
                "will pause %(task)s: nothing more is handed out, its dates stay "
                "(%(start)s .. %(end)s); the rounds in flight are crawled again on resume"
            )
            % {"task": label, "start": current.start_date, "end": _end(current.end_date)},
        )
    if action == "resume":
        end = _day(values["end"], "end date")
        if current.halt_reason:
            after = end or (current.end_date.isoformat() if current.end_date else None)
            says = _(
                "will clear the halt of %(task)s (%(reason)s): the rounds that drained while "
                "halted are crawled again, errorCode rows that failed for it are replayed; "
                "end date %(before)s -> %(after)s"
            ) % {
                "task": label,
                "reason": halt_reason(current.halt_reason),
                "before": _end(current.end_date),
                "after": after or _("(up to today)"),
            }
        elif end:
            says = _("will set the end date of %(task)s from %(before)s to %(after)s") % {
                "task": label,
                "before": _end(current.end_date),
                "after": end,
            }
        else:
            return Plan(
                action,
                current.name,
                _("%(task)s is not paused: give a later end date to go on after a stop")
                % {"task": label},
                values,
                ready=False,
            )
        return Plan(action, current.name, says, {"end": end or ""})
    if action == "stop":
        day = current.cur_date or current.start_date
        stop_at = (day - dt.timedelta(days=1)).isoformat()
        return Plan(
            action,
            current.name,
            _(
                "will set the end date of %(task)s from %(before)s to %(after)s: no round is "
                "handed out after the cursor; the rounds in flight finish"
            )
            % {"task": label, "before": _end(current.end_date), "after": stop_at},
        )
    if action == "extend":
        end = _day(values["end"], "end date")
        if not end:
            return Plan(action, current.name, _("give the new end date"), values, ready=False)
        if end < current.start_date.isoformat():
            raise ValueError(
                _("the end date %(end)s is before the task's start date %(start)s")
                % {"end": end, "start": current.start_date}
            )
        return Plan(
            action,
            current.name,
            _("will set the end date of %(task)s from %(before)s to %(after)s")
            % {"task": label, "before": _end(current.end_date), "after": end},
            {"end": end},
        )
    if action == "move":
        date = _day(values["date"], "date")
        code = values["code"] or None
        if code is not None and len(code) > 64:
            raise ValueError(
                _("category code %(code)r... is longer than 64 characters") % {"code": code[:20]}
            )
        if code is not None and code not in current.tree:
            raise ValueError(
                _("category %(code)r is not one of the task's categories") % {"code": code}
            )
        if not date:
            return Plan(
                action, current.name, _("give the day to crawl again from"), values, ready=False
            )
        store.check_move(current.id, date, code)  # `task move`'s refusals, before "will move"
        cursor = f"{current.cur_date or '-'} {current.cur_code or '-'}"
        return Plan(
            action,
            current.name,
            _(
                "will move the cursor of %(task)s from %(before)s to %(date)s %(code)s: the rounds "
                "from %(date)s on are crawled again (documents are upserted, never duplicated)"
            )
            % {"task": label, "before": cursor, "date": date, "code": code or "-"},
            {"date": date, "code": code or ""},
        )
    # recrawl
    progress = store.progress(current.id)
    if current.halt_reason:
        raise ValueError(
            _("%(task)s is halted (%(reason)s): resume it first")
            % {"task": label, "reason": halt_reason(current.halt_reason)}
        )
    return Plan(
        action,
        current.name,
        _(
            "will set the phase of %(task)s from %(before)s to %(after)s: its workers replay "
            "%(codes)s errorCode and %(links)s errorLink rows"
        )
        % {
            "task": label,
            "before": word(current.phase),
            "after": word(Phase.RECRAWL),
            "codes": progress["error_code"],
            "links": progress["error_link"],
        },
    )


def carry_out(config, engine, p: Plan) -> str:
    """Do what ``p`` said, as the CLI does it; the CLI's line describing the task after."""
    from tasks.rows import describe

    store = _store(config, engine)
    v = p.values
    if p.action == "pause":
        return _("paused: %(task)s") % {"task": describe(store.pause(p.task))}
    if p.action == "resume":
        resumed, reopened = store.resume(p.task, v.get("end") or None)
        if reopened is None:
            return _("resumed: %(task)s") % {"task": describe(resumed)}
        return _(
            "resumed: %(task)s (halt cleared: %(reason)s; %(rounds)s rounds re-opened, "
            "%(codes)s errorCode rows to replay)"
        ) % {
            "task": describe(resumed),
            "reason": halt_reason(reopened["reason"]),
            "rounds": reopened["rounds"],
            "codes": reopened["error_code"],
        }
    if p.action == "stop":
        return _("stopped: %(task)s") % {"task": describe(store.stop(p.task))}
    if p.action == "extend":
        return _("extended: %(task)s") % {"task": describe(store.set_end_date(p.task, v["end"]))}
    if p.action == "move":
        moved = store.move_cursor(p.task, v["date"], v.get("code") or None)
        return _("moved: %(task)s") % {"task": describe(moved)}
    if p.action == "recrawl":
        current = store.get(p.task)
        if not store.set_phase(current.id, Phase.RECRAWL):
            raise ValueError(
                _("task %(name)r: the phase did not move (halted meanwhile?)") % {"name": p.task}
            )
        return _("recrawl: %(task)s") % {"task": describe(store.get(current.id))}
    raise LookupError(_("no action %(action)r") % {"action": p.action})


# -- sessions ------------------------------------------------------------------------------------


def plan_session(config, paste_text: str):
    """(the parsed paste, what adding it will do): the checks of `session add --from-curl -`."""
    from cnkispider.sessions import paste as pastes
    from cnkispider.sessions.waysin import cnki_site_of

    home_url, hosts = cnki_site_of(config.cnki["base_url"])
    site = home_url.split("/")[2].split(":")[0].lower()
    paste = pastes.from_curl(paste_text, cnki_hosts=hosts)
    if paste.host != site:
        raise pastes.PasteError(
            _(
                "the paste is a request to %(host)s, but the crawler searches %(site)s: copy a "
                "request to %(site)s (its search page, or brief/grid after a search)"
            )
            % {"host": paste.host, "site": site}
        )
    says = _("will add a session of %(host)s to the pool: %(n)s cookies (%(names)s)") % {
        "host": paste.host,
        "n": len(paste.cookies),
        "names": ", ".join(paste.names),
    }
    return paste, says


def add_session(config, redis_client, paste) -> str:
    from cnkispider.sessions import SessionStore
    from cnkispider.sessions.pool import namespace_for
    from cnkispider.sessions.waysin import added_line

    store = SessionStore(redis_client, namespace_for(config.cnki["base_url"], config.redis_prefix))
    session = store.add(paste.cookies, source="curl", user_agent=paste.user_agent)
    return added_line(session, paste, "curl")


# -- the audit table -----------------------------------------------------------------------------


def record(engine, *, who: str, action: str, task: str | None, detail: str, ok: bool) -> None:
    """One row of ``audit``: who (address and browser), when (the database's clock), what."""
    with engine.begin() as conn:
        conn.execute(
            audit.insert().values(
                at=db_now(conn),
                who=who[:300],
                action=action,
                task_name=task,
                detail=detail,
                ok=1 if ok else 0,
            )
        )


def recent(engine, limit: int = 50) -> list[dict]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(audit).order_by(audit.c.id.desc()).limit(limit)).all()
    return [dict(r._mapping) for r in rows]
