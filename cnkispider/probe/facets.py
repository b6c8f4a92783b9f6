"""The probe's checks of facet counts and the update-time control (issue 46.4).

``group/result`` (PROTOCOL.md 2026 point 23): the day's counts by the facet a type's categories
map to must add up to the grid's total for the same query, or a split by facet counts would
lose or double rows. The update-time control (更新时间: 最近一周 ...) is unconfirmed anywhere public:
the probe tries one candidate encoding in QueryJson and reports what CNKI did with it (rejected,
ignored, or narrowed), never assuming it works. The checks run after the base probe's category
checks (:meth:`Probe.more_checks`); no state beyond the probe's.
"""

from __future__ import annotations

import datetime as dt
import json

from cnkispider.cnki import groups, listgrid, refusals
from cnkispider.cnki.search import RESOURCES, Search
from cnkispider.exceptions import RefusedPage
from cnkispider.probe import checks
from cnkispider.probe.answers import CnkiSession
from cnkispider.probe.answers import reason as _reason
from cnkispider.probe.verdicts import FAIL, PASS, UNKNOWN, Said, Type
from cnkispider.words.i18n import N_

#: The update-time candidate tried: a ControlGroup item of the last week on an entry-time field.
#: UNCONFIRMED (no public client sends one): a probe run on CNKI says what it does.
UPDATE_TIME_ITEM = {
    "Key": "span[value=UT]",
    "Title": "更新时间",
    "Logic": 0,
    "Field": "UT",
    "Operator": 7,
}


class Probe(checks.Probe):
    """The probe with the facet checks."""

    def more_checks(self, main: CnkiSession) -> None:
        for doc_type in RESOURCES:
            self.check_group_counts(main, doc_type)
        self.check_update_time(main)

    def check_group_counts(self, session: CnkiSession, doc_type: str) -> None:
        check = Said(N_("facet counts: %(type)s"), type=Type(doc_type))
        day_page = self.first_pages.get(doc_type)
        if day_page is None:
            self.verdict(check, UNKNOWN, Said(N_("the day's search failed")))
            return
        group = groups.category_group(doc_type)
        url, form, headers = self.protocol.group_request_args(
            Search.for_day(doc_type, self.day), [group]
        )
        answer = (self.current or session).post(
            url, form, check.english(), referer=headers["Referer"]
        )
        if answer.error:
            self.verdict(check, FAIL, Said(N_("no answer: %(why)s"), why=answer.error))
            return
        try:
            counts = groups.counts_of(groups.parse_groups(answer.body, [group]), group)
        except RefusedPage as exc:
            words = refusals.rejection_text(answer.body)
            why = str(exc) + (f" ({words})" if words else "")
            self.verdict(check, FAIL, Said(N_("%(group)s: %(why)s"), group=group, why=why))
            return
        said = Said(
            N_(
                "%(day)s: %(group)s counts %(parts)s parts, summing to %(sum)s; the grid: %(total)s"
            ),
            day=self.day,
            group=group,
            parts=len(counts),
            sum=sum(counts.values()),
            total=day_page.total,
        )
        self.verdict(check, PASS if sum(counts.values()) == day_page.total else FAIL, said)

    def check_update_time(self, session: CnkiSession) -> None:
        """Informational (PASS whatever CNKI does: the crawler does not use the control): the
        evidence says whether the candidate was rejected, ignored or narrowed the week."""
        check = Said(N_("update time: last week (unconfirmed)"))
        doc_type = "paper"
        day_page = self.first_pages.get(doc_type)
        if day_page is None:
            self.verdict(check, UNKNOWN, Said(N_("the day's search failed")))
            return
        search = Search.for_day(doc_type, self.day)
        form = self.protocol.grid_form(search, 1, None)
        query = json.loads(form["QueryJson"])
        week_ago = (self.day - dt.timedelta(days=6)).isoformat()
        item = dict(UPDATE_TIME_ITEM, Value=week_ago, Value2=self.day.isoformat())
        for qgroup in query["QNode"]["QGroup"]:
            if qgroup["Key"] == "ControlGroup":
                qgroup["Items"].append(item)
        form["QueryJson"] = json.dumps(query, ensure_ascii=False, separators=(",", ":"))
        answer = (self.current or session).post(
            self.protocol.grid_url,
            form,
            check.english(),
            referer=self.protocol.referer(doc_type),
        )
        reason = _reason("list", answer)
        if reason:
            words = refusals.rejection_text(answer.body) or reason
            self.verdict(check, PASS, Said(N_("not accepted: %(why)s"), why=words))
            return
        try:
            total = listgrid.parse_list(answer.body).total
        except RefusedPage as exc:
            self.verdict(check, PASS, Said(N_("not accepted: %(why)s"), why=str(exc)))
            return
        if total == day_page.total:
            said = Said(
                N_("ignored: the day lists %(total)s with and without it (unconfirmed)"),
                total=total,
            )
        else:
            said = Said(
                N_("the day lists %(total)s with it, %(before)s without: it narrows (unconfirmed)"),
                total=total,
                before=day_page.total,
            )
        self.verdict(check, PASS, said)
