"""Which task found which document (issue 47): the ``task_document`` link table.

A document is stored once, on its natural key, whichever task found it; every task that lists
it gets a link row. A task's documents (export, status, counts) are the documents it links to,
never the document row's ``task_id`` (the task that wrote it last). State owned: the
``task_document`` rows, written only inside a transaction that stores the document or finds it
already stored deeply enough (:func:`take_known`).
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, sqlite

from cnkispider.items import DEPTHS, depth_rank
from cnkispider.store import ledger
from cnkispider.store.schema import documents, task_document


def link(conn, task_id: int | None, doc_type: str, keys: Iterable[tuple[str, str]]) -> None:
    """Link the documents ``keys`` ((dbname, filename) pairs) to the task; a link already
    there is left alone (an upsert that adds nothing)."""
    if task_id is None:
        return
    rows = [
        {"task_id": task_id, "doc_type": doc_type, "dbname": dbname, "filename": filename}
        for dbname, filename in dict.fromkeys(keys)
    ]
    if not rows:
        return
    if conn.dialect.name == "mysql":
        stmt = mysql.insert(task_document).prefix_with("IGNORE")
    elif conn.dialect.name == "sqlite":
        stmt = sqlite.insert(task_document).on_conflict_do_nothing()
    else:  # pragma: no cover - only the two dialects are supported
        raise NotImplementedError(conn.dialect.name)
    conn.execute(stmt, rows)


def of_task(doc_type: str, task_id: int):
    """A WHERE clause on the document table of ``doc_type``: the documents the task links to."""
    table = documents[doc_type]
    return sa.exists(
        sa.select(task_document.c.id).where(
            task_document.c.task_id == task_id,
            task_document.c.doc_type == doc_type,
            task_document.c.dbname == table.c.dbname,
            task_document.c.filename == table.c.filename,
        )
    )


def count(conn, doc_type: str, task_id: int) -> int:
    """How many stored documents of ``doc_type`` the task has, whichever task stored them."""
    table = documents[doc_type]
    return conn.execute(
        sa.select(sa.func.count()).select_from(table).where(of_task(doc_type, task_id))
    ).scalar()


def take_known(
    engine,
    task_id: int,
    round_id: int,
    doc_type: str,
    keys: list[tuple[str, str]],
    depth: str,
) -> set[tuple[str, str]]:
    """Of a list page's ``keys``, the documents another task already stored at ``depth`` or
    deeper: in one transaction they are linked to this task and stored in the round's ledger, so
    that this task does not fetch them again. Returns those keys. A document this task already
    has is fetched as before: the operator's move back or reopen crawls its rounds again."""
    if not keys:
        return set()
    table = documents[doc_type]
    deep_enough = [name for name in DEPTHS if depth_rank(name) >= depth_rank(depth)]
    depth_ok = table.c.depth.in_(deep_enough)
    if depth_rank(None) >= depth_rank(depth):  # NULL: stored before depths, at detail
        depth_ok = sa.or_(depth_ok, table.c.depth.is_(None))
    filenames = sorted({filename for _, filename in keys})
    wanted = set(keys)
    with engine.begin() as conn:
        found = {
            (r.dbname, r.filename)
            for r in conn.execute(
                sa.select(table.c.dbname, table.c.filename).where(
                    table.c.filename.in_(filenames), depth_ok, ~of_task(doc_type, task_id)
                )
            )
        } & wanted
        if found:
            link(conn, task_id, doc_type, sorted(found))
            ledger.note_stored(conn, [(round_id, ledger.doc_key(d, f)) for d, f in found])
    return found
