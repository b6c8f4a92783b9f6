"""The one schema, for MySQL/MariaDB and SQLite alike (SQLAlchemy Core).

Tables
------
task        the operator's steering wheel: one row per task. The seed's columns are kept so
            an operator recognises them: type, cur_date, cur_code, end_date, and status = time
            of the last heartbeat of any worker on the task.
round       one (day x category) search of a task and where it stands (see tasks/rounds.py).
errorCode   rounds that failed at the list stage, replayed by the recrawl phase.
errorLink   detail links that failed, replayed by the recrawl phase.
ledger      every row a round listed, by its document key, with its outcome (cnkispider/store/ledger.py):
            a round is done only when its rows are accounted for.
ledger_fold the ledger rows of long-done rounds, folded into counts ([database] ledger_days)
worker      one row per running worker process: host, pid, heartbeat, counters, last error
fill        per round and detail field, the documents the parser filled it on (the drift alarm)
task_document  which task found which document: a row per (task, document)
task_skip   the days of a task its operator skipped, by which command (tasks/skips.py)
reference   a paper's reference list: one row per (citing document, position) ([crawl] references)
audit       one row per action taken on the web page (cnkispider/web/): who, when, what, result.
census_sample  the census totals `task plan --sample N` asked CNKI for, by task and day
patent, paper, achievement
            the documents, one row per natural key (dbname, filename), upserted.
schema_version
            one row; bumped with every change below, so an old database can be upgraded.

Dates that operators edit by hand (task.start_date, cur_date, end_date) are ``YYYY-MM-DD``
strings, not DATE columns: a row edited into nonsense must reach the crawler so that it can be
reported and skipped, instead of being silently coerced by the database.
"""

from __future__ import annotations

from sqlalchemy import (
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    exists,
    inspect,
    literal,
    select,
)
from sqlalchemy.dialects.mysql import MEDIUMTEXT

from cnkispider.items import FIELDS, INTEGER_FIELDS, TIME_FIELDS

SCHEMA_VERSION = 18

metadata = MetaData()

# Long free text (abstracts, claims, tracebacks): MEDIUMTEXT on MySQL, TEXT elsewhere.
LongText = Text().with_variant(MEDIUMTEXT(), "mysql", "mariadb")

schema_version = Table(
    "schema_version",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),  # always 1: one row
    Column("version", Integer, nullable=False),
)

task = Table(
    "task",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(100), nullable=False, unique=True),
    Column("type", String(20), nullable=False),
    Column("start_date", String(10), nullable=False),
    Column("cur_date", String(10)),  # day of the last round handed out
    Column(
        "cur_code", String(64)
    ),  # category of the last round handed out; NULL = none yet that day
    Column("end_date", String(10)),  # NULL or '' = up to today, moving with the calendar
    Column("categories", String(500), nullable=False, default="builtin"),
    Column("phase", String(16), nullable=False, default="crawl"),  # crawl | recrawl | done
    Column("status", DateTime),  # time of the last heartbeat
    Column("created_at", DateTime),
    Column("updated_at", DateTime),
    # Set when the task halts (a rejection, a failure repeating, CNKI unreachable): why, as
    # "<reason slug>: <words>". While set, no round is handed out or marked done and the phase
    # does not move; `cnkispider task resume NAME` clears both (cnkispider/watch/halting.py).
    Column("halt_reason", String(500)),
    Column("halted_at", DateTime),
    # list | export | detail (cnkispider.items.DEPTHS); NULL = detail, today's crawl
    Column("depth", String(10)),
    # a deepening task's rule (tasks/selection.py): where:RULE or keys:PATH; NULL = every row
    Column("selection", Text),
    # issue 39: the task's professional-search expression (cnkispider/cnki/query.py, in its one
    # spelling); NULL: a category task
    Column("query", Text),
    # issue 38: the task follows today (1; NULL or 0: no): its end date is today in Beijing,
    # and its looks count the look-back's days again (tasks/lookback.py)
    Column("follow", Integer),
    Column("look_at", DateTime),  # when its last look began (NULL: none yet)
    Column("look_due", DateTime),  # when its next look is due (NULL: when the crawl is at today)
    Column("looks", Integer),  # how many looks it has had (the look's number: one per task)
    # the last look whose end was told ([notify] look:N): told by whichever worker finds its
    # rounds all closed first, so a look whose worker died is still told, and told once
    Column("look_told", Integer),
    # [task] refresh_counts_every (tasks/lookback.py): when its last counts refresh over the
    # look-back was claimed (NULL: never), and when the next is due
    Column("counts_at", DateTime),
    Column("counts_due", DateTime),
)

round_ = Table(
    "round",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("task_id", Integer, nullable=False),
    Column("day", String(10), nullable=False),
    Column("category", String(64), nullable=False),
    Column("state", String(16), nullable=False),  # claimed | seeded | done | failed
    Column("worker", String(100)),
    Column("lease_until", DateTime),
    Column("attempts", Integer, nullable=False, default=1),
    Column("epoch", String(40)),  # the Redis epoch the round was seeded under
    Column("total", Integer),  # documents CNKI listed for the round (its root search's total)
    # The round's ledger when it drained (cnkispider/store/ledger.py): listed (= total) = stored +
    # in_error + dropped + beyond for a done round; a failed round keeps the numbers that did not
    # balance.
    Column("stored", Integer),
    Column("in_error", Integer),  # rows whose document is in errorLink
    Column("dropped", Integer),  # rows dropped by a named rule (by rule in ``drops``)
    Column("beyond", Integer),  # rows past the cap or the pager (recorded in errorCode)
    Column("drops", String(500)),  # JSON {rule: count} of the dropped rows
    Column("note", String(500)),
    Column("created_at", DateTime),
    Column("updated_at", DateTime),
    # issue 38: what the round listed before a look re-opened it (its history: listed before,
    # ``total`` listed now); NULL: never re-opened by a look
    Column("listed_before", Integer),
    Column("look", Integer),  # the look (task.looks) that re-opened it last
    # issue 47: the seeding the round's requests in Redis belong to (a fresh token at each
    # mark_seeded, written with its seed to {ns}:seedings): a drain, close or unlisted mark
    # names it, compared in the same statement, so a late writer of an earlier seeding of the
    # same round (whatever the Redis epoch) changes nothing
    Column("seeding", String(32)),
    UniqueConstraint("task_id", "day", "category", name="uq_round_task_day_category"),
    Index("ix_round_task_state", "task_id", "state"),
)

error_code = Table(
    "errorCode",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("task_id", Integer, nullable=False),
    Column("round_id", Integer),
    Column("day", String(10), nullable=False),
    Column("category", String(64), nullable=False),
    Column("search", Text),  # the failed search as JSON (sort, title, page), to replay it exactly
    Column("page", Integer),
    Column("reason", String(200), nullable=False),
    Column("detail", LongText),  # traceback or response excerpt
    Column("attempts", Integer, nullable=False, default=1),
    Column("state", String(16), nullable=False, default="open"),  # open | claimed | permanent
    Column("lease_until", DateTime),
    Column("created_at", DateTime),
    Column("updated_at", DateTime),
    # How many of the round's listed rows this fact puts beyond reach (an overflow, a pager
    # shorter than its total, a census its roots do not cover): the round's ledger counts exactly
    # this many as ``beyond`` (cnkispider/store/ledger.py), never whatever happens to be missing.
    Column("unreachable", Integer),
    Index("ix_errorcode_task_state", "task_id", "state"),
)

error_link = Table(
    "errorLink",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("task_id", Integer, nullable=False),
    Column("round_id", Integer),
    Column("doc_type", String(20), nullable=False),
    Column("url", Text, nullable=False),
    # wider than the documents' keys, so that a document refused for an over-long key can still
    # be recorded here (cnkispider/store/storage.py key_problem); the unique key stays within
    # InnoDB's 3072 bytes: (64 + 255) x 4 + 4
    Column("dbname", String(64), nullable=False),
    Column("filename", String(255), nullable=False),
    Column("title", String(500)),  # to search the document again when its link has gone stale
    Column("day", String(10)),
    Column("category", String(64)),
    Column("listing", Text),  # the list row's fields as JSON (source, date, database)
    Column("reason", String(200), nullable=False),
    Column("detail", LongText),
    Column("attempts", Integer, nullable=False, default=1),
    Column("state", String(16), nullable=False, default="open"),  # open | claimed | permanent
    Column("lease_until", DateTime),
    Column("created_at", DateTime),
    Column("updated_at", DateTime),
    UniqueConstraint("task_id", "dbname", "filename", name="uq_errorlink_task_doc"),
    Index("ix_errorlink_task_state", "task_id", "state"),
)

# One row per (round, document) the round's searches listed: its outcome, one of
#   pending           listed, its detail not yet stored nor recorded as failed
#   stored            the document is in its table (written in the document upsert's transaction)
#   error             its detail failed: the document is in errorLink (written with that row)
#   dropped:<rule>    listed but not crawled, for a named rule (dropped:other-database)
# Written idempotently on (round_id, doc_key): a page or a document handled twice (at-least-once
# delivery) changes nothing, and ``stored`` is final (cnkispider/store/ledger.py).
ledger = Table(
    "ledger",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("round_id", Integer, nullable=False),
    # dbname/filename, as wide as errorLink's key columns: (64 + 1 + 255) x 4 bytes + 4 stays
    # within InnoDB's 3072-byte key
    Column("doc_key", String(320), nullable=False),
    Column("outcome", String(64), nullable=False),
    # issue 38: a look walking its round again (tasks/lookback.py) sets ``unconfirmed`` to the
    # look's number on every row, and each page it lists clears it on the rows it shows; the rows
    # still unconfirmed when the round drains are no longer listed by CNKI: ``unlisted_since``
    # (they stay, a stored document stays stored; counted apart in the round's ledger)
    Column("unconfirmed", Integer),
    Column("unlisted_since", DateTime),
    # issue 46.3: when a list page first showed the row (UTC; written once, by the insert that
    # creates the row): against the round's day, the entry lag a look measures (tasks/lag.py)
    Column("first_listed", DateTime),
    UniqueConstraint("round_id", "doc_key", name="uq_ledger_round_doc"),
)

# The per-document ledger rows of a round done long ago ([database] ledger_days), folded into
# one count per (round, outcome): what the round's rows were, without a row per document
# (cnkispider/store/ledger.py fold_round). Only final outcomes fold (stored, dropped:<rule>); a round's
# counts are its ledger rows plus these.
ledger_fold = Table(
    "ledger_fold",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("round_id", Integer, nullable=False),
    Column("outcome", String(64), nullable=False),
    Column("documents", Integer, nullable=False, default=0),
    UniqueConstraint("round_id", "outcome", name="uq_ledger_fold_round_outcome"),
)

worker = Table(
    "worker",
    metadata,
    Column("id", String(100), primary_key=True),  # host:pid:random
    Column("task_id", Integer),
    Column("host", String(100), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started_at", DateTime),
    Column("last_seen", DateTime),
    Column("pages", Integer, nullable=False, default=0),
    Column("items", Integer, nullable=False, default=0),
    Column("errors", Integer, nullable=False, default=0),
    Column("current_round", String(100)),
    Column("state", String(16), nullable=False, default="running"),  # running | stopped
    # CNKI's challenges this worker met (verify, captcha, the soft block, a JavaScript page, a
    # verified session checked again: the retry middleware's ``retry/challenges``), and the last
    # failure it recorded ("reason: words", masked, cut to the column): both from its heartbeat.
    Column("challenges", Integer, nullable=False, default=0),
    Column("last_error", String(300)),
    # the GetExport batch size its sessions last reached (export depth, docs/DEPTH.md); NULL: none
    Column("export_batch", Integer),
)

# One row per action the operator's web page carried out (cnkispider/web/actions.py): resume,
# stop, extend, move, recrawl, a session added. Written after the action, with its outcome; the
# page never deletes a row. ``who`` is the client's address and User-Agent (the token proves the
# right to act, not a name); ``detail`` is what the action did, in the CLI's words.
audit = Table(
    "audit",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", DateTime, nullable=False),  # the database's clock
    Column("who", String(300), nullable=False),
    Column("action", String(40), nullable=False),
    Column("task_name", String(100)),  # NULL for a session
    Column("detail", Text),
    Column("ok", Integer, nullable=False, default=1),  # 0: refused or failed (detail says why)
    Index("ix_audit_at", "at"),
)


# The drift alarm's counts (cnkispider/watch/drift.py): per round and detail field, how many stored
# documents the parser filled it on. Written in the document upsert's transaction.
fill = Table(
    "fill",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("task_id", Integer, nullable=False),
    Column("round_id", Integer, nullable=False),
    Column("doc_type", String(20), nullable=False),
    Column("field", String(64), nullable=False),
    Column("documents", Integer, nullable=False, default=0),
    Column("filled", Integer, nullable=False, default=0),
    UniqueConstraint("round_id", "field", name="uq_fill_round_field"),
    Index("ix_fill_task_round", "task_id", "round_id"),
)


# Issue 47: a document belongs to every task that found it. One row per (task, document),
# written in the transaction that stores the document or finds it already stored (the document
# row's own ``task_id`` is only the task that wrote it last). Export, status and the counts of a
# task read its documents through here (cnkispider/store/doclinks.py).
task_document = Table(
    "task_document",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("task_id", Integer, nullable=False),
    Column("doc_type", String(20), nullable=False),
    Column("dbname", String(20), nullable=False),  # the document's natural key
    Column("filename", String(64), nullable=False),
    UniqueConstraint("task_id", "doc_type", "dbname", "filename", name="uq_task_document"),
    Index("ix_task_document_doc", "doc_type", "dbname", "filename"),
)


# Issue 47: a day of a task the operator skipped (``task move`` forward past days never
# crawled), and by which command: the task is finished with it said ("1 day skipped by move").
# A move back to or before the day makes it due again and deletes its row (tasks/skips.py).
task_skip = Table(
    "task_skip",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("task_id", Integer, nullable=False),
    Column("day", String(10), nullable=False),  # YYYY-MM-DD, as the round's day
    Column("command", String(40), nullable=False),  # move
    Column("at", DateTime),  # the database's clock
    UniqueConstraint("task_id", "day", name="uq_task_skip_day"),
)


# A paper's reference list ([crawl] references, cnkispider/spiders/references.py): one row per
# entry, keyed on the citing document and the entry's position, so that a replay rewrites the
# row instead of adding one. The cited document's key is set where CNKI links it.
census_sample = Table(
    "census_sample",
    metadata,
    # the task's name, not its id: a task of config.ini is sampled before its first run makes
    # its row
    Column("task", String(100), primary_key=True),
    Column("day", String(10), primary_key=True),  # YYYY-MM-DD
    Column("total", Integer, nullable=False),  # the day's census total as CNKI said it
    Column("sampled_at", DateTime),
)

reference = Table(
    "reference",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("dbname", String(20), nullable=False),  # the citing document's key
    Column("filename", String(64), nullable=False),
    Column("position", Integer, nullable=False),  # 1-based, in CNKI's order
    Column("title", Text),
    Column("authors", LongText),
    Column("source", Text),
    Column("year", String(16)),
    Column("cited_dbname", String(20)),
    Column("cited_filename", String(64)),
    Column("task_id", Integer),
    Column("crawled_at", DateTime),
    UniqueConstraint("dbname", "filename", "position", name="uq_reference_entry"),
    Index("ix_reference_cited", "cited_dbname", "cited_filename"),
)


#: What each schema version adds to the one before, for :func:`cnkispider.store.migrate.upgrade`: version ->
#: (table, column) pairs to add when missing. Columns only; each step is idempotent, so a
#: database upgraded half-way (two workers starting at once) is finished by the next start.
UPGRADES: dict[int, list[tuple[Table, str]]] = {
    2: [(task, "halt_reason"), (task, "halted_at")],
    # the round ledger; its table is created like any new table (CREATE TABLE IF NOT EXISTS)
    3: [(round_, "in_error"), (round_, "dropped"), (round_, "beyond"), (round_, "drops")],
    # the web page's audit table, created like any new table (CREATE TABLE IF NOT EXISTS)
    4: [],
    # the worker's challenges and last error, for the web page and /metrics
    5: [(worker, "challenges"), (worker, "last_error")],
    # issue 26: the fields researchers cite (list-row counts and export id, the source line,
    # affiliations, theses, references); filled in below, once the document tables exist
    6: [],
    # issue 27: the task's depth and each document's (NULL: detail, what every older row was
    # crawled at); the documents' are filled in below, once the document tables exist
    7: [(task, "depth"), (task, "selection"), (worker, "export_batch")],
    # issue 48.4: census_sample, created like any new table (CREATE TABLE IF NOT EXISTS)
    16: [],
}

# Document columns that can outgrow TEXT's 65,535 bytes (about 21,000 Chinese characters in
# utf8mb4): long free text, and the people and institution lists (a large collaboration lists
# thousands of authors). Everything else is TEXT, which no real CNKI title or code comes near.
LONG_FIELDS = frozenset(
    {
        "abstract",
        "claim",
        "summary",
        "authors",
        "institutions",
        "inventors",
        "applicant",
        "co_applicants",
        "completers",
        "first_unit",
        "keywords",
        "fund",
        "author_affiliations",
    }
)


def _document_table(doc_type: str) -> Table:
    columns = []
    for name in FIELDS[doc_type]:
        if name in ("dbname",):
            columns.append(Column(name, String(20), nullable=False))
        elif name == "filename":
            columns.append(Column(name, String(64), nullable=False))
        elif name in LONG_FIELDS:
            columns.append(Column(name, LongText))
        elif name in INTEGER_FIELDS:  # counted, sorted and summed: numbers, NULL when unknown
            columns.append(Column(name, Integer))
        elif name in TIME_FIELDS:
            columns.append(Column(name, DateTime))
        else:  # the title too: nothing bounds a CNKI title, and VARCHAR(500) refused a 600-character one
            columns.append(Column(name, Text))
    return Table(
        doc_type,
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        *columns,
        Column("task_id", Integer),
        Column("crawled_at", DateTime),
        Column("depth", String(10)),  # the depth it was stored at (NULL: detail)
        UniqueConstraint("dbname", "filename", name=f"uq_{doc_type}_doc"),
        Index(f"ix_{doc_type}_crawled", "crawled_at"),
        Index(f"ix_{doc_type}_task", "task_id"),  # per-task counts for status and summaries
    )


documents = {doc_type: _document_table(doc_type) for doc_type in FIELDS}


def _new_document_columns() -> list[tuple[Table, str]]:
    """Schema 6's document columns: every field added to the items since schema 5."""
    added = []
    for doc_type, table in documents.items():
        for name in FIELDS[doc_type]:
            if name not in _SCHEMA5_FIELDS[doc_type]:
                added.append((table, name))
    return added


# The document fields schema 5 had; any other field of cnkispider.items is a column that
# ``migrate.upgrade`` adds to an older database.
_SCHEMA5_FIELDS = {
    "patent": frozenset(
        "dbname filename title source date database patent_type application_no "
        "application_date publication_no publication_date grant_no grant_date applicant "
        "address co_applicants inventors ipc main_ipc province_code agency agent pages "
        "abstract claim".split()
    ),
    "paper": frozenset(
        "dbname filename title source date database authors institutions abstract keywords "
        "fund doi clc album topic".split()
    ),
    "achievement": frozenset(
        "dbname filename title source date database completers first_unit keywords clc "
        "subject_code summary achievement_type entry_date level period evaluation".split()
    ),
}
UPGRADES[6] = _new_document_columns()
UPGRADES[7] += [(table, "depth") for table in documents.values()]


def _add_reference_table() -> list[tuple[Table, str]]:
    """The step that adds the ``reference`` table: no column to add, because ``migrate.create_schema``
    creates every missing table (CREATE TABLE IF NOT EXISTS) before it upgrades."""
    return []


UPGRADES[8] = _add_reference_table()


def _add_ledger_fold_table() -> list[tuple[Table, str]]:
    """Issue 43: the ``ledger_fold`` table, created like any new table (CREATE TABLE IF NOT
    EXISTS, ``migrate.create_schema``); no column to add."""
    return []


UPGRADES[9] = _add_ledger_fold_table()


# issue 39: a task may carry a professional-search expression
UPGRADES[10] = [(task, "query")]

# issue 38: a task follows today; its looks, and the history of the rounds they re-open
UPGRADES[11] = [
    (task, "follow"),
    (task, "look_at"),
    (task, "look_due"),
    (task, "looks"),
    (round_, "listed_before"),
    (round_, "look"),
    (ledger, "unconfirmed"),
    (ledger, "unlisted_since"),
]

# issue 43: "beyond" is what an overflow, pager-short or census row says, by count (NULL on an
# older row: it counts none, and its round, failing on its ledger, is crawled again and records
# the count)
UPGRADES[12] = [(error_code, "unreachable")]

# issue 38, point 4: a follow task's counts refreshed over its look-back every
# [task] refresh_counts_every, claimed once per task (tasks/lookback.py)
UPGRADES[13] = [(task, "counts_at"), (task, "counts_due")]

# issue 38: a look's end told once per task, by any worker (tasks/lookback.py claim_look_told)
UPGRADES[14] = [(task, "look_told")]

# issue 47: every write of a drain bound to the seeding it belongs to (tasks/rounds.py); a round
# seeded before has none, and its drain is judged by its epoch as before
UPGRADES[15] = [(round_, "seeding")]

# issue 46.3: when each ledger row was first listed (NULL on older rows: no lag measured)
UPGRADES[18] = [(ledger, "first_listed")]

#: Values an upgrade step gives the rows that were there before it, by version: the looks a
#: task had before version 14 were told by the worker that claimed them.
UPGRADE_FILLS = {
    14: lambda conn: conn.execute(
        task.update().where(task.c.look_told.is_(None)).values(look_told=task.c.looks)
    ),
}

# issue 47: a document belongs to every task that found it (``task_document``), and the days an
# operator skipped are recorded (``task_skip``); both tables are created like any new table
# (``migrate.create_schema``), no column to add
UPGRADES[16] = []


def _link_stored_documents(conn) -> None:
    """Version 16's fill: every document stored before gets the link row of the task that
    stored it (idempotent: a link already there is left alone)."""
    for doc_type, table in documents.items():
        live = {c["name"] for c in inspect(conn).get_columns(table.name)}
        if "task_id" not in live:  # a table older than tasks: no task to link to
            continue
        linked = select(task_document.c.id).where(
            task_document.c.task_id == table.c.task_id,
            task_document.c.doc_type == doc_type,
            task_document.c.dbname == table.c.dbname,
            task_document.c.filename == table.c.filename,
        )
        rows = select(table.c.task_id, literal(doc_type), table.c.dbname, table.c.filename).where(
            table.c.task_id.is_not(None), ~exists(linked)
        )
        conn.execute(
            task_document.insert().from_select(["task_id", "doc_type", "dbname", "filename"], rows)
        )


UPGRADE_FILLS[16] = _link_stored_documents
