"""The report over time, for the charts: kept in memory by the web process, never written.

A sample is taken every ``every`` seconds by a thread of the app (and when a page is drawn, if
the last one is older), so the charts cover the time since ``cnkispider web`` started, at most
``keep`` samples (default 360: an hour at 10 s). Rates are the difference between two
samples over their time apart, as ``status --watch`` computes a worker's recent rate.
"""

from __future__ import annotations

import threading
import time
from collections import deque


class History:
    def __init__(self, keep: int = 360, clock=time.time):
        self.samples: deque = deque(maxlen=keep)
        self.clock = clock
        self.lock = threading.Lock()

    def add(self, report: dict) -> None:
        point = {"t": self.clock(), "tasks": {}}
        for t in report["tasks"]:
            errors: dict[str, int] = {}
            for table in ("errorCode", "errorLink"):
                for reason, n in t["errors"][table]["by_reason"].items():
                    errors[reason] = errors.get(reason, 0) + n
            point["tasks"][t["name"]] = {
                "documents": t.get("documents") or 0,
                "pages": sum(w["pages"] or 0 for w in t["workers"]),
                "challenges": t.get("challenges") or 0,
                "waiting": 1 if t.get("waiting") else 0,
                "errors": errors,
            }
        with self.lock:
            self.samples.append(point)

    def age(self) -> float | None:
        with self.lock:
            return self.clock() - self.samples[-1]["t"] if self.samples else None

    def series(self, task: str) -> dict:
        """{"t": [unix seconds], "pages_per_min", "documents_per_min", "challenges_per_min",
        "waiting" (1 while a worker waits for a person), "errors": {reason: [count]}} for the
        task (a rate needs two samples: the first is null)."""
        with self.lock:
            points = [(p["t"], p["tasks"][task]) for p in self.samples if task in p["tasks"]]
        rates = (
            ("pages_per_min", "pages"),
            ("documents_per_min", "documents"),
            ("challenges_per_min", "challenges"),
        )
        out: dict = {"t": [], "waiting": []}
        out.update({key: [] for key, _ in rates})
        reasons = sorted({r for _, s in points for r in s["errors"]})
        out["errors"] = {r: [] for r in reasons}
        before = None
        for t, s in points:
            out["t"].append(round(t, 1))
            for key, value in rates:
                if before is None or t <= before[0]:
                    out[key].append(None)
                else:
                    rate = (s.get(value, 0) - before[1].get(value, 0)) / (t - before[0]) * 60
                    out[key].append(round(max(rate, 0.0), 1))  # a worker left the listing: not < 0
            out["waiting"].append(s["waiting"])
            for r in reasons:
                out["errors"][r].append(s["errors"].get(r, 0))
            before = (t, s)
        return out
