"""What an operator sees: every task's progress, errors, workers and queue, from any machine.

One room per concern:

  collecting  the database (and Redis, when it can be reached) -> one plain JSON-able report;
              the report's keys and what they mean are listed there
  liveness    a task's workers: alive, gone or stopped, from their heartbeats
  rates       a task's round rate and ETA, the one every view shows
  times       the report's times, on the database's clock
  round_views the web page's views of rounds: a task's grid, one round's detail
  rendering   the report -> the text of ``cnkispider status``, its JSON, the end-of-run summary
  watching    ``--watch``: redraw the report in place, with each worker's recent rate
  command     ``cnkispider status`` and :func:`run_summary`: open, collect, render

The database and Redis are opened by their factories (:func:`cnkispider.store.db.open_database_readonly`,
:func:`cnkispider.store.redisconn.connect_if_running`); nothing here writes.
"""

from cnkispider.status.collecting import collect
from cnkispider.status.command import run_summary, status_command
from cnkispider.status.rendering import FORCED_STOP, render, render_summary, to_json
from cnkispider.status.watching import watch

__all__ = [
    "FORCED_STOP",
    "collect",
    "render",
    "render_summary",
    "run_summary",
    "status_command",
    "to_json",
    "watch",
]
