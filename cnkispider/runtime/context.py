"""CrawlContext: what one worker's components share about the task it crawls.

Flow control (``tasks.feeder.RoundFeeder``) builds it once the worker has registered (or
joined) its task, and is its only writer: it calls :func:`open_context`. Every other component
asks for it explicitly, when it needs it, through :func:`context_of`; nobody sets attributes on
the spider for others to find, and nobody probes the spider for them::

    spider         task_id (request meta), tree (splitting a search), tasks.set_total,
                   error_recorder (permanent facts: overflow, pager-short, not-found-on-refresh;
                   a replayed page mended)
    errors/        error_recorder and task_id, doc_type (the failures of requests)
    pipelines      task_id (stored with each document; clearing errorLink)
    retry          halted (no more retries once the task halted)
    sessions       worker_id and the task's name (the worker's "waiting for a person" state)

``None`` until the task is open (the database answered at ``spider_opened``), and in a crawl
without flow control (``TASKS_ENABLED`` off, no ``DATABASE_URL``).

This module sits in the base layer (see ``[tool.importlinter]`` in pyproject.toml) so that its
readers need not import flow control, which sits above errors/ and below the crawl layer. So it
imports nothing above it, not even for type checkers: its fields' types (``tasks.flow``,
``errors.recorder``, ``tasks.categories``) are named in their comments, typed ``Any``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


@dataclass
class CrawlContext:
    #: The task row. Flow control reads it again before each claim, so that a categories file
    #: edited while the worker runs is seen when a search of the claimed round has to split
    #: (a ``tasks.flow.Task``).
    task: Any
    #: The task table, its rounds and workers (a ``tasks.flow.TaskStore``).
    tasks: Any
    #: errorCode and errorLink (an ``errors.recorder.ErrorRecorder``).
    error_recorder: Any
    #: The task's halt reason once this worker knows it: the retry middleware then holds what
    #: it would retry (``RoundFeeder.halt`` sets it before the halt is written, so that no retry
    #: slips in meanwhile).
    halted: str | None = None
    #: This worker's id in the task's workers table (``tasks.flow.new_worker_id``), which the
    #: session runtime publishes its waiting state under.
    worker_id: str | None = None

    @property
    def task_id(self) -> int:
        return self.task.id

    @property
    def doc_type(self) -> str:
        return self.task.type

    @property
    def tree(self) -> Any:  # a tasks.categories.CategoryTree
        return self.task.tree


# One context per crawler (a process may run several, as the tests do); weak, so that a
# finished crawler takes its context with it.
_contexts: WeakKeyDictionary[Crawler, CrawlContext] = WeakKeyDictionary()


def open_context(crawler: Crawler, context: CrawlContext) -> None:
    """Flow control opened ``context``'s task on ``crawler`` (its only caller: tasks.feeder)."""
    _contexts[crawler] = context


def context_of(crawler: Crawler) -> CrawlContext | None:
    """The crawl context of ``crawler``'s task; ``None`` before the task is open and in a crawl
    without flow control."""
    return _contexts.get(crawler)
