"""The stand-in's ``POST /kns8s/group/result``: a query's rows counted by facet, as CNKI does.

PROTOCOL.md, 2026 evidence point 23. The same checks as the grid (client id, a live session;
the session is touched, not counted as a page turn), the grid's QueryJson read by the grid's own
reader, and each count computed by the grid's own search with the facet value ticked: a count
here is always what the grid would list (``as_of``'s late arrivals included), and for a day the
counts of the 学科 facet add up to the day's total (each document's codes stay under one top-level
class of the stand-in's tree, whose top-level codes are the facet's values).

Only the ``CCL`` group is answered; other group ids are left out of the fragment, as a facet the
site does not offer (the crawler's parser then says "unexpected", never zero). No state here.
"""

from __future__ import annotations

import dataclasses
from html import escape
from urllib.parse import parse_qs

from standin import markup
from standin.corpus import Corpus

PATH = "/kns8s/group/result"
FACET = "CCL"
FACET_TITLE = "学科"
#: a group/result POST without a readable queryJson: CNKI's check of a form field, in the
#: words it uses for pageSize
BAD_QUERY_JSON = markup.rejection("参数校验;字段【queryJson】校验失败")


def facet_counts(corpus: Corpus, search, listed=None) -> list[tuple[str, str, int]]:
    """(code, label, count) of the search's rows per top-level category, empty ones left out.
    ``listed``: what the grid lists of a category search's results (its breaks), so that a
    count is what the grid's search with that category ticked totals."""
    tree = corpus.trees[search.doc_type]
    out = []
    for code in tree.top:
        ticked = dataclasses.replace(search, also=search.also + ((code,),))
        refs = corpus.results(ticked)
        count = len(listed(refs) if listed is not None else refs)
        if count:
            out.append((code, tree.names.get(code, code), count))
    return out


def fragment(counts: list[tuple[str, str, int]], groups: list[str]) -> bytes:
    """The answer's HTML, in CNKI's shape (dl[groupid] > dt b, dd > ul > li); a group the site
    does not offer is left out."""
    if FACET not in groups:
        return b'<div class="resultlist"></div>'  # CNKI's words unknown: not a zero, not blank
    items = "".join(
        f'<li><input type="checkbox" value="{escape(code)}" text="{escape(label)}" '
        f'title="{escape(label)}"><a href="javascript:void(0);" title="{escape(label)}">'
        f"{escape(label)}</a><span>({count})</span></li>"
        for code, label, count in counts
    )
    return (
        f'<div class="resultlist"><dl groupid="{FACET}" class="">'
        f'<dt class="tit"><i class="icon"></i><b>{FACET_TITLE}</b></dt>'
        f"<dd><ul>{items}</ul></dd></dl></div>"
    ).encode()


def read_form(body: bytes) -> tuple[str, list[str]] | None:
    """(queryJson, group ids) of a group/result POST, or None when either is missing."""
    form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    query_json = (form.get("queryJson") or [""])[0]
    groups = [g.strip() for g in (form.get("groupIds") or [""])[0].split(",") if g.strip()]
    if not query_json.strip() or not groups:
        return None
    return query_json, groups


def grid_form(query_json: str) -> dict[str, list[str]]:
    """The grid form whose search the site's own reader makes of this queryJson."""
    return {"QueryJson": [query_json], "pageSize": ["20"], "pageNum": ["1"]}
