"""The three reads of Scrapy's private engine slot (``engine._slot``), in one place.

Why private: Scrapy 2.19 has no public API for them. ``engine.needs_backout()`` is also true
while the downloader is merely full, so it cannot say "the spider is closing"; the signals
``request_reached_downloader`` / ``request_left_downloader`` cover the download only, not the
scraping after it, so they cannot say which requests the engine still works on; and only the
slot's ``nextcall`` wakes the engine without handing it a request. Should Scrapy rename the
slot, these three functions are all that breaks (each falls back to "no slot").
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler


def _slot(crawler: Crawler) -> Any:
    try:
        engine = crawler.engine
    except (AttributeError, RuntimeError):  # not crawling (yet)
        return None
    return getattr(engine, "_slot", None)


def closing(crawler: Crawler) -> bool:
    """The engine is closing the spider (it waits for the requests in progress)."""
    slot = _slot(crawler)
    return slot is not None and slot.closing is not None


def in_progress(crawler: Crawler) -> Collection[Request]:
    """The requests the engine is working on (downloading or scraping)."""
    slot = _slot(crawler)
    return slot.inprogress if slot is not None else ()


def wake(crawler: Crawler) -> None:
    """Have the engine ask the scheduler for requests now, not at its next 5 s heartbeat."""
    slot = _slot(crawler)
    if slot is not None:
        slot.nextcall.schedule()
