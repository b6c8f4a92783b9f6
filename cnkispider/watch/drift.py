"""The markup drift alarm: a field the parser filled on most documents and suddenly fills on none.

CNKI changes its pages without notice. When a label is renamed or a block moves, the parser does
not fail: it returns ``""`` for that field, and a crawl would store thousands of documents
without it. So every stored document of a round counts, per detail field, whether the parser
filled it (table ``fill``: one row per round and field, in the document upsert's transaction),
and after each batch the task's recent rounds are read back:

    a field that was filled on at least half of the ``window`` or more documents of the rounds
    before, and is empty on every one of the last ``window`` or more documents (rounds in order
    of their id), halts the task: ``markup drift: page_range empty on 100 of 100 documents since
    round 812; sample page data/drift/<task>-page_range-812.html``.

The halt is the task's ordinary halt (cnkispider/watch/halting.py: ``halt_requested``): no round is
handed out or closed until ``cnkispider task resume``; the documents stored before are not
touched. ``window`` is the Scrapy setting ``CNKI_DRIFT_DOCUMENTS`` (100; 0 turns the alarm off).

:func:`verdict` is pure; :func:`note_fill`, :func:`history` and :func:`fill_rates` read and write
the table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, sqlite

from cnkispider.cnki.detailpage import DETAIL_FIELDS
from cnkispider.store.schema import fill

#: Rounds read back for the verdict and for the fill rates: the task's latest ones.
RECENT_ROUNDS = 200
#: Detail fields that are the document's identity, never a drift (a page without them is
#: refused by the parser already).
_NOT_WATCHED = frozenset({"dbname", "filename", "title"})


def watched(doc_type: str) -> tuple[str, ...]:
    """The fields whose fill is counted: what the detail page's parser fills."""
    return tuple(f for f in DETAIL_FIELDS[doc_type] if f not in _NOT_WATCHED)


@dataclass(frozen=True)
class Drift:
    field: str
    empty: int  # documents in a row without it
    since_round: int  # the first round of that run

    def reason(self, sample: str | None = None) -> str:
        words = (
            f"markup drift: {self.field} empty on {self.empty} of {self.empty} documents "
            f"since round {self.since_round}"
        )
        return f"{words}; sample page {sample}" if sample else words


def verdict(history: dict[str, list[tuple[int, int, int]]], window: int) -> Drift | None:
    """The first field that drifted, or None. ``history``: field -> [(round id, documents,
    filled)] of the task's recent rounds, in any order."""
    if window <= 0:
        return None
    for field, rounds in sorted(history.items()):
        rounds = sorted(rounds)
        empty, since, cut = 0, None, len(rounds)
        for index in range(len(rounds) - 1, -1, -1):
            round_id, documents, filled = rounds[index]
            if filled:
                break
            empty += documents
            since, cut = round_id, index
        if empty < window or since is None:
            continue
        before = rounds[:cut]
        documents = sum(d for _, d, _ in before)
        filled = sum(f for _, _, f in before)
        if documents >= window and 2 * filled >= documents:
            return Drift(field, empty, since)
    return None


# Fields a document has only of some kind: counted only on documents of that kind, so that a
# run of 网络首发 papers (no issue or pages yet) or of theses is no drift of the source line.
_JOURNAL_ISSUE = frozenset({"year", "volume", "issue", "page_range"})
_THESIS = frozenset({"supervisor", "degree"})


def applies(name: str, values: dict) -> bool:
    """Whether the document ``values`` should have the field ``name`` at all."""
    if name in _JOURNAL_ISSUE:
        return values.get("database") == "期刊" and values.get("online_first") not in ("1", 1)
    if name == "issn":
        return values.get("database") == "期刊"
    if name in _THESIS:
        return values.get("database") in ("博士", "硕士")
    return True


def counts(doc_type: str, items: Iterable[dict]) -> dict[str, tuple[int, int]]:
    """field -> (documents, filled) of ``items`` (one round's documents of a batch): the
    documents the field applies to (:func:`applies`), and those of them that have it."""
    fields = watched(doc_type)
    documents = dict.fromkeys(fields, 0)
    filled = dict.fromkeys(fields, 0)
    for values in items:
        for name in fields:
            if not applies(name, values):
                continue
            documents[name] += 1
            if values.get(name) not in (None, ""):
                filled[name] += 1
    return {name: (documents[name], filled[name]) for name in fields if documents[name]}


def note_fill(
    conn, task_id: int, doc_type: str, round_id: int, per_field: dict[str, tuple[int, int]]
) -> None:
    """Add a batch's counts to the round's rows (one statement; idempotent only per batch: a
    document written twice counts twice, which a rate does not mind)."""
    rows = [
        {
            "task_id": task_id,
            "round_id": round_id,
            "doc_type": doc_type,
            "field": name,
            "documents": documents,
            "filled": filled,
        }
        for name, (documents, filled) in per_field.items()
    ]
    if not rows:
        return
    if conn.dialect.name == "mysql":
        stmt = mysql.insert(fill).values(rows)
        stmt = stmt.on_duplicate_key_update(
            documents=fill.c.documents + stmt.inserted.documents,
            filled=fill.c.filled + stmt.inserted.filled,
        )
    else:
        stmt = sqlite.insert(fill).values(rows)
        stmt = stmt.on_conflict_do_update(
            index_elements=["round_id", "field"],
            set_={
                "documents": fill.c.documents + stmt.excluded.documents,
                "filled": fill.c.filled + stmt.excluded.filled,
            },
        )
    conn.execute(stmt)


def history(
    conn, task_id: int, rounds: int = RECENT_ROUNDS
) -> dict[str, list[tuple[int, int, int]]]:
    """field -> [(round id, documents, filled)] over the task's latest ``rounds`` rounds."""
    latest = (
        sa.select(fill.c.round_id)
        .where(fill.c.task_id == task_id)
        .group_by(fill.c.round_id)
        .order_by(fill.c.round_id.desc())
        .limit(rounds)
    )
    ids = [r for (r,) in conn.execute(latest)]
    if not ids:
        return {}
    query = sa.select(fill.c.field, fill.c.round_id, fill.c.documents, fill.c.filled).where(
        fill.c.task_id == task_id, fill.c.round_id.in_(ids)
    )
    out: dict[str, list[tuple[int, int, int]]] = {}
    for field, round_id, documents, filled in conn.execute(query):
        out.setdefault(field, []).append((round_id, documents, filled))
    return out


def fill_rates(conn, task_id: int, rounds: int = 20) -> dict[str, float]:
    """field -> share of the documents of the task's latest ``rounds`` rounds that have it."""
    rates = {}
    for field, entries in sorted(history(conn, task_id, rounds).items()):
        documents = sum(d for _, d, _ in entries)
        if documents:
            rates[field] = round(sum(f for _, _, f in entries) / documents, 4)
    return rates
