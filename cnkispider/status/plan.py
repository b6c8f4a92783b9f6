"""The person's side of a task, in numbers: what its remaining days need at each depth.

For each depth (list, export, detail): the CNKI requests the remaining days take, the passes a
person makes for them (at the requests a pass answered, measured on the pool's sessions CNKI
checked again, or ``[cnki] pass_requests`` before any), and the hours they take at
``[cnki] session_pace``. :func:`estimate` is pure (day totals and figures in, numbers out);
:func:`task_plan` reads its inputs: the task's days (config.ini's ``[task]`` before its first
run), the census totals its rounds have seen, the pool, and (``task plan --sample N``) the census
totals of a few unseen days asked of CNKI by the caller's ``sampler`` (cnkispider/probe/sample.py:
this layer sends no request), kept for later plans (plan_inputs.py).

A day's documents: the total its rounds saw (the census's, or its roots' together) or its
sampled census total, else the mean of the seen and sampled days of the same weekday (CNKI
publishes patents on fixed weekdays: a Tuesday and a Saturday differ a hundredfold), else the
mean of every seen and sampled day; with no day seen or sampled there is nothing to estimate
from and the plan says so (None). :func:`sample_days` chooses the days to sample: spread over
the remaining days, the weekdays no day has shown yet first.

A day's requests at ``N`` documents (docs/DEPTH.md, bench/sessions.py):
    list    its list pages: ceil(N / page_size) (an empty day: its census, 1); a day over the
            cap is split by the roots, each root's last page part-full: + half a page a root
    export  list + ceil(N / export_batch) citation exports
    detail  list + N detail pages x 1.015 (the links that die with a pass, listed again)
and, over all the days, the start-ups of the sessions their list pages open (plan_startups.py).
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from dataclasses import dataclass

import sqlalchemy as sa

from cnkispider.config.looktiers import Tier, parse_tiers, spans
from cnkispider.items import DEFAULT_DEPTH, DEPTHS
from cnkispider.status.plan_inputs import (
    config_task,
    keep_samples,
    kept_samples,
    with_cursor_days,
)
from cnkispider.status.plan_startups import startup_requests
from cnkispider.words.i18n import _

#: Detail requests a document beyond its one page: the pages of a pass's last moments, whose
#: links die with it, are listed and fetched again (bench/sessions.py: 1.035 requests a document
#: at detail, 1.02 of them the floor).
DETAIL_OVERHEAD = 1.015


@dataclass(frozen=True)
class Costs:
    page_size: int
    cap_rows: int
    export_batch: int
    roots: int  # the task's root categories: a day over the cap is searched by each
    pass_requests: float  # requests a pass answers (measured, or [cnki] pass_requests)
    pace: float  # requests/s a session keeps to ([cnki] session_pace; 0: no cap)
    measured_passes: int = 0  # passes pass_requests was measured on (0: the configured value)
    # the sessions' start-ups (plan_startups.py); pool_size 0: not counted (the pages alone)
    turn_limit: int = 14
    pool_size: int = 0
    sessions: str = "plain"  # [cnki] sessions: verified opens passes, not plain sessions


def day_requests(total: int, depth: str, costs: Costs) -> float:
    """The CNKI requests one day of ``total`` documents takes at ``depth``."""
    pages = max(1, math.ceil(total / costs.page_size))
    if total > costs.cap_rows:
        pages += 1 + costs.roots / 2  # the census, then each root's pages, the last part-full
    if depth == "list":
        return float(pages)
    if depth == "export":
        return float(pages + math.ceil(total / costs.export_batch))
    return pages + total * DETAIL_OVERHEAD


def day_totals(days: list[str], seen: dict[str, int]) -> dict[str, float] | None:
    """Each day's documents: seen, else the mean of its weekday's seen days, else of all seen
    days; None when no day was seen."""
    if not seen:
        return None
    by_weekday: dict[int, list[int]] = defaultdict(list)
    for day, total in seen.items():
        by_weekday[dt.date.fromisoformat(day).weekday()].append(total)
    overall = sum(seen.values()) / len(seen)
    out = {}
    for day in days:
        if day in seen:
            out[day] = float(seen[day])
            continue
        same = by_weekday.get(dt.date.fromisoformat(day).weekday())
        out[day] = sum(same) / len(same) if same else overall
    return out


def sample_days(days: list[str], seen: dict[str, int], n: int) -> list[str]:
    """Up to ``n`` of ``days`` not in ``seen`` to ask CNKI the census total of, in date order:
    each the day nearest its share of the remaining days (the i-th of n: the middle of the i-th
    n-th) among the days of the weekdays least shown so far (by the seen days, then by the days
    already chosen), so that a few samples cover distinct weekdays first: CNKI publishes
    patents on fixed weekdays, and a day of one weekday says little of another."""
    unseen = [d for d in days if d not in seen]
    if n <= 0 or not unseen:
        return []
    if n >= len(unseen):
        return unseen
    shown: dict[int, int] = defaultdict(int)
    for day in seen:
        shown[dt.date.fromisoformat(day).weekday()] += 1
    weekday = {d: dt.date.fromisoformat(d).weekday() for d in unseen}
    chosen: set[int] = set()
    for i in range(n):
        target = (i + 0.5) * len(unseen) / n - 0.5
        index = min(
            (j for j in range(len(unseen)) if j not in chosen),
            key=lambda j: (shown[weekday[unseen[j]]], abs(j - target), j),
        )
        chosen.add(index)
        shown[weekday[unseen[index]]] += 1
    return [unseen[j] for j in sorted(chosen)]


def estimate(
    days: list[str], seen: dict[str, int], costs: Costs, sampled: dict[str, int] | None = None
) -> dict:
    """``{"days": D, "documents": N, "depths": {depth: {"requests", "passes", "hours"}}}`` for the
    remaining ``days``; documents and the depths' figures None when no day was seen or sampled.
    ``sampled``: census totals asked of CNKI for days no round has seen, counted as seen (a
    day's own total wins over its sample)."""
    sampled = {d: n for d, n in (sampled or {}).items() if d not in seen}
    known = {**sampled, **seen}
    totals = day_totals(days, known)
    shown = {dt.date.fromisoformat(d).weekday() for d in known}
    out = {
        "days": len(days),
        "seen_days": sum(1 for d in days if d in seen),
        "sampled": dict(sorted(sampled.items())),
        # the remaining days of a weekday no seen or sampled day shows: estimated from the
        # mean of every other day (a Tuesday of patents is no Saturday): the plan's weak part
        "days_of_unshown_weekdays": sum(
            1
            for d in days
            if d not in known and dt.date.fromisoformat(d).weekday() not in shown and known
        ),
        "documents": None,
        "pass_requests": costs.pass_requests,
        "measured_passes": costs.measured_passes,
        "session_pace": costs.pace,
        "depths": dict.fromkeys(DEPTHS),
    }
    if totals is None:
        return out
    out["documents"] = round(sum(totals.values()))
    for depth in DEPTHS:
        requests = sum(day_requests(round(n), depth, costs) for n in totals.values())
        requests += _startups(totals, requests, costs)
        passes = math.ceil(requests / costs.pass_requests) if requests else 0
        hours = requests / costs.pace / 3600 if costs.pace > 0 else None
        out["depths"][depth] = {
            "requests": round(requests),
            "passes": passes,
            "hours": None if hours is None else round(hours, 2),
        }
    return out


# -- following today (issue 46.6) -----------------------------------------------------------
# A task that follows today with a daily look pays, each day, the crawl of the new day and the
# days of its look-back its tiers make due (cnkispider/config/looktiers.py): a census each, and a walk
# of its list pages when its count grew. Without the lag CNKI shows for this task, the plan
# assumes every counted day grew: an upper bound (on the stand-in's realistic year the model
# bench/follow_cost.py, which knows the lags, gives about half of it).


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


def _startups(totals: dict[str, float], requests: float, costs: Costs) -> int:
    """The start-up requests of the sessions the days' list pages open."""
    if not costs.pool_size:
        return 0
    grids = sum(day_requests(round(n), "list", costs) for n in totals.values())
    return startup_requests(
        grids,
        turn_limit=costs.turn_limit,
        pool_size=costs.pool_size,
        mode=costs.sessions,
        passes=math.ceil(requests / costs.pass_requests) if requests else 0,
    )


# -- reading the inputs ----------------------------------------------------------------------------


def measured_pass_requests(store) -> tuple[float | None, int]:
    """(mean requests a pass answered, how many passes): the pool's sessions CNKI checked
    again (``needs-person``), whose count stopped where CNKI stopped answering them."""
    from cnkispider.sessions.pool import NEEDS_PERSON

    ended = [s.requests for s in store.list() if s.state == NEEDS_PERSON and s.requests > 0]
    if not ended:
        return None, 0
    return sum(ended) / len(ended), len(ended)


def task_days(engine, name: str, today: dt.date | None = None) -> tuple[dict, list[str], dict]:
    """(the task row as a dict, its days not yet done, {day: documents} its rounds have seen)."""
    from cnkispider.store.schema import round_, task

    with engine.connect() as conn:
        row = conn.execute(sa.select(task).where(task.c.name == name)).mappings().first()
        if row is None and name.isdigit():
            row = conn.execute(sa.select(task).where(task.c.id == int(name))).mappings().first()
        if row is None:
            raise LookupError(_("no task %(name)r") % {"name": name})
        rounds = conn.execute(
            sa.select(round_.c.day, round_.c.category, round_.c.state, round_.c.total).where(
                round_.c.task_id == row["id"]
            )
        ).all()
    end = row["end_date"] or (today or dt.date.today()).isoformat()
    first = dt.date.fromisoformat(row["start_date"])
    last = dt.date.fromisoformat(end)
    census: dict[str, int] = {}
    roots: dict[str, int] = defaultdict(int)
    open_days, done_days = set(), set()
    for day, category, state, total in rounds:
        (done_days if state == "done" else open_days).add(day)
        if total is None:
            continue
        if category == "*":
            census[day] = int(total)
        else:
            roots[day] += int(total)
    # the census's total when it walked its day (roots may overlap); a census split into its
    # root rounds lists 0 (the day is its roots'), an empty day's 0 has no root round
    walked = {day: total for day, total in census.items() if total or day not in roots}
    seen = {**roots, **walked}
    days = [
        d.isoformat()
        for d in (first + dt.timedelta(n) for n in range(max(0, (last - first).days + 1)))
        if d.isoformat() not in done_days or d.isoformat() in open_days
    ]
    return dict(row), days, seen


def _task_or_config(config, engine, name: str, today: dt.date | None):
    """:func:`task_days` of ``name``, or config.ini's task before its first run (no row yet,
    or no database yet: ``engine`` None)."""
    try:
        if engine is None:
            raise LookupError(_("no task %(name)r") % {"name": name})
        return task_days(engine, name, today)
    except (LookupError, sa.exc.DBAPIError) as exc:
        planned = config_task(config, name, today)
        if planned is None:
            if isinstance(exc, LookupError):
                raise
            raise LookupError(_("no task %(name)r") % {"name": name}) from exc
        return planned[0], planned[1], {}


def task_plan(
    config,
    engine,
    name: str,
    store=None,
    today: dt.date | None = None,
    *,
    sample: int = 0,
    sampler=None,
) -> dict:
    """:func:`estimate` of the task ``name``: its remaining days, with the pool's measured
    passes (``store``: the session pool, None: the configured figure).

    ``sample``: how many unseen days to sample (:func:`sample_days`), through ``sampler(row,
    tree, days)``, which asks CNKI and returns ``(totals {day: n}, not sampled {day: why},
    requests sent)``; the plan then has ``sampled``, ``not_sampled`` and ``sample_requests``.
    The totals are kept (plan_inputs.py): later plans have them as ``kept_samples``.
    ``engine`` None (no database yet), or no row of ``name``: config.ini's task, if it is it."""
    from cnkispider import default_settings
    from tasks.categories import load_tree

    row, days, seen = _task_or_config(config, engine, name, today)
    tree = load_tree(row["categories"], row["type"], config.base_dir)
    days = with_cursor_days(row, days, tree, today)  # a moved cursor's days, crawled again
    kept = kept_samples(engine, row["name"])
    sampled: dict[str, int] = {}
    not_sampled: dict[str, str] = {}
    requests = 0
    chosen = sample_days(days, {**kept, **seen}, sample)
    if chosen and sampler is not None:
        sampled, not_sampled, requests = sampler(row, tree, chosen)
        keep_samples(engine, row["name"], sampled)
    measured, passes = measured_pass_requests(store) if store is not None else (None, 0)
    costs = Costs(
        page_size=config.cnki["page_size"],
        cap_rows=config.cnki["cap_rows"],
        export_batch=config.cnki["export_batch"],
        roots=len(tree.roots),
        pass_requests=measured or float(config.cnki["pass_requests"]),
        pace=config.cnki["session_pace"],
        measured_passes=passes,
        turn_limit=config.cnki["turn_limit"],
        pool_size=default_settings.SESSION_POOL_SIZE,
        sessions=config.cnki["sessions"],
    )
    out = estimate(days, seen, costs, {**kept, **sampled})
    out["sampled"] = dict(sorted(sampled.items()))  # this plan's; the kept ones apart
    out["kept_samples"] = {d: n for d, n in sorted(kept.items()) if d not in sampled}
    out["not_sampled"] = dict(sorted(not_sampled.items()))
    out["sample_requests"] = requests
    out["task"] = row["name"]
    out["depth"] = row["depth"] or DEFAULT_DEPTH
    out["follow"] = None
    if row.get("follow") and seen:  # issue 46.6: what a day of following costs
        out["follow"] = follow_day(
            sum(seen.values()) / len(seen),
            costs,
            parse_tiers(config.task.look_tiers),
            config.task.look_back_days,
        )
    if row.get("follow"):  # issue 46.3: the entry lag its looks measured (tasks/lag.py)
        from tasks import lag

        with engine.connect() as conn:
            out["entry_lag"] = lag.measured(conn, row["id"]).to_dict()
    return out
