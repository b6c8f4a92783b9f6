"""The checks of `cnkispider probe` (cnkispider/probe/__init__.py says why it exists): one
:class:`Check` per assumption the crawler makes about CNKI, run in order by :class:`Probe`, each
answer judged by the crawler's own code (protocol, parsers, refusals). The requests and their
record are :mod:`cnkispider.probe.answers`.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cnkispider import default_settings, i18n, vocabulary
from cnkispider.clock import cnki_today
from cnkispider.cnki import parsers, references, refusals
from cnkispider.cnki.export_batch import ExportRow, match_records
from cnkispider.cnki.export_records import ExportAnswerError, parse_export
from cnkispider.cnki.protocol import RESOURCES, Protocol, Search
from cnkispider.exceptions import RefusedPage
from cnkispider.i18n import N_, _
from cnkispider.probe.answers import Answer, CnkiSession, record
from cnkispider.probe.answers import client_id as _client_id
from cnkispider.probe.answers import reason as _reason
from cnkispider.probe.answers import snippet as _snippet
from cnkispider.probe.answers import user_agent as _user_agent

CLIENT_ID_URL = default_settings.CNKI_CLIENT_ID_URL
# Fields a detail page of each type must yield for the crawler to be worth running.
REQUIRED_DETAIL_FIELDS = {
    "patent": ("title", "application_no", "application_date", "applicant", "inventors", "abstract"),
    "paper": ("title", "authors", "abstract"),
    "achievement": ("title", "completers", "first_unit", "summary"),
}
PASS, FAIL, UNKNOWN = "PASS", "FAIL", "UNKNOWN"


class Said:
    """A sentence of a check's line: written in English and marked for the catalogue where it is
    written (``Said(N_("search: %(type)s"), type=...)``), with its values (URLs, counts, CNKI's
    words, reason slugs: shown as they are). The record keeps the English (:meth:`english`: a
    check's name is its identity, docs/PROBE.md and the tests key on it); the line the operator
    reads is in their language (:meth:`shown`)."""

    def __init__(self, message: str, **values: Any):
        self.message, self.values = message, values

    def english(self) -> str:
        return self.message % {k: _english(v) for k, v in self.values.items()}

    def shown(self) -> str:
        return _(self.message) % {k: _shown(v) for k, v in self.values.items()}


class AsIs(Said):
    """Words that are not ours (CNKI's, a parser's diagnostic): the same in every language."""

    def __init__(self, text: str):
        super().__init__("%(text)s", text=text)

    def shown(self) -> str:
        return self.english()


class Type:
    """A document type (``patent``): its name in the record, its word when shown (专利)."""

    def __init__(self, name: str):
        self.name = name

    def english(self) -> str:
        return self.name

    def shown(self) -> str:
        return vocabulary.word(self.name)


def _english(value: Any) -> Any:
    return value.english() if isinstance(value, (Said, Type)) else value


def _shown(value: Any) -> Any:
    return value.shown() if isinstance(value, (Said, Type)) else value


@dataclass
class Check:
    """The verdict on one assumption, with the evidence a maintainer needs to act on it.

    ``name`` and ``evidence`` are English, as written: the record of the run (a test, a script,
    docs/PROBE.md key on the name). ``shown_name`` and ``shown_evidence`` are the same words in
    the reader's language: what :meth:`line` prints."""

    name: str
    verdict: str
    evidence: str
    shown_name: str | None = None
    shown_evidence: str | None = None

    def line(self, english: bool = False) -> str:
        """The line printed (``english``: as recorded, for a log)."""
        name = self.name if english or self.shown_name is None else self.shown_name
        evidence = self.evidence if english or self.shown_evidence is None else self.shown_evidence
        return f"{self.verdict:<8}{name:<36}{evidence}"


class Probe:
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
        self.first_pages: dict[str, parsers.ListPage] = {}
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

    def open_session(self, label: str, check: bool) -> CnkiSession | None:
        """Warm-up page, then the client id; None when the session could not be opened."""
        session = CnkiSession(self, label)
        self.sessions.append(session)
        home = session.get(self.protocol.home_url, f"{label} warm-up")
        reason = _reason("home", home)
        if reason in ("verify", "captcha") and check:
            # CNKI 2026: a plain session is sent to the person check (PROTOCOL.md point 11)
            self.checked_plain = True
            self.verdict(
                Said(N_("session: a plain session is checked")),
                PASS,
                Said(
                    N_(
                        "GET %(url)s: %(reason)s (%(answer)s); the crawl needs a session a "
                        "person passed (cnkispider session login)"
                    ),
                    url=self.protocol.home_url,
                    reason=reason,
                    answer=home.location or _snippet(home.body),
                ),
            )
            return None
        if reason:
            if check:
                self.verdict(
                    Said(N_("session: warm-up")),
                    FAIL,
                    Said(N_("GET %(url)s: %(reason)s"), url=self.protocol.home_url, reason=reason),
                )
            return None
        if check:
            cookies = ", ".join(session.cookie_names())
            self.verdict(
                Said(N_("session: warm-up")),
                PASS,
                Said(
                    N_("HTTP %(status)s, cookies %(cookies)s"), status=home.status, cookies=cookies
                )
                if cookies
                else Said(N_("HTTP %(status)s, cookies none"), status=home.status),
            )
        answer = session.get(
            self.client_id_url, f"{label} client id", referer=self.protocol.home_url
        )
        client_id = _client_id(answer)
        if client_id is None:
            if check:
                self.verdict(
                    Said(N_("session: Ecp_ClientId")),
                    FAIL,
                    Said(
                        N_("GET %(url)s: HTTP %(status)s %(answer)s"),
                        url=self.client_id_url,
                        status=answer.status,
                        answer=answer.error or _snippet(answer.body),
                    ),
                )
            return None
        session.set_cookie("Ecp_ClientId", client_id)
        if check:
            self.verdict(
                Said(N_("session: Ecp_ClientId")),
                PASS,
                Said(N_("issued (%(n)s characters)"), n=len(client_id)),
            )
        return session

    def open_verified(self, label: str) -> CnkiSession | None:
        """A session a person passed, from the pool: its cookies, no warm-up (it would spend one
        of its requests)."""
        if self.verified is None:
            self.verdict(
                Said(N_("session: verified session")),
                UNKNOWN,
                Said(
                    N_(
                        "no ready session in the pool: run `cnkispider session login` (or "
                        "`session add --from-curl`), then probe again"
                    )
                ),
            )
            return None
        session = CnkiSession(self, label)
        session.verified = True  # no renewal after a few turns: a pass is not renewed
        self.sessions.append(session)
        for cookie in self.verified.cookies:
            session.set_cookie(cookie["name"], cookie["value"])
        self.verdict(
            Said(N_("session: verified session")),
            PASS,
            Said(
                N_("%(id)s (%(source)s), cookies %(cookies)s"),
                id=self.verified.id,
                source=self.verified.source,
                cookies=", ".join(self.verified.cookie_names()),
            ),
        )
        return session

    def check_session_lasts(self, session: CnkiSession) -> None:
        """How long a verified session lasts at the configured pace: page 1 of one search,
        again and again, at ``session_pace`` requests/s, until CNKI checks it again or the
        budget is spent. It spends the person's pass: run it on purpose (``--session-budget``)."""
        check = Said(N_("session: a verified session lasts"))
        name = check.english()
        search = Search.for_day("paper", self.day)
        delay, self.delay = self.delay, max(self.delay, 1.0 / max(self.session_pace, 1e-6))
        started = self.clock()
        served = session.sent  # the probe's earlier requests in it count too
        try:
            for n in range(1, self.session_budget + 1):
                form = self.protocol.grid_form(search, 1, None)
                answer = session.post(
                    self.protocol.grid_url, form, f"{name} {n}", self.protocol.referer("paper")
                )
                reason = _reason("list", answer)
                if reason is not None:
                    minutes = (self.clock() - started) / 60
                    self.verdict(
                        check,
                        PASS,
                        Said(
                            N_(
                                "%(served)s requests / %(minutes)s minutes at %(pace)s "
                                "requests/s, then %(reason)s (checked again)"
                            ),
                            served=served,
                            minutes=f"{minutes:.1f}",
                            pace=f"{self.session_pace:g}",
                            reason=reason,
                        ),
                    )
                    return
                served += 1
        finally:
            self.delay = delay
        minutes = (self.clock() - started) / 60
        self.verdict(
            check,
            PASS,
            Said(
                N_(
                    "at least %(served)s requests / %(minutes)s minutes at %(pace)s requests/s "
                    "(the budget, not CNKI, ended it)"
                ),
                served=served,
                minutes=f"{minutes:.1f}",
                pace=f"{self.session_pace:g}",
            ),
        )

    def search(
        self,
        session: CnkiSession,
        search: Search,
        page: int,
        name: str,
        turn_token: str | None = None,
    ) -> tuple[parsers.ListPage | None, str]:
        session = self.current or session
        verified = getattr(session, "verified", False)
        if not verified and session.grid_posts >= self.turns_per_session and page == 1:
            # Renew before CNKI's soft block, as the crawler does; a new search starts at page 1.
            fresh = self.open_session(f"session-{len(self.sessions) + 1}", check=False)
            if fresh is not None:
                session = self.current = fresh
        form = self.protocol.grid_form(search, page, turn_token)
        answer = session.post(
            self.protocol.grid_url, form, name, referer=self.protocol.referer(search.doc_type)
        )
        reason = _reason("list", answer)
        if reason:
            words = refusals.rejection_text(answer.body)
            return None, f"{reason}" + (f" ({words})" if words else "")
        try:
            return parsers.parse_list(answer.body), ""
        except RefusedPage as exc:
            return None, str(exc)

    def check_search(self, session: CnkiSession, doc_type: str) -> None:
        check = Said(N_("search: %(type)s"), type=Type(doc_type))
        name = check.english()
        search = Search.for_day(doc_type, self.day)
        page, why = self.search(session, search, 1, name)
        if page is None:
            self.verdict(check, FAIL, Said(N_("%(day)s: %(why)s"), day=self.day, why=why))
            return
        if page.total <= 0:
            self.verdict(
                check,
                FAIL,
                Said(
                    N_(
                        "%(day)s lists 0 documents: a busy day should not; the query shape is "
                        "probably wrong"
                    ),
                    day=self.day,
                ),
            )
            return
        self.first_pages[doc_type] = page
        expected_pages = min(
            math.ceil(page.total / self.protocol.page_size), self.protocol.max_pages
        )
        keys = sum(1 for r in page.rows if r.dbname and r.filename)
        evidence = Said(
            N_(
                "%(day)s: %(total)s listed, %(pages)s pages (expected %(expected)s), %(rows)s "
                "rows, %(keys)s with keys"
            ),
            day=self.day,
            total=page.total,
            pages=page.page_count,
            expected=expected_pages,
            rows=len(page.rows),
            keys=keys,
        )
        if len(page.rows) > self.protocol.page_size or keys < len(page.rows):
            self.verdict(check, FAIL, evidence)
        elif page.page_count != expected_pages:
            cap = Said(N_("the cap is not %(cap)s rows"), cap=self.protocol.cap)
            self.verdict(check, FAIL, evidence, cap)
        else:
            self.verdict(check, PASS, evidence)

    def check_page_two(self, session: CnkiSession) -> None:
        check = Said(N_("page turn: page 2"))
        name = check.english()
        doc_type = next((t for t, p in self.first_pages.items() if p.page_count >= 2), None)
        if doc_type is None:
            self.verdict(check, UNKNOWN, Said(N_("no search of this day has two pages")))
            return
        first = self.first_pages[doc_type]
        page, why = self.search(
            session, Search.for_day(doc_type, self.day), 2, name, turn_token=first.turn_token
        )
        if page is None:
            self.verdict(check, FAIL, Said(N_("%(type)s: %(why)s"), type=Type(doc_type), why=why))
            return
        seen = {r.doc_key for r in first.rows}
        new = [r for r in page.rows if r.doc_key not in seen]
        if page.page != 2 or not new:
            self.verdict(
                check,
                FAIL,
                Said(
                    N_("%(type)s: page %(page)s, %(new)s rows not on page 1"),
                    type=Type(doc_type),
                    page=page.page,
                    new=len(new),
                ),
            )
        elif first.turn_token[:12]:
            self.verdict(
                check,
                PASS,
                Said(
                    N_("%(type)s: page 2 has %(new)s new rows (turn token %(token)s…)"),
                    type=Type(doc_type),
                    new=len(new),
                    token=first.turn_token[:12],
                ),
            )
        else:
            self.verdict(
                check,
                PASS,
                Said(
                    N_("%(type)s: page 2 has %(new)s new rows (turn token empty…)"),
                    type=Type(doc_type),
                    new=len(new),
                ),
            )

    def check_query(self, session: CnkiSession) -> None:
        """A query task's search (issue 39, docs/QUERY.md): the day's papers with a professional
        -search expression that names the title of the day's first row narrow to that row; a
        malformed expression is refused, and in which words."""
        check = Said(N_("query: professional search"))
        name = check.english()
        first = self.first_pages.get("paper")
        if first is None or not first.rows:
            self.verdict(check, UNKNOWN, Said(N_("the day's paper search failed")))
            return
        row = first.rows[0]
        quote = "'" if "'" not in row.title else '"'
        query = f"TI={quote}{row.title}{quote}"
        page, why = self.search(session, Search.for_day("paper", self.day, query=query), 1, name)
        if page is None:
            self.verdict(check, FAIL, Said(N_("%(query)s: %(why)s"), query=query, why=why))
            return
        found = any(r.doc_key == row.doc_key for r in page.rows)
        counts = {"query": query, "total": page.total, "all": first.total}
        if not found or not 1 <= page.total < first.total:
            evidence = [Said(N_("%(query)s: %(total)s of the day's %(all)s listed"), **counts)]
            if not found:
                evidence.append(Said(N_("%(key)s not among them"), key=row.doc_key))
            self.verdict(check, FAIL, *evidence)
        else:
            self.verdict(
                check,
                PASS,
                Said(
                    N_("%(query)s: %(total)s of the day's %(all)s listed, %(key)s among them"),
                    key=row.doc_key,
                    **counts,
                ),
            )
        check = Said(N_("query: a malformed expression"))
        name = check.english()
        broken = "TI='x' AND"
        page, why = self.search(session, Search.for_day("paper", self.day, query=broken), 1, name)
        if page is None:
            self.verdict(
                check, PASS, Said(N_("%(query)s refused: %(why)s"), query=repr(broken), why=why)
            )
        elif page.total == 0:
            self.verdict(
                check,
                UNKNOWN,
                Said(
                    N_(
                        "%(query)s answered as a zero: only the crawler's own check stops a bad "
                        "query"
                    ),
                    query=repr(broken),
                ),
            )
        else:
            self.verdict(
                check,
                FAIL,
                Said(
                    N_("%(query)s listed %(total)s: the expression was ignored"),
                    query=repr(broken),
                    total=page.total,
                ),
            )

    def check_date_narrows(self, session: CnkiSession, doc_type: str) -> None:
        check = Said(N_("date: one day (%(type)s)"), type=Type(doc_type))
        name = check.english()
        day_page = self.first_pages.get(doc_type)
        if day_page is None:
            self.verdict(check, UNKNOWN, Said(N_("the day's search failed")))
            return
        week = Search(doc_type, self.day - dt.timedelta(days=6), self.day)
        page, why = self.search(session, week, 1, name)
        counts = {"day": self.day, "day_total": day_page.total}
        if page is None:
            self.verdict(check, FAIL, Said(N_("week search: %(why)s"), why=why))
        elif page.total > day_page.total:
            self.verdict(
                check,
                PASS,
                Said(N_("%(day)s: %(day_total)s < week: %(week)s"), week=page.total, **counts),
            )
        else:
            self.verdict(
                check,
                FAIL,
                Said(
                    N_(
                        "the date condition does not narrow: %(day)s: %(day_total)s, week: %(week)s"
                    ),
                    week=page.total,
                    **counts,
                ),
            )

    def check_categories(self, session: CnkiSession, doc_type: str) -> None:
        check = Said(N_("category: prefix (%(type)s)"), type=Type(doc_type))
        name = check.english()
        day_page = self.first_pages.get(doc_type)
        candidates = self.categories.get(doc_type) or []
        if day_page is None or not candidates:
            self.verdict(
                check,
                UNKNOWN,
                Said(N_("the day's search failed"))
                if day_page is None
                else Said(N_("no category to try")),
            )
            return
        # A small category may list nothing on one day: try a few before calling it a failure.
        tried = []
        for parent, children in candidates[:3]:  # noqa: B007 - the pair found is used below
            page, why = self.search(session, Search.for_day(doc_type, self.day, parent), 1, name)
            if page is None:
                self.verdict(check, FAIL, Said(N_("%(code)s: %(why)s"), code=parent, why=why))
                return
            tried.append(f"{parent}: {page.total}")
            if page.total > 0:
                break
        else:
            self.verdict(
                check,
                FAIL,
                Said(
                    N_("%(tried)s of the day's %(all)s: no category lists anything"),
                    tried="; ".join(tried),
                    all=day_page.total,
                ),
            )
            return
        counts = {"code": parent, "total": page.total, "all": day_page.total}
        if not page.total < day_page.total:
            self.verdict(
                check,
                FAIL,
                Said(
                    N_(
                        "%(code)s: %(total)s of the day's %(all)s: the category condition does "
                        "not narrow"
                    ),
                    **counts,
                ),
            )
            return
        if not children:
            self.verdict(check, PASS, Said(N_("%(code)s: %(total)s of %(all)s"), **counts))
            return
        total = 0
        for code in children:
            child, why = self.search(
                session, Search.for_day(doc_type, self.day, code), 1, f"{name} {code}"
            )
            if child is None:
                self.verdict(check, FAIL, Said(N_("%(code)s: %(why)s"), code=code, why=why))
                return
            total += child.total
        # A document may carry several codes, so children may add up to a little more.
        counts.update(n=len(children), children=total)
        if page.total <= total <= page.total * 1.5:
            self.verdict(
                check,
                PASS,
                Said(
                    N_("%(code)s: %(total)s of %(all)s; its %(n)s children: %(children)s"), **counts
                ),
            )
        else:
            self.verdict(
                check,
                FAIL,
                Said(
                    N_(
                        "%(code)s: %(total)s of %(all)s; its %(n)s children: %(children)s "
                        "(children should add up to about the parent)"
                    ),
                    **counts,
                ),
            )

    def check_detail(self, session: CnkiSession, doc_type: str) -> None:
        check = Said(N_("detail: %(type)s"), type=Type(doc_type))
        name = check.english()
        first = self.first_pages.get(doc_type)
        row = next((r for r in (first.rows if first else []) if r.url), None)
        if row is None:
            self.verdict(check, UNKNOWN, Said(N_("no list row to follow")))
            return
        url = self.protocol.absolute(row.url)
        answer = session.get(url, name, referer=self.protocol.grid_url)
        reason = _reason("detail", answer)
        if reason:
            self.verdict(
                check, FAIL, Said(N_("%(key)s: %(reason)s"), key=row.doc_key, reason=reason)
            )
            return
        try:
            fields = parsers.parse_detail(doc_type, answer.body)
        except RefusedPage as exc:
            self.verdict(
                check, FAIL, Said(N_("%(key)s: %(reason)s"), key=row.doc_key, reason=str(exc))
            )
            return
        fields.setdefault("title", row.title)
        missing = [f for f in REQUIRED_DETAIL_FIELDS[doc_type] if not fields.get(f)]
        filled = sum(1 for v in fields.values() if v)
        if missing:
            self.verdict(
                check,
                FAIL,
                Said(N_("%(key)s: missing %(fields)s"), key=row.doc_key, fields=", ".join(missing)),
            )
        else:
            self.verdict(
                check, PASS, Said(N_("%(key)s: %(n)s fields filled"), key=row.doc_key, n=filled)
            )
        self._detail_link = (doc_type, row, url)

    def check_export(self, session: CnkiSession) -> None:
        """CNKI's citation export (PROTOCOL.md point 16; docs/DEPTH.md): one request with two
        export ids of a list page, and how many records come back (the batch size that export
        depth learns per session: 1 of 2 means one id a request)."""
        check = Said(N_("export: GetExport, 2 ids"))
        name = check.english()
        rows = next(
            (
                [r for r in page.rows if r.export_id][:2]
                for page in self.first_pages.values()
                if sum(1 for r in page.rows if r.export_id) >= 2
            ),
            None,
        )
        if rows is None:
            self.verdict(
                check, UNKNOWN, Said(N_("no list page with two export ids (input.cbItem)"))
            )
            return
        session = self.current or session
        answer = session.post(
            self.protocol.export_url,
            self.protocol.export_form([r.export_id for r in rows]),
            name,
            referer=self.protocol.home_url,
        )
        reason = _reason("export", answer)
        if reason:
            words = refusals.rejection_text(answer.body)
            self.verdict(check, FAIL, AsIs(f"{reason}" + (f" ({words})" if words else "")))
            return
        try:
            records = parse_export(answer.body)
        except ExportAnswerError as exc:
            self.verdict(check, FAIL, AsIs(str(exc)))
            return
        asked = [ExportRow(r.export_id, r.title, r.authors) for r in rows]
        pairs, _unmatched, strays = match_records(asked, records)
        counts = {"records": len(records), "matched": len(pairs), "strays": len(strays)}
        if strays and len(pairs) == 2:
            message = N_(
                "%(records)s records for 2 ids, %(matched)s matched by title, %(strays)s "
                "matching no row: batches of several ids work"
            )
        elif strays:
            message = N_(
                "%(records)s records for 2 ids, %(matched)s matched by title, %(strays)s "
                "matching no row: one id a request"
            )
        elif len(pairs) == 2:
            message = N_(
                "%(records)s records for 2 ids, %(matched)s matched by title: batches of "
                "several ids work"
            )
        else:
            message = N_(
                "%(records)s records for 2 ids, %(matched)s matched by title: one id a request"
            )
        self.verdict(check, PASS if pairs and not strays else FAIL, Said(message, **counts))

    def check_references(self, session: CnkiSession) -> None:
        """One paper's reference list ([crawl] references), asked as the crawler asks it: with
        its detail link's token, in the session that listed it (PROTOCOL.md point 17)."""
        check = Said(N_("references: paper"))
        name = check.english()
        first = self.first_pages.get("paper")
        row = next(
            (
                r
                for r in (first.rows if first else [])
                if r.url and references.reference_type(r.dbname)
            ),
            None,
        )
        if row is None:
            self.verdict(check, UNKNOWN, Said(N_("no journal or thesis row to ask for")))
            return
        detail = self.protocol.absolute(row.url)
        v = references.token_of(detail)
        if not v:
            self.verdict(
                check, FAIL, Said(N_("%(key)s: its detail link has no v= token"), key=row.doc_key)
            )
            return
        kind = references.reference_type(row.dbname)
        url = references.references_url(self.protocol.base_url, v, kind)
        answer = session.get(url, name, referer=detail)
        reason = _reason("references", answer)
        if reason:
            self.verdict(
                check,
                FAIL,
                Said(
                    N_("%(key)s (%(kind)s): %(reason)s: %(answer)s"),
                    key=row.doc_key,
                    kind=kind,
                    reason=reason,
                    answer=_snippet(answer.body),
                ),
            )
            return
        try:
            page = references.parse_references(answer.body)
        except RefusedPage as exc:
            self.verdict(
                check,
                FAIL,
                Said(N_("%(key)s (%(kind)s): %(reason)s"), key=row.doc_key, kind=kind, reason=exc),
            )
            return
        shown = page.references[0].title[:30] if page.references else "-"
        self.verdict(
            check,
            PASS,
            Said(
                N_(
                    "%(key)s (%(kind)s): %(n)s of %(total)s references (first: %(first)s); "
                    "[crawl] references costs %(cost)s request(s) for this paper"
                ),
                key=row.doc_key,
                kind=kind,
                n=len(page.references),
                total=page.total,
                first=shown,
                cost=math.ceil(page.total / 10) or 1,
            ),
        )

    def check_foreign_session(self) -> None:
        """A detail link listed by one session, opened by another (how replays reach links).

        Either it works, or CNKI answers with a challenge the crawler recognises (it then
        refreshes the link by a title search); anything else would lose the document.
        """
        check = Said(N_("detail: link from another session"))
        name = check.english()
        link = getattr(self, "_detail_link", None)
        if link is None:
            self.verdict(check, UNKNOWN, Said(N_("no detail page was fetched")))
            return
        doc_type, row, url = link
        if self.checked_plain:
            # a session a person passed is bound to its cookies; the link, to that session
            other = CnkiSession(self, "session-2 (plain)")
            self.sessions.append(other)
            answer = other.get(url, name, referer=self.protocol.grid_url)
            reason = _reason("detail", answer)
            own = Said(N_("detail: a link opens only in its own session"))
            if reason is not None and (
                refusals.kind_of(reason) == refusals.CHALLENGE or reason == "http-302"
            ):
                self.verdict(
                    own,
                    PASS,
                    Said(
                        N_(
                            "%(key)s: opened in its session, %(reason)s in another; the crawler "
                            "lists the page again in the round's session"
                        ),
                        key=row.doc_key,
                        reason=reason,
                    ),
                )
            elif reason is not None:
                self.verdict(
                    own, FAIL, Said(N_("%(key)s: %(reason)s"), key=row.doc_key, reason=reason)
                )
            else:
                self.verdict(
                    own, PASS, Said(N_("%(key)s: it opens in any session"), key=row.doc_key)
                )
            return
        other = self.open_session("session-2", check=False)
        if other is None:
            self.verdict(check, UNKNOWN, Said(N_("a second session could not be opened")))
            return
        answer = other.get(url, name, referer=self.protocol.grid_url)
        reason = _reason("detail", answer)
        if reason is None:
            self.verdict(
                check, PASS, Said(N_("%(key)s: the link works in a fresh session"), key=row.doc_key)
            )
        elif refusals.kind_of(reason) == refusals.CHALLENGE or reason == "http-302":
            self.verdict(
                check,
                PASS,
                Said(
                    N_(
                        "%(key)s: refused (%(reason)s); the crawler refreshes such links by a "
                        "title search"
                    ),
                    key=row.doc_key,
                    reason=reason,
                ),
            )
        else:
            self.verdict(
                check,
                FAIL,
                Said(
                    N_("%(key)s: %(reason)s: a replayed link would be lost"),
                    key=row.doc_key,
                    reason=reason,
                ),
            )


def default_day(today: dt.date | None = None) -> dt.date:
    """A busy day: the Wednesday four weeks back (CNKI's calendar), well indexed by now."""
    today = today or cnki_today()
    day = today - dt.timedelta(days=28)
    return day - dt.timedelta(days=(day.weekday() - 2) % 7)
