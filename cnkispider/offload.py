"""Blocking work (database calls) off the reactor thread: the one helper everything uses."""

from __future__ import annotations

import asyncio

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import threads


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
