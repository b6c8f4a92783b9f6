"""The probe's checks of what a crawl stores: a detail page per type with the fields the crawler
needs, the export of a page's rows matched to them, and a paper's reference list. A mixin of
:class:`cnkispider.probe.checks.Probe`; they read the links the searches found.
"""

from __future__ import annotations

import math

from cnkispider.cnki import detailpage, references, refusals
from cnkispider.cnki.export_batch import ExportRow, match_records
from cnkispider.cnki.export_records import ExportAnswerError, parse_export
from cnkispider.exceptions import RefusedPage
from cnkispider.probe.answers import CnkiSession
from cnkispider.probe.answers import reason as _reason
from cnkispider.probe.answers import snippet as _snippet
from cnkispider.probe.verdicts import FAIL, PASS, UNKNOWN, AsIs, Said, Type
from cnkispider.words.i18n import N_

# Fields a detail page of each type must yield for the crawler to be worth running.
REQUIRED_DETAIL_FIELDS = {
    "patent": ("title", "application_no", "application_date", "applicant", "inventors", "abstract"),
    "paper": ("title", "authors", "abstract"),
    "achievement": ("title", "completers", "first_unit", "summary"),
}


class RecordChecks:
    """The checks of the detail pages, the export and the references."""

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
            fields = detailpage.parse_detail(doc_type, answer.body)
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
