"""What following today costs a day, for ``task plan`` (issue 46.6): pure, figures in, numbers out.

A task that follows today with a daily look pays, each day, the crawl of the new day and the
days of its look-back its tiers make due (cnkispider/looktiers.py): a census each, and a walk
of its list pages when its count grew. Without the lag CNKI shows for this task (issue 46.3),
the plan assumes every counted day grew: the figure is an upper bound (on the stand-in's
realistic year the model bench/follow_cost.py, which knows the lags, gives about half of it).
The new documents cost what any crawl pays once at the task's depth.
"""

from __future__ import annotations

import math

from cnkispider.looktiers import Tier, spans
from cnkispider.status.plan import DEPTHS, DETAIL_OVERHEAD, Costs, day_requests


def counted_days(tiers: tuple[Tier, ...], window: int) -> float:
    """Days a daily look counts on average (today's, the crawl's, among them)."""
    return sum((last - first + 1) / (period or 1) for first, last, period in spans(tiers, window))


def follow_day(documents: float, costs: Costs, tiers: tuple[Tier, ...], window: int) -> dict:
    """``{"documents_a_day", "days_counted", "depths": {depth: {"requests", "passes"}}}``: at
    most what a day of following costs at ``documents`` a day (daily looks)."""
    days = counted_days(tiers, window)
    pages = day_requests(round(documents), "list", costs)
    walk = days * pages  # every counted day walked whole: the bound
    new = {
        "list": 0.0,
        "export": math.ceil(documents / costs.export_batch),
        "detail": documents * DETAIL_OVERHEAD,
    }
    out = {"documents_a_day": round(documents), "days_counted": round(days, 1), "depths": {}}
    for depth in DEPTHS:
        requests = round(walk + new[depth])
        out["depths"][depth] = {
            "requests": requests,
            "passes": math.ceil(requests / costs.pass_requests) if requests else 0,
        }
    return out
