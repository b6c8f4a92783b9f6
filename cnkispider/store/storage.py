"""Document storage: batched upserts on the natural key (dbname, filename).

A replayed request, a recrawl or a round crawled twice after a cursor move rewrites the same
row, never adds one. Both dialects get a native upsert (MySQL ``ON DUPLICATE KEY UPDATE``,
SQLite ``ON CONFLICT DO UPDATE``), one statement per batch, built and compiled once.

Depths (docs/DEPTH.md): a row carries the depth it was stored at (``depth``: list, export or
detail; NULL = detail). The upsert never lets a pass blank what another filled, nor a shallower
pass overwrite a deeper one's values: for each field, an empty new value keeps the stored one;
a non-empty new value replaces it unless the stored row is deeper and its value is not empty (a
list-depth pass fills a field no deeper pass found, and nothing else). The counts
(``cited``, ``downloads``, ``counted_at``) and ``export_id``, which every depth reads from the
list row and which change, take the newest non-empty read whatever the depth. Numbers and times
are empty only when NULL (a count of 0 is a count). The row's depth becomes the deeper of the
two.

A document whose key cannot be stored (an empty or over-long ``dbname``/``filename``) is refused
by :func:`key_problem` before anything is written; one whose value the database refuses (a value
longer than its column) fails its statement, and with it the whole batch: the pipeline then
writes the batch row by row, so that only that document fails (see cnkispider/pipelines.py).
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable, Iterator

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, sqlite
from sqlalchemy.engine import Engine

from cnkispider.items import (
    COUNT_FIELDS,
    DEFAULT_DEPTH,
    DEPTHS,
    FIELDS,
    INTEGER_FIELDS,
    TIME_FIELDS,
    depth_rank,
)
from cnkispider.store import doclinks
from cnkispider.store.schema import documents


class DocumentRejected(Exception):
    """This document cannot be stored as it is (a bad key, a value the database refuses); the
    same write would fail again, unlike an outage. The message names the document and why."""


def key_problem(doc_type: str, values: dict) -> str | None:
    """Why the natural key of ``values`` cannot be stored, or None when it can: each key column
    must hold a non-empty value, without spaces or control characters, within its width."""
    table = documents[doc_type]
    for name in ("dbname", "filename"):
        value = values.get(name)
        if not isinstance(value, str) or not value:
            return f"{name} is empty"
        width = table.c[name].type.length
        if len(value) > width:
            return f"{name} is {len(value)} characters long; its column holds {width}"
        if any(ch.isspace() or not ch.isprintable() for ch in value):
            return f"{name} {value[:width]!r} holds spaces or control characters"
    return None


#: Where an item's depth travels with its values (not an item field: the pipeline sets it).
DEPTH_KEY = "_depth"


def row_for(doc_type: str, values: dict, task_id: int | None, now: dt.datetime) -> dict:
    row = {}
    for field in FIELDS[doc_type]:
        value = values.get(field)
        if field in INTEGER_FIELDS:
            row[field] = as_integer(field, value)
        elif field in TIME_FIELDS:
            row[field] = as_time(value)
        else:
            row[field] = value or ""
    row["task_id"] = task_id
    row["crawled_at"] = now
    row["depth"] = values.get(DEPTH_KEY) or DEFAULT_DEPTH
    return row


def _constant(value: str | int):
    """A constant of the upsert written into its SQL rather than bound: the statement's only
    placeholders are then its VALUES, which the driver's executemany turns into one multi-row
    INSERT (pymysql rewrites it; one round trip a batch, as before), and one compiled statement
    serves every batch. Only the module's own words and numbers come here."""
    if isinstance(value, int):
        return sa.literal_column(str(value))
    assert value.isidentifier() or value == "", value  # never a value from a page
    return sa.literal_column(f"'{value}'")


def _rank(column):
    """A depth column as its rank (NULL and unknown values: detail's)."""
    return sa.case(
        *((column == _constant(name), _constant(rank)) for rank, name in enumerate(DEPTHS)),
        else_=_constant(DEPTHS.index(DEFAULT_DEPTH)),
    )


def _merged(table, new, columns: list[str]) -> list[tuple[str, object]]:
    """The upsert's assignments under the depth rule (module docstring), ``depth`` last: MySQL
    evaluates ON DUPLICATE KEY UPDATE assignments in order, and the others read the old depth."""
    old_rank, new_rank = _rank(table.c.depth), _rank(new.depth)
    out = []
    for name in columns:
        if name == "depth":
            continue
        old, value = table.c[name], new[name]
        if name in ("task_id", "crawled_at"):
            out.append((name, value))
            continue
        if name in INTEGER_FIELDS or name in TIME_FIELDS:
            # numbers and times: only NULL is "not read" (0 is a count; '' would be cast to 0)
            old_empty, new_empty = old.is_(None), value.is_(None)
        else:
            old_empty = sa.or_(old.is_(None), old == _constant(""))
            new_empty = sa.or_(value.is_(None), value == _constant(""))
        if name in COUNT_FIELDS or name == "export_id":
            # what every depth reads from the list row, and what changes: the newest read wins
            out.append((name, sa.case((new_empty, old), else_=value)))
            continue
        out.append(
            (
                name,
                sa.case(
                    (new_empty, old),
                    (sa.and_(old_rank > new_rank, sa.not_(old_empty)), old),
                    else_=value,
                ),
            )
        )
    out.append(
        (
            "depth",
            sa.case(
                (new_rank >= old_rank, new.depth),
                else_=sa.func.coalesce(table.c.depth, _constant(DEFAULT_DEPTH)),
            ),
        )
    )
    return out


def merge_rows(old: dict, new: dict) -> dict:
    """Two rows of one document, ``new`` written after ``old``, merged as :func:`_merged` merges
    a row into the stored one (the module docstring's rules), for two copies in one batch."""
    old_rank, new_rank = depth_rank(old.get("depth")), depth_rank(new.get("depth"))
    out = dict(new)
    for name, value in new.items():
        if name in ("dbname", "filename", "task_id", "crawled_at", "depth"):
            continue
        before = old.get(name)
        if name in INTEGER_FIELDS or name in TIME_FIELDS:
            old_empty, new_empty = before is None, value is None
        else:
            old_empty, new_empty = before in (None, ""), value in (None, "")
        if new_empty or (
            old_rank > new_rank and not old_empty and name not in (*COUNT_FIELDS, "export_id")
        ):
            out[name] = before
    out["depth"] = new.get("depth") if new_rank >= old_rank else old.get("depth") or DEFAULT_DEPTH
    return out


def as_integer(field: str, value) -> int | None:
    """An item's count ("37", "" unknown) as the integer column holds it: ``None`` when unknown.
    ``online_first`` is a flag: "1" or a true value is 1, anything else 0."""
    if field == "online_first":
        return 1 if value in (1, True, "1") else 0
    if value is None or value == "":
        return None
    return int(value)


def as_time(value) -> dt.datetime | None:
    """``counted_at`` ("2026-11-26 10:30:00" UTC, as the spider stamps it) as a naive datetime."""
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=None)
    return dt.datetime.fromisoformat(str(value)).replace(tzinfo=None, microsecond=0)


def upsert_documents(conn, doc_type: str, rows: list[dict]) -> None:
    """Insert or update ``rows`` (dicts of one type's columns) on (dbname, filename), and link
    each to its row's task (cnkispider/store/doclinks.py)."""
    if not rows:
        return
    # Two copies of one document in a batch would make MySQL update twice and SQLite fail the
    # batch: they are merged into one first, by the rules the upsert applies across batches (a
    # list pass and a detail pass of one document in one batch keep the detail's abstract).
    by_key: dict[tuple, dict] = {}
    for row in rows:
        key = (row["dbname"], row["filename"])
        by_key[key] = merge_rows(by_key[key], row) if key in by_key else row
    unique = list(by_key.values())
    conn.execute(_upsert(conn.dialect.name, doc_type, tuple(unique[0])), unique)
    # in the same transaction: the document belongs to its task too, whichever task stored it
    # first (issue 47; the row's own task_id is only the last writer)
    for task_id in {row.get("task_id") for row in unique}:
        keys = [(r["dbname"], r["filename"]) for r in unique if r.get("task_id") == task_id]
        doclinks.link(conn, task_id, doc_type, keys)


@functools.cache
def _upsert(dialect: str, doc_type: str, columns: tuple[str, ...]):
    """The upsert of one type's ``columns``, built once: its CASE trees took more CPU to build
    and compile for each batch than the database took to run it."""
    table = documents[doc_type]
    updatable = [c for c in columns if c not in ("dbname", "filename")]
    if dialect == "mysql":
        insert = mysql.insert(table)
        return insert.on_duplicate_key_update(_merged(table, insert.inserted, updatable))
    if dialect == "sqlite":
        insert = sqlite.insert(table)
        return insert.on_conflict_do_update(
            index_elements=["dbname", "filename"],
            set_=dict(_merged(table, insert.excluded, updatable)),
        )
    raise NotImplementedError(dialect)  # pragma: no cover - only the two dialects are supported


def iter_documents(
    engine: Engine,
    doc_type: str,
    since: str | None = None,
    batch: int = 1000,
    task_id: int | None = None,
) -> Iterator[dict]:
    """Stream stored documents in id order without loading them all (keyset pagination).
    ``since``: a day (``YYYY-MM-DD``: dated then or later) or a time (``YYYY-MM-DD HH:MM[:SS]``,
    UTC: stored or changed since then, by ``crawled_at``)."""
    table = documents[doc_type]
    last = 0
    while True:
        query = sa.select(table).where(table.c.id > last).order_by(table.c.id).limit(batch)
        if since and len(since) > 10:  # a time (issue 38): stored or changed since then
            query = query.where(table.c.crawled_at >= dt.datetime.fromisoformat(since))
        elif since:  # a day: documents dated that day or later
            query = query.where(table.c.date >= since)
        if task_id is not None:
            # the task's documents, whichever task stored them first (issue 47)
            query = query.where(doclinks.of_task(doc_type, task_id))
        with engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        if not rows:
            return
        for row in rows:
            yield dict(row)
        last = rows[-1]["id"]


def fetch_all(engine: Engine, doc_type: str) -> list[dict]:
    """Every stored document of a type (for tests and small exports)."""
    return list(iter_documents(engine, doc_type))


def chunked(values: Iterable, size: int) -> Iterator[list]:
    chunk: list = []
    for value in values:
        chunk.append(value)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
