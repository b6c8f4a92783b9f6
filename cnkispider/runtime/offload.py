"""Blocking work off the reactor thread: the way components leave the reactor, but for the
exceptions listed below.

- :func:`in_thread`: one blocking call (a database read or write, a file), awaited by a
  coroutine; :func:`deferred_in_thread` is the same for code that works with Deferreds.
- :class:`ThreadIO`: a thread of one's own for a component's Redis calls, so they run in the
  order they were made; :class:`InlineIO` runs them at once instead (tests that drive a
  component by hand).
- :class:`RedisCalls`: the batching loop over a ``ThreadIO`` that the scheduler and the rate
  limiter share: one call in flight, each carrying everything that waited, retried with
  :func:`backoff` when Redis cannot be reached.

The exceptions, each on purpose:

- Twisted's thread pool (``twisted.internet.threads.deferToThread``), not :func:`in_thread`
  (asyncio's executor under Scrapy's asyncio reactor): the document pipeline's batch writes and
  its ``open_database`` (``cnkispider.pipelines``) and flow control's heartbeat
  (``tasks.feeder``). During a database outage the writes and the heartbeat wait it out
  (``cnkispider.store.db.retrying``, up to ``DATABASE_OUTAGE_SECONDS``); in Twisted's pool they do not
  share asyncio's executor with flow control's claims and moves, which go through
  :func:`in_thread`.
- ``proxy.provider`` calls the proxy provider with Scrapy's
  ``scrapy.utils.asyncio.run_in_thread``: ``proxy/`` imports nothing of ``cnkispider``.
- ``cnkispider.watch.notify`` posts each webhook on a daemon thread of its own (fire and forget,
  nothing awaits it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from scrapy.utils.asyncio import call_later
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy.utils.reactor import is_reactor_installed
from twisted.internet import threads
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.python.failure import Failure

logger = logging.getLogger("cnkispider.offload")  # its name before the move: log lines keep it


async def in_thread(function, *args, **kwargs):
    """Run ``function`` in a worker thread and await its result, never blocking the reactor.

    Under Scrapy's asyncio reactor (the default) the running loop is the reactor's, and
    asyncio's thread pool serves; without a running loop (a coroutine driven by Twisted
    alone), Twisted's thread pool does.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return await maybe_deferred_to_future(threads.deferToThread(function, *args, **kwargs))
    return await asyncio.to_thread(function, *args, **kwargs)


def deferred_in_thread(function, *args, **kwargs) -> Deferred:
    """:func:`in_thread` as a Deferred (a looping call's work, a callback chain)."""
    return deferred_from_coro(in_thread(function, *args, **kwargs))


class ThreadIO:
    """Runs blocking calls on one thread of its own; results come back on the reactor thread."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cnki-redis")
        if is_reactor_installed():
            from twisted.internet import reactor

            self._call_soon = reactor.callFromThread
        else:
            self._call_soon = asyncio.get_running_loop().call_soon_threadsafe

    def run(self, fn: Any, *args: Any) -> Deferred:
        d: Deferred = Deferred()

        def done(future: Future) -> None:
            self._call_soon(_fire, d, future)

        self._pool.submit(fn, *args).add_done_callback(done)
        return d

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False)


def _fire(d: Deferred, future: Future) -> None:
    exc = future.exception()
    if exc is not None:
        d.errback(Failure(exc))
    else:
        d.callback(future.result())


class InlineIO:
    """Runs calls at once on the calling thread (tests that drive a component by hand)."""

    def run(self, fn: Any, *args: Any) -> Deferred:
        return maybeDeferred(fn, *args)

    def shutdown(self) -> None:
        pass


def backoff(failures: int) -> float:
    """Seconds to wait after ``failures`` failed Redis calls in a row: 0.2, 0.4, ... up to 5."""
    return min(5.0, 0.1 * 2 ** min(failures, 6))


class RedisCalls:
    """One component's calls to Redis, off the reactor thread, one at a time.

    The owner gives three functions, all run on the reactor thread except ``call``:
    ``take()`` builds the next batch from what waits (None: nothing to send), ``call(batch)``
    runs on the I/O thread, ``done(result, batch)`` or ``failed(failure, batch, delay)`` takes
    the answer back (``failed`` puts the batch's work back to wait, in order).

    Invariants:
    - ``busy`` while a call is in flight; calls never overlap, so writes land in the order they
      were made.
    - :meth:`kick` while ``busy`` only sets ``again``; ``again`` is cleared when a call starts.
      The owner's ``done`` decides whether to kick again (``again`` tells it that someone asked).
    - After a failure no call starts before ``retry_at`` (``backoff(failures)`` from then); one
      is started then, unless :meth:`close` was called. ``failures`` counts failures in a row;
      a success clears it.
    - ``io`` is the owner's (an ``InlineIO`` in tests); without one, a :class:`ThreadIO` is made
      at the first call.
    """

    def __init__(
        self,
        take: Callable[[], Any],
        call: Callable[[Any], Any],
        done: Callable[[Any, Any], None],
        failed: Callable[[Failure, Any, float], None],
        *,
        io: ThreadIO | InlineIO | None = None,
        owner: str = "Redis",
    ):
        self.take, self.call, self.done, self.failed = take, call, done, failed
        self.io = io
        self.owner = owner
        self.busy = False
        self.again = False
        self.failures = 0
        self.retry_at = 0.0
        self.closed = False

    def kick(self) -> None:
        """Make a call now (or, while one is in flight, mark that one is wanted)."""
        if time.monotonic() < self.retry_at:
            return
        if self.busy:
            self.again = True
            return
        batch = self.take()
        if batch is None:
            return
        if self.io is None:
            self.io = ThreadIO()
        self.busy, self.again = True, False
        d = self.io.run(self.call, batch)
        d.addCallbacks(self._done, self._failed, callbackArgs=(batch,), errbackArgs=(batch,))
        d.addErrback(self._bug)

    def close(self) -> None:
        """No retry is scheduled after this (a call in flight still finishes)."""
        self.closed = True

    def _done(self, result: Any, batch: Any) -> None:
        self.busy = False
        self.failures = 0
        self.done(result, batch)

    def _failed(self, failure: Failure, batch: Any) -> None:
        self.busy = False
        self.failures += 1
        delay = backoff(self.failures)
        self.retry_at = time.monotonic() + delay
        self.failed(failure, batch, delay)
        if not self.closed:
            call_later(delay, self.kick)

    def _bug(self, failure: Failure) -> None:
        logger.error("%s bug", self.owner, exc_info=(failure.type, failure.value, failure.tb))
