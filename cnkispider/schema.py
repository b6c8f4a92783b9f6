"""The one schema, for MySQL/MariaDB and SQLite alike (SQLAlchemy Core).

Tables
------
task        the operator's steering wheel: one row per task. The seed's columns are kept so
            an operator recognises them: type, cur_date, cur_code, end_date, and status = time
            of the last heartbeat of any worker on the task.
round       one (day x category) search of a task and where it stands (see tasks/flow.py).
errorCode   rounds that failed at the list stage, replayed by the recrawl phase.
errorLink   detail links that failed, replayed by the recrawl phase.
worker      one row per running worker process: host, pid, heartbeat, counters.
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
)
from sqlalchemy.dialects.mysql import MEDIUMTEXT

from cnkispider.items import FIELDS

SCHEMA_VERSION = 1

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
    Column("cur_code", String(64)),  # category of the last round handed out; NULL = none yet that day
    Column("end_date", String(10)),  # NULL or '' = up to today, moving with the calendar
    Column("categories", String(500), nullable=False, default="builtin"),
    Column("phase", String(16), nullable=False, default="crawl"),  # crawl | recrawl | done
    Column("status", DateTime),  # time of the last heartbeat
    Column("created_at", DateTime),
    Column("updated_at", DateTime),
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
    Column("total", Integer),  # documents CNKI listed for the round (sum over its searches)
    Column("stored", Integer),
    Column("note", String(500)),
    Column("created_at", DateTime),
    Column("updated_at", DateTime),
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
    Column("dbname", String(20), nullable=False),
    Column("filename", String(64), nullable=False),
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
)


def _document_table(doc_type: str) -> Table:
    columns = []
    for name in FIELDS[doc_type]:
        if name in ("dbname",):
            columns.append(Column(name, String(20), nullable=False))
        elif name == "filename":
            columns.append(Column(name, String(64), nullable=False))
        elif name in ("abstract", "claim", "summary"):
            columns.append(Column(name, LongText))
        elif name == "title":
            columns.append(Column(name, String(500)))
        else:
            columns.append(Column(name, Text))
    return Table(
        doc_type,
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        *columns,
        Column("task_id", Integer),
        Column("crawled_at", DateTime),
        UniqueConstraint("dbname", "filename", name=f"uq_{doc_type}_doc"),
        Index(f"ix_{doc_type}_crawled", "crawled_at"),
        Index(f"ix_{doc_type}_task", "task_id"),  # per-task counts for status and summaries
    )


documents = {doc_type: _document_table(doc_type) for doc_type in FIELDS}
