"""CrawlContext: what one worker's components share about the task it crawls.

Flow control (:class:`tasks.feeder.RoundFeeder`) builds it once the worker has registered (or
joined) its task, and is its only writer. Every other component asks for it explicitly, when it
needs it, through ``RoundFeeder.context_of(crawler)``; nobody sets attributes on the spider for
others to find, and nobody probes the spider for them::

    spider         task_id (request meta), tree (splitting a search), tasks.add_total,
                   error_recorder (permanent facts: overflow, pager-short, not-found-on-refresh;
                   a replayed page mended)
    errors/        error_recorder and task_id, doc_type (the failures of requests)
    pipelines      task_id (stored with each document; clearing errorLink)
    retry          halted (no more retries once the task halted)

``None`` until the task is open (the database answered at ``spider_opened``), and in a crawl
without flow control (``TASKS_ENABLED`` off, no ``DATABASE_URL``).
"""

from __future__ import annotations

from dataclasses import dataclass

from errors.recorder import ErrorRecorder
from tasks.categories import CategoryTree
from tasks.flow import Task, TaskStore


@dataclass
class CrawlContext:
    #: The task row. Flow control reads it again before each claim, so that a categories file
    #: edited while the worker runs is seen when a search of the claimed round has to split.
    task: Task
    #: The task table, its rounds and workers (``tasks.flow``).
    tasks: TaskStore
    #: errorCode and errorLink (``errors.recorder``).
    error_recorder: ErrorRecorder
    #: The task's halt reason once this worker knows it: the retry middleware then holds what
    #: it would retry (``RoundFeeder.halt`` sets it before the halt is written, so that no retry
    #: slips in meanwhile).
    halted: str | None = None

    @property
    def task_id(self) -> int:
        return self.task.id

    @property
    def doc_type(self) -> str:
        return self.task.type

    @property
    def tree(self) -> CategoryTree:
        return self.task.tree
