"""Recording the failures of a crawl's requests in errorCode and errorLink, and the spider
middleware that is the seed's global exception handler.

Every way a request can fail for good comes here, written down for the recrawl phase: a
download that failed after its retries (the spider's errback calls
:func:`record_download_failure`), an exception raised by a spider callback
(:class:`ErrorRecordingMiddleware` records it with its traceback and swallows it, so one bad
page never stops a worker and never passes for "zero results"), a document parsed but not
stored (signal ``item_error``), a request whose lease ran out too often (``request_abandoned``).

A detail request's failure goes to errorLink, any other's to errorCode
(:meth:`errors.recorder.ErrorRecorder.record_failure` reads the row from the request's meta),
for the task of the crawl's context (:class:`cnkispider.runtime.context.CrawlContext`). After a list-stage
failure (not a permanent row) the signal ``list_failed`` tells the circuit breaker; a rejection
(CNKI refused the query itself) halts the task at once, as every other round would be refused
the same way (signal ``halt_requested``, awaited: flow control sits above errors/ and is never
imported from here).

The rules kept on the way: everything is written before the request is acknowledged (Scrapy
awaits the errback and the handlers); a request held back by a halted task is not a failure;
and if even the recording fails, the request is held (never acked, its lease brings it back)
and the worker closes with one CRITICAL line. The invariant kept: each document found is stored,
or in errorLink, or still leased in Redis.

Settings: ``ERRORS_ENABLED`` (off: the middleware is not installed).

The rest of this module's story: docs/INTERNALS.md#errorsmiddlewarepy.
"""

from __future__ import annotations

import logging
import traceback

from scrapy import signals
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.utils.defer import deferred_from_coro

from cnkispider import signals as cnki_signals
from cnkispider.cnki.refusals import REJECTION, kind_of, rejection_text
from cnkispider.config.masking import mask_text
from cnkispider.exceptions import CnkiSpiderError, GaveUp, HaltedRequest, RefusedPage
from cnkispider.runtime.context import context_of
from cnkispider.runtime.offload import in_thread
from cnkispider.scheduling.outcome import hold  # lease bookkeeping: below errors/ (the layers)

logger = logging.getLogger(__name__)

#: The stat holding the last failure this worker recorded, ``"<reason>: <words>"`` (the last line
#: of its detail: a traceback's exception, a refusal's words), URLs and their secrets masked; the
#: feeder's heartbeat writes it to the ``worker`` row. Not under ``errors/``, whose stats are
#: counts summed by the heartbeat and the progress line.
LAST_ERROR_STAT = "last_error"


class ErrorRecordingMiddleware:
    def __init__(self, crawler):
        self.crawler = crawler
        self.stats = crawler.stats

    @classmethod
    def from_crawler(cls, crawler):
        if not crawler.settings.getbool("ERRORS_ENABLED"):
            raise NotConfigured
        middleware = cls(crawler)
        crawler.signals.connect(middleware.item_error, signal=signals.item_error)
        crawler.signals.connect(middleware.request_abandoned, signal=cnki_signals.request_abandoned)
        return middleware

    def process_spider_exception(self, response, exception):
        if context_of(self.crawler) is None:
            return None  # no task to record it for: let Scrapy handle it
        self.stats.inc_value(f"errors/exception/{type(exception).__name__}")
        logger.warning("recorded %s on %s: %s", type(exception).__name__, response.url, exception)
        # Scrapy consumes this (empty) output before it is done with the response, so the
        # error row is written before the scheduler acknowledges the request.
        return self._recorded(response, exception)

    async def _recorded(self, response, exception):
        await record_callback_exception(self.crawler, response, exception)
        return
        yield  # pragma: no cover - makes this an async generator

    async def item_error(self, item, response, spider=None, failure=None):
        """A document parsed but not stored (a pipeline raised): record its link."""
        if context_of(self.crawler) is None:
            return
        meta = response.meta if response is not None else {}
        reason = f"pipeline:{type(failure.value).__name__}" if failure is not None else "pipeline"
        detail = failure.getTraceback() if failure is not None else ""
        self.stats.inc_value(f"errors/detail/{reason}")
        url = response.url if response is not None else ""
        request = response.request if response is not None else None
        await record_or_hold(
            self.crawler,
            request,
            meta,
            url,
            reason,
            detail,
            stage="detail",
            what="store a document",
        )

    async def request_abandoned(self, request, reason, attempts, spider=None):
        """A request whose lease ran out too often (it kills or stalls its workers): record it.
        Not held if that fails: the scheduler acknowledges it only after this returned."""
        if context_of(self.crawler) is None:
            return
        meta = request.meta
        self.stats.inc_value(f"errors/{meta.get('cnki_kind', 'other')}/{reason}")
        await record_failure(
            self.crawler, meta, request.url, reason, f"lease ran out {attempts} times"
        )


def failure_reason(error: BaseException) -> str:
    """The reason slug of a request that failed for good: the retry middleware's or a page
    refusal's own (``verify``, ``http-500``, ...), else the exception's type
    (``ignored:<Type>`` for a request a middleware dropped)."""
    if isinstance(error, (GaveUp, RefusedPage)):
        return error.reason
    if isinstance(error, IgnoreRequest):
        return f"ignored:{type(error).__name__}"
    return type(error).__name__


async def record_download_failure(crawler, failure) -> bool:
    """A request that failed for good (the errback's failure): record it; True once written.
    A rejection then halts the task. A request a halted task held is not recorded (False)."""
    request, error = failure.request, failure.value
    if isinstance(error, HaltedRequest):
        return False  # held for after `task resume`: not a failure of the page
    meta = request.meta
    reason = failure_reason(error)
    detail = str(error) if isinstance(error, (GaveUp, RefusedPage)) else failure.getTraceback()
    words = getattr(error, "detail", "") or ""  # CNKI's own words, for a rejection
    crawler.stats.inc_value(f"errors/{meta.get('cnki_kind', 'other')}/{reason}")
    if not await record_or_hold(crawler, request, meta, request.url, reason, detail, words=words):
        return False
    if kind_of(reason) == REJECTION:
        await _halt(crawler, reason, words)
    return True


async def record_callback_exception(crawler, response, exception) -> bool:
    """An unexpected exception in a callback (the seed's global exception handler): record it
    with its traceback; a rejection a parser saw (the middleware let it through) halts the task."""
    reason = exception.reason if isinstance(exception, RefusedPage) else type(exception).__name__
    detail = "".join(traceback.format_exception(exception))
    words = ""
    if isinstance(exception, RefusedPage) and kind_of(reason) == REJECTION:
        words = rejection_text(response.body) or exception.detail  # CNKI's own words
    request = response.request
    if not await record_or_hold(
        crawler, request, response.meta, response.url, reason, detail, words=words
    ):
        return False
    if kind_of(reason) == REJECTION:
        await _halt(crawler, reason, words)
    return True


async def record_failure(
    crawler,
    meta: dict,
    url: str,
    reason: str,
    detail: str = "",
    *,
    stage: str | None = None,
    permanent: bool = False,
    request=None,
    words: str = "",
    unreachable: int | None = None,
) -> None:
    """Write one failure (off the reactor) for the crawl's task; raises if it cannot.

    ``stage``, ``permanent`` and ``unreachable`` as in
    :meth:`~errors.recorder.ErrorRecorder.record_failure`. A
    list-stage failure is then sent as ``list_failed`` (``detail`` is ``words``: CNKI's for a
    rejection), but not a permanent row: an overflow is a fact about CNKI, not a failure of the
    crawl.
    """
    context = context_of(crawler)
    if context is None:
        raise CnkiSpiderError(
            "no task is open (flow control, TASKS_ENABLED and DATABASE_URL, records failures)"
        )
    stage = await in_thread(
        context.error_recorder.record_failure,
        context.task_id,
        context.doc_type,
        meta,
        url,
        reason,
        detail,
        stage=stage,
        permanent=permanent,
        unreachable=unreachable,
    )
    crawler.stats.set_value(LAST_ERROR_STAT, last_error(reason, detail, url))
    if stage == "list" and not permanent:
        crawler.signals.send_catch_log(
            cnki_signals.list_failed,
            reason=reason,
            detail=words,
            request=request,
            spider=crawler.spider,
        )


def last_error(reason: str, detail: str, url: str = "") -> str:
    """One line for the operator: the reason and the last line of its detail, masked (the URLs
    in it, and the password or secret query values of ``url`` wherever they appear)."""
    lines = [line.strip() for line in (detail or "").splitlines() if line.strip()]
    words = f"{reason}: {lines[-1]}" if lines else reason
    return mask_text(words, url)


async def record_or_hold(
    crawler,
    request,
    meta: dict,
    url: str,
    reason: str,
    detail: str = "",
    *,
    stage: str | None = None,
    words: str = "",
    what: str = "crawl a page",
) -> bool:
    """:func:`record_failure`; True once written. If even that fails, ``request`` is held
    (never released, so never acked: its lease brings it back) and the worker closes with
    reason ``database_error``, in one CRITICAL line naming the cause (``what`` says what could
    not be done: ``crawl a page``, ``store a document``)."""
    try:
        await record_failure(
            crawler, meta, url, reason, detail, stage=stage, request=request, words=words
        )
    except Exception as exc:
        from cnkispider.store.db import first_line

        cause = first_line(exc)
        crawler.stats.inc_value("errors/unrecorded")
        logger.critical(
            "cannot %s nor record its failure (%s: %s); %s is kept for its lease to bring "
            "back; stopping this worker",
            what,
            type(exc).__name__,
            mask_text(cause),
            getattr(request, "url", "the request"),
        )
        logger.debug("the recording's failure", exc_info=True)
        if request is not None:
            hold(crawler, request)  # never released: its lease brings it back
        # Once per worker is enough; a second close only waits for the first (Scrapy's engine).
        d = deferred_from_coro(crawler.engine.close_spider_async(reason="database_error"))
        d.addErrback(lambda f: logger.debug("closing: %s", f.getErrorMessage()))
        return False
    return True


async def _halt(crawler, reason: str, words: str) -> None:
    """Ask flow control to halt the task, and wait until it has (signal ``halt_requested``): the
    request is acknowledged only after the halt is written. What the handler raised is raised
    here, unlogged by Scrapy, as if the feeder had been called."""
    results = await crawler.signals.send_catch_log_async(
        cnki_signals.halt_requested,
        reason=f"{reason}: {words}" if words else reason,
        spider=crawler.spider,
        dont_log=Exception,
    )
    for _, result in results:
        if isinstance(result, BaseException):
            raise result
