"""The parsers of kcms2 detail pages (a patent's, a paper's, an achievement's), pure: HTML in, the
item's fields out (no network, no Scrapy engine). Markup is CONTRACTS.md's (hand-made detail
pages, since no real kcms2 page is public); old KCMS paper pages are read as a fallback.

As the list page's parser (:mod:`cnkispider.cnki.listgrid`), a page that is a refusal raises
:class:`RefusedPage` with the retry middleware's reason, and one it does not understand raises
``RefusedPage("unexpected")``. Values follow ``cnkispider.items``: every field a string, ``""``
when absent, several values joined with ``;`` (no spaces) in page order. Label/value rows are
read as key/value pairs through :data:`LABELS`, never by position, because CNKI drops and adds
rows page by page.
"""

from __future__ import annotations

import json
import re

from lxml import etree

from cnkispider.cnki import refusals
from cnkispider.cnki.markup import (
    NO_SUP,
    ONLINE_FIRST,
    as_bytes,
    css_class,
    document,
    hidden_inputs,
    is_hidden,
    join_values,
    text_of,
    value_of,
)
from cnkispider.exceptions import RefusedPage
from cnkispider.items import FIELDS, LIST_FIELDS

# -- the label table ------------------------------------------------------------------------

# Normalised label (see normalize_label) -> item field, per document type. One table, so that
# a label CNKI renames is fixed in one line. The same label can mean different fields in
# different types (分类号 is the IPC of a patent and the CLC of a paper).
LABELS: dict[str, dict[str, str]] = {
    "patent": {
        "专利类型": "patent_type",
        "申请(专利)号": "application_no",
        "申请号": "application_no",
        "申请日": "application_date",
        "申请公布号": "publication_no",
        "公开公告日": "publication_date",
        "授权公布号": "grant_no",
        "授权公告日": "grant_date",
        "申请人": "applicant",
        "地址": "address",
        "共同申请人": "co_applicants",
        "发明人": "inventors",
        "设计人": "inventors",  # design patents name their inventors so
        "分类号": "ipc",
        "主分类号": "main_ipc",
        "国省代码": "province_code",
        "代理机构": "agency",
        "代理人": "agent",
        "页数": "pages",
        "公开日": "publication_date",
        "摘要": "abstract",
        "主权项": "claim",
    },
    "paper": {
        "摘要": "abstract",
        "关键词": "keywords",
        "基金": "fund",
        "基金资助": "fund",
        "DOI": "doi",
        "分类号": "clc",
        "中图分类号": "clc",
        "专辑": "album",
        "专题": "topic",
        "ISSN": "issn",
        "页码": "page_range",
        "导师": "supervisor",
    },
    "achievement": {
        "成果完成人": "completers",
        "第一完成单位": "first_unit",
        "关键词": "keywords",
        "中图分类号": "clc",
        "学科分类号": "subject_code",
        "成果简介": "summary",
        "成果类别": "achievement_type",
        "成果入库时间": "entry_date",
        "成果水平": "level",
        "研究起止时间": "period",
        "评价形式": "evaluation",
    },
}

# Fields that hold a list: written "A;B" whether the page uses <a> children, ";" or "；".
MULTI_VALUED: dict[str, frozenset[str]] = {
    "patent": frozenset({"applicant", "co_applicants", "inventors", "ipc", "agent"}),
    "paper": frozenset({"authors", "institutions", "keywords", "fund", "clc", "supervisor"}),
    "achievement": frozenset({"completers", "keywords", "clc", "subject_code"}),
}

DETAIL_FIELDS: dict[str, tuple[str, ...]] = {
    doc_type: tuple(f for f in fields if f not in LIST_FIELDS)
    for doc_type, fields in FIELDS.items()
}

# -- detail pages ---------------------------------------------------------------------------

_X_TITLE = etree.XPath(f"//div[{css_class('wx-tit')}]//h1")
_X_ROWTIT = etree.XPath(f"//span[{css_class('rowtit')} or {css_class('rowtit2')}]")
_X_ABSTRACT_TEXT = etree.XPath(f"//*[{css_class('abstract-text')}]")
_X_CLAIM_TEXT = etree.XPath(f"//*[{css_class('claim-text')}]")
# 2026 kcms2: <div class="claim"><h5>主权项：</h5><div>TEXT</div></div> (.claim > h5 + div)
_X_CLAIM = etree.XPath(f"//div[{css_class('claim')}]/h5/following-sibling::*[1][self::div]")
_X_CLC_CODE = etree.XPath(f"//p[{css_class('clc-code')}]")
_X_SUMMARY = etree.XPath("//*[@id='ChDivSummary']")
_X_AUTHOR_H3 = etree.XPath(f"//h3[{css_class('author')}]")
_X_KEYWORDS = etree.XPath(f"//p[{css_class('keywords')}]")
_X_TOP_TIP = etree.XPath(f"//div[{css_class('top-tip')}]")
# kcms2's counts and sizes line: <div class="total-inform"><span>页码：7-10</span>...
_X_TOTAL_INFORM = etree.XPath(f"//*[{css_class('total-inform')}]/span")
_X_SHOUFA = etree.XPath(f"//*[{css_class('icon-shoufa')}]")
# older pages: div.sourinfo (刊名, "1987年12期", "ISSN：1001-1668") and div.total spans
# (<label>页码：</label><b>7-10</b>), old_journal_detail.html
_X_OLD_SOURINFO = etree.XPath(f"//div[{css_class('sourinfo')}]/p")
_X_OLD_TOTAL = etree.XPath(f"//div[{css_class('total')}]/span")
# 网络首发 on a kcms2 page: a mark in the title block or the source line above it (where the
# list row's b.marktip sits on the list page); never the body text, which may quote the words.
_X_HEAD_MARKS = etree.XPath(
    f"//div[{css_class('wx-tit')}]//*[self::b or self::span or self::i or self::em]"
    f" | //div[{css_class('top-tip')}]//*[self::b or self::span or self::i or self::em]"
)
# The old KCMS detail page (before kcms2), read as a fallback for papers.
_X_OLD_TITLE = etree.XPath(f"//div[{css_class('wxTitle')}]/h2[{css_class('title')}]")
_X_OLD_AUTHORS = etree.XPath(f"//div[{css_class('wxTitle')}]/div[{css_class('author')}]")
_X_OLD_ORGS = etree.XPath(f"//div[{css_class('wxTitle')}]/div[{css_class('orgn')}]")
_X_OLD_LABELS = etree.XPath(
    f"//div[{css_class('wxBaseinfo')}]//label[starts-with(@id, 'catalog_')]"
)

_INSTITUTION_INDEX_RE = re.compile(r"^\s*\d+\s*[.．、]\s*")
_LABEL_TRANSLATION = str.maketrans({"（": "(", "）": ")", "：": "", ":": ""})


def normalize_label(text: str) -> str:
    """``' 申请（专利）号：'`` -> ``'申请(专利)号'``: no spaces anywhere (two real labels carry a
    leading one), no trailing colon, ASCII brackets, ASCII letters upper-cased (DOI)."""
    return "".join(text.split()).translate(_LABEL_TRANSLATION).upper()


def parse_patent(page: str | bytes) -> dict[str, str]:
    """A kcms2 patent detail page -> the detail fields of ``PatentItem``."""
    return parse_detail("patent", page)


def parse_paper(page: str | bytes) -> dict[str, str]:
    """A kcms2 journal or thesis page (or an old KCMS one) -> the detail fields of ``PaperItem``."""
    return parse_detail("paper", page)


def parse_achievement(page: str | bytes) -> dict[str, str]:
    """A kcms2 achievement (成果) page -> the detail fields of ``AchievementItem``."""
    return parse_detail("achievement", page)


def parse_detail(doc_type: str, page: str | bytes) -> dict[str, str]:
    """The detail fields (``FIELDS[doc_type]`` minus ``LIST_FIELDS``) of one detail page."""
    if doc_type not in DETAIL_FIELDS:
        raise ValueError(f"doc_type: expected one of {sorted(DETAIL_FIELDS)}, got {doc_type!r}")
    data = as_bytes(page)
    reason = refusals.body_reason("detail", data)
    if reason:
        raise RefusedPage(reason, f"{doc_type} detail page")
    root = document(data, page)
    out = dict.fromkeys(DETAIL_FIELDS[doc_type], "")
    multi = MULTI_VALUED[doc_type]

    titles = _X_TITLE(root)
    if not titles:
        if doc_type == "paper" and _X_OLD_TITLE(root):
            return _old_paper(root, out, multi)
        raise RefusedPage("unexpected", f"{doc_type} detail page without .wx-tit h1")
    out["title"] = text_of(titles[0])
    if not out["title"]:
        raise RefusedPage("unexpected", f"{doc_type} detail page with an empty title")
    hidden = hidden_inputs(root)
    out["dbname"] = hidden.get("paramdbname", "")
    out["filename"] = hidden.get("paramfilename", "")

    labels = LABELS[doc_type]
    for span in _X_ROWTIT(root):
        if is_hidden(span):
            continue
        name = labels.get(normalize_label(text_of(span)))
        if name is None or out[name]:
            continue  # a label we do not store, or a repeated one: the first wins
        out[name] = _row_value(span, name in multi)

    if doc_type == "patent":
        _override(out, "abstract", _X_ABSTRACT_TEXT(root), multi)
        _override(out, "claim", _X_CLAIM(root) or _X_CLAIM_TEXT(root), multi)
    elif doc_type == "paper":
        _paper_people(root, out)
        _override(out, "abstract", _X_SUMMARY(root) or _X_ABSTRACT_TEXT(root), multi)
        keywords = _X_KEYWORDS(root)
        if keywords:
            out["keywords"] = value_of(keywords[0], multi=True) or out["keywords"]
        _override(out, "clc", _X_CLC_CODE(root), multi)
        out["online_first"] = _online_first_mark(root)
        _source_line(root, out)
        _totals(_X_TOTAL_INFORM(root), out)
        out["degree"] = _degree(hidden)
    # The visible abstract is cut to 100 characters + "…" when longer; the page keeps the
    # whole text in a hidden input, which wins whenever it is there.
    full = hidden.get("abstract_text", "")
    if full:
        out[ABSTRACT_FIELD[doc_type]] = " ".join(full.split())
    return out


# Where input#abstract_text goes: an achievement's abstract is its 成果简介.
ABSTRACT_FIELD = {"patent": "abstract", "paper": "abstract", "achievement": "summary"}


def _row_value(span, multi: bool) -> str:
    """The value of a ``span.rowtit``: the element after it, or text written right after it."""
    tail = " ".join((span.tail or "").split())
    nxt = span.getnext()
    if tail or nxt is None or "rowtit" in (nxt.get("class") or ""):
        return join_values([tail]) if multi else tail
    return value_of(nxt, multi)


def _override(out: dict[str, str], name: str, elements: list, multi: frozenset[str]) -> None:
    """A dedicated element (div.abstract-text, ...) wins over a labelled row for ``name``."""
    if elements:
        value = value_of(elements[0], name in multi)
        if value:
            out[name] = value


def _paper_people(root, out: dict[str, str]) -> None:
    """Authors from ``h3#authorpart`` and institutions from the next ``h3.author``."""
    h3s = _X_AUTHOR_H3(root)
    authors = next((h for h in h3s if h.get("id") == "authorpart"), None)
    if authors is None and h3s:
        authors = h3s[0]
    others = [h for h in h3s if h is not authors]
    if authors is not None:
        out["authors"] = _people(authors)
    if others:
        out["institutions"] = _people(others[0], strip_index=True)
    if authors is not None and others:
        out["author_affiliations"] = _affiliations(authors, others[0])


_SUP_NUMBERS_RE = re.compile(r"\d+")
_INSTITUTION_NUMBER_RE = re.compile(r"^\s*(\d+)\s*[.．、]")


def _affiliations(authors_h3, institutions_h3) -> str:
    """Each author with the institutions their ``<sup>`` numbers point to, as JSON text.

    The institutions are numbered ("1. 华中科技大学") when there are several; an author's
    ``<sup>1,2</sup>`` names them. Without numbers, a single institution is every author's;
    several institutions without numbers give each author none (never a guess)."""
    parts = list(institutions_h3.iterchildren("span")) or list(institutions_h3.iter("a"))
    by_number: dict[str, str] = {}
    names = []
    for part in parts:
        text = text_of(part, skip_tags=NO_SUP).strip(",，")
        match = _INSTITUTION_NUMBER_RE.match(text)
        name = _INSTITUTION_INDEX_RE.sub("", text)
        if not name:
            continue
        names.append(name)
        if match:
            by_number[match.group(1)] = name
    people = list(authors_h3.iterchildren("span")) or list(authors_h3.iter("a"))
    out = []
    for person in people:
        author = text_of(person, skip_tags=NO_SUP).strip(",，;；")
        if not author:
            continue
        numbers = [n for sup in person.iter("sup") for n in _SUP_NUMBERS_RE.findall(text_of(sup))]
        if numbers:
            institutions = [by_number[n] for n in numbers if n in by_number]
        else:
            institutions = names if len(names) == 1 else []
        out.append({"author": author, "institutions": institutions})
    return affiliations_json(out) if out else ""


def affiliations_json(affiliations: list[dict]) -> str:
    """The stored form of ``author_affiliations`` (one spelling, so that equal is equal)."""
    return json.dumps(affiliations, ensure_ascii=False, separators=(",", ":"))


# .top-tip, as l0o0/translators_CN CNKI.js reads it: "刊名. 2020,41(04):157-165", also without
# volume ("刊名. 2020,(04):1-7"), without pages, or pages in pieces ("3-5,12").
_TOP_TIP_RE = re.compile(
    r"^(?P<source>.+?)\s?\.\s?(?P<year>\d{4})?\s?(?:,(?P<volume>\d+)?)?\s?"
    r"(?:\(0*(?P<issue>\d+)\))?\s?(?::(?P<pages>[\d,\s-]+))?"
)
_OLD_ISSUE_RE = re.compile(r"(\d{4})\s*年\s*(?:(\d+)\s*卷\s*)?0*(\d+)\s*期")
_ISSN_RE = re.compile(r"ISSN\s*[：:]\s*([0-9]{4}-?[0-9]{3}[0-9Xx])")


def _source_line(root, out: dict[str, str]) -> None:
    """year, volume, issue, pages of a journal from its kcms2 ``.top-tip``."""
    for tip in _X_TOP_TIP(root):
        match = _TOP_TIP_RE.match(text_of(tip))
        if not match:
            continue
        for name in ("year", "volume", "issue"):
            out[name] = out[name] or (match.group(name) or "")
        pages = "".join((match.group("pages") or "").split()).strip(",-")
        out["page_range"] = out["page_range"] or pages
        return


def _totals(spans, out: dict[str, str]) -> None:
    """页码 from a counts line: kcms2 ``.total-inform > span`` "页码：7-10", or the older
    ``div.total span`` (<label>页码：</label><b>7-10</b>)."""
    for span in spans:
        label, _, value = text_of(span).partition("：")
        if normalize_label(label) == "页码" and not out["page_range"]:
            out["page_range"] = "".join(value.split())


def _degree(hidden: dict[str, str]) -> str:
    """博士 or 硕士 from the page's own database (CDFD, CMFD/CDMH), as translators_CN does."""
    for key in ("paramdbname", "paramdbcode"):
        name = hidden.get(key, "").upper()
        for prefix, degree in _DEGREES:
            if name.startswith(prefix):
                return degree
    return ""


_DEGREES = (("CDFD", "博士"), ("CMFD", "硕士"), ("CDMH", "硕士"))


def _people(container, strip_index: bool = False) -> str:
    """Names from ``<span>`` (or ``<a>``) children, without their ``<sup>`` affiliation index."""
    parts = list(container.iterchildren("span")) or list(container.iter("a"))
    names = [text_of(p, skip_tags=NO_SUP) for p in parts] if parts else [text_of(container, NO_SUP)]
    if strip_index:
        names = [_INSTITUTION_INDEX_RE.sub("", n) for n in names]
    return join_values(n.strip(",，") for n in names)


def _online_first_mark(root) -> str:
    """ "1" when the page marks the paper 网络首发, else "" (translators_CN reads
    ``.icon-shoufa``; the words in the head's marks count too)."""
    if _X_SHOUFA(root):
        return "1"
    for el in _X_HEAD_MARKS(root):
        if not is_hidden(el) and ONLINE_FIRST in (el.text or ""):
            return "1"
    return ""


def _old_paper(root, out: dict[str, str], multi: frozenset[str]) -> dict[str, str]:
    """The old KCMS page (``div.wxTitle h2.title``, ``label#catalog_*``): the fields it has."""
    out["title"] = text_of(_X_OLD_TITLE(root)[0])
    if not out["title"]:
        raise RefusedPage("unexpected", "paper detail page with an empty title")
    hidden = hidden_inputs(root)
    out["dbname"] = hidden.get("paramdbname", "")
    out["filename"] = hidden.get("paramfilename", "")
    for container, name, strip in (
        (_X_OLD_AUTHORS, "authors", False),
        (_X_OLD_ORGS, "institutions", True),
    ):
        found = container(root)
        if found:
            out[name] = _people(found[0], strip_index=strip)
    labels = LABELS["paper"]
    for label in _X_OLD_LABELS(root):
        name = labels.get(normalize_label(text_of(label)))
        if name is None or out[name]:
            continue
        # The value is the rest of the label's paragraph.
        out[name] = value_of(label.getparent(), name in multi, exclude=label)
    _override(out, "abstract", _X_SUMMARY(root), multi)
    if hidden.get("abstract_text"):
        out["abstract"] = " ".join(hidden["abstract_text"].split())
    authors, orgs = _X_OLD_AUTHORS(root), _X_OLD_ORGS(root)
    if authors and orgs:
        out["author_affiliations"] = _affiliations(authors[0], orgs[0])
    for p in _X_OLD_SOURINFO(root):  # "1987年12期", "ISSN：1001-1668"
        text = text_of(p)
        issue = _OLD_ISSUE_RE.search(text)
        if issue and not out["year"]:
            out["year"], out["volume"], out["issue"] = (
                issue.group(1),
                issue.group(2) or "",
                issue.group(3),
            )
        issn = _ISSN_RE.search(text)
        if issn and not out["issn"]:
            out["issn"] = issn.group(1).upper()
    _totals(_X_OLD_TOTAL(root), out)
    out["degree"] = _degree(hidden)
    return out
