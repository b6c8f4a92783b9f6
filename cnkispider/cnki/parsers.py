"""Pure page parsers: kns8s list pages and kcms2 detail pages in, plain data out.

No network and no Scrapy engine here: the spider hands a response body to these functions and
decides what to request next from what they return. Markup is CONTRACTS.md's (the real list
page in shared/cnki/pages, hand-made detail pages since no real kcms2 page is public).

Every parser first runs :func:`cnkispider.cnki.refusals.body_reason` on the body, so a page
that is one of CNKI's ways of saying no raises :class:`RefusedPage` with the same reason the
retry middleware sees. After that, a parser raises ``RefusedPage("unexpected")`` or
``RefusedPage("no-pager")`` for a page it does not understand; it never returns an empty result
for one. Zero results are reported only for a page that says so: the no-content block
(``p.no-content`` with 暂无数据), or a pager that reads 0.

Detail values follow ``cnkispider.items``: every field a string, ``""`` when absent, several
values joined with ``;`` (no spaces) in page order. Label/value rows are read as key/value pairs
through :data:`LABELS`, never by position, because CNKI drops and adds rows page by page.
"""

from __future__ import annotations

import codecs
import json
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit

from lxml import etree

from cnkispider.cnki import refusals
from cnkispider.exceptions import RefusedPage
from cnkispider.items import FIELDS, LIST_FIELDS

__all__ = [
    "LABELS",
    "ListPage",
    "ListRow",
    "normalize_label",
    "parse_achievement",
    "parse_detail",
    "parse_list",
    "parse_paper",
    "parse_patent",
]

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

# -- the list page --------------------------------------------------------------------------


@dataclass
class ListRow:
    """One row of a result list. Every value is the normalised cell text ("" when empty)."""

    seq: str
    title: str
    url: str  # the kcms2 detail link as found (resolve it with Protocol.absolute)
    authors: str  # ";"-joined (a patent's inventors, td.inventor)
    source: str  # td.source (a patent's applicant, td.applicant)
    date: str  # td.date (a patent's second td.date: 公开日, the day of its round)
    application_date: str  # a patent's first td.date (申请日); "" for other rows
    database: str  # 期刊, 硕士, 博士, 专利, ...
    # The natural key, from a.icon-collect or else from the detail link's own dbname/filename
    # parameters; never empty (a row without a key makes the page unexpected); never the url.
    dbname: str
    filename: str
    quote: str  # td.quote as written
    download: str  # td.download as written
    # 被引 and 下载 as digits: an empty cell is "0"; "" when the row has no such cell (patent
    # rows) or the cell holds no number (unknown, never guessed as 0).
    cited: str = ""
    downloads: str = ""
    export_id: str = ""  # td.seq input.cbItem@value: opaque, not dbname!filename
    online_first: str = ""  # "1" when td.name has b.marktip 网络首发

    @property
    def doc_key(self) -> str:
        return f"{self.dbname}/{self.filename}"


@dataclass
class ListPage:
    """A parsed list page. ``total`` is the real total, ``page_count`` the pages CNKI shows
    (capped), ``turn_token`` the value to send as ``turnpage`` with the next page."""

    total: int
    page_count: int
    page: int
    turn_token: str
    rows: list[ListRow] = field(default_factory=list)


def _cls(name: str) -> str:
    """XPath test for one class token (``contains(@class, 'name')`` alone would match 'names').

    The plain ``contains`` runs first because it is cheap and rejects almost every element;
    the exact token test alone costs a millisecond per query on a full page.
    """
    return f"(contains(@class, '{name}') and contains(concat(' ', normalize-space(@class), ' '), ' {name} '))"


_X_ROWS = etree.XPath(f"//table[{_cls('result-table-list')}]//tr[td]")
# Element names are spelled out where known: "//span[...]" only tests the page's few
# hundred spans, "//*[...]" every element (four times slower on a full page).
_X_PAGER = etree.XPath(f"//span[{_cls('pagerTitleCell')}]")
_X_OLD_PAGER = etree.XPath(f"//div[{_cls('pagerTitleCell')}]")  # old KNS
_X_PAGE_MARK = etree.XPath(f"//span[{_cls('countPageMark')}]")
_X_PAGE_NEXT = etree.XPath("//a[@id='PageNext']")
_X_NO_CONTENT = etree.XPath(f"//p[{_cls('no-content')}]")

_NUMBER_RE = re.compile(r"\d[\d,]*")
_PAGER_TOTAL_RE = re.compile(r"(-\s*)?(\d[\d,]*)\s*条")
_NEGATIVE_RE = re.compile(r"[-−－]\s*\d")
_NO_DATA = "暂无数据"
_RETRY = "请稍后重试"


# More results than CNKI holds in all (about 3 x 10^8 documents): a pager saying more is broken.
MAX_TOTAL = 10**9


def parse_list(page: str | bytes, doc_type: str | None = None) -> ListPage:
    """Parse a kns8s result list (the grid fragment, or a whole saved page).

    Rows are read by their own markup: journal/thesis/achievement rows (``td.author``,
    ``td.source``, one ``td.date``) and patent rows (``td.inventor``, ``td.applicant``, two
    ``td.date``: 申请日 then 公开日). With ``doc_type="patent"`` a row in journal markup is
    refused: its one date cannot be told apart as 申请日 or 公开日. A header row written in
    ``<td>`` cells is skipped; any other row that cannot be read (no detail link, no key)
    makes the whole page ``unexpected`` with a message naming the page and the row: never
    an exception of another kind, never a page that silently lost some of its rows.
    """
    data = _as_bytes(page)
    reason = refusals.body_reason("list", data)
    if reason:
        raise RefusedPage(reason, f"{doc_type or 'a'} list page")
    root = _document(data, page)

    hidden = _hidden_inputs(root)
    page_no = _current_page(root, hidden)
    where = f"{doc_type + ' ' if doc_type else ''}list page {page_no}"
    rows = _rows(root, doc_type, where)
    pagers = _X_PAGER(root) or _X_OLD_PAGER(root)
    turn_token = hidden.get("hidTurnPage", "")
    if not pagers and "totalCnt" not in hidden:
        if _says_no_content(root) and not rows:
            return ListPage(total=0, page_count=0, page=page_no, turn_token=turn_token)
        raise RefusedPage("no-pager", "no pagerTitleCell, no #totalCnt, no no-content block")

    total = _total(pagers, hidden, where)
    if total == 0:
        if rows:
            raise RefusedPage("unexpected", f"{where}: pager says 0 results but {len(rows)} rows")
        return ListPage(total=0, page_count=0, page=page_no, turn_token=turn_token)
    if not rows:
        # A header without rows under a non-zero total is a truncated or broken answer; an
        # empty result here would silently drop the page's documents.
        raise RefusedPage("unexpected", f"{where}: total {total} but no rows")
    return ListPage(
        total=total,
        page_count=_page_count(root, page_no, where),
        page=page_no,
        turn_token=turn_token,
        rows=rows,
    )


# The labels of a table header written in <td> cells instead of <th> (seen on kns8 grids).
_HEADER_LABELS = frozenset(
    "序号 题名 作者 发明人 完成人 来源 申请人 完成单位 发表时间 日期 申请日 公开日 入库时间 "
    "数据库 被引 下载 操作 阅读 收藏 引用".split()
)


def _is_header(tr) -> bool:
    """A header row in <td> cells: no link anywhere, and every non-empty cell a column label."""
    if any(a.get("href") for a in tr.iter("a")):
        return False
    texts = [t for t in (_text(td) for td in tr.iterchildren("td")) if t]
    return len(texts) >= 2 and all(t in _HEADER_LABELS for t in texts)


def _rows(root, doc_type: str | None, where: str) -> list[ListRow]:
    rows = []
    for number, tr in enumerate(_X_ROWS(root), 1):
        if _is_header(tr):
            continue
        rows.append(_list_row(tr, doc_type, f"{where}, row {number}"))
    return rows


def _hidden_inputs(root) -> dict[str, str]:
    """``{id: value}`` of the page's inputs, in one pass (the first of a repeated id wins)."""
    found: dict[str, str] = {}
    for el in root.iter("input"):
        key = el.get("id")
        if key and key not in found:
            found[key] = (el.get("value") or "").strip()
    return found


def _checked_total(text: str, where: str) -> int | None:
    """The total written in ``text``, or None; a negative or absurd one is refused (a pager
    claiming -5 or 10^22 results is broken, and reading "-5" as 5 would hide it)."""
    number = _to_int(text)
    if number is None:
        return None
    if _NEGATIVE_RE.search(text):
        raise RefusedPage("unexpected", f"{where}: negative total {text.strip()!r} in the pager")
    if number > MAX_TOTAL:
        raise RefusedPage(
            "unexpected", f"{where}: absurd total {number} (more than CNKI holds, {MAX_TOTAL})"
        )
    return number


def _total(pagers, hidden: dict[str, str], where: str = "list page") -> int:
    for pager in pagers:
        for em in pager.iter("em"):
            number = _checked_total(_text(em), where)
            if number is not None:
                return number
    number = _checked_total(hidden.get("totalCnt") or "", where)
    if number is not None:
        return number
    # The old KNS pager writes "找到 1,934,679 条结果" without an <em>.
    for pager in pagers:
        match = _PAGER_TOTAL_RE.search(_text(pager))
        if match:
            return _checked_total(match.group(0), where)
    raise RefusedPage("no-pager", f"{where}: pager without a readable total")


def _current_page(root, hidden: dict[str, str]) -> int:
    number = _to_int(hidden.get("curPageHid"))
    if number:
        return number
    for mark in _X_PAGE_MARK(root):
        head = _text(mark).partition("/")[0]
        number = _to_int(head)
        if number:
            return number
    return 1


def _page_count(root, page_no: int, where: str = "list page") -> int:
    """The page count the pager shows. Not trusted further than its sign: the spider walks
    at most ``min(this, Protocol.page_count(total))`` pages (a pager may claim a million)."""
    for mark in _X_PAGE_MARK(root):
        raw = mark.get("data-pagenum")
        if raw is None or _to_int(raw) is None:
            raw = _text(mark).partition("/")[2]
        number = _to_int(raw)
        if number is not None:
            if _NEGATIVE_RE.search(raw):
                raise RefusedPage("unexpected", f"{where}: negative page count {raw.strip()!r}")
            return number
    if not _X_PAGE_NEXT(root):
        return page_no  # no page mark and no next link: this is the last page
    raise RefusedPage("no-pager", f"{where}: rows and a next link but no page count")


def _says_no_content(root) -> bool:
    for p in _X_NO_CONTENT(root):
        text = _text(p)
        if _NO_DATA in text and _RETRY not in text:
            return True
    return False


def _links(el, cls: str) -> list:
    """The ``<a>`` under ``el`` with class ``cls``, else all of them (plain iteration: an
    XPath call per cell would cost more than the row's text)."""
    links = list(el.iter("a"))
    marked = [a for a in links if cls in (a.get("class") or "").split()]
    return marked or links


_DATE_RE = re.compile(r"\d{4}-\d{1,2}-\d{1,2}(?:\s+\d{1,2}:\d{2}(?::\d{2})?)?")


def _key_from_link(url: str) -> tuple[str, str]:
    """``dbname`` and ``filename`` from a detail link's own query (parameter names in any case)."""
    query = {k.lower(): v.strip() for k, v in parse_qsl(urlsplit(url).query) if v.strip()}
    return query.get("dbname", ""), query.get("filename", "")


def _patent_date(td, what: str, where: str) -> str:
    """The date in a patent row's td.date (its text may carry the label: 申请日 2024-01-30)."""
    text = _text(td)
    match = _DATE_RE.search(text)
    if match:
        return match.group(0)
    if text:
        raise RefusedPage("unexpected", f"{where}: {what} cell {text[:40]!r} holds no date")
    return ""


def _list_row(tr, doc_type: str | None = None, where: str = "list row") -> ListRow:
    cells: dict[str, object] = {}
    dates = []
    for td in tr.iterchildren("td"):
        names = (td.get("class") or "").split()
        if "date" in names:
            dates.append(td)
        for name in names:
            cells.setdefault(name, td)

    def cell(name: str) -> str:
        td = cells.get(name)
        return _text(td) if td is not None else ""

    title, url = "", ""
    name_td = cells.get("name")
    if name_td is not None:
        links = _links(name_td, "fz14")
        if links:
            title, url = _text(links[0]), (links[0].get("href") or "").strip()
        else:
            title = _text(name_td)
    if not url:
        raise RefusedPage(
            "unexpected", f"{where} ({title[:40]!r}): no detail link in td.name a.fz14"
        )

    dbname = filename = ""
    # The ids sit in td.operat; the whole row is searched only if a page moves them.
    operat = cells.get("operat")
    for a in (operat if operat is not None else tr).iter("a"):
        if a.get("data-filename") is not None and "icon-collect" in (a.get("class") or "").split():
            dbname = (a.get("data-dbname") or "").strip()
            filename = (a.get("data-filename") or "").strip()
            break
    if not (dbname and filename):
        # Some rows come without a.icon-collect; their detail link names the document itself.
        dbname, filename = _key_from_link(url)
    if not (dbname and filename):
        raise RefusedPage(
            "unexpected",
            f"{where} ({title[:40]!r}): no key: neither a.icon-collect[data-dbname][data-filename] "
            "nor dbname and filename parameters in its detail link",
        )

    # Patent markup: td.inventor, td.applicant and two td.date (申请日, then 公开日).
    patent_markup = "inventor" in cells or "applicant" in cells or len(dates) >= 2
    people_td, people_class = cells.get("author"), "KnowledgeNetLink"
    source = cell("source")
    application_date = ""
    if patent_markup:
        if len(dates) != 2:
            raise RefusedPage(
                "unexpected",
                f"{where} ({title[:40]!r}): patent markup with {len(dates)} td.date; expected "
                "two (申请日, then 公开日)",
            )
        application_date = _patent_date(dates[0], "申请日", where)
        date = _patent_date(dates[1], "公开日", where)
        people_td = cells.get("inventor", people_td)
        source = cell("applicant") or source
    elif doc_type == "patent":
        raise RefusedPage(
            "unexpected",
            f"{where} ({title[:40]!r}): a patent row in journal markup (td.author, one td.date): "
            "its date cannot be told apart as 申请日 or 公开日",
        )
    else:
        date = _text(dates[0]) if dates else ""

    authors = ""
    if people_td is not None:
        links = _links(people_td, people_class)
        authors = _join(_text(a) for a in links) if links else _join([_text(people_td)])

    seq_td = cells.get("seq")
    export_id = ""
    if seq_td is not None:
        for box in seq_td.iter("input"):
            if "cbItem" in (box.get("class") or "").split():
                export_id = (box.get("value") or "").strip()
                break
    online_first = ""
    if name_td is not None:
        for mark in name_td.iter("b"):
            if "marktip" in (mark.get("class") or "").split() and _ONLINE_FIRST in _text(mark):
                online_first = "1"
                break

    return ListRow(
        seq=cell("seq"),
        title=title,
        url=url,
        authors=authors,
        source=source,
        date=date,
        application_date=application_date,
        database=cell("data"),
        dbname=dbname,
        filename=filename,
        quote=cell("quote"),
        download=cell("download"),
        cited=_count(cells.get("quote")),
        downloads=_count(cells.get("download")),
        export_id=export_id,
        online_first=online_first,
    )


_ONLINE_FIRST = "网络首发"
_COUNT_RE = re.compile(r"^\d[\d,]*$")


def _count(td) -> str:
    """A count cell (td.quote, td.download; the number possibly inside a link) as digits: an
    empty cell is "0" (CNKI leaves 被引 empty when nobody cited it); no cell, or a cell holding
    something else than one number, is "" (unknown: stored NULL, never a guessed 0)."""
    if td is None:
        return ""
    text = _text(td)
    if not text:
        return "0"
    if _COUNT_RE.match(text):
        return text.replace(",", "")
    return ""


# -- detail pages ---------------------------------------------------------------------------

_X_TITLE = etree.XPath(f"//div[{_cls('wx-tit')}]//h1")
_X_ROWTIT = etree.XPath(f"//span[{_cls('rowtit')} or {_cls('rowtit2')}]")
_X_ABSTRACT_TEXT = etree.XPath(f"//*[{_cls('abstract-text')}]")
_X_CLAIM_TEXT = etree.XPath(f"//*[{_cls('claim-text')}]")
# 2026 kcms2: <div class="claim"><h5>主权项：</h5><div>TEXT</div></div> (.claim > h5 + div)
_X_CLAIM = etree.XPath(f"//div[{_cls('claim')}]/h5/following-sibling::*[1][self::div]")
_X_CLC_CODE = etree.XPath(f"//p[{_cls('clc-code')}]")
_X_SUMMARY = etree.XPath("//*[@id='ChDivSummary']")
_X_AUTHOR_H3 = etree.XPath(f"//h3[{_cls('author')}]")
_X_KEYWORDS = etree.XPath(f"//p[{_cls('keywords')}]")
_X_TOP_TIP = etree.XPath(f"//div[{_cls('top-tip')}]")
# kcms2's counts and sizes line: <div class="total-inform"><span>页码：7-10</span>...
_X_TOTAL_INFORM = etree.XPath(f"//*[{_cls('total-inform')}]/span")
_X_SHOUFA = etree.XPath(f"//*[{_cls('icon-shoufa')}]")
# older pages: div.sourinfo (刊名, "1987年12期", "ISSN：1001-1668") and div.total spans
# (<label>页码：</label><b>7-10</b>), old_journal_detail.html
_X_OLD_SOURINFO = etree.XPath(f"//div[{_cls('sourinfo')}]/p")
_X_OLD_TOTAL = etree.XPath(f"//div[{_cls('total')}]/span")
# 网络首发 on a kcms2 page: a mark in the title block or the source line above it (where the
# list row's b.marktip sits on the list page); never the body text, which may quote the words.
_X_HEAD_MARKS = etree.XPath(
    f"//div[{_cls('wx-tit')}]//*[self::b or self::span or self::i or self::em]"
    f" | //div[{_cls('top-tip')}]//*[self::b or self::span or self::i or self::em]"
)
# The old KCMS detail page (before kcms2), read as a fallback for papers.
_X_OLD_TITLE = etree.XPath(f"//div[{_cls('wxTitle')}]/h2[{_cls('title')}]")
_X_OLD_AUTHORS = etree.XPath(f"//div[{_cls('wxTitle')}]/div[{_cls('author')}]")
_X_OLD_ORGS = etree.XPath(f"//div[{_cls('wxTitle')}]/div[{_cls('orgn')}]")
_X_OLD_LABELS = etree.XPath(f"//div[{_cls('wxBaseinfo')}]//label[starts-with(@id, 'catalog_')]")

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
    data = _as_bytes(page)
    reason = refusals.body_reason("detail", data)
    if reason:
        raise RefusedPage(reason, f"{doc_type} detail page")
    root = _document(data, page)
    out = dict.fromkeys(DETAIL_FIELDS[doc_type], "")
    multi = MULTI_VALUED[doc_type]

    titles = _X_TITLE(root)
    if not titles:
        if doc_type == "paper" and _X_OLD_TITLE(root):
            return _old_paper(root, out, multi)
        raise RefusedPage("unexpected", f"{doc_type} detail page without .wx-tit h1")
    out["title"] = _text(titles[0])
    if not out["title"]:
        raise RefusedPage("unexpected", f"{doc_type} detail page with an empty title")
    hidden = _hidden_inputs(root)
    out["dbname"] = hidden.get("paramdbname", "")
    out["filename"] = hidden.get("paramfilename", "")

    labels = LABELS[doc_type]
    for span in _X_ROWTIT(root):
        if _hidden(span):
            continue
        name = labels.get(normalize_label(_text(span)))
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
            out["keywords"] = _value(keywords[0], multi=True) or out["keywords"]
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
        return _join([tail]) if multi else tail
    return _value(nxt, multi)


def _override(out: dict[str, str], name: str, elements: list, multi: frozenset[str]) -> None:
    """A dedicated element (div.abstract-text, ...) wins over a labelled row for ``name``."""
    if elements:
        value = _value(elements[0], name in multi)
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
        text = _text(part, skip_tags=_NO_SUP).strip(",，")
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
        author = _text(person, skip_tags=_NO_SUP).strip(",，;；")
        if not author:
            continue
        numbers = [n for sup in person.iter("sup") for n in _SUP_NUMBERS_RE.findall(_text(sup))]
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
        match = _TOP_TIP_RE.match(_text(tip))
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
        label, _, value = _text(span).partition("：")
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
    names = [_text(p, skip_tags=_NO_SUP) for p in parts] if parts else [_text(container, _NO_SUP)]
    if strip_index:
        names = [_INSTITUTION_INDEX_RE.sub("", n) for n in names]
    return _join(n.strip(",，") for n in names)


def _online_first_mark(root) -> str:
    """ "1" when the page marks the paper 网络首发, else "" (translators_CN reads
    ``.icon-shoufa``; the words in the head's marks count too)."""
    if _X_SHOUFA(root):
        return "1"
    for el in _X_HEAD_MARKS(root):
        if not _hidden(el) and _ONLINE_FIRST in (el.text or ""):
            return "1"
    return ""


def _old_paper(root, out: dict[str, str], multi: frozenset[str]) -> dict[str, str]:
    """The old KCMS page (``div.wxTitle h2.title``, ``label#catalog_*``): the fields it has."""
    out["title"] = _text(_X_OLD_TITLE(root)[0])
    if not out["title"]:
        raise RefusedPage("unexpected", "paper detail page with an empty title")
    hidden = _hidden_inputs(root)
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
        name = labels.get(normalize_label(_text(label)))
        if name is None or out[name]:
            continue
        # The value is the rest of the label's paragraph.
        out[name] = _value(label.getparent(), name in multi, exclude=label)
    _override(out, "abstract", _X_SUMMARY(root), multi)
    if hidden.get("abstract_text"):
        out["abstract"] = " ".join(hidden["abstract_text"].split())
    authors, orgs = _X_OLD_AUTHORS(root), _X_OLD_ORGS(root)
    if authors and orgs:
        out["author_affiliations"] = _affiliations(authors[0], orgs[0])
    for p in _X_OLD_SOURINFO(root):  # "1987年12期", "ISSN：1001-1668"
        text = _text(p)
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


# -- text helpers ---------------------------------------------------------------------------

_ALWAYS_SKIP = frozenset({"script", "style", "noscript", "template"})
_NO_SUP = frozenset({"sup"})
_NO_LINKS = frozenset({"a"})
# Elements whose boundaries separate words ("a<br>b" is two words, not "ab").
_BREAKS = frozenset({"br", "p", "div", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6"})
_SEPARATORS_RE = re.compile(r"[\s;；,，、]+")
_SPLIT_RE = re.compile(r"[;；]")
_CHARSET_RE = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", re.I)


def _as_bytes(page: str | bytes) -> bytes:
    if isinstance(page, str):
        return page.encode("utf-8", "surrogateescape")
    return bytes(page)


def _document(data: bytes, original: str | bytes):
    """Parse HTML bytes; text given as ``str`` is utf-8 here whatever its <meta> claims."""
    encoding = "utf-8"
    if not isinstance(original, str):
        match = _CHARSET_RE.search(data, 0, 4096)
        if match:
            try:
                encoding = codecs.lookup(match.group(1).decode("ascii")).name
            except LookupError:
                pass  # an unknown charset name: CNKI serves utf-8
    # A parser per call: lxml parsers must not be shared between threads, and one costs
    # microseconds next to the parse itself.
    parser = etree.HTMLParser(
        encoding=encoding, remove_comments=True, remove_pis=True, collect_ids=False
    )
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        raise RefusedPage("unexpected", f"unparsable HTML: {exc}") from None
    if root is None:
        raise RefusedPage("blank", "no HTML in the body")
    return root


def _hidden(el) -> bool:
    style = el.get("style")
    if style and "display:none" in style.replace(" ", "").lower():
        return True
    return el.get("hidden") is not None


def _collect(el, parts: list[str], skip_tags: frozenset[str], exclude) -> None:
    if el.text:
        parts.append(el.text)
    for child in el:
        tag = child.tag
        if isinstance(tag, str) and tag not in skip_tags and tag not in _ALWAYS_SKIP:
            if child is not exclude and not _hidden(child):
                if tag in _BREAKS:
                    parts.append(" ")
                _collect(child, parts, skip_tags, exclude)
                if tag in _BREAKS:
                    parts.append(" ")
        if child.tail:
            parts.append(child.tail)


def _text(el, skip_tags: frozenset[str] = frozenset(), exclude=None) -> str:
    """Visible text of ``el``: hidden elements and scripts dropped, whitespace collapsed."""
    if not len(el):  # a leaf (most cells and links): no walk needed
        return " ".join((el.text or "").split())
    parts: list[str] = []
    _collect(el, parts, skip_tags, exclude)
    return " ".join("".join(parts).split())


def _join(pieces) -> str:
    """``["A;", "B；C", " "]`` -> ``"A;B;C"``: CNKI's list separator, without spaces."""
    out = []
    for piece in pieces:
        for part in _SPLIT_RE.split(piece):
            part = part.strip()
            if part:
                out.append(part)
    return ";".join(out)


def _value(el, multi: bool, exclude=None) -> str:
    """The value held by ``el``: its ``<a>`` children joined with ";" when they are all it
    holds (people, keywords, class codes), else its text."""
    anchors = [a for a in el.iter("a") if a is not el and not _hidden(a)]
    if anchors and not _SEPARATORS_RE.sub("", _text(el, _NO_LINKS, exclude)):
        return _join(_text(a, _NO_SUP) for a in anchors)
    text = _text(el, exclude=exclude)
    return _join([text]) if multi else text


def _to_int(value) -> int | None:
    if value is None:
        return None
    match = _NUMBER_RE.search(str(value))
    return int(match.group(0).replace(",", "")) if match else None
