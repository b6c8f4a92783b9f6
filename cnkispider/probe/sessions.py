"""The probe's checks of CNKI sessions: the warm-up and the client id of a plain session, a
session a person passed taken from the pool, how long such a session lasts, and whether a
detail link opens in another session. A mixin of :class:`cnkispider.probe.checks.Probe`.
"""

from __future__ import annotations

from cnkispider.cnki import refusals
from cnkispider.cnki.search import Search
from cnkispider.probe.answers import CnkiSession
from cnkispider.probe.answers import client_id as _client_id
from cnkispider.probe.answers import reason as _reason
from cnkispider.probe.answers import snippet as _snippet
from cnkispider.probe.verdicts import FAIL, PASS, UNKNOWN, Said
from cnkispider.words.i18n import N_


class SessionChecks:
    """Opening sessions and the checks of what CNKI does with them."""

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
