"""The ``reference`` table: a paper's reference list, upserted on (citing key, position).

One page of a reference list (10 entries) is one batch: a replay, a recrawl or a page fetched
twice rewrites its rows, never adds any (MySQL ``ON DUPLICATE KEY UPDATE``, SQLite ``ON
CONFLICT DO UPDATE``, as :mod:`cnkispider.store.storage` does for documents).
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, sqlite
from sqlalchemy.engine import Engine

from cnkispider.store.schema import reference

#: the columns of one row, besides the citing key, task and time
ENTRY_COLUMNS = (
    "position",
    "title",
    "authors",
    "source",
    "year",
    "cited_dbname",
    "cited_filename",
)
_KEY = ("dbname", "filename", "position")


def rows_for(
    dbname: str, filename: str, entries: list[dict], task_id: int | None, now: dt.datetime
) -> list[dict]:
    """The table rows of one page's entries (dicts with :data:`ENTRY_COLUMNS`)."""
    return [
        {
            "dbname": dbname,
            "filename": filename,
            **{name: entry.get(name) or None for name in ENTRY_COLUMNS},
            "position": int(entry["position"]),
            "task_id": task_id,
            "crawled_at": now,
        }
        for entry in entries
    ]


def upsert_references(conn, rows: list[dict]) -> None:
    """Insert or update ``rows`` on (dbname, filename, position)."""
    if not rows:
        return
    unique = list({tuple(r[k] for k in _KEY): r for r in rows}.values())
    updatable = [c for c in unique[0] if c not in _KEY]
    if conn.dialect.name == "mysql":
        stmt = mysql.insert(reference).values(unique)
        stmt = stmt.on_duplicate_key_update({c: stmt.inserted[c] for c in updatable})
    elif conn.dialect.name == "sqlite":
        stmt = sqlite.insert(reference).values(unique)
        stmt = stmt.on_conflict_do_update(
            index_elements=list(_KEY), set_={c: stmt.excluded[c] for c in updatable}
        )
    else:  # pragma: no cover - only the two dialects are supported
        raise NotImplementedError(conn.dialect.name)
    conn.execute(stmt)


def fetch_references(engine: Engine) -> list[dict]:
    """Every stored reference, by citing key and position (tests, small exports)."""
    query = sa.select(reference).order_by(
        reference.c.dbname, reference.c.filename, reference.c.position
    )
    with engine.connect() as conn:
        return [dict(row) for row in conn.execute(query).mappings()]
