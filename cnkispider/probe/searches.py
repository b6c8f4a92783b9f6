"""The probe's checks of the list grid: a day's search per type, page two, the query words, a
date that narrows and the categories that split a day. A mixin of
:class:`cnkispider.probe.checks.Probe`; the first pages it keeps feed the later checks.
"""

from __future__ import annotations

import datetime as dt
import math

from cnkispider.cnki import listgrid, refusals
from cnkispider.cnki.search import Search
from cnkispider.exceptions import RefusedPage
from cnkispider.probe.answers import CnkiSession
from cnkispider.probe.answers import reason as _reason
from cnkispider.probe.verdicts import FAIL, PASS, UNKNOWN, Said, Type
from cnkispider.words.i18n import N_


class SearchChecks:
    """The grid's searches and the checks of their answers."""

    def search(
        self,
        session: CnkiSession,
        search: Search,
        page: int,
        name: str,
        turn_token: str | None = None,
    ) -> tuple[listgrid.ListPage | None, str]:
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
            return listgrid.parse_list(answer.body), ""
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
