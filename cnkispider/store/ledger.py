"""The round ledger: every row a round listed, by its document key, with its outcome.

A round is done only when its rows are accounted for: listed = stored + in errorLink + dropped
by a named rule + beyond reach (what each term means:
docs/RELIABILITY.md#every-listed-row-accounted-for).

Who writes what, each in the transaction of what it records, so a row's outcome commits
atomically with the fact it stands for:

- the spider, for each list page of a round: its rows ``pending``, or ``dropped:<rule>``
  (:func:`note_listed`, one batch, before the page's detail requests are handed out);
- the item pipeline, in its document upsert: ``stored`` (:func:`note_stored`);
- the error recorder, with the errorLink row: ``error`` (:func:`note_error`).

Invariants, held by the statements themselves (any number of workers, at-least-once delivery):

- one row per (round_id, doc_key) (a unique key): a page or a document handled twice changes
  nothing;
- ``stored`` is final: nothing moves a row out of it (an error recorded after a store, by a
  redelivered request, leaves it stored);
- ``error`` only replaces ``pending``; a listed row is never lost: ``dropped`` rows stay
  dropped and count as accounted for;
- the rows stay across a round's attempts (a re-opened round keeps what it stored); a row a
  look's walk no longer lists is marked ``unlisted_since``, kept, and counted apart
  (tasks/lookback.py).

:func:`balance` is the one rule that reads a round's counts; ``tasks.rounds.Rounds.close_round``
applies it when the round drains.

The rest of this module's story: docs/INTERNALS.md#cnkispiderstoreledgerpy.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

import sqlalchemy as sa

from cnkispider.store.schema import error_code, ledger, ledger_fold, round_

PENDING = "pending"
STORED = "stored"
ERROR = "error"
DROPPED = "dropped:"  # + the rule's name
#: errorCode reasons of a round's rows no search can reach (recorded permanent by the spider).
#: ``census``: a day's roots list fewer than its census (the spider records the shortfall; the
#: rows the census saw beyond the roots' are what no category search reaches).
BEYOND_REASONS = ("overflow", "pager-short", "census")
#: doc_key's width in the ledger table.
KEY_WIDTH = 320


def doc_key(dbname: str, filename: str) -> str:
    """The ledger's key of a document: ``dbname/filename`` (what the dupefilter keys on)."""
    return f"{dbname}/{filename}"[:KEY_WIDTH]


def dropped(rule: str) -> str:
    return f"{DROPPED}{rule}"


def _insert_ignoring_existing(conn, rows: list[dict]) -> None:
    """Insert the rows whose (round_id, doc_key) is new; leave the others as they are."""
    if not rows:
        return
    unique = list({(r["round_id"], r["doc_key"]): r for r in rows}.values())
    # a row's first listing time (issue 46.3), written only by the insert that creates it
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    for r in unique:
        r.setdefault("first_listed", now)
    if conn.dialect.name == "mysql":
        stmt = sa.insert(ledger).prefix_with("IGNORE")
    elif conn.dialect.name == "sqlite":
        stmt = sa.insert(ledger).prefix_with("OR IGNORE")
    else:  # pragma: no cover - only the two dialects are supported
        raise NotImplementedError(conn.dialect.name)
    conn.execute(stmt, unique)


def note_listed(
    conn,
    round_id: int,
    pending: Iterable[str],
    drops: dict[str, str],
    listed_at: dt.datetime | None = None,
) -> None:
    """A list page of the round: its kept rows ``pending``, its dropped rows ``dropped:<rule>``
    (``drops``: doc_key -> rule). A row the ledger has already keeps its outcome (and its
    ``first_listed``; ``listed_at``: when, UTC naive, default now)."""
    unfold(conn, round_id)  # listed again: its folded rows are listed and stored anew
    when = {"first_listed": listed_at} if listed_at is not None else {}
    rows = [
        {"round_id": round_id, "doc_key": key[:KEY_WIDTH], "outcome": PENDING, **when}
        for key in pending
    ]
    rows += [
        {"round_id": round_id, "doc_key": key[:KEY_WIDTH], "outcome": dropped(rule), **when}
        for key, rule in drops.items()
    ]
    _insert_ignoring_existing(conn, rows)


def note_stored(conn, keys: Iterable[tuple[int, str]]) -> None:
    """Documents stored (in the upsert's transaction): their rows ``stored``, whatever they were."""
    pairs = list({(round_id, key[:KEY_WIDTH]) for round_id, key in keys})
    if not pairs:
        return
    _insert_ignoring_existing(
        conn, [{"round_id": r, "doc_key": k, "outcome": STORED} for r, k in pairs]
    )
    for round_id in {r for r, _ in pairs}:
        conn.execute(
            ledger.update()
            .where(
                ledger.c.round_id == round_id,
                ledger.c.doc_key.in_([k for r, k in pairs if r == round_id]),
                ledger.c.outcome != STORED,
            )
            .values(outcome=STORED)
        )


def note_error(conn, round_id: int, key: str) -> None:
    """A document's detail failed (in the errorLink write's transaction): ``error``, unless
    the row is stored already (a redelivered request failing after its document was stored)."""
    key = key[:KEY_WIDTH]
    _insert_ignoring_existing(conn, [{"round_id": round_id, "doc_key": key, "outcome": ERROR}])
    conn.execute(
        ledger.update()
        .where(ledger.c.round_id == round_id, ledger.c.doc_key == key, ledger.c.outcome == PENDING)
        .values(outcome=ERROR)
    )


def stored_in_task(conn, task_id: int, key: str) -> bool:
    """The document's row is ``stored`` in some round of the task (issue 47.6: a failure of
    it that comes after, a slow holder's abandoned lease, is no failure of the task)."""
    rounds = sa.select(round_.c.id).where(round_.c.task_id == task_id)
    # A locking read of the document's rows: a store of it not yet committed (its transaction
    # holds the row it marks stored) is waited for, then read as committed, so a failure
    # recorded while the slow holder's store commits sees it (MySQL; SQLite serialises writers)
    rows = conn.execute(
        sa.select(ledger.c.outcome)
        .where(ledger.c.round_id.in_(rounds), ledger.c.doc_key == key[:KEY_WIDTH])
        .with_for_update()
    ).scalars()
    return STORED in set(rows)


def settle_errors(conn, task_ids: Iterable[int], keys: Iterable[str]) -> int:
    """Documents now stored (any holder, any round): their rows ``error`` in every round of
    these tasks become ``stored`` (a document listed by two rounds whose detail failed in
    both; its errorLink row names only the first). Scoped by the tasks' rounds: the ledger's
    key (round, document) finds each row without a scan."""
    task_ids, keys = sorted(set(task_ids)), sorted({k[:KEY_WIDTH] for k in keys})
    if not task_ids or not keys:
        return 0
    rounds = sa.select(round_.c.id).where(round_.c.task_id.in_(task_ids))
    return conn.execute(
        ledger.update()
        .where(ledger.c.round_id.in_(rounds), ledger.c.doc_key.in_(keys), ledger.c.outcome == ERROR)
        .values(outcome=STORED)
    ).rowcount


@dataclass(frozen=True)
class Counts:
    """A round's ledger rows, counted."""

    pending: int = 0
    stored: int = 0
    in_error: int = 0
    drops: dict[str, int] = field(default_factory=dict)  # rule -> rows
    # rows no longer listed (tasks/lookback.py): kept, not part of listed = accounted + beyond
    unlisted: int = 0

    @property
    def dropped(self) -> int:
        return sum(self.drops.values())

    @property
    def accounted(self) -> int:
        return self.stored + self.in_error + self.dropped


def count(conn, round_id: int) -> Counts:
    by_outcome = dict(
        conn.execute(
            sa.select(ledger.c.outcome, sa.func.count())
            .where(ledger.c.round_id == round_id, ledger.c.unlisted_since.is_(None))
            .group_by(ledger.c.outcome)
        ).all()
    )
    for outcome, n in folded(conn, round_id).items():  # rows folded away ([database] ledger_days)
        by_outcome[outcome] = by_outcome.get(outcome, 0) + n
    # rows CNKI no longer lists (a look's walk did not show them): apart from the equation
    unlisted = conn.execute(
        sa.select(sa.func.count()).where(
            ledger.c.round_id == round_id, ledger.c.unlisted_since.is_not(None)
        )
    ).scalar()
    drops = {
        outcome[len(DROPPED) :]: n
        for outcome, n in by_outcome.items()
        if outcome.startswith(DROPPED)
    }
    return Counts(
        pending=by_outcome.get(PENDING, 0),
        stored=by_outcome.get(STORED, 0),
        in_error=by_outcome.get(ERROR, 0),
        drops=dict(sorted(drops.items())),
        unlisted=unlisted,
    )


def list_facts(conn, round_id: int) -> tuple[int, list[str]]:
    """(how many of the round's rows its errorCode rows say no search can reach: an overflow,
    a pager shorter than its total, a census its roots do not cover, each by its count; the
    reasons of its list pages that failed and are in errorCode to replay).

    One fact counts once: a page handled twice (at-least-once delivery) may record its fact
    twice, so the rows of one (reason, search, page) count as one, with the larger count. A row
    without a count (recorded before schema 11) counts none."""
    rows = conn.execute(
        sa.select(
            error_code.c.reason,
            error_code.c.state,
            error_code.c.search,
            error_code.c.page,
            error_code.c.unreachable,
        ).where(error_code.c.round_id == round_id)
    ).all()
    facts: dict[tuple, int] = {}
    for row in rows:
        if row.reason in BEYOND_REASONS:
            fact = (row.reason, row.search, row.page)
            facts[fact] = max(facts.get(fact, 0), row.unreachable or 0)
    return sum(facts.values()), [row.reason for row in rows if row.state != "permanent"]


@dataclass(frozen=True)
class Verdict:
    """A round's ledger at its drain, and whether it balances."""

    listed: int | None
    counts: Counts
    beyond: int = 0
    failed_pages: int = 0  # list pages of the round in errorCode (their rows were never listed)
    failed_reasons: tuple[str, ...] = ()  # why they failed (errorCode reasons, distinct)

    @property
    def unaccounted(self) -> int:
        if self.listed is None:
            return 0
        return self.listed - self.counts.accounted - self.beyond

    @property
    def balanced(self) -> bool:
        return (
            self.listed is not None
            and not self.counts.pending
            and not self.failed_pages
            and self.unaccounted == 0
        )

    def words(self) -> str:
        """``listed 51, stored 0, dropped other-database 51``: the numbers, for errorCode and
        the log."""
        c = self.counts
        if self.listed is None:
            parts = ["the list never answered (listed unknown)", f"stored {c.stored}"]
        else:
            parts = [f"listed {self.listed}", f"stored {c.stored}"]
        if c.in_error:
            parts.append(f"in errorLink {c.in_error}")
        parts += [f"dropped {rule} {n}" for rule, n in c.drops.items()]
        if self.beyond:
            parts.append(f"beyond {self.beyond}")
        if c.unlisted:
            parts.append(f"no longer listed {c.unlisted}")
        if c.pending:
            parts.append(f"pending {c.pending}")
        if self.unaccounted:
            parts.append(f"unaccounted {self.unaccounted}")
        if self.failed_pages:
            why = f" ({', '.join(self.failed_reasons)})" if self.failed_reasons else ""
            parts.append(f"list pages failed {self.failed_pages}{why}")
        return ", ".join(parts)

    def columns(self) -> dict:
        """The round row's ledger columns."""
        c = self.counts
        return {
            "stored": c.stored,
            "in_error": c.in_error,
            "dropped": c.dropped,
            "beyond": self.beyond,
            "drops": json.dumps(c.drops, sort_keys=True) if c.drops else None,
        }


def balance(
    listed: int | None,
    counts: Counts,
    unreachable: int,
    failed_pages: int = 0,
    failed_reasons: tuple[str, ...] = (),
) -> Verdict:
    """The round's verdict: ``beyond`` is what its overflow, pager-short and census rows say
    is beyond reach (``unreachable``, by count), no more than ``listed`` leaves past the rows
    counted (a document listed under two categories may be reached by the other), and none
    when one of its list pages failed (else the rows of a failed page would pass for rows
    beyond reach). Any other missing row stays unaccounted: a page lost without a trace keeps
    the round from ``done``, whatever else the round recorded."""
    beyond = 0
    if listed is not None and unreachable > 0 and not failed_pages:
        beyond = min(unreachable, max(0, listed - counts.accounted))
    return Verdict(listed, counts, beyond, failed_pages, failed_reasons)


def judge(conn, round_id: int, listed: int | None) -> Verdict:
    """Count the round's ledger and errorCode rows and :func:`balance` them."""
    unreachable, reasons = list_facts(conn, round_id)
    return balance(
        listed, count(conn, round_id), unreachable, len(reasons), tuple(sorted(set(reasons)))
    )


# -- folding the rows of long-done rounds ([database] ledger_days) ---------------------------------
#
# A year of a task is ~200,000 rounds and a ledger row per document each round listed: rows kept
# for ever once their rounds are done. Folding replaces a done round's rows of final outcome
# (``stored``, ``dropped:<rule>``: nothing moves a row out of them) by one count per outcome in
# ``ledger_fold``; :func:`count` adds those counts, so the round's verdict, and the sums status
# reads from its round row, stay what they were. Rows that can still move stay rows: ``error``
# (a replay may store its document) and ``pending``. A folded round listed again (the cursor
# moved back, a resume) forgets its folded counts in :func:`note_listed`: the new crawl lists
# and stores its documents anew (its round's Bloom filter is fresh, so each is fetched again).


def final():
    """The ledger rows whose outcome nothing changes any more: they may fold."""
    return sa.or_(ledger.c.outcome == STORED, ledger.c.outcome.like(f"{DROPPED}%"))


def folded(conn, round_id: int) -> dict[str, int]:
    """The round's folded counts: outcome -> documents ({} for a round never folded)."""
    return dict(
        conn.execute(
            sa.select(ledger_fold.c.outcome, ledger_fold.c.documents).where(
                ledger_fold.c.round_id == round_id
            )
        ).all()
    )


def unfold(conn, round_id: int) -> None:
    """Forget the round's folded counts (it is listed again, or its rows are deleted)."""
    conn.execute(ledger_fold.delete().where(ledger_fold.c.round_id == round_id))


def fold_round(conn, round_id: int) -> int:
    """Fold the round's rows of final outcome into its ``ledger_fold`` counts, in the caller's
    transaction (which holds the round's row, so that no re-open interleaves); returns the rows
    folded. Folding twice adds nothing: the rows counted are deleted in the same transaction."""
    counts = conn.execute(
        sa.select(ledger.c.outcome, sa.func.count())
        .where(ledger.c.round_id == round_id, final())
        .group_by(ledger.c.outcome)
    ).all()
    if not counts:
        return 0
    before = folded(conn, round_id)
    for outcome, n in counts:
        if outcome in before:
            conn.execute(
                ledger_fold.update()
                .where(ledger_fold.c.round_id == round_id, ledger_fold.c.outcome == outcome)
                .values(documents=ledger_fold.c.documents + n)
            )
        else:
            conn.execute(
                ledger_fold.insert().values(round_id=round_id, outcome=outcome, documents=n)
            )
    conn.execute(ledger.delete().where(ledger.c.round_id == round_id, final()))
    return sum(n for _, n in counts)
