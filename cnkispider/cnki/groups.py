"""CNKI's facet counts: one ``group/result`` POST tells how a query's rows split over a facet.

Pure (no network, no Scrapy engine), like :mod:`cnkispider.cnki.protocol` and
:mod:`cnkispider.cnki.listgrid`: the form a browser's result page sends, the parser of the HTML
fragment it gets back, and which facet a document type's categories are counted by
(PROTOCOL.md, 2026 evidence point 23). :meth:`cnkispider.cnki.protocol.Protocol.group_request_args`
builds the request for a round's search in the grid's session and headers.

A fragment this module does not understand raises ``RefusedPage("unexpected")``; CNKI's
refusals raise the reason the grid would get (:func:`cnkispider.cnki.refusals.body_reason`).
Never an empty answer that would read as "no rows".
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cnkispider.cnki import refusals
from cnkispider.cnki.markup import as_bytes as _as_bytes  # one HTML reader for all pages
from cnkispider.cnki.markup import document as _document

# the form and path live beside the grid's (protocol.py builds the request); named here too
from cnkispider.cnki.protocol import GROUP_PATH, group_form
from cnkispider.exceptions import RefusedPage

__all__ = [
    "CATEGORY_GROUPS",
    "FACET_PARTS",
    "FACET_SEEDING",
    "GROUP_PATH",
    "GROUP_TITLES",
    "SINGLE_GROUP_PATH",
    "FacetCount",
    "category_group",
    "counts_of",
    "group_form",
    "parse_groups",
]

SINGLE_GROUP_PATH = "/kns8s/group/singleresult"  # expands one group (not used yet)
#: meta of a look's group/result request: the parts it recounts (cnkispider/spiders/facets.py);
#: its answer is a fragment, not a grid (the refusal middlewares let it through to the parser)
FACET_PARTS = "facet_parts"
#: meta of a census's seed (its page 1, or a look's group/result) and of its split request: the
#: census's seeding (tasks/parts.py), which the scheduler does not strip as it does the seed's
#: own token; the split or recount its facet counts decide acts only for that seeding
FACET_SEEDING = "facet_seeding"

# The group ids of the result page's left-hand facets, with their labels (a group of several
# ids is one facet: its ids are joined with ||| in the form).
GROUP_TITLES: dict[str, str] = {
    "CCL": "学科",
    "YE": "年度",
    "ZYZT|||CYZT": "主题",
    "LYBSM": "来源类别",
    "YJCC": "研究层次",
    "WXLX2": "文献类型",
    "WXLY": "文献来源",
    "AUC|||HWZZ": "作者",
    "AFC": "机构",
    "FUC": "基金",
}

# Which facet counts a document type's categories. Papers: CCL (学科), whose codes are CNKI's
# 168 专题 codes (PROTOCOL.md point 6/23). Patents and achievements: UNCONFIRMED (no public
# client shows which group they offer, perhaps an IPC one): CCL is assumed until the probe
# says otherwise, and the value is configurable (``category_group(doc_type, override)``).
CATEGORY_GROUPS: dict[str, str] = {"paper": "CCL", "patent": "CCL", "achievement": "CCL"}
UNCONFIRMED_GROUPS = frozenset({"patent", "achievement"})


@dataclass(frozen=True)
class FacetCount:
    """One facet value of a group/result answer: its code, its label, its row count."""

    code: str
    label: str
    count: int


def category_group(doc_type: str, override: str | Mapping[str, str] | None = None) -> str:
    """The group id counting ``doc_type``'s categories (``override``: one id, or a mapping by
    type, as a configuration gives it)."""
    if isinstance(override, str) and override.strip():
        return override.strip()
    if isinstance(override, Mapping) and override.get(doc_type):
        return str(override[doc_type]).strip()
    try:
        return CATEGORY_GROUPS[doc_type]
    except KeyError:
        raise ValueError(
            f"doc_type: expected one of {sorted(CATEGORY_GROUPS)}, got {doc_type!r}"
        ) from None


_COUNT_RE = re.compile(r"^\s*[(（]?\s*([0-9][0-9,]*)\s*[)）]?\s*$")


def _count(li, where: str) -> int:
    for span in li.iter("span"):
        text = "".join(span.itertext())
        match = _COUNT_RE.match(text)
        if match:
            return int(match.group(1).replace(",", ""))
    raise RefusedPage("unexpected", f"{where}: no count (123) in the entry")


def parse_groups(
    html: str | bytes, group_ids: Sequence[str] | None = None
) -> dict[str, list[FacetCount]]:
    """The facet counts of a group/result fragment: ``{group id: [FacetCount, ...]}``.

    Reads ``dl[groupid] > dd > li``: each entry's ``input`` gives its label (attribute
    ``text``) and code (``value``), its ``span`` the count "(123)". Entries of sub-groups
    (``dd[tit]``) are listed together under their ``dl``'s id. ``group_ids``: the ids asked
    for; one missing from the answer makes it ``unexpected`` (a facet CNKI leaves out is not a
    facet with no rows).
    """
    data = _as_bytes(html)
    # The grid's refusals (verify, rejected, soft block, captcha, blank, JavaScript) first; the
    # list's "no-pager" only says it is not a grid, which a group fragment never is.
    reason = refusals.body_reason("list", data)
    if reason and reason != "no-pager":
        raise RefusedPage(reason, "group/result")
    root = _document(data, html)
    groups: dict[str, list[FacetCount]] = {}
    for dl in root.iter("dl"):
        gid = (dl.get("groupid") or "").strip()
        if not gid:
            continue
        where = f"group/result {gid}"
        if gid in groups:
            raise RefusedPage("unexpected", f"{where}: the group is answered twice")
        entries: list[FacetCount] = []
        for dd in dl.iter("dd"):
            seen: set[str] = set()  # per dd: a topic may be both main and secondary
            for li in dd.iter("li"):
                inputs = list(li.iter("input"))
                if not inputs:
                    raise RefusedPage("unexpected", f"{where}: an entry without its input")
                code = (inputs[0].get("value") or "").strip()
                label = (inputs[0].get("text") or inputs[0].get("title") or "").strip()
                if not code:
                    raise RefusedPage("unexpected", f"{where}: an entry without a code")
                if code in seen:
                    raise RefusedPage("unexpected", f"{where}: code {code} listed twice")
                seen.add(code)
                entries.append(FacetCount(code, label, _count(li, f"{where} {code}")))
        groups[gid] = entries
    if not groups:
        raise RefusedPage("unexpected", "group/result: no dl[groupid] in the answer")
    missing = [g for g in (group_ids or ()) if g not in groups]
    if missing:
        raise RefusedPage("unexpected", f"group/result: groups {', '.join(missing)} not answered")
    return groups


def counts_of(groups: Mapping[str, list[FacetCount]], group_id: str) -> dict[str, int]:
    """``{code: count}`` of one group of a :func:`parse_groups` answer."""
    return {f.code: f.count for f in groups[group_id]}
