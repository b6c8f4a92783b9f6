"""The stand-in's search grid: ``POST /kns8s/brief/grid`` (a QueryJson read as CNKI reads it,
its rejections, the 6,000-row cap, list rows with their detail tokens and export ids) and the
facet counts of ``POST /kns8s/group/result`` over the same search (standin/groups.py).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from urllib.parse import parse_qs

from standin import groups as facets
from standin import markup
from standin.catalogue import FOREIGN_DATABASES, PAPER_CLASSES, Search, parse_day
from standin.query import ExpertError, compile_expert
from standin.wire import Request, Response

CROSSDB_CLASS = "WD0FTY92"

# single-database resources (Resource, or Classid when Resource is absent): type and databases
SINGLE_RESOURCES = {
    "PATENT": ("patent", ()),
    "ACHIEVEMENTS": ("achievement", ()),
    "JOURNAL": ("paper", PAPER_CLASSES["YSTT4HG0"]),
    "DISSERTATION": ("paper", PAPER_CLASSES["LSTPFY1C"]),
}
SINGLE_CLASSES = {
    "VUDIXAIY": "PATENT",
    "BLZOG7CK": "ACHIEVEMENTS",
    "YSTT4HG0": "JOURNAL",
    "LSTPFY1C": "DISSERTATION",
}
PAGE_SIZES = ("10", "20", "50")
# break_ expert-ignored: the professional-search item is ignored, as a site that moved it would
# break_ census-short: a category search loses every CENSUS_SHORT_EVERY-th document
CENSUS_SHORT_EVERY = 10
BROKEN_DATE_DAYS = 7  # date-filter: every search covers the span's first week, whatever its PT
MAX_RANGE_DAYS = 3660
REJECTIONS = ("no_category", "page_size", "cursor", "logic", "expert", "group_form")
REJECTION_BODIES = {
    markup.BAD_EXPERT: "expert",
    markup.BAD_LOGIC: "logic",
    markup.NO_CATEGORY: "no_category",
    markup.BAD_PAGE_SIZE: "page_size",
    markup.CURSOR_PAST_CAP: "cursor",
}


def _lower_keys(d) -> dict:
    return {str(k).lower(): v for k, v in d.items()} if isinstance(d, dict) else {}


def _items(group: dict) -> list[dict]:
    g = _lower_keys(group)
    out = [_lower_keys(i) for i in g.get("items") or []]
    for child in g.get("childitems") or []:
        out.extend(_items(child))
    return out


class BadQuery(ValueError):
    """A QueryJson the stand-in cannot read (CNKI answers 抱歉，暂无数据，请稍后重试。)."""


class SearchGrid:
    """The list pages and the facet counts. A part of :class:`standin.site.Site`."""

    def _search(self, form: dict) -> tuple[Search | bytes, int, int]:
        """(search, page number, page size) from the grid form.

        The search is bytes (the answer) when CNKI rejects the query or finds nothing by rule
        (a single database asked with a KuaKuCode list); BadQuery if unreadable."""
        try:
            q = _lower_keys(json.loads(form["QueryJson"][0]))
        except (KeyError, ValueError) as exc:
            raise BadQuery(str(exc)) from None
        size_text = (form.get("pageSize") or [""])[0].strip()
        try:
            page = int((form.get("pageNum") or form.get("CurPage") or ["1"])[0] or 1)
        except ValueError as exc:
            raise BadQuery(str(exc)) from None
        if size_text not in PAGE_SIZES:
            return markup.BAD_PAGE_SIZE, page, 0
        size = int(size_text)
        resource = str(q.get("resource") or "").upper()
        classid = str(q.get("classid") or "").upper()
        kuaku = [c.strip().upper() for c in str(q.get("kuakucode") or "").split(",") if c.strip()]
        dbnames: tuple[str, ...] = ()
        foreign: tuple[str, ...] = ()
        if resource == "CROSSDB" or (not resource and classid == CROSSDB_CLASS):
            if not kuaku:  # 总库 needs the list of its databases
                return markup.NO_CATEGORY, page, size
            doc_type = "paper"
            dbnames = tuple(db for c in kuaku for db in PAPER_CLASSES.get(c, ()))
            foreign = tuple(FOREIGN_DATABASES[c][0] for c in kuaku if c in FOREIGN_DATABASES)
            if not dbnames and not foreign:
                return markup.NO_CONTENT, page, size
        else:
            single = SINGLE_RESOURCES.get(resource or SINGLE_CLASSES.get(classid, ""))
            if single is None:
                raise LookupError("no documents of this resource")
            if kuaku:  # a single database asked with a 总库 list: a genuine zero
                return markup.NO_CONTENT, page, size
            doc_type, dbnames = single
        start = end = None
        # prefix conditions (CLC SUFFIX, the CCL facet) as clauses: the codes of one clause are
        # OR'd, the clauses AND'd. In a group, a CLC row with Logic 1 joins the clause before it
        # (the form's several 分类号 rows joined by OR), with Logic 0 it starts a new one (AND);
        # the facet's ticked codes (each Logic 1) are one clause.
        clauses: list[list[str]] = []
        exact: list[str] = []
        title = ""
        expert = ""
        for group in _lower_keys(q.get("qnode")).get("qgroup") or []:
            open_clause = False
            for item in _items(group):
                name = str(item.get("field", "")).upper()
                value = str(item.get("value") or "").strip()
                logic = item.get("logic", 0)
                if type(logic) is not int or logic not in (0, 1, 2):
                    return markup.BAD_LOGIC, page, 0
                if name == "PT":
                    start, end = value, str(item.get("value2") or value).strip()
                elif name in ("CLC", "CCL") and value:
                    if logic == 2:  # NOT: not modelled; CNKI would narrow, never widen
                        raise BadQuery("NOT conditions are not modelled")
                    # TOPRANK ranks by relevance to the exact code: no prefix (child) matches
                    if name == "CLC" and str(item.get("operator", "")).upper() == "TOPRANK":
                        exact.append(value)
                    elif open_clause and (name == "CCL" or logic == 1):
                        clauses[-1].append(value)
                    else:  # SUFFIX (the form's 分类号) and the CCL facet: a prefix
                        clauses.append([value])
                        open_clause = True
                elif name == "TI":
                    title = value
                elif name == "EXPERT" and "expert-ignored" not in self.breaks:
                    if expert or not value:
                        return markup.BAD_EXPERT, page, 0
                    try:
                        compile_expert(value, doc_type)
                    except ExpertError:
                        return markup.BAD_EXPERT, page, 0
                    expert = value
        codes = clauses[0] if clauses else []
        also = tuple(tuple(sorted(set(c))) for c in clauses[1:])
        if "category-filter" in self.breaks:
            codes, exact, also = [], [], ()
        try:
            if start is None:
                first, last = self.corpus.span
            else:
                first, last = parse_day(start[:10]), parse_day(end[:10])
        except ValueError as exc:
            raise BadQuery(str(exc)) from None
        if "date-filter" in self.breaks:
            first = self.corpus.span[0]
            last = first + BROKEN_DATE_DAYS - 1
        if last - first > MAX_RANGE_DAYS:
            raise BadQuery("date range too long for the stand-in")
        sort_field = (form.get("sortField") or [""])[0]
        if sort_field not in ("", "PT", "FFD", "CF", "DFR"):
            sort_field = "PT"
        desc = (form.get("sortType") or ["desc"])[0].lower() != "asc"
        search = Search(
            doc_type,
            first,
            last,
            tuple(sorted(set(codes))),
            title,
            sort_field or "PT",
            desc,
            tuple(sorted(set(exact))),
            tuple(sorted(set(dbnames))),
            tuple(sorted(set(foreign))),
            also,
            expert,
        )
        return search, page, size

    def _variant(self, doc) -> str:
        """How a patent row carries its key: icon-collect, the link's query, or nowhere."""
        if self.options.rows_without_keys or "patent-keys" in self.breaks:
            return "bare"
        return "link" if doc.extra["keyless"] < self.options.collect_missing else "collect"

    def grid(self, req: Request) -> Response:
        if req.method != "POST":
            return Response(405, b"POST only", "text/plain")
        now = self.clock()
        if not self.client_ids.valid(self._cookie(req, "Ecp_ClientId")):
            self.stats["no_client_id_refusals"] += 1
            return self._json_403(req)
        sid = self._cookie(req, "SID_kns_new")
        verdict = self.sessions.grid(sid, now)
        if verdict == "unknown":
            self.stats["no_session_refusals"] += 1
            return self._json_403(req)
        if verdict == "turn-limit":
            self.stats["turn_refusals"] += 1
            self._challenge("soft_block", "turn_limit")
            return Response(200, markup.SOFT_BLOCK)
        if "json" in req.headers.get("content-type", ""):
            return Response(200, markup.NO_DATA_RETRY)  # CNKI wants a form, not a JSON body
        form = parse_qs(req.body.decode("utf-8", "replace"), keep_blank_values=True)
        try:
            search, page, size = self._search(form)
        except BadQuery:
            return Response(200, markup.NO_DATA_RETRY)
        except LookupError:
            return self._zero()
        if isinstance(search, bytes):
            name = REJECTION_BODIES.get(search)
            if name is None:
                return self._zero()
            self.stats["rejections"][name] += 1
            return Response(200, search)
        searches = self.stats["searches"]
        if page > 1:
            searches["turns"] += 1
        else:
            searches["first"] += 1
            if not search.codes and not search.exact:
                searches["uncategorised"] += 1
        if page > 1 and "turn-token" in self.breaks:
            self._challenge("soft_block", "turn_limit")
            return Response(200, markup.SOFT_BLOCK)
        refs = self.corpus.results(search)
        if search.codes or search.exact:
            refs = self._by_category(refs)
        total = len(refs)
        if total == 0:
            if page <= 1:
                searches["zero"] += 1
            return self._zero()
        cap = self.options.cap_rows
        first = (page - 1) * size
        if page < 1 or first >= min(total, cap):
            self.stats["page_refusals"] += 1
            self.stats["rejections"]["cursor"] += 1
            return Response(200, markup.CURSOR_PAST_CAP)
        pages = max(1, min(math.ceil(total / size), cap // size))
        prefix = self.tokens.prefix(sid, int(now * 1000))
        # a stale link was issued long before any token_ttl (not at 0: time.monotonic() is the
        # machine's uptime, under token_ttl for the first minutes after a boot)
        stale_prefix = (
            self.tokens.prefix(sid, int(now * 1000) - 10**9)
            if self.stale_links and not search.title
            else None
        )
        issue, document, base = self.tokens.issue, self.corpus.document, self.base
        patent = search.doc_type == "patent"
        page_b = str(page).encode()
        rows = []
        for seq, ref in enumerate(refs[first : min(first + size, cap)], first + 1):
            doc = document(search.doc_type, *ref)
            variant = self._variant(doc) if patent else "collect"
            cached = doc.row_parts
            parts = cached.get(variant) if cached else None
            a, b, c = parts or markup.row_parts(doc, base, variant)
            f = doc.fields
            self.exports.remember(doc, doc.extra["cookie"])  # its input.cbItem value
            rows.append(
                markup.ROW_HEAD
                + page_b
                + a
                + str(seq).encode()
                + b
                + issue(
                    stale_prefix if stale_prefix and f["filename"] in self.stale_links else prefix,
                    f["dbname"],
                    f["filename"],
                )
                + c
            )
        if self.options.header_rows > 0:
            draw = hashlib.blake2b(
                f"header|{self.options.corpus.seed}|{search}|{page}".encode(), digest_size=8
            ).digest()
            if int.from_bytes(draw, "big") / 2.0**64 < self.options.header_rows:
                rows.insert(0, markup.td_header(search.doc_type))
        # hidTurnPage: opaque, and echoed back leniently (never checked), like CNKI's
        turn = hashlib.blake2b(f"{sid}|{search}|{page}".encode(), digest_size=16).digest()
        turn_token = base64.urlsafe_b64encode(turn).decode().replace("=", "!")
        self.stats["pages"]["list"] += 1
        return Response(
            200, markup.list_fragment(search.doc_type, total, page, pages, rows, turn_token)
        )

    def group_result(self, req: Request) -> Response:
        """Facet counts (standin/groups.py): the grid's checks and search, counted by facet."""
        if req.method != "POST":
            return Response(405, b"POST only", "text/plain")
        if not self.client_ids.valid(self._cookie(req, "Ecp_ClientId")):
            self.stats["no_client_id_refusals"] += 1
            return self._json_403(req)
        if not self.sessions.touch(self._cookie(req, "SID_kns_new"), self.clock()):
            self.stats["no_session_refusals"] += 1  # touched, not counted as a page turn
            return self._json_403(req)
        if "json" in req.headers.get("content-type", ""):
            return Response(200, markup.NO_DATA_RETRY)  # a form, as the grid wants
        asked = facets.read_form(req.body)
        try:
            search = self._search(facets.grid_form(asked[0]))[0] if asked else None
        except BadQuery:
            search = None
        except LookupError:
            search = ()  # no documents of this resource: nothing to count
        if search is None:
            self.stats["rejections"]["group_form"] += 1
            return Response(200, facets.BAD_QUERY_JSON)
        if isinstance(search, bytes) and search in REJECTION_BODIES:
            self.stats["rejections"][REJECTION_BODIES[search]] += 1
            return Response(200, search)  # what the grid answers this query
        self.stats["pages"]["group"] += 1
        counts = (
            facets.facet_counts(self.corpus, search, self._by_category)
            if isinstance(search, Search)
            else []
        )
        return Response(200, facets.fragment(counts, asked[1]))

    def _by_category(self, refs: list) -> list:
        """What a search with a category condition lists of its results: all of them, or
        with break ``census-short`` one in CENSUS_SHORT_EVERY lost (a document no category
        reaches, so the category facet does not count it either)."""
        if "census-short" not in self.breaks:
            return refs
        return [r for r in refs if r[-1] % CENSUS_SHORT_EVERY != CENSUS_SHORT_EVERY - 1]

    def _zero(self) -> Response:
        """A search with no results: CNKI's genuine zero, or (``zero_as_soft_block``) the soft
        block's very bytes, as PROTOCOL.md point 13 leaves possible."""
        self.stats["pages"]["no_content"] += 1
        if self.options.zero_as_soft_block:
            self.stats["zeros_as_soft_block"] += 1
            return Response(200, markup.SOFT_BLOCK)
        return Response(200, markup.NO_CONTENT)
