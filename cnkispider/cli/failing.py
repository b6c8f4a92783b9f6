"""How the command line ends when something goes wrong that no check foresaw: one line saying
what to do and where the traceback is kept (never a traceback on the console), and a closed
pipe (``cnkispider task list | head -1``) ended quietly, as well-behaved commands do."""

from __future__ import annotations

import datetime as dt
import os
import sys
import tempfile
import traceback
from pathlib import Path

from cnkispider.words.i18n import _

#: where the command's log is, once config.ini has said (cli.common.command_config)
log_path: list[Path] = []

#: the exit status of a command whose reader went away (128 + SIGPIPE, as the shell reports it)
CLOSED_PIPE = 141


def fallback_log() -> Path:
    return Path(tempfile.gettempdir()) / "cnkispider-error.log"


def keep_traceback(exc: BaseException) -> Path:
    """Append the traceback of ``exc`` to the command's log (the temporary folder's file when
    there is none, or it cannot be written); the file written."""
    text = "".join(traceback.format_exception(exc))
    stamp = dt.datetime.now().isoformat(sep=" ", timespec="seconds")
    for path in [*log_path[-1:], fallback_log()]:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as log:
                log.write(f"{stamp} ERROR cnkispider: unexpected error\n{text}")
            return path
        except OSError:
            continue
    return fallback_log()


def unexpected(exc: BaseException) -> int:
    """The one line of an error no check foresaw (a bug, or a cause outside the crawler), its
    traceback kept in the log; exit status 1."""
    kept = keep_traceback(exc)
    cause = str(exc) or type(exc).__name__
    print(
        _(
            "error: unexpected failure (%(kind)s: %(cause)s). The details are in %(log)s; run "
            "the command again, and if it repeats, report it with that file"
        )
        % {"kind": type(exc).__name__, "cause": cause, "log": kept},
        file=sys.stderr,
    )
    return 1


def closed_pipe() -> int:
    """The reader of standard output went away: nothing more to say, and nothing said when
    Python flushes standard output at exit (it would fail again)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return CLOSED_PIPE
