"""The parser of a kns8s list page (the grid of a search's results): its rows, total, page count
and turn token, pure (HTML in, a :class:`ListPage` out; no network, no Scrapy engine). The
spider decides what to request next from what it returns.

The page is first run through :func:`cnkispider.cnki.refusals.body_reason`, so a page that is
one of CNKI's ways of saying no raises :class:`RefusedPage` with the same reason the retry
middleware sees. A page it does not understand raises ``RefusedPage("unexpected")`` or
``RefusedPage("no-pager")``, never an empty result. Zero results are reported only for a page
that says so: the no-content block (``p.no-content`` with 暂无数据), or a pager that reads 0.
Markup is CONTRACTS.md's (the real list page in shared/cnki/pages).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit

from lxml import etree

from cnkispider.cnki import refusals
from cnkispider.cnki.markup import (
    ONLINE_FIRST,
    as_bytes,
    css_class,
    document,
    hidden_inputs,
    join_values,
    text_of,
)
from cnkispider.exceptions import RefusedPage


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


_X_ROWS = etree.XPath(f"//table[{css_class('result-table-list')}]//tr[td]")
# Element names are spelled out where known: "//span[...]" only tests the page's few
# hundred spans, "//*[...]" every element (four times slower on a full page).
_X_PAGER = etree.XPath(f"//span[{css_class('pagerTitleCell')}]")
_X_OLD_PAGER = etree.XPath(f"//div[{css_class('pagerTitleCell')}]")  # old KNS
_X_PAGE_MARK = etree.XPath(f"//span[{css_class('countPageMark')}]")
_X_PAGE_NEXT = etree.XPath("//a[@id='PageNext']")
_X_NO_CONTENT = etree.XPath(f"//p[{css_class('no-content')}]")

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
    data = as_bytes(page)
    reason = refusals.body_reason("list", data)
    if reason:
        raise RefusedPage(reason, f"{doc_type or 'a'} list page")
    root = document(data, page)

    hidden = hidden_inputs(root)
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
    texts = [t for t in (text_of(td) for td in tr.iterchildren("td")) if t]
    return len(texts) >= 2 and all(t in _HEADER_LABELS for t in texts)


def _rows(root, doc_type: str | None, where: str) -> list[ListRow]:
    rows = []
    for number, tr in enumerate(_X_ROWS(root), 1):
        if _is_header(tr):
            continue
        rows.append(_list_row(tr, doc_type, f"{where}, row {number}"))
    return rows


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
            number = _checked_total(text_of(em), where)
            if number is not None:
                return number
    number = _checked_total(hidden.get("totalCnt") or "", where)
    if number is not None:
        return number
    # The old KNS pager writes "找到 1,934,679 条结果" without an <em>.
    for pager in pagers:
        match = _PAGER_TOTAL_RE.search(text_of(pager))
        if match:
            return _checked_total(match.group(0), where)
    raise RefusedPage("no-pager", f"{where}: pager without a readable total")


def _current_page(root, hidden: dict[str, str]) -> int:
    number = _to_int(hidden.get("curPageHid"))
    if number:
        return number
    for mark in _X_PAGE_MARK(root):
        head = text_of(mark).partition("/")[0]
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
            raw = text_of(mark).partition("/")[2]
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
        text = text_of(p)
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
    text = text_of(td)
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
        return text_of(td) if td is not None else ""

    title, url = "", ""
    name_td = cells.get("name")
    if name_td is not None:
        links = _links(name_td, "fz14")
        if links:
            title, url = text_of(links[0]), (links[0].get("href") or "").strip()
        else:
            title = text_of(name_td)
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
        date = text_of(dates[0]) if dates else ""

    authors = ""
    if people_td is not None:
        links = _links(people_td, people_class)
        authors = (
            join_values(text_of(a) for a in links) if links else join_values([text_of(people_td)])
        )

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
            if "marktip" in (mark.get("class") or "").split() and ONLINE_FIRST in text_of(mark):
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


_COUNT_RE = re.compile(r"^\d[\d,]*$")


def _count(td) -> str:
    """A count cell (td.quote, td.download; the number possibly inside a link) as digits: an
    empty cell is "0" (CNKI leaves 被引 empty when nobody cited it); no cell, or a cell holding
    something else than one number, is "" (unknown: stored NULL, never a guessed 0)."""
    if td is None:
        return ""
    text = text_of(td)
    if not text:
        return "0"
    if _COUNT_RE.match(text):
        return text.replace(",", "")
    return ""


def _to_int(value) -> int | None:
    if value is None:
        return None
    match = _NUMBER_RE.search(str(value))
    return int(match.group(0).replace(",", "")) if match else None
