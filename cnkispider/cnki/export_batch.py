"""How many export ids one GetExport request asks for, learned per session; records matched
to their ids by content. Pure: no network, no clock (nothing here depends on time).

CNKI does not say how many ids one request answers (PROTOCOL.md, 2026 evidence point 16: one
public client sends several comma-joined, unconfirmed live). So the size is learned, never
assumed:

- a session starts at ``[cnki] export_batch`` (``CNKI_EXPORT_BATCH``, 50), or at the size this
  worker last learned from another session (CNKI's limit is the site's, not a session's: a new
  session need not pay to learn it again);
- an answer with fewer records than ids sets the size to the number of records it held (CNKI
  answering 10 of 50 is settled at 10 by that one answer: issue 39 point 6); an answer with none
  tells nothing about a limit (an outage, a refusal) and halves it; never below 1;
- the ids left out are asked again, first, in the next batch;
- an id left out of three batches of several is asked alone next; left out of a batch of one
  (asked alone) it is given up: its row goes to errorLink with
  reason ``export-missing`` and the recrawl phase fetches it again.

Records come back in CNKI's order, which need not be the ids' order, and a batch may lose
some: a record is matched to its row by content (the normalised title, then the people), never
by position alone. Only rows whose content is the same in every compared field are told apart
by their order among themselves, where any assignment is right.

Invariants (:class:`ExportQueue`): every row handed in is, at any moment, in exactly one of
``pending``, a batch out (between :meth:`ExportQueue.take` and :meth:`ExportQueue.answered`),
``done`` (matched to a record) or ``missing`` (given up); :meth:`ExportQueue.balanced` checks
it. Nothing is dropped silently.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cnkispider.cnki.export_records import ExportRecord, normal_people, normal_title

ALONE_AFTER = 3  # left out of this many batches of several: asked alone
MAX_EXPORT_BATCH = 500  # config's upper bound: a form this long is asking for a refusal


def check_batch(value: Any, name: str = "export_batch") -> int:
    """A batch size from configuration; ValueError naming what was expected."""
    try:
        size = int(str(value).strip())
    except ValueError:
        raise ValueError(f"{name}: expected a whole number of ids, got {value!r}") from None
    if not 1 <= size <= MAX_EXPORT_BATCH:
        raise ValueError(f"{name}: expected 1 to {MAX_EXPORT_BATCH} ids a request, got {size}")
    return size


class ExportBatches:
    """Each session's learned batch size (see the module docstring)."""

    def __init__(self, start: int = 50):
        self.start = check_batch(start)
        self._sizes: dict[str, int] = {}
        self._learned: int | None = None  # the last size an answer taught, any session

    def size(self, session: str | None) -> int:
        return self._sizes.get(session or "", self._learned or self.start)

    def answered(self, session: str | None, asked: int, got: int) -> int:
        """Learn from one answer (``got`` records for ``asked`` ids); the session's new size."""
        size = self.size(session)
        if asked > 0 and got < asked:
            size = got if got > 0 else max(1, min(size, asked) // 2)
            self._sizes[session or ""] = size
            if got > 0:
                self._learned = size
        return size

    def forget(self, session: str | None) -> None:
        """A retired session: its successor learns afresh."""
        self._sizes.pop(session or "", None)

    def view(self) -> dict[str, int]:
        """Sizes reached, by session (for status)."""
        return dict(self._sizes)


@dataclass
class ExportRow:
    """What a list row says about a document that the export must find again."""

    export_id: str
    title: str
    people: str = ""  # authors, inventors or completers, ;-joined
    payload: Any = None  # what the caller needs back (the row's item, its key, ...)
    left_out: int = 0  # answers of batches of several that held no record for it


def match_records(
    rows: Sequence[ExportRow], records: Iterable[ExportRecord]
) -> tuple[list[tuple[ExportRow, ExportRecord]], list[ExportRow], list[ExportRecord]]:
    """(matched pairs, rows without a record, records without a row), by content.

    A record goes to the row with its normalised title; among several such rows, to one whose
    people are the record's; among rows alike in both, to the first not yet matched."""
    by_title: dict[str, list[ExportRow]] = {}
    for row in rows:
        by_title.setdefault(normal_title(row.title), []).append(row)
    matched: list[tuple[ExportRow, ExportRecord]] = []
    strays: list[ExportRecord] = []
    taken: set[int] = set()
    for record in records:
        candidates = [r for r in by_title.get(normal_title(record.title), []) if id(r) not in taken]
        if len(candidates) > 1:
            people = normal_people(record.people)
            same = [r for r in candidates if normal_people(r.people) == people]
            if not same and people:
                # the list may show fewer names than the record (CNKI cuts long author lists)
                same = [
                    r
                    for r in candidates
                    if normal_people(r.people)
                    and people[: len(normal_people(r.people))] == normal_people(r.people)
                ]
            candidates = same or candidates
        if not candidates:
            strays.append(record)
            continue
        row = candidates[0]
        taken.add(id(row))
        matched.append((row, record))
    left = [r for r in rows if id(r) not in taken]
    return matched, left, strays


@dataclass
class ExportQueue:
    """The rows of one round (or page) waiting for their export records."""

    pending: deque = field(default_factory=deque)
    done: list = field(default_factory=list)  # (row, record)
    missing: list = field(default_factory=list)  # rows given up: errorLink export-missing
    strays: int = 0  # records that matched no row asked (counted, never stored)
    out: dict = field(default_factory=dict)  # batch number -> rows asked
    _next: int = 0
    total: int = 0

    @classmethod
    def of(cls, rows: Iterable[ExportRow]) -> ExportQueue:
        q = cls()
        for row in rows:
            q.pending.append(row)
            q.total += 1
        return q

    def take(self, size: int) -> tuple[int, list[ExportRow]]:
        """The next batch (its number and rows); an empty list when nothing is pending. A row
        left out of three batches of several is asked alone (a record CNKI never gives would
        otherwise ride along in every batch)."""
        if self.pending and self.pending[0].left_out >= ALONE_AFTER:
            size = 1
        rows = [self.pending.popleft() for _ in range(min(max(1, size), len(self.pending)))]
        if not rows:
            return -1, []
        self._next += 1
        self.out[self._next] = rows
        return self._next, rows

    def answered(
        self, number: int, records: Iterable[ExportRecord]
    ) -> tuple[list[tuple[ExportRow, ExportRecord]], list[ExportRow]]:
        """Match one batch's answer: (pairs matched, rows given up now). Rows left out of a
        batch of several go back to the front of ``pending``; of a batch of one, to
        ``missing``."""
        rows = self.out.pop(number)
        pairs, left, strays = match_records(rows, records)
        self.done.extend(pairs)
        self.strays += len(strays)
        given_up: list[ExportRow] = []
        if len(rows) == 1:
            given_up = left
            self.missing.extend(left)
        else:
            for row in left:
                row.left_out += 1
            self.pending.extendleft(reversed(left))
        return pairs, given_up

    def failed(self, number: int) -> list[ExportRow]:
        """A batch whose request failed for good (retries spent): every row is given up."""
        rows = self.out.pop(number)
        self.missing.extend(rows)
        return rows

    @property
    def finished(self) -> bool:
        return not self.pending and not self.out

    def balanced(self) -> bool:
        """Every row handed in is in exactly one place (the ledger's rule, for one queue)."""
        out = sum(len(r) for r in self.out.values())
        return self.total == len(self.pending) + out + len(self.done) + len(self.missing)
