"""The crawler's internal names as the operator reads them: a task's type, phase, depth and
state, a round's and a worker's state, an error row's state, in the language of the reader.

The database and the code keep their names (``patent``, ``crawl``, ``seeded``, ``alive``): they
are what SQL, JSON (``status --json``, ``/api/status``) and the logs hold. Shown to a person,
a name goes through :func:`word`: the marked word of this table, in the catalogue's language
(``patent`` is 专利 on a Chinese page). A name this table does not know (a new state before it
is added here) is shown as it is, never dropped.
"""

from __future__ import annotations

import re

from cnkispider.words.i18n import N_, _, mark

WORDS = {
    # where a session in the pool came from (cnkispider/sessions/waysin.py added_line)
    "browser": N_("a browser"),
    "curl": N_("a request copied as cURL"),
    "cookie-string": N_("a cookie string"),
    "cookie-file": N_("a cookie file"),
    # a task's type (cnkispider.items.DOC_TYPES)
    "patent": N_("patent"),
    "paper": N_("paper"),
    "achievement": N_("achievement"),
    # a task's depth (cnkispider.items.DEPTHS)
    "list": N_("list"),
    "export": N_("export"),
    "detail": N_("detail"),
    # a task's phase (tasks.phase.Phase)
    "crawl": N_("crawl"),
    "recrawl": N_("recrawl"),
    "done": N_("done"),
    # a task's activity (cnkispider.status.collecting)
    "running": N_("running"),
    "finished": N_("finished"),
    "stopped": N_("stopped"),
    "paused": N_("paused"),
    "halted": N_("halted"),
    "no live worker": N_("no live worker"),
    "waiting for a person": N_("waiting for a person"),
    # a round's state (tasks.roundstate.RoundState) and a grid cell's (status.round_views)
    "claimed": N_("claimed"),
    "seeded": N_("seeded"),
    "failed": N_("failed"),
    "pending": N_("pending"),
    "in-flight": N_("in flight"),
    "unbalanced": N_("out of balance"),
    "skipped": N_("skipped"),  # a day its operator skipped (tasks/skips.py)
    # a worker's state (cnkispider.status.liveness)
    "alive": N_("alive"),
    "gone": N_("gone"),
    # a session's state (cnkispider.sessions.pool)
    "ready": N_("ready"),
    "leased": N_("leased"),
    "cooling": N_("cooling"),
    "needs-person": N_("needs a person"),
    "expired": N_("expired"),
    # an error row's state (errors/recorder.py)
    "open": N_("open"),
    "permanent": N_("permanent"),
    # Redis as status sees it (cnkispider.status.collecting)
    "connected": N_("connected"),
    "idle": N_("idle"),
    "unreachable": N_("unreachable"),
    # the census round's category (tasks.categories.DAY_LABEL)
    "day": N_("day"),
    # the page's actions (cnkispider.web.actions.TASK_ACTIONS) and its form's fields
    "pause": N_("pause"),
    "resume": N_("resume"),
    "stop": N_("stop"),
    "extend": N_("extend"),
    "move": N_("move"),
    "end": N_("end date"),
    "date": N_("date"),
    "code": N_("category"),
    "session": N_("add a session"),
    # a run's finish reason (tasks.feeder's closes, Scrapy's own), in the run's summary
    "up_to_date": N_("up to date"),
    "task_error": N_("the task cannot be crawled (see the error above)"),
    "database_error": N_("the database failed (see the error above)"),
    "needs_person": N_("waiting for a person to pass CNKI's check"),
    "shutdown": N_("shut down on request"),
    "cancelled": N_("cancelled"),
}


#: A halt's reason is the breaker's code and its words (``rejected: ...``, stored as written);
#: the operator's own halt has one fixed reason (cnkispider.watch.halting.PAUSE_REASON), said here.
HALT_REASONS = {"paused: by the operator": N_("paused by the operator")}


#: The halt reasons the crawler writes (cnkispider.watch.halting.Breaker, tasks.feeder, tasks.rounds),
#: stored in English (SQL, the logs and `status --json` read them as written, whatever the
#: language of the worker that halted), and shown in the reader's: each pattern's groups fill
#: its marked sentence (in English the sentence is the stored text itself). A reason that matches none (an older wording, a hand-edited row) is
#: shown as stored.
HALT_PATTERNS = [
    (re.compile(r"rejected"), N_("rejected")),
    (re.compile(r"rejected: (?P<detail>.+)"), N_("rejected: %(detail)s")),
    (
        re.compile(
            r"(?P<reason>[^:]+): CNKI is not reachable from here \((?P<what>[^)]*)\): try "
            r"`cnkispider demo` \(every list request of the first rounds failed\)"
        ),
        N_(
            "%(reason)s: CNKI is not reachable from here (%(what)s): try `cnkispider demo` "
            "(every list request of the first rounds failed)"
        ),
    ),
    (
        re.compile(
            r"(?P<reason>[^:]+): the last (?P<n>\d+) list pages all failed with (?P=reason)"
        ),
        N_("%(reason)s: the last %(n)s list pages all failed with %(reason)s"),
    ),
    (
        re.compile(
            r"(?P<reason>[^:]+): (?P<count>\d+) of the last (?P<window>\d+) list pages failed "
            r"with (?P=reason)"
        ),
        N_("%(reason)s: %(count)s of the last %(window)s list pages failed with %(reason)s"),
    ),
    (re.compile(r"unreadable: (?P<detail>.+)"), N_("unreadable: %(detail)s")),
    (
        re.compile(r"ledger: every round failed \((?P<n>\d+) of (?P=n)\); last: (?P<last>.*)"),
        N_("ledger: every round failed (%(n)s of %(n)s); last: %(last)s"),
    ),
]


def halt_reason(reason: str | None) -> str:
    """A task's halt reason as the reader reads it."""
    if not reason:
        return "-"
    marked = HALT_REASONS.get(reason)
    if marked is not None:
        return _(marked)
    for pattern, sentence in HALT_PATTERNS:
        found = pattern.fullmatch(reason)
        if found is not None:
            return _(sentence) % found.groupdict()
    return reason


def word(name: str | None, unknown: str = "-") -> str:
    """``name`` in the reader's language (``unknown`` for None or empty)."""
    if not name:
        return unknown
    marked = WORDS.get(name)
    return _(marked) if marked is not None else name


#: A document's field (cnkispider.items.FIELDS) as the reader reads it: the label CNKI's page
#: gives it in Chinese (摘要, 公开号), an English label in English (docs/FIELDS.md names each).
FIELD_LABELS = {
    "dbname": N_("CNKI database code"),
    "filename": N_("CNKI file name"),
    "title": N_("title"),
    "source": N_("source"),
    "date": N_("date"),
    "database": N_("CNKI database"),
    "patent_type": N_("patent type"),
    "application_no": N_("application number"),
    "application_date": N_("application date"),
    "publication_no": N_("publication number"),
    "publication_date": N_("publication date"),
    "grant_no": N_("grant number"),
    "grant_date": N_("grant date"),
    "applicant": N_("applicant"),
    "address": N_("address"),
    "co_applicants": N_("co-applicants"),
    "inventors": N_("inventors"),
    "ipc": N_("IPC class"),
    "main_ipc": N_("main IPC class"),
    "province_code": N_("province code"),
    "agency": N_("patent agency"),
    "agent": N_("patent agent"),
    "pages": N_("number of pages"),
    "abstract": N_("abstract"),
    "claim": N_("main claim"),
    "export_id": N_("export id"),
    "authors": N_("authors"),
    "institutions": N_("institutions"),
    "keywords": N_("keywords"),
    "fund": N_("fund"),
    "doi": N_("DOI"),
    "clc": N_("CLC class"),
    "album": N_("album"),
    "topic": N_("topic"),
    "year": N_("year"),
    "volume": N_("volume"),
    "issue": N_("issue"),
    "page_range": N_("page range"),
    "issn": N_("ISSN"),
    "author_affiliations": N_("author affiliations"),
    "supervisor": N_("supervisor"),
    "degree": N_("degree"),
    "cited": N_("times cited"),
    "downloads": N_("downloads"),
    "counted_at": N_("counted at"),
    "online_first": N_("online first"),
    "completers": N_("completers"),
    "first_unit": N_("first unit"),
    "subject_code": N_("subject code"),
    "summary": N_("achievement summary"),
    "achievement_type": N_("achievement type"),
    "entry_date": N_("entry date"),
    "level": N_("level"),
    "period": N_("research period"),
    "evaluation": N_("evaluation"),
}


def field_label(name: str) -> str:
    """Field ``name`` by its label in the reader's language (a field this table does not know:
    its name, as :func:`word` does)."""
    marked = FIELD_LABELS.get(name)
    return _(marked) if marked is not None else name


#: The parts of a round's ledger note as the closing writes it (cnkispider/store/ledger.py
#: ``Verdict.words``: "ledger: listed 51, stored 0, dropped other-database 51"), stored in
#: English in the round row; each part said in the reader's words (in English: the note itself).
LEDGER_PARTS = [
    (
        re.compile(r"the list never answered \(listed unknown\)"),
        N_("the list never answered (listed unknown)"),
    ),
    (re.compile(r"listed (?P<n>\d+)"), N_("listed %(n)s")),
    (re.compile(r"stored (?P<n>\d+)"), N_("stored %(n)s")),
    (re.compile(r"in errorLink (?P<n>\d+)"), N_("in errorLink %(n)s")),
    (re.compile(r"dropped (?P<rule>\S+) (?P<n>\d+)"), N_("dropped %(rule)s %(n)s")),
    (re.compile(r"beyond (?P<n>\d+)"), N_("beyond %(n)s")),
    (re.compile(r"no longer listed (?P<n>\d+)"), N_("no longer listed %(n)s")),
    (re.compile(r"pending (?P<n>\d+)"), N_("pending %(n)s")),
    (re.compile(r"unaccounted (?P<n>\d+)"), N_("unaccounted %(n)s")),
    (
        re.compile(r"list pages failed (?P<n>\d+)(?: \((?P<why>[^)]*)\))?"),
        N_("list pages failed %(n)s%(why)s"),
    ),
]


def ledger_note(note: str | None) -> str:
    """A round's note in the reader's words: a ledger's ("ledger: listed 51, stored 0") part
    by part, anything else (an older wording, a hand-edited row) as it is."""
    if not note or not note.startswith("ledger: "):
        return note or ""
    said = []
    for part in re.split(r", (?![^(]*\))", note[len("ledger: ") :]):
        for pattern, sentence in LEDGER_PARTS:
            found = pattern.fullmatch(part)
            if found is not None:
                values = {k: v or "" for k, v in found.groupdict().items()}
                if "why" in values and values["why"]:
                    values["why"] = _(" (%(why)s)") % {"why": values["why"]}
                said.append(_(sentence) % values)
                break
        else:
            said.append(part)
    return _("ledger: %(parts)s") % {"parts": mark("list").join(said)}
