"""`cnkispider refresh-counts TASK [--from DAY --to DAY]`: read 被引 and 下载 again, nothing else.

Counts change (a paper is cited for years); the list rows carry them, so a refresh walks the
task's list pages again, never a detail page: about one request per 50 documents (a page of 50
rows), plus the session's own few. It is a crawl of its own: the task ``NAME~counts`` (same
type and categories, the days asked), run by the crawler's ordinary machinery (rounds, splits,
sessions, pace, proxies), with the spider in counts-only mode (the Scrapy setting
``CNKI_COUNTS_ONLY``): each list page's rows update ``cited``, ``downloads`` and ``counted_at``
of the documents already stored, in one statement, and nothing else. A row whose document is
not stored (new since the crawl) is counted in the round's ledger as ``dropped:not-stored``; a
document the list no longer shows keeps its last counts.

Each refresh starts its ``~counts`` task afresh (its old rounds, ledger and errorCode rows go).
"""

from __future__ import annotations

import sys

import sqlalchemy as sa

# (defined in cnkispider.items: config.ini's check of refresh_counts_every needs it there)
from cnkispider.items import has_counts  # noqa: F401
from cnkispider.store import ledger
from cnkispider.store.schema import documents, error_code, ledger_fold, round_, task
from cnkispider.store.schema import ledger as ledger_table

#: The ledger rule of a listed row whose document is not stored.
NOT_STORED = "not-stored"
SUFFIX = "~counts"


def counts_task_name(name: str) -> str:
    return f"{name}{SUFFIX}"


def command(config_file: str, name: str, first, last) -> list[str]:
    """The command line of a counts refresh a worker of task ``name`` claimed (tasks/feeder.py):
    ``refresh-counts NAME --from FIRST --to LAST``, in a process of its own (a crawl is a
    Twisted reactor, one per process), on the config file the worker read, and ``--claimed``:
    the claim already forgot the last refresh, and a refresh in flight is joined, not reset."""
    # frozen (the .exe), the program is the command itself: `-m` would mean nothing to it
    frozen = getattr(sys, "frozen", False)
    base = [sys.executable] if frozen else [sys.executable, "-m", "cnkispider.cli"]
    if config_file:
        base += ["--config", config_file]
    days = ["--from", first.isoformat(), "--to", last.isoformat()]
    return [*base, "refresh-counts", name, *days, "--claimed"]


def reset(engine, name: str) -> None:
    """Forget an earlier refresh of this name: its task row, rounds, ledger (folded too) and
    errorCode rows."""
    with engine.begin() as conn:
        reset_in(conn, name)


def reset_in(conn, name: str) -> None:
    """:func:`reset` in the caller's transaction (a refresh claimed by a follow task forgets
    the last one in the transaction that claims it: tasks/lookback.py)."""
    found = conn.execute(sa.select(task.c.id).where(task.c.name == name)).scalar()
    if found is not None:
        rounds = sa.select(round_.c.id).where(round_.c.task_id == found)
        conn.execute(ledger_table.delete().where(ledger_table.c.round_id.in_(rounds)))
        conn.execute(ledger_fold.delete().where(ledger_fold.c.round_id.in_(rounds)))
        conn.execute(error_code.delete().where(error_code.c.task_id == found))
        conn.execute(round_.delete().where(round_.c.task_id == found))
        conn.execute(task.delete().where(task.c.id == found))


def update_counts(
    engine,
    doc_type: str,
    round_id: int | None,
    rows: list[tuple[str, str, str, str]],
    counted_at,
    drops: dict[str, str] | None = None,
) -> tuple[int, int]:
    """One list page: ``rows`` (dbname, filename, cited, downloads) update the stored documents'
    counts (only ``cited``, ``downloads``, ``counted_at``), in one transaction with the round's
    ledger (``drops``: the page's rows of other databases, doc_key -> rule). Returns
    (documents updated, rows whose document is not stored)."""
    table = documents[doc_type]
    keys = {(d, f) for d, f, _, _ in rows}
    with engine.begin() as conn:
        stored = set()
        for chunk in _chunks(sorted(keys), 200):
            stored |= set(
                conn.execute(
                    sa.select(table.c.dbname, table.c.filename).where(
                        sa.tuple_(table.c.dbname, table.c.filename).in_(chunk)
                    )
                ).all()
            )
        updates = [
            {
                "k_dbname": d,
                "k_filename": f,
                "cited": int(c) if c else None,
                "downloads": int(n) if n else None,
                "counted_at": counted_at,
            }
            for d, f, c, n in rows
            if (d, f) in stored
        ]
        if updates:
            conn.execute(
                table.update()
                .where(
                    table.c.dbname == sa.bindparam("k_dbname"),
                    table.c.filename == sa.bindparam("k_filename"),
                )
                .values(
                    cited=sa.bindparam("cited"),
                    downloads=sa.bindparam("downloads"),
                    counted_at=sa.bindparam("counted_at"),
                ),
                updates,
            )
        if round_id is not None:
            missing = {ledger.doc_key(d, f): NOT_STORED for d, f in keys - stored}
            ledger.note_listed(conn, round_id, [], {**(drops or {}), **missing})
            ledger.note_stored(conn, [(round_id, ledger.doc_key(d, f)) for d, f in stored])
    return len(stored), len(keys - stored)


def _chunks(values: list, size: int):
    for start in range(0, len(values), size):
        yield values[start : start + size]
