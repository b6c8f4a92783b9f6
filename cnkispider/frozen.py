"""The entry of the one-file executable (build_exe.spec): ``cnkispider`` for a PC that has only
``cnkispider.exe`` and a ``config.ini``.

With arguments it is exactly the ``cnkispider`` command (:func:`cnkispider.cli.main`). Without
arguments (a double-click) it is ``cnkispider run``: it reads the config.ini beside the
executable, creates the database and its tables if they are missing, registers the task of
``[task]`` (or joins the task of that name as the task table has it), crawls it, runs its recrawl
phase and prints a summary. Ctrl-C stops it gracefully (a second Ctrl-C at once); starting it
again resumes where the task stands.

What differs from ``cnkispider run``, and why:

- no config.ini beside the executable (nor in the working directory) is an error, not the
  built-in defaults: a double-clicked crawler must not start on a task nobody configured;
- the log goes to a file beside config.ini (``[crawl] log_file``, ``cnkispider.log`` when empty;
  see :func:`cnkispider.config.load_config`), and the console shows the progress worth watching
  (tasks, rounds, Scrapy's per-minute counts, warnings and errors) and the summary;
- on Windows, a double-clicked window waits for Enter before it closes, so the summary or the
  error can be read. Never in a console it shares with cmd.exe or PowerShell, and never without
  a console to type into (a script, CI, a scheduled task, input from NUL).

Its exit status is the command's: 3 when the task is halted (CNKI rejected a query, one failure
kept repeating, CNKI cannot be reached), with one line saying why and how to go on
(``cnkispider task resume NAME``); see :mod:`cnkispider.watch.halting`.
"""

from __future__ import annotations

import logging
import os
import sys

#: Loggers whose INFO lines the console shows; the others only from WARNING up.
CONSOLE_LOGGERS = ("cnkispider", "tasks", "errors", "proxy", "scrapy.extensions.logstats")
#: Loggers kept out of the console (still in the log file): tldextract warns, with tracebacks,
#: when it cannot download the public-suffix list and then uses its bundled copy, which is fine.
QUIET_LOGGERS = ("tldextract",)


class _ProgressFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        from cnkispider.watch.logs import console_shows

        if record.name.startswith(QUIET_LOGGERS) or not console_shows(record):
            return False
        return record.levelno >= logging.WARNING or record.name.startswith(CONSOLE_LOGGERS)


class _OneLine(logging.Formatter):
    """One line per event: tracebacks belong in the log file, not in a home PC's window."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{self.formatTime(record, '%H:%M:%S')} {record.levelname}: {record.getMessage()}"


def _console_progress() -> None:
    """A console handler beside the one Scrapy installs for the log file (Scrapy replaces only
    its own root handler, so this one stays)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.INFO)
    handler.addFilter(_ProgressFilter())
    handler.setFormatter(_OneLine())
    logging.getLogger().addHandler(handler)


def _readable_streams() -> None:
    # A console or a redirected file in a legacy Windows code page cannot encode every
    # character of a Chinese title or category name; a replacement beats a crash at the summary.
    for stream in (sys.stdout, sys.stderr):
        if stream is not None and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def _console_window_of_its_own() -> bool:
    """True when the program runs in a console window opened for it (a double-click): its
    standard input is that console, and no other program (cmd.exe, PowerShell) is attached to it.

    ``sys.stdin.isatty()`` cannot tell: on Windows NUL is a character device, so a script's
    ``< NUL`` looks like a terminal, and a window borrowed from cmd.exe stays open anyway."""
    import ctypes
    from ctypes import wintypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    kernel32.GetStdHandle.restype = wintypes.HANDLE
    mode = wintypes.DWORD()
    if not kernel32.GetConsoleMode(kernel32.GetStdHandle(-10), ctypes.byref(mode)):  # STD_INPUT
        return False  # NUL, a pipe or a file: nobody could press Enter
    attached = (wintypes.DWORD * 16)()
    count = kernel32.GetConsoleProcessList(attached, len(attached))
    # The one-file executable is two processes on the console: the unpacking bootloader (the
    # parent) and this Python.
    return 0 < count <= len(attached) and set(attached[:count]) <= {os.getpid(), os.getppid()}


def _pause_before_closing() -> None:
    try:
        input("\nPress Enter to close this window.")
    except (EOFError, KeyboardInterrupt):
        pass


def main(argv: list[str] | None = None) -> int:
    from cnkispider.cli import main as cli_main
    from cnkispider.config import CONFIG_NAME, executable_dir, find_config

    argv = list(sys.argv[1:] if argv is None else argv)
    double_clicked = not argv
    frozen = getattr(sys, "frozen", False)
    _readable_streams()
    if double_clicked and find_config() is None:
        print(
            f"error: no {CONFIG_NAME} beside the program ({executable_dir()}) nor in the "
            f"current folder; put the {CONFIG_NAME} you were given next to the program",
            file=sys.stderr,
        )
        code = 2
    else:
        if frozen:  # frozen, the log always goes to a file (config.ini), so the console is free
            _console_progress()
        code = cli_main(argv or ["run"])
    if double_clicked and sys.platform == "win32" and frozen and _console_window_of_its_own():
        _pause_before_closing()
    return code


if __name__ == "__main__":
    sys.exit(main())
