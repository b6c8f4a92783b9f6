"""config.ini's [task]: the task a crawl runs, read into one :class:`TaskConfig` once its keys
are checked together (a key alone is checked by its parser in :mod:`cnkispider.config.keys`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cnkispider.config.looktiers import DEFAULT_TIERS
from cnkispider.exceptions import ConfigError
from cnkispider.items import DEFAULT_DEPTH, has_counts
from cnkispider.words.i18n import _
from cnkispider.words.vocabulary import word


@dataclass(frozen=True)
class TaskConfig:
    name: str
    type: str
    start_date: str
    end_date: str
    categories: str
    day_census: bool = True
    depth: str = DEFAULT_DEPTH
    query: str = ""
    follow: bool = False
    look_back_days: int = 60
    follow_every: int = 6 * 3600  # seconds
    refresh_counts_every: int = 0  # seconds; 0: off
    look_tiers: str = (
        DEFAULT_TIERS  # cnkispider/config/looktiers.py; "off": every day at every look
    )
    facet_counts: bool = True  # a look's parts recounted by one group/result a day


def check_task(task: dict[str, Any], sources: dict[tuple[str, str], Path], shown: Path) -> None:
    """The [task] keys checked together (``task``: their values, each already read); the query
    is written in its one spelling. ConfigError naming the key at fault."""
    if task["end_date"] and not task["start_date"]:
        # an empty start is "today": the range would start after it ends, or change each day
        raise ConfigError(
            sources[("task", "start_date")],
            "task",
            "start_date",
            _("must be set when %(key)s is") % {"key": "end_date"},
        )
    if task["start_date"] and task["end_date"] and task["end_date"] < task["start_date"]:
        raise ConfigError(shown, "task", "end_date", _("is before %(key)s") % {"key": "start_date"})
    # a query is read for its task's type (a patent's fields are not a paper's): checked here,
    # with both known, and kept in its one spelling
    from cnkispider.cnki.query import QueryError, task_query

    try:
        task["query"] = task_query(task["query"], task["type"]) or ""
    except QueryError as exc:
        raise ConfigError(sources[("task", "query")], "task", "query", str(exc)) from None
    if task["follow"] and task["end_date"]:
        raise ConfigError(
            shown,
            "task",
            "end_date",
            _("must be empty when %(key)s is on (the end date is today)") % {"key": "follow"},
        )
    if task["refresh_counts_every"] and not has_counts(task["type"]):
        raise ConfigError(
            sources[("task", "refresh_counts_every")],
            "task",
            "refresh_counts_every",
            _("%(type)s rows carry no counts on CNKI's list: leave it empty or 0")
            % {"type": word(task["type"])},
        )
