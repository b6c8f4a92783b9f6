"""Watching the status report: ``cnkispider status --watch`` redraws it in place (or writes one
JSON report a line) until Ctrl-C, and adds each worker's recent rate between redraws.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from collections.abc import Callable

import sqlalchemy as sa

from cnkispider.exceptions import CnkiSpiderError
from cnkispider.status.rendering import render

CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen


class RecentRates:
    """Pages per minute between a worker's last two heartbeats, remembered across redraws.

    The worker table holds only running totals; ``watch`` sees them change heartbeat by
    heartbeat, which shows a worker that slowed down (banned, throttled) long before its
    average since start does.
    """

    def __init__(self):
        self.seen: dict[str, tuple[str, int, float | None]] = {}

    def apply(self, report: dict) -> dict:
        for entry in report["tasks"]:
            for w in entry["workers"]:
                before = self.seen.get(w["id"])
                rate = before[2] if before else None
                if before and w["last_seen"] and before[0] and w["last_seen"] > before[0]:
                    seconds = (_parse(w["last_seen"]) - _parse(before[0])).total_seconds()
                    rate = round((w["pages"] - before[1]) / seconds * 60, 1)
                self.seen[w["id"]] = (w["last_seen"], w["pages"], rate)
                if w["state"] == "alive":
                    w["recent_pages_per_minute"] = rate
        return report


def _parse(iso: str) -> dt.datetime:
    return dt.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ")


def watch(
    sample: Callable[[], dict],
    interval: float,
    *,
    as_json: bool = False,
    stream=None,
    sleep: Callable[[float], None] = time.sleep,
    count: int | None = None,
) -> int:
    """Redraw the report every ``interval`` seconds until Ctrl-C (exit status 0).

    JSON is written as one report per line (JSON lines) instead of redrawing. A database or
    Redis that is down for a while is shown, not fatal: the next redraw tries again.
    """
    stream = stream or sys.stdout
    if sys.platform == "win32" and not as_json:
        os.system("")  # makes the Windows console interpret ANSI escapes (VT mode)
    rates = RecentRates()
    drawn = 0
    try:
        while count is None or drawn < count:
            try:
                report = rates.apply(sample())
                text = (
                    json.dumps(report, ensure_ascii=False) + "\n"
                    if as_json
                    else CLEAR + render(report)
                )
            except (sa.exc.SQLAlchemyError, CnkiSpiderError) as exc:
                problem = getattr(exc, "orig", None) or exc
                when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
                text = (
                    json.dumps({"error": str(problem), "at": when}) + "\n"
                    if as_json
                    else f"{CLEAR}{when} UTC: cannot read the database: {problem}\nretrying every {interval:g} s\n"
                )
            stream.write(text)
            stream.flush()
            drawn += 1
            if count is None or drawn < count:
                sleep(interval)
    except KeyboardInterrupt:
        if not as_json:
            stream.write("\n")
    return 0
