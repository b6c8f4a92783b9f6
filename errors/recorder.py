"""errorCode and errorLink: what failed, why, and how often, so the recrawl phase can replay it.

errorCode   a list-stage failure: the round's (day, category), the exact search (sort, title)
            and the page it stopped at. Replayed as a search from that page.
errorLink   a detail-stage failure: the document's ids (dbname, filename), its title (to find a
            fresh link when the old one went stale), its list-row fields, the last URL.

An error row's life::

    open --claimed by a recrawl worker (lease)--> claimed --replayed and stored--> (deleted)
      ^                                             |
      '------- lease ran out / failed again --------'--- attempts > limit --> permanent

A list-stage failure of the network itself (DNS, refused, timeout, reset:
:data:`cnkispider.watch.halting.NETWORK_REASONS`) is never permanent: CNKI was not asked, so nothing is
known about the page; when the network stays down the circuit breaker halts the task instead.
A round crawled again deletes its own errorCode rows (:meth:`ErrorRecorder.forget_round`, called
by flow control in the transaction that re-opens the round), and a replayed page that parses
deletes its row, so a row left is a page still missing. Only this module writes errorCode and
errorLink; flow control calls it.

A document stored by any route deletes its errorLink row, so "errorLink is empty" means no
document is missing, and a row left is a document not stored (the invariant: each document
found is stored, or its link is in errorLink).
"""

from __future__ import annotations

import datetime as dt
import json
import logging

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, sqlite
from sqlalchemy.engine import Engine

from cnkispider import default_settings
from cnkispider.cnki.protocol import DOCUMENT_KINDS, REFERENCES
from cnkispider.store import ledger
from cnkispider.store.db import db_now, retried
from cnkispider.store.schema import error_code, error_link
from cnkispider.watch.halting import is_network

logger = logging.getLogger(__name__)


class ErrorRecorder:
    """The errorCode and errorLink rows of one database.

    Each method marked ``@retried`` (run again while the database is away,
    :func:`cnkispider.store.db.retried`) is one transaction, rolled back whole when a statement is cut
    off, so running it again is safe. The one imprecision: a commit whose answer was lost and
    then run again counts an attempt twice (``record_link``) or adds a second row for the same
    page (``record_code``); both err toward replaying more, never toward losing a failure.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        max_attempts: int = default_settings.ERRORS_MAX_ATTEMPTS,
        lease_seconds: int = 300,
    ):
        self.engine = engine
        self.max_attempts = max_attempts
        self.lease = dt.timedelta(seconds=lease_seconds)

    # -- recording -----------------------------------------------------------------------

    @retried("recording a list-stage failure")
    def record_code(
        self,
        task_id: int,
        round_id: int | None,
        day: str,
        category: str,
        search: dict | None,
        page: int | None,
        reason: str,
        detail: str = "",
        replay_of: int | None = None,
        permanent: bool = False,
        unreachable: int | None = None,
    ) -> None:
        """A list-stage failure. A failed replay updates its own row instead of adding one.

        ``permanent``: no replay can mend it (an overflow beyond every cut); kept, never replayed.
        A network failure is never permanent, whatever its attempts. ``unreachable``: how many
        listed rows the fact puts beyond reach (overflow, pager-short, census), the count the
        round's ledger takes as ``beyond`` (cnkispider/store/ledger.py; one fact counts once, however
        many rows it has).

        errorCode has no unique key, so unlike errorLink's its insert cannot collide: two
        workers failing on one page at once (a lease that ran out under a slow worker) add two
        rows, both replayed, and a replay's row is read ``FOR UPDATE``, so two failures of one
        replay count up that row in turn.
        """
        network = is_network(reason)
        permanent = permanent and not network
        with self.engine.begin() as conn:
            now = db_now(conn)
            if replay_of is not None and not permanent:
                # Counted here, not in the UPDATE: MySQL assigns left to right, so a state
                # computed there from ``attempts + 1`` would see the attempt already counted.
                attempts = conn.execute(
                    sa.select(error_code.c.attempts)
                    .where(error_code.c.id == replay_of)
                    .with_for_update()
                ).scalar()
                if attempts is not None:
                    total = attempts + 1
                    conn.execute(
                        error_code.update()
                        .where(error_code.c.id == replay_of)
                        .values(
                            page=page,
                            search=json.dumps(search, ensure_ascii=False) if search else None,
                            reason=reason[:200],
                            detail=detail,
                            attempts=total,
                            state="open" if network or total < self.max_attempts else "permanent",
                            lease_until=None,
                            updated_at=now,
                        )
                    )
                    return
                # Its row is gone (the replayed page parsed once, then its worker died before
                # the ack and the request came back and failed): a new row, never nothing.
            conn.execute(
                error_code.insert().values(
                    task_id=task_id,
                    round_id=round_id,
                    day=day,
                    category=category,
                    search=json.dumps(search, ensure_ascii=False) if search else None,
                    page=page,
                    reason=reason[:200],
                    detail=detail,
                    attempts=1,
                    state="permanent" if permanent else "open",
                    unreachable=unreachable,
                    created_at=now,
                    updated_at=now,
                )
            )

    @retried("recording a detail-stage failure")
    def record_link(
        self,
        task_id: int,
        round_id: int | None,
        doc_type: str,
        url: str,
        dbname: str,
        filename: str,
        reason: str,
        *,
        title: str = "",
        day: str = "",
        category: str = "",
        listing: dict | None = None,
        detail: str = "",
        settled_by_store: bool = True,
    ) -> None:
        """A detail-stage failure; the same document failing again counts up its row. The
        document's row in its round's ledger says ``error`` from the same transaction.

        One upsert on errorLink's unique key (task, dbname, filename), not a read and then an
        insert: two workers recording one document at once (listed by two categories of the
        task, or a replay failing while its first failure is written) would both read nothing
        under READ COMMITTED and the second insert would fail on the key (MySQL 1062), stopping
        its worker over a failure that is already recorded. The key collision is the "already
        recorded" case, counted up in the same statement."""
        with self.engine.begin() as conn:
            now = db_now(conn)
            key = ledger.doc_key(dbname, filename)
            # (a reference list is not settled by its document: it has a failure of its own)
            if settled_by_store and ledger.stored_in_task(conn, task_id, key):
                # stored already by another holder (a slow one whose lease ran out, or another
                # round listing it): nothing of the task is missing, so no errorLink row
                logger.debug("not recording %s (%s): the task stored it already", key, reason)
                return
            if round_id is not None:
                ledger.note_error(conn, round_id, key)
            first = {
                "task_id": task_id,
                "round_id": round_id,
                "doc_type": doc_type,
                "url": url,
                "dbname": dbname,
                "filename": filename,
                "title": title[:500],
                "day": day,
                "category": category,
                "listing": json.dumps(listing or {}, ensure_ascii=False),
                "reason": reason[:200],
                "detail": detail,
                "attempts": 1,
                "state": "open" if self.max_attempts > 1 else "permanent",
                "created_at": now,
                "updated_at": now,
            }
            conn.execute(_upsert_link(conn.dialect.name, first, self.max_attempts))

    def record_failure(
        self,
        task_id: int | None,
        doc_type: str,
        meta: dict,
        url: str,
        reason: str,
        detail: str = "",
        *,
        stage: str | None = None,
        permanent: bool = False,
        unreachable: int | None = None,
    ) -> str:
        """A request's failure, its row read from the request's meta; returns the stage.

        ``stage`` is ``"detail"`` (errorLink: the document of ``doc_key``, or of ``refresh_for``
        for a title search that did not find it) or ``"list"`` (errorCode: the page of
        ``search``, updating the errorCode row ``error_code_id`` a replay mends); by default the
        request's own (``cnki_kind``). ``permanent`` is for list-stage facts no replay can mend;
        ``unreachable``: the rows such a fact puts beyond reach (:meth:`record_code`).
        Each write is its own retried transaction (``record_code``, ``record_link``).
        """
        stage = stage or stage_of(meta)
        search = meta.get("search") or {}
        if stage == "detail":
            dbname, filename = (meta.get("doc_key") or meta.get("refresh_for") or "/").split("/", 1)
            listing = meta.get("listing", {})
            self.record_link(
                task_id,
                meta.get("round_id"),
                doc_type,
                url,
                dbname,
                filename,
                reason,
                title=listing.get("title", ""),
                day=search.get("day_start", ""),
                category=search.get("category") or "",
                listing=listing,
                detail=detail,
                settled_by_store=meta.get("cnki_kind") != REFERENCES,
            )
        else:
            self.record_code(
                task_id,
                meta.get("round_id"),
                search.get("day_start", ""),
                search.get("category") or "",
                search,
                meta.get("page"),
                reason,
                detail,
                replay_of=meta.get("error_code_id"),
                permanent=permanent,
                unreachable=unreachable,
            )
        return stage

    @retried("clearing errorLink rows")
    def resolve_links(self, task_id: int | None, keys: list[tuple[str, str]]) -> int:
        """Documents now stored: their errorLink rows go (whatever task listed them), and in
        the same transaction every ledger row ``error`` of those documents in the rounds of
        those tasks becomes ``stored`` (the row names only the first round that failed it)."""
        if not keys:
            return 0
        with self.engine.begin() as conn:
            condition = sa.tuple_(error_link.c.dbname, error_link.c.filename).in_(keys)
            open_rows = conn.execute(
                sa.select(error_link.c.task_id, error_link.c.dbname, error_link.c.filename).where(
                    condition
                )
            ).all()
            if not open_rows:
                return 0
            ledger.settle_errors(
                conn,
                [r.task_id for r in open_rows],
                [ledger.doc_key(r.dbname, r.filename) for r in open_rows],
            )
            return conn.execute(error_link.delete().where(condition)).rowcount

    @retried("clearing an errorCode row")
    def resolve_code(self, code_id: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(error_code.delete().where(error_code.c.id == code_id))

    @retried("setting an error row permanent")
    def unreplayable(self, table_name: str, row_id: int, why: str) -> bool:
        """A claimed row no request can be built from (an empty day, a search that no longer
        parses): permanent, with the reason in ``detail``, so it is neither claimed again every
        lease nor keeps its task from finishing. ``table_name``: error_code or error_link."""
        table = {"error_code": error_code, "error_link": error_link}[table_name]
        with self.engine.begin() as conn:
            return (
                conn.execute(
                    table.update()
                    .where(table.c.id == row_id)
                    .values(
                        state="permanent",
                        reason="unreplayable",
                        detail=f"no request can be built from this row: {why}",
                        lease_until=None,
                        updated_at=db_now(conn),
                    )
                ).rowcount
                == 1
            )

    # -- in flow control's transaction ----------------------------------------------------
    # Flow control (tasks/) moves a round and writes its errorCode rows in one transaction, so
    # these take the caller's connection (``conn``): the round's move and its rows commit or roll
    # back together. They are the only writes of errorCode outside this class's own transactions.

    def forget_round(self, conn, round_id: int) -> None:
        """The round is crawled again from its first page: its old list-stage failures are stale
        (what still fails is recorded again, an overflow too, by the new crawl of the round)."""
        conn.execute(error_code.delete().where(error_code.c.round_id == round_id))

    def record_round_failed(
        self,
        conn,
        *,
        task_id: int,
        round_id: int,
        day: str,
        category: str,
        reason: str,
        detail: str,
        attempts: int,
        now: dt.datetime,
    ) -> None:
        """A round failed for good (its ledger never balanced): a permanent errorCode row."""
        conn.execute(
            error_code.insert().values(
                task_id=task_id,
                round_id=round_id,
                day=day,
                category=category,
                search=None,
                page=None,
                reason=reason,
                detail=detail,
                attempts=attempts,
                state="permanent",
                created_at=now,
                updated_at=now,
            )
        )

    @staticmethod
    def rounds_failed_for(task_id: int, reasons: list[str]):
        """A subquery: the ids of the task's rounds with an errorCode row for one of
        ``reasons`` (``round.id IN (...)``)."""
        return sa.select(error_code.c.round_id).where(
            error_code.c.task_id == task_id,
            error_code.c.reason.in_(reasons),
            error_code.c.round_id.is_not(None),
        )

    def reopen_for(self, conn, task_id: int, reasons: list[str], now: dt.datetime) -> int:
        """The task's errorCode rows that failed for one of ``reasons`` are open again, their
        attempts reset (a halt for that reason was lifted): the recrawl phase replays them.
        Returns how many."""
        return conn.execute(
            error_code.update()
            .where(error_code.c.task_id == task_id, error_code.c.reason.in_(reasons))
            .values(state="open", attempts=0, lease_until=None, updated_at=now)
        ).rowcount

    @staticmethod
    def count_rows(conn, task_id: int) -> dict[str, int]:
        """How many errorCode and errorLink rows the task has, whatever their state."""
        return {
            name: conn.execute(
                sa.select(sa.func.count()).select_from(table).where(table.c.task_id == task_id)
            ).scalar()
            for name, table in (("error_code", error_code), ("error_link", error_link))
        }

    # -- the recrawl phase: claims like rounds --------------------------------------------

    def _claim(self, table, task_id: int, worker_id: str, limit: int) -> list:
        claimed = []
        with self.engine.begin() as conn:
            now = db_now(conn)
            due = sa.and_(
                table.c.task_id == task_id,
                sa.or_(
                    table.c.state == "open",
                    sa.and_(table.c.state == "claimed", table.c.lease_until < now),
                ),
            )
            ids = (
                conn.execute(sa.select(table.c.id).where(due).order_by(table.c.id).limit(limit))
                .scalars()
                .all()
            )
            for row_id in ids:
                won = conn.execute(
                    table.update()
                    .where(table.c.id == row_id, due)
                    .values(state="claimed", lease_until=now + self.lease, updated_at=now)
                ).rowcount
                if won == 1:
                    claimed.append(row_id)
            if not claimed:
                return []
            return list(conn.execute(sa.select(table).where(table.c.id.in_(claimed))).mappings())

    @retried("claiming errorCode rows")
    def claim_codes(self, task_id: int, worker_id: str, limit: int = 10) -> list:
        return self._claim(error_code, task_id, worker_id, limit)

    @retried("claiming errorLink rows")
    def claim_links(self, task_id: int, worker_id: str, limit: int = 100) -> list:
        return self._claim(error_link, task_id, worker_id, limit)

    @retried("counting error rows")
    def outstanding(self, task_id: int) -> dict[str, int]:
        """Error rows still to replay (open or claimed) and permanent ones, per table."""
        counts = {}
        with self.engine.connect() as conn:
            for name, table in (("error_code", error_code), ("error_link", error_link)):
                for state, count in conn.execute(
                    sa.select(table.c.state, sa.func.count())
                    .where(table.c.task_id == task_id)
                    .group_by(table.c.state)
                ):
                    counts[f"{name}/{state}"] = count
        return counts

    def pending(self, task_id: int) -> int:
        counts = self.outstanding(task_id)
        return sum(v for k, v in counts.items() if not k.endswith("/permanent"))


def _upsert_link(dialect: str, first: dict, max_attempts: int):
    """``INSERT`` the document's first failure, or count up the row the key already holds.

    The update keeps the row's listing and round (the first failure's) and takes the new
    URL, reason and detail. ``state`` is assigned before ``attempts`` and both read the row's old
    ``attempts``: MySQL assigns left to right, so an expression after ``attempts = attempts + 1``
    would see the attempt already counted, while SQLite reads the old row throughout."""
    total = error_link.c.attempts + 1
    update = [
        (
            "state",
            sa.case((total >= max_attempts, "permanent"), else_="open"),
        ),
        ("attempts", total),
        ("url", first["url"]),
        ("reason", first["reason"]),
        ("detail", first["detail"]),
        ("lease_until", None),
        ("updated_at", first["updated_at"]),
    ]
    if dialect == "mysql":
        return mysql.insert(error_link).values(first).on_duplicate_key_update(update)
    if dialect == "sqlite":
        return (
            sqlite.insert(error_link)
            .values(first)
            .on_conflict_do_update(
                index_elements=["task_id", "dbname", "filename"], set_=dict(update)
            )
        )
    raise NotImplementedError(dialect)  # pragma: no cover - only the two dialects are supported


def stage_of(meta: dict) -> str:
    """``"detail"`` for a detail or reference request (its failure goes to errorLink), else ``"list"``."""
    # a reference list is its document's too: its failure is the document's errorLink row
    return "detail" if meta.get("cnki_kind") in DOCUMENT_KINDS else "list"
