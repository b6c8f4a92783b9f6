"""Item pipelines: documents into the database, in batches, off the reactor thread.

``DocumentPipeline`` collects items and writes them in one upsert per type and batch, in a
worker thread; each item's ``process_item`` finishes only when its batch is committed. That
is what lets the scheduler acknowledge a request exactly when its outcome is written (an item
"scraped" is an item stored), and it keeps blocking database I/O off the reactor.

The raw-HTML archive (``[crawl] archive_html``) is not an item pipeline: it is a downloader
middleware, ``cnkispider.middlewares.archive.HtmlArchiveMiddleware``.

Failures, and what each item's outcome is:

- the database is away (a transient error, cnkispider.store.db.is_transient): the batch is written
  again with backoff for up to DATABASE_OUTAGE_SECONDS, one log line per attempt
  (cnkispider.store.db.retrying); past that, the items fail and their requests are held (item_error);
- a document whose key cannot be stored fails alone, before anything is written
  (:class:`~cnkispider.store.storage.DocumentRejected`);
- a value the database refuses (too long for its column) fails the statement, so the batch is
  written again row by row: the other documents are stored, only that one fails
  (DocumentRejected, with the database's reason), and item_error records it in errorLink.

An item of a round carries ``_cnki_ledger``; the upsert's transaction marks that ledger row
``stored``. Settings: ``DATABASE_URL``, ``DATABASE_BATCH_SIZE`` (200), ``DATABASE_BATCH_SECONDS``
(0.2), ``DATABASE_OUTAGE_SECONDS`` (600, the process's policy: :data:`cnkispider.store.db.OUTAGE`),
``DATABASE_LEDGER_DAYS`` (0: off; else the ledgers of rounds done that long ago are folded, in
the background, when the crawl opens: tasks/retention.py).

The rest of this module's story: docs/INTERNALS.md#cnkispiderpipelinespy.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import sqlalchemy as sa
from scrapy.exceptions import NotConfigured
from scrapy.utils.asyncio import call_later, create_looping_call
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import defer, threads

from cnkispider import signals as cnki_signals
from cnkispider.items import DEFAULT_DEPTH, doc_type_of
from cnkispider.runtime.context import context_of
from cnkispider.store import db, ledger
from cnkispider.store.db import db_now, is_transient, open_database, retrying
from cnkispider.store.storage import (
    DEPTH_KEY,
    DocumentRejected,
    key_problem,
    row_for,
    upsert_documents,
)
from cnkispider.watch import drift
from tasks.retention import fold

logger = logging.getLogger(__name__)

#: Where an item's round-ledger row (round id, list key) travels with its values.
LEDGER_KEY = "_ledger"
#: Where the detail page of a document lacking a watched field travels (the drift sample).
PAGE_KEY = "_page"


class DocumentPipeline:
    def __init__(
        self, database_url: str, batch_size: int = 200, batch_seconds: float = 0.2, stats=None
    ):
        self.database_url = database_url
        self.batch_size = batch_size
        self.batch_seconds = batch_seconds
        self.stats = stats
        self.engine = None
        self.task_id = None
        self._pending: list[tuple[str, dict, defer.Deferred]] = []
        self._timer = None
        self._write_lock = threading.Lock()  # one batch at a time: fewer lock waits in the DB
        self.drift_documents = 100
        self._drifted: str | None = None  # a drift halt reason found by the last batch
        self.ledger_days = 0  # [database] ledger_days: 0, no folding
        self.look_back_days = 0  # a follow task's rounds fold only past it (tasks/retention.py)
        self.fold_every = 0.0  # DATABASE_FOLD_EVERY: seconds between folds; 0, at start only
        self.folds = 0  # folds started (tests read it)
        self._folding: defer.Deferred | None = None
        self._fold_timer = None
        self._stop_folding = threading.Event()

    @classmethod
    def from_crawler(cls, crawler):
        url = crawler.settings.get("DATABASE_URL")
        if not url:
            raise NotConfigured("DATABASE_URL is not set")
        pipeline = cls(
            url,
            crawler.settings.getint("DATABASE_BATCH_SIZE"),
            crawler.settings.getfloat("DATABASE_BATCH_SECONDS"),
            crawler.stats,
        )
        db.set_outage_seconds(crawler.settings.getfloat("DATABASE_OUTAGE_SECONDS"))
        pipeline.drift_documents = crawler.settings.getint("CNKI_DRIFT_DOCUMENTS")
        pipeline.data_dir = crawler.settings.get("CNKI_DATA_DIR") or "."
        pipeline.ledger_days = crawler.settings.getint("DATABASE_LEDGER_DAYS")
        pipeline.look_back_days = crawler.settings.getint("TASKS_LOOK_BACK_DAYS")
        pipeline.fold_every = crawler.settings.getfloat("DATABASE_FOLD_EVERY")
        pipeline.crawler = crawler
        return pipeline

    async def open_spider(self):
        self.engine = await maybe_deferred_to_future(
            threads.deferToThread(open_database, self.database_url)
        )
        if self.ledger_days > 0:
            # The ledger rows of long-done rounds folded into counts (tasks/retention.py), in
            # the background: the first fold of a large database takes a while, the crawl
            # need not wait for it. Here because the crawl's database settings are this
            # component's; any worker may do it, and two at once fold each row once. Again
            # every fold_every: a worker that follows today for months keeps folding.
            if self.fold_every > 0:
                self._fold_timer = create_looping_call(self._fold)
                self._fold_timer.start(self.fold_every, now=True)
            else:
                self._fold()

    def _fold(self) -> None:
        """Start a fold in a thread, unless one is running."""
        if self._folding is not None and not self._folding.called:
            return
        self.folds += 1
        self._folding = threads.deferToThread(
            fold, self.engine, self.ledger_days, self.look_back_days, stop=self._stop_folding
        )
        self._folding.addErrback(
            lambda f: logger.warning("folding done rounds' ledgers: %s", f.getErrorMessage())
        )

    async def close_spider(self):
        await self._flush()
        if self._fold_timer is not None and self._fold_timer.running:
            self._fold_timer.stop()
        if self._folding is not None:  # it stops after the round it is folding
            self._stop_folding.set()
            await maybe_deferred_to_future(self._folding)
        if self.engine is not None:
            self.engine.dispose()

    async def process_item(self, item):
        done: defer.Deferred = defer.Deferred()
        values = dict(item)
        settles = getattr(item, "_cnki_ledger", None)
        if settles is not None:
            values[LEDGER_KEY] = settles  # not a column: row_for reads only the type's fields
        depth = getattr(item, "_cnki_depth", None)
        if depth is not None:  # the depth it was crawled at (absent: detail, today's crawl)
            values[DEPTH_KEY] = depth
        page = getattr(item, "_cnki_page", None)
        if page is not None:
            values[PAGE_KEY] = page
        self._pending.append((doc_type_of(item), values, done))
        if len(self._pending) >= self.batch_size:
            self._flush_soon(0)
        elif self._timer is None:
            self._flush_soon(self.batch_seconds)
        await maybe_deferred_to_future(done)
        return item

    def _flush_soon(self, delay: float) -> None:
        # a pending timer is cleared by _flush, so "not None" means "still to fire"
        if self._timer is not None:
            if delay > 0:
                return
            self._timer.cancel()
        # Scrapy's call_later: the reactor's callLater under a reactor, the asyncio loop's in a
        # crawl without one (importing twisted's reactor here would install one under it)
        self._timer = call_later(delay, self._flush)

    def _flush(self) -> defer.Deferred:
        if self._timer is not None:  # called at close while a timer waits: it has nothing left
            self._timer.cancel()
        self._timer = None
        batch, self._pending = self._pending, []
        if not batch:
            return defer.succeed(None)
        d = threads.deferToThread(self._write, batch)

        def written(failures: dict[int, Exception]):
            drifted, self._drifted = self._drifted, None
            if drifted is not None:
                # before the items are done: their requests are acknowledged after the halt
                return defer.ensureDeferred(self._halt_for_drift(drifted)).addBoth(
                    lambda _: settle(failures)
                )
            return settle(failures)

        def settle(failures: dict[int, Exception]):
            for index, (_, _, done) in enumerate(batch):
                if index in failures:
                    done.errback(failures[index])
                else:
                    done.callback(None)

        def failed(failure):  # a bug of ours: every item of the batch fails, none is lost
            logger.error("storing %d documents failed: %s", len(batch), failure.getErrorMessage())
            for _, _, done in batch:
                done.errback(failure)

        d.addCallbacks(written, failed)
        return d

    def _write(self, batch) -> dict[int, Exception]:
        """Store a batch (in a worker thread); return the items that failed, by index."""
        failures: dict[int, Exception] = {}
        todo = []
        for index, (doc_type, values, _) in enumerate(batch):
            problem = key_problem(doc_type, values)
            if problem is None:
                todo.append(index)
            else:
                failures[index] = DocumentRejected(f"{doc_type} {_key(values)}: {problem}")
                logger.error("not storing %s", failures[index])
        if not todo:
            return failures
        try:
            retrying(self._write_rows, batch, todo, what=f"storing {len(todo)} documents")
            return failures
        except (sa.exc.DataError, sa.exc.IntegrityError) as exc:  # a value, never an outage
            if len(todo) == 1:
                return {**failures, **self._refused(batch, todo, exc)}
            logger.warning(
                "storing %d documents failed (%s); storing them one at a time to find the one refused",
                len(todo),
                _reason(exc),
            )
        except Exception as exc:
            if not is_transient(exc):
                raise
            return {**failures, **dict.fromkeys(todo, exc)}  # the outage outlasted our patience
        for position, index in enumerate(todo):
            try:
                retrying(self._write_rows, batch, [index], what="storing 1 document")
            except (sa.exc.DataError, sa.exc.IntegrityError) as exc:
                failures.update(self._refused(batch, [index], exc))
            except Exception as exc:
                if not is_transient(exc):
                    raise
                failures.update(dict.fromkeys(todo[position:], exc))
                break
        return failures

    def _refused(self, batch, indexes: list[int], exc: Exception) -> dict[int, Exception]:
        refused = {}
        for index in indexes:
            doc_type, values, _ = batch[index]
            refused[index] = DocumentRejected(
                f"{doc_type} {_key(values)} refused by the database: {_reason(exc)}"
            )
            logger.error("not storing %s", refused[index])
            if self.stats is not None:
                self.stats.inc_value("storage/documents_refused")
        return refused

    def _write_rows(self, batch, indexes: list[int]) -> None:
        """One transaction: upsert the rows of ``batch`` at ``indexes``; then their errorLink rows go."""
        # Read at write time: flow control opens the task after the pipelines opened.
        context = context_of(self.crawler)
        self.task_id = context.task_id if context is not None else None
        by_type: dict[str, list[dict]] = {}
        with self._write_lock, self.engine.begin() as conn:
            now = db_now(conn)
            for index in indexes:
                doc_type, values, _ = batch[index]
                by_type.setdefault(doc_type, []).append(
                    row_for(doc_type, values, self.task_id, now)
                )
            for doc_type, rows in by_type.items():
                upsert_documents(conn, doc_type, rows)
            # in the same transaction: the ledger says stored exactly when the document is
            ledger.note_stored(
                conn, [batch[i][1][LEDGER_KEY] for i in indexes if LEDGER_KEY in batch[i][1]]
            )
            found = self._note_drift(conn, batch, indexes)
        # A stored document is no longer missing, whoever listed it as failed (errorLink is flow
        # control's: a crawl without it records no failures).
        if context is not None:
            keys = [(batch[i][1]["dbname"], batch[i][1]["filename"]) for i in indexes]
            retrying(
                context.error_recorder.resolve_links,
                self.task_id,
                keys,
                what="clearing errorLink rows",
            )
        if found is not None:
            self._drifted = self._drift_reason(*found)
        if self.stats is not None:
            self.stats.inc_value("storage/documents_written", len(indexes))
            self.stats.inc_value("storage/batches")

    # -- the markup drift alarm (cnkispider/watch/drift.py) ------------------------------------

    def _note_drift(self, conn, batch, indexes: list[int]):
        """Count the round documents' filled fields; the drift found, with its sample page."""
        if self.task_id is None or self.drift_documents <= 0:
            return None
        by_round: dict[tuple[str, int], list[dict]] = {}
        for i in indexes:
            doc_type, values, _ = batch[i]
            settles = values.get(LEDGER_KEY)
            # only documents read from their detail pages: a list- or export-depth document
            # lacks the detail fields by design, not because CNKI changed its markup
            if settles is not None and (values.get(DEPTH_KEY) or DEFAULT_DEPTH) == "detail":
                by_round.setdefault((doc_type, settles[0]), []).append(values)
        if not by_round:
            return None
        for (doc_type, round_id), items in by_round.items():
            drift.note_fill(conn, self.task_id, doc_type, round_id, drift.counts(doc_type, items))
        found = drift.verdict(drift.history(conn, self.task_id), self.drift_documents)
        if found is None:
            return None
        pages = [
            batch[i][1][PAGE_KEY]
            for i in indexes
            if PAGE_KEY in batch[i][1] and not batch[i][1].get(found.field)
        ]
        return found, (pages[-1] if pages else None)

    def _drift_reason(self, found: drift.Drift, page: bytes | None) -> str:
        """The halt reason, with the sample page saved where the operator can open it."""
        sample = None
        if page is not None:
            folder = Path(self.data_dir) / "drift"
            try:
                folder.mkdir(parents=True, exist_ok=True)
                path = folder / f"task{self.task_id}-{found.field}-{found.since_round}.html"
                path.write_bytes(page)
                sample = str(path)
            except OSError as exc:
                logger.warning("the drift sample page was not saved: %s", exc)
        return found.reason(sample)

    async def _halt_for_drift(self, reason: str) -> None:
        logger.error("markup drift: %s", reason)
        if self.stats is not None:
            self.stats.inc_value("drift/halts")
        await self.crawler.signals.send_catch_log_async(
            cnki_signals.halt_requested, reason=reason, spider=self.crawler.spider
        )


def _key(values: dict) -> str:
    return f"{str(values.get('dbname'))[:40]}/{str(values.get('filename'))[:80]}"


def _reason(exc: Exception) -> str:
    return db.first_line(exc)[:300]
