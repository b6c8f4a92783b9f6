"""The probe of `cnkispider probe` (cnkispider/probe/__init__.py says why it exists): one
:class:`Check` per assumption the crawler makes about CNKI, run in order by :class:`Probe`, each
answer judged by the crawler's own code (protocol, parsers, refusals). The checks come in groups
by what they check: sessions.py (sessions), searches.py (the list grid), records.py (detail pages,
export, references); verdicts.py holds a check's words. The requests and their record are
:mod:`cnkispider.probe.answers`.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cnkispider import default_settings
from cnkispider.clock import cnki_today
from cnkispider.cnki import listgrid
from cnkispider.cnki.protocol import Protocol
from cnkispider.cnki.search import RESOURCES
from cnkispider.probe.answers import Answer, CnkiSession, record
from cnkispider.probe.answers import user_agent as _user_agent
from cnkispider.probe.records import RecordChecks
from cnkispider.probe.searches import SearchChecks
from cnkispider.probe.sessions import SessionChecks
from cnkispider.probe.verdicts import FAIL, UNKNOWN, Check, Said
from cnkispider.words import i18n
from cnkispider.words.i18n import _

CLIENT_ID_URL = default_settings.CNKI_CLIENT_ID_URL


class Probe(SessionChecks, SearchChecks, RecordChecks):
    """Runs the checks in order; later checks use what earlier ones found (links, totals)."""

    def __init__(
        self,
        protocol: Protocol,
        *,
        client_id_url: str = CLIENT_ID_URL,
        day: dt.date | None = None,
        delay: float = 3.0,
        timeout: float = 20.0,
        save_dir: Path | None = None,
        user_agent: str | None = None,
        categories: dict[str, list[tuple[str, list[str]]]] | None = None,
        turns_per_session: int = 9,
        verified: Any = None,
        session_pace: float = 0.5,
        session_budget: int = 0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        out: Callable[[str], None] = print,
    ):
        self.protocol = protocol
        self.client_id_url = client_id_url
        self.day = day or default_day()
        self.delay, self.timeout = delay, timeout
        self.save_dir = save_dir
        self.user_agent = user_agent or _user_agent()
        # per type: candidate (parent code, its child codes) pairs for the category check
        self.categories = categories or {}
        self.clock, self.sleep, self.out = clock, sleep, out
        self._last: float | None = None
        self.requests = 0
        self.index: list[dict[str, Any]] = []
        self.checks: list[Check] = []
        self.first_pages: dict[str, listgrid.ListPage] = {}
        self.sessions: list[CnkiSession] = []
        self.current: CnkiSession | None = None
        self.turns_per_session = turns_per_session
        # a session a person passed (cnkispider.sessions.VerifiedSession), from the pool
        self.verified = verified
        self.session_pace = session_pace
        self.session_budget = session_budget  # requests the "lasts" check may spend (0: skip)
        self.checked_plain = False  # CNKI sent a plain session's warm-up to its person check
        if save_dir is not None:
            save_dir.mkdir(parents=True, exist_ok=True)

    # -- plumbing ----------------------------------------------------------------------------

    def pace(self) -> None:
        now = self.clock()
        if self._last is not None and now - self._last < self.delay:
            self.sleep(self.delay - (now - self._last))
        self._last = self.clock()
        self.requests += 1

    def record(self, name: str, request, form, answer: Answer, session: str) -> None:
        record(self.index, self.save_dir, name, request, form, answer, session)

    def verdict(self, name: Said, verdict: str, *evidence: Said) -> Check:
        """One check's line; ``evidence``: whole sentences (each translated whole), joined by
        "; "."""
        check = Check(
            name.english(),
            verdict,
            "; ".join(e.english() for e in evidence),
            name.shown(),
            "; ".join(e.shown() for e in evidence),
        )
        self.checks.append(check)
        self.out(check.line())
        return check

    # -- the checks --------------------------------------------------------------------------

    def run(self) -> int:
        """Run every check, print one line each; 1 if any FAILed, else 0."""
        decimals = min(len(f"{self.delay:g}".partition(".")[2]), 3)
        self.out(
            _("probing %(url)s (day %(day)s, at most one request per %(delay)s s)")
            % {
                "url": self.protocol.base_url,
                "day": self.day,
                "delay": i18n.number(self.delay, decimals),
            }
        )
        main = self.current = self.open_session("session-1", check=True)
        if main is None and self.checked_plain:
            main = self.current = self.open_verified("session-v1")
        if main is not None:
            for doc_type in RESOURCES:
                self.check_search(main, doc_type)
            self.check_page_two(main)
            self.check_query(main)
            for doc_type in RESOURCES:
                self.check_date_narrows(main, doc_type)
            for doc_type in RESOURCES:
                self.check_categories(main, doc_type)
            self.more_checks(main)  # facet counts, update time (probe/facets.py)
            for doc_type in RESOURCES:
                self.check_detail(main, doc_type)
            self.check_export(main)
            self.check_references(main)
            self.check_foreign_session()
            if self.checked_plain and self.session_budget > 0:
                self.check_session_lasts(main)
        failed = [c for c in self.checks if c.verdict == FAIL]
        unknown = [c for c in self.checks if c.verdict == UNKNOWN]
        counts = {
            "passed": i18n.number(len(self.checks) - len(failed) - len(unknown)),
            "failed": i18n.number(len(failed)),
            "unknown": i18n.number(len(unknown)),
            "requests": i18n.number(self.requests),
            "folder": self.save_dir,
        }
        if self.save_dir:
            said = _(
                "%(passed)s passed, %(failed)s failed, %(unknown)s unknown; %(requests)s "
                "requests; raw answers in %(folder)s"
            )
        else:
            said = _(
                "%(passed)s passed, %(failed)s failed, %(unknown)s unknown; %(requests)s requests"
            )
        self.out(said % counts)
        return 1 if failed else 0

    def more_checks(self, main: CnkiSession) -> None:
        """Checks a subclass adds after the category checks (none here)."""


def default_day(today: dt.date | None = None) -> dt.date:
    """A busy day: the Wednesday four weeks back (CNKI's calendar), well indexed by now."""
    today = today or cnki_today()
    day = today - dt.timedelta(days=28)
    return day - dt.timedelta(days=(day.weekday() - 2) % 7)
