"""Item pipelines: documents into the database, in batches, off the reactor thread.

``DocumentPipeline`` collects items and writes them in one upsert per type and batch, in a
worker thread; each item's ``process_item`` finishes only when its batch is committed. That
is what lets the scheduler acknowledge a request exactly when its outcome is written (an item
"scraped" is an item stored), and it keeps blocking database I/O off the reactor.

``HtmlArchivePipeline`` is not an item pipeline but a downloader-side switch; see
``cnkispider.archive``.

Settings
--------
DATABASE_URL            SQLAlchemy URL of the database (required)
DATABASE_BATCH_SIZE     items per write (default 200)
DATABASE_BATCH_SECONDS  longest an item waits for its batch (default 0.2)
"""

from __future__ import annotations

import logging
import threading
import time

from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import defer, reactor, threads

from cnkispider.db import db_now, open_database
from cnkispider.items import doc_type_of
from cnkispider.storage import row_for, upsert_documents
from errors.recorder import ErrorRecorder

logger = logging.getLogger(__name__)


class DocumentPipeline:
    def __init__(self, database_url: str, batch_size: int = 200, batch_seconds: float = 0.2, stats=None):
        self.database_url = database_url
        self.batch_size = batch_size
        self.batch_seconds = batch_seconds
        self.stats = stats
        self.engine = None
        self.task_id = None
        self._pending: list[tuple[str, dict, defer.Deferred]] = []
        self._timer = None
        self._write_lock = threading.Lock()  # one batch at a time: fewer lock waits in the DB

    @classmethod
    def from_crawler(cls, crawler):
        url = crawler.settings.get("DATABASE_URL")
        if not url:
            raise NotConfigured("DATABASE_URL is not set")
        pipeline = cls(
            url,
            crawler.settings.getint("DATABASE_BATCH_SIZE", 200),
            crawler.settings.getfloat("DATABASE_BATCH_SECONDS", 0.2),
            crawler.stats,
        )
        pipeline.crawler = crawler
        return pipeline

    async def open_spider(self):
        self.engine = await maybe_deferred_to_future(threads.deferToThread(open_database, self.database_url))
        self.errors = ErrorRecorder(self.engine)

    async def close_spider(self):
        await self._flush()
        if self.engine is not None:
            self.engine.dispose()

    async def process_item(self, item):
        done: defer.Deferred = defer.Deferred()
        self._pending.append((doc_type_of(item), dict(item), done))
        if len(self._pending) >= self.batch_size:
            self._flush_soon(0)
        elif self._timer is None:
            self._flush_soon(self.batch_seconds)
        await maybe_deferred_to_future(done)
        return item

    def _flush_soon(self, delay: float) -> None:
        if self._timer is not None and self._timer.active():
            if delay > 0:
                return
            self._timer.cancel()
        self._timer = reactor.callLater(delay, self._flush)

    def _flush(self) -> defer.Deferred:
        self._timer = None
        batch, self._pending = self._pending, []
        if not batch:
            return defer.succeed(None)
        d = threads.deferToThread(self._write, batch)

        def stored(_):
            for _, _, done in batch:
                done.callback(None)

        def failed(failure):
            logger.error("storing %d documents failed: %s", len(batch), failure.getErrorMessage())
            for _, _, done in batch:
                done.errback(failure)

        d.addCallbacks(stored, failed)
        return d

    def _write(self, batch):
        """Write one batch; a failure is retried twice (a database blip), then raised."""
        for attempt in range(3):
            try:
                return self._write_once(batch)
            except Exception:
                if attempt == 2:
                    raise
                logger.warning("storing %d documents failed; retrying", len(batch), exc_info=True)
                time.sleep(0.5 * 2**attempt)  # a worker thread, never the reactor

    def _write_once(self, batch):
        # Read at write time: flow control learns the task id after the spider opened.
        self.task_id = getattr(self.crawler.spider, "task_id", None)
        by_type: dict[str, list[dict]] = {}
        with self._write_lock, self.engine.begin() as conn:
            now = db_now(conn)
            for doc_type, values, _ in batch:
                by_type.setdefault(doc_type, []).append(row_for(doc_type, values, self.task_id, now))
            for doc_type, rows in by_type.items():
                upsert_documents(conn, doc_type, rows)
        # A stored document is no longer missing, whoever listed it as failed.
        self.errors.resolve_links(self.task_id, [(v["dbname"], v["filename"]) for _, v, _ in batch])
        if self.stats is not None:
            self.stats.inc_value("storage/documents_written", len(batch))
            self.stats.inc_value("storage/batches")
