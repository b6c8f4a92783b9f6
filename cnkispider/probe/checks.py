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

from cnkispider import default_settings, i18n
from cnkispider.clock import cnki_today
from cnkispider.cnki import parsers, references, refusals
from cnkispider.cnki.export_batch import ExportRow, match_records
from cnkispider.cnki.export_records import ExportAnswerError, parse_export
from cnkispider.cnki.protocol import RESOURCES, Protocol, Search
from cnkispider.exceptions import RefusedPage
from cnkispider.i18n import _
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


@dataclass
class Check:
    """The verdict on one assumption, with the evidence a maintainer needs to act on it."""

    name: str
    verdict: str
    evidence: str

    def line(self) -> str:
        return f"{self.verdict:<8}{self.name:<36}{self.evidence}"


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

    def verdict(self, name: str, verdict: str, evidence: str) -> Check:
        check = Check(name, verdict, evidence)
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
                "session: a plain session is checked",
                PASS,
                f"GET {self.protocol.home_url}: {reason} "
                f"({home.location or _snippet(home.body)}); the crawl needs a session a person "
                "passed (cnkispider session login)",
            )
            return None
        if reason:
            if check:
                self.verdict("session: warm-up", FAIL, f"GET {self.protocol.home_url}: {reason}")
            return None
        if check:
            self.verdict(
                "session: warm-up",
                PASS,
                f"HTTP {home.status}, cookies {', '.join(session.cookie_names()) or 'none'}",
            )
        answer = session.get(
            self.client_id_url, f"{label} client id", referer=self.protocol.home_url
        )
        client_id = _client_id(answer)
        if client_id is None:
            if check:
                self.verdict(
                    "session: Ecp_ClientId",
                    FAIL,
                    f"GET {self.client_id_url}: HTTP {answer.status} "
                    f"{answer.error or _snippet(answer.body)}",
                )
            return None
        session.set_cookie("Ecp_ClientId", client_id)
        if check:
            self.verdict("session: Ecp_ClientId", PASS, f"issued ({len(client_id)} characters)")
        return session

    def open_verified(self, label: str) -> CnkiSession | None:
        """A session a person passed, from the pool: its cookies, no warm-up (it would spend one
        of its requests)."""
        if self.verified is None:
            self.verdict(
                "session: verified session",
                UNKNOWN,
                "no ready session in the pool: run `cnkispider session login` (or `session add "
                "--from-curl`), then probe again",
            )
            return None
        session = CnkiSession(self, label)
        session.verified = True  # no renewal after a few turns: a pass is not renewed
        self.sessions.append(session)
        for cookie in self.verified.cookies:
            session.set_cookie(cookie["name"], cookie["value"])
        self.verdict(
            "session: verified session",
            PASS,
            f"{self.verified.id} ({self.verified.source}), cookies "
            f"{', '.join(self.verified.cookie_names())}",
        )
        return session

    def check_session_lasts(self, session: CnkiSession) -> None:
        """How long a verified session lasts at the configured pace: page 1 of one search,
        again and again, at ``session_pace`` requests/s, until CNKI checks it again or the
        budget is spent. It spends the person's pass: run it on purpose (``--session-budget``)."""
        name = "session: a verified session lasts"
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
                        name,
                        PASS,
                        f"{served} requests / {minutes:.1f} minutes at {self.session_pace:g} "
                        f"requests/s, then {reason} (checked again)",
                    )
                    return
                served += 1
        finally:
            self.delay = delay
        minutes = (self.clock() - started) / 60
        self.verdict(
            name,
            PASS,
            f"at least {served} requests / {minutes:.1f} minutes at {self.session_pace:g} "
            "requests/s (the budget, not CNKI, ended it)",
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
        name = f"search: {doc_type}"
        search = Search.for_day(doc_type, self.day)
        page, why = self.search(session, search, 1, name)
        if page is None:
            self.verdict(name, FAIL, f"{self.day}: {why}")
            return
        if page.total <= 0:
            self.verdict(
                name,
                FAIL,
                f"{self.day} lists 0 documents: a busy day should not; "
                "the query shape is probably wrong",
            )
            return
        self.first_pages[doc_type] = page
        expected_pages = min(
            math.ceil(page.total / self.protocol.page_size), self.protocol.max_pages
        )
        keys = sum(1 for r in page.rows if r.dbname and r.filename)
        evidence = (
            f"{self.day}: {page.total} listed, {page.page_count} pages "
            f"(expected {expected_pages}), {len(page.rows)} rows, {keys} with keys"
        )
        if len(page.rows) > self.protocol.page_size or keys < len(page.rows):
            self.verdict(name, FAIL, evidence)
        elif page.page_count != expected_pages:
            self.verdict(name, FAIL, evidence + f"; the cap is not {self.protocol.cap} rows")
        else:
            self.verdict(name, PASS, evidence)

    def check_page_two(self, session: CnkiSession) -> None:
        name = "page turn: page 2"
        doc_type = next((t for t, p in self.first_pages.items() if p.page_count >= 2), None)
        if doc_type is None:
            self.verdict(name, UNKNOWN, "no search of this day has two pages")
            return
        first = self.first_pages[doc_type]
        page, why = self.search(
            session, Search.for_day(doc_type, self.day), 2, name, turn_token=first.turn_token
        )
        if page is None:
            self.verdict(name, FAIL, f"{doc_type}: {why}")
            return
        seen = {r.doc_key for r in first.rows}
        new = [r for r in page.rows if r.doc_key not in seen]
        if page.page != 2 or not new:
            self.verdict(name, FAIL, f"{doc_type}: page {page.page}, {len(new)} rows not on page 1")
        else:
            self.verdict(
                name,
                PASS,
                f"{doc_type}: page 2 has {len(new)} new rows "
                f"(turn token {first.turn_token[:12] or 'empty'}…)",
            )

    def check_query(self, session: CnkiSession) -> None:
        """A query task's search (issue 39, docs/QUERY.md): the day's papers with a professional
        -search expression that names the title of the day's first row narrow to that row; a
        malformed expression is refused, and in which words."""
        name = "query: professional search"
        first = self.first_pages.get("paper")
        if first is None or not first.rows:
            self.verdict(name, UNKNOWN, "the day's paper search failed")
            return
        row = first.rows[0]
        quote = "'" if "'" not in row.title else '"'
        query = f"TI={quote}{row.title}{quote}"
        page, why = self.search(session, Search.for_day("paper", self.day, query=query), 1, name)
        if page is None:
            self.verdict(name, FAIL, f"{query}: {why}")
            return
        found = any(r.doc_key == row.doc_key for r in page.rows)
        evidence = f"{query}: {page.total} of the day's {first.total} listed"
        if not found or not 1 <= page.total < first.total:
            self.verdict(
                name, FAIL, evidence + ("" if found else f"; {row.doc_key} not among them")
            )
        else:
            self.verdict(name, PASS, evidence + f", {row.doc_key} among them")
        name = "query: a malformed expression"
        broken = "TI='x' AND"
        page, why = self.search(session, Search.for_day("paper", self.day, query=broken), 1, name)
        if page is None:
            self.verdict(name, PASS, f"{broken!r} refused: {why}")
        elif page.total == 0:
            self.verdict(
                name,
                UNKNOWN,
                f"{broken!r} answered as a zero: only the crawler's own check stops a bad query",
            )
        else:
            self.verdict(name, FAIL, f"{broken!r} listed {page.total}: the expression was ignored")

    def check_date_narrows(self, session: CnkiSession, doc_type: str) -> None:
        name = f"date: one day ({doc_type})"
        day_page = self.first_pages.get(doc_type)
        if day_page is None:
            self.verdict(name, UNKNOWN, "the day's search failed")
            return
        week = Search(doc_type, self.day - dt.timedelta(days=6), self.day)
        page, why = self.search(session, week, 1, name)
        if page is None:
            self.verdict(name, FAIL, f"week search: {why}")
        elif page.total > day_page.total:
            self.verdict(name, PASS, f"{self.day}: {day_page.total} < week: {page.total}")
        else:
            self.verdict(
                name,
                FAIL,
                f"the date condition does not narrow: {self.day}: "
                f"{day_page.total}, week: {page.total}",
            )

    def check_categories(self, session: CnkiSession, doc_type: str) -> None:
        name = f"category: prefix ({doc_type})"
        day_page = self.first_pages.get(doc_type)
        candidates = self.categories.get(doc_type) or []
        if day_page is None or not candidates:
            self.verdict(
                name,
                UNKNOWN,
                "the day's search failed" if day_page is None else "no category to try",
            )
            return
        # A small category may list nothing on one day: try a few before calling it a failure.
        tried = []
        for parent, children in candidates[:3]:  # noqa: B007 - the pair found is used below
            page, why = self.search(session, Search.for_day(doc_type, self.day, parent), 1, name)
            if page is None:
                self.verdict(name, FAIL, f"{parent}: {why}")
                return
            tried.append(f"{parent}: {page.total}")
            if page.total > 0:
                break
        else:
            self.verdict(
                name,
                FAIL,
                f"{'; '.join(tried)} of the day's {day_page.total}: no category lists anything",
            )
            return
        if not page.total < day_page.total:
            self.verdict(
                name,
                FAIL,
                f"{parent}: {page.total} of the day's {day_page.total}: "
                "the category condition does not narrow",
            )
            return
        if not children:
            self.verdict(name, PASS, f"{parent}: {page.total} of {day_page.total}")
            return
        total = 0
        for code in children:
            child, why = self.search(
                session, Search.for_day(doc_type, self.day, code), 1, f"{name} {code}"
            )
            if child is None:
                self.verdict(name, FAIL, f"{code}: {why}")
                return
            total += child.total
        # A document may carry several codes, so children may add up to a little more.
        evidence = (
            f"{parent}: {page.total} of {day_page.total}; its {len(children)} children: {total}"
        )
        if page.total <= total <= page.total * 1.5:
            self.verdict(name, PASS, evidence)
        else:
            self.verdict(name, FAIL, evidence + " (children should add up to about the parent)")

    def check_detail(self, session: CnkiSession, doc_type: str) -> None:
        name = f"detail: {doc_type}"
        first = self.first_pages.get(doc_type)
        row = next((r for r in (first.rows if first else []) if r.url), None)
        if row is None:
            self.verdict(name, UNKNOWN, "no list row to follow")
            return
        url = self.protocol.absolute(row.url)
        answer = session.get(url, name, referer=self.protocol.grid_url)
        reason = _reason("detail", answer)
        if reason:
            self.verdict(name, FAIL, f"{row.doc_key}: {reason}")
            return
        try:
            fields = parsers.parse_detail(doc_type, answer.body)
        except RefusedPage as exc:
            self.verdict(name, FAIL, f"{row.doc_key}: {exc}")
            return
        fields.setdefault("title", row.title)
        missing = [f for f in REQUIRED_DETAIL_FIELDS[doc_type] if not fields.get(f)]
        filled = sum(1 for v in fields.values() if v)
        if missing:
            self.verdict(name, FAIL, f"{row.doc_key}: missing {', '.join(missing)}")
        else:
            self.verdict(name, PASS, f"{row.doc_key}: {filled} fields filled")
        self._detail_link = (doc_type, row, url)

    def check_export(self, session: CnkiSession) -> None:
        """CNKI's citation export (PROTOCOL.md point 16; docs/DEPTH.md): one request with two
        export ids of a list page, and how many records come back (the batch size that export
        depth learns per session: 1 of 2 means one id a request)."""
        name = "export: GetExport, 2 ids"
        rows = next(
            (
                [r for r in page.rows if r.export_id][:2]
                for page in self.first_pages.values()
                if sum(1 for r in page.rows if r.export_id) >= 2
            ),
            None,
        )
        if rows is None:
            self.verdict(name, UNKNOWN, "no list page with two export ids (input.cbItem)")
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
            self.verdict(name, FAIL, f"{reason}" + (f" ({words})" if words else ""))
            return
        try:
            records = parse_export(answer.body)
        except ExportAnswerError as exc:
            self.verdict(name, FAIL, str(exc))
            return
        asked = [ExportRow(r.export_id, r.title, r.authors) for r in rows]
        pairs, _, strays = match_records(asked, records)
        evidence = (
            f"{len(records)} records for 2 ids, {len(pairs)} matched by title"
            + (f", {len(strays)} matching no row" if strays else "")
            + (": batches of several ids work" if len(pairs) == 2 else ": one id a request")
        )
        self.verdict(name, PASS if pairs and not strays else FAIL, evidence)

    def check_references(self, session: CnkiSession) -> None:
        """One paper's reference list ([crawl] references), asked as the crawler asks it: with
        its detail link's token, in the session that listed it (PROTOCOL.md point 17)."""
        name = "references: paper"
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
            self.verdict(name, UNKNOWN, "no journal or thesis row to ask for")
            return
        detail = self.protocol.absolute(row.url)
        v = references.token_of(detail)
        if not v:
            self.verdict(name, FAIL, f"{row.doc_key}: its detail link has no v= token")
            return
        kind = references.reference_type(row.dbname)
        url = references.references_url(self.protocol.base_url, v, kind)
        answer = session.get(url, name, referer=detail)
        reason = _reason("references", answer)
        if reason:
            self.verdict(name, FAIL, f"{row.doc_key} ({kind}): {reason}: {_snippet(answer.body)}")
            return
        try:
            page = references.parse_references(answer.body)
        except RefusedPage as exc:
            self.verdict(name, FAIL, f"{row.doc_key} ({kind}): {exc}")
            return
        shown = page.references[0].title[:30] if page.references else "-"
        self.verdict(
            name,
            PASS,
            f"{row.doc_key} ({kind}): {len(page.references)} of {page.total} references "
            f"(first: {shown}); [crawl] references costs {math.ceil(page.total / 10) or 1} "
            "request(s) for this paper",
        )

    def check_foreign_session(self) -> None:
        """A detail link listed by one session, opened by another (how replays reach links).

        Either it works, or CNKI answers with a challenge the crawler recognises (it then
        refreshes the link by a title search); anything else would lose the document.
        """
        name = "detail: link from another session"
        link = getattr(self, "_detail_link", None)
        if link is None:
            self.verdict(name, UNKNOWN, "no detail page was fetched")
            return
        doc_type, row, url = link
        if self.checked_plain:
            # a session a person passed is bound to its cookies; the link, to that session
            other = CnkiSession(self, "session-2 (plain)")
            self.sessions.append(other)
            answer = other.get(url, name, referer=self.protocol.grid_url)
            reason = _reason("detail", answer)
            if reason is not None and (
                refusals.kind_of(reason) == refusals.CHALLENGE or reason == "http-302"
            ):
                self.verdict(
                    "detail: a link opens only in its own session",
                    PASS,
                    f"{row.doc_key}: opened in its session, {reason} in another; the crawler "
                    "lists the page again in the round's session",
                )
            else:
                self.verdict(
                    "detail: a link opens only in its own session",
                    FAIL if reason is not None else PASS,
                    f"{row.doc_key}: " + (reason or "it opens in any session"),
                )
            return
        other = self.open_session("session-2", check=False)
        if other is None:
            self.verdict(name, UNKNOWN, "a second session could not be opened")
            return
        answer = other.get(url, name, referer=self.protocol.grid_url)
        reason = _reason("detail", answer)
        if reason is None:
            self.verdict(name, PASS, f"{row.doc_key}: the link works in a fresh session")
        elif refusals.kind_of(reason) == refusals.CHALLENGE or reason == "http-302":
            self.verdict(
                name,
                PASS,
                f"{row.doc_key}: refused ({reason}); the crawler refreshes "
                "such links by a title search",
            )
        else:
            self.verdict(name, FAIL, f"{row.doc_key}: {reason}: a replayed link would be lost")


def default_day(today: dt.date | None = None) -> dt.date:
    """A busy day: the Wednesday four weeks back (CNKI's calendar), well indexed by now."""
    today = today or cnki_today()
    day = today - dt.timedelta(days=28)
    return day - dt.timedelta(days=(day.weekday() - 2) % 7)
