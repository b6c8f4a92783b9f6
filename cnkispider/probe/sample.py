"""`cnkispider task plan NAME --sample N`: the census totals of a few unseen days, asked of CNKI.

A task with no day crawled yet has no census total to plan from, and one whose days crawled so
far are all Tuesdays says nothing of its Saturdays. The sample asks CNKI the census of a few of
its remaining days (cnkispider/status/plan.py ``sample_days`` chooses them): the search the
crawler's census round sends (the day, the task's query, no category, or the task's root
categories OR'd when they are not the whole tree: spiders/base.py ``round_requests``), page 1,
and reads its total.

Through the probe's plain sequential machinery (one cookie jar, at most one request per
``delay`` seconds; no Scrapy): a session a person passed from the pool when there is one (its
requests counted on it in the pool, as the crawler counts them; CNKI 2026 checks plain
sessions), else a plain session, warmed up as the probe does. An answer that is refused, a
check, or that cannot be read is not a zero: its day stays unsampled, with why. A check ends
the sample (the session is spent: a passed one is marked ``needs-person``, as the crawler marks
it); a refusal of the query too (every day would be refused the same).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from cnkispider.cnki import refusals
from cnkispider.cnki.search import Search
from cnkispider.probe import probe_from_config

logger = logging.getLogger(__name__)

#: Why a day was not sampled, besides CNKI's own reasons (``verify``, ``rejected (...)``,
#: ``http-500``, ...; cnkispider/cnki/refusals.py): CNKI checks plain sessions and the pool has
#: no session a person passed; no session could be opened; the sample stopped before the day
#: (a check, or a refusal of the query, on an earlier one); the passed session is dead in the
#: pool (``session-needs-person``, ``session-expired``, ``session-missing``).
CHECKED_PLAIN = "checked-plain"
NO_SESSION = "no-session"
STOPPED = "not-asked"
SESSION_STATE = "session-"


@dataclass
class Sample:
    """The sampled days' census totals, the days not sampled with why, the requests sent."""

    totals: dict[str, int] = field(default_factory=dict)
    not_sampled: dict[str, str] = field(default_factory=dict)
    requests: int = 0

    def as_tuple(self) -> tuple[dict[str, int], dict[str, str], int]:
        return self.totals, self.not_sampled, self.requests


def census_search(row: dict, tree, day: str) -> Search:
    """The census search of ``day`` for the task ``row`` (as the crawler's census round)."""
    from tasks.categories import covers

    roots = () if covers(tree, row["type"]) else tuple(tree.roots)
    return Search.for_day(row["type"], day, None, query=row.get("query") or None, any_of=roots)


def _pool(config):
    """(the session pool, its first ready session) or (None, None): no Redis, or none ready."""
    try:
        from cnkispider.sessions import READY, SessionStore

        store = SessionStore.from_config(config)
        return store, next((s for s in store.list() if s.state == READY), None)
    except Exception as exc:  # no Redis: a plain session is the only one
        logger.debug("plan sample: no session pool: %s", exc)
        return None, None


def sample_census(config, row: dict, tree, days: list[str], *, delay: float) -> Sample:
    """Ask CNKI the census total of each of ``days`` (see the module docstring)."""
    out = Sample()
    store, passed = _pool(config)
    probe = probe_from_config(
        config,
        delay=delay,
        out=lambda line: logger.debug("plan sample: %s", line),
        session_id=passed.id if passed is not None else None,
    )
    if passed is not None:
        session = probe.current = probe.open_verified("plan-sample")
    else:
        session = probe.current = probe.open_session("plan-sample", check=True)
    if session is None:
        logger.warning(
            "plan sample: no session: %s", "; ".join(c.line(english=True) for c in probe.checks)
        )
        out.not_sampled = dict.fromkeys(days, CHECKED_PLAIN if probe.checked_plain else NO_SESSION)
        out.requests = probe.requests
        return out
    for n, day in enumerate(days):
        if passed is not None:
            state, _count = store.use(passed.id, "plan-sample")
            if state != "ok":
                out.not_sampled[day] = SESSION_STATE + state
                _stop(out, days[n + 1 :])
                break
        page, why = probe.search(session, census_search(row, tree, day), 1, f"census {day}")
        if page is not None:
            out.totals[day] = page.total
            logger.info("plan sample: %s census %d", day, page.total)
            continue
        reason = why.split(" ", 1)[0]
        kind = refusals.kind_of(reason)
        out.not_sampled[day] = why
        logger.info("plan sample: %s not sampled: %s", day, why)
        if kind == refusals.CHALLENGE and reason in ("verify", "captcha") and passed is not None:
            note = f"checked by CNKI at the census sample of {day} ({reason}, task plan)"
            store.mark(passed.id, "needs-person", note, unless_dead=True)
        if kind in (refusals.CHALLENGE, refusals.REJECTION):
            _stop(out, days[n + 1 :])
            break
    out.requests = probe.requests
    return out


def _stop(out: Sample, rest: list[str]) -> None:
    for other in rest:
        out.not_sampled[other] = STOPPED
