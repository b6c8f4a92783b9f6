"""The stand-in's HTML: CNKI's real list markup and the hand-made detail pages of CONTRACTS.md.

The list fragment follows ``shared/cnki/pages/kns8s_list_crossdb_p1.html`` (the ``#briefBox``
part a ``POST /kns8s/brief/grid`` returns): ``span.pagerTitleCell em``, ``span.countPageMark``
with ``data-pagenum``, ``a#PageNext[data-curpage]``, the hidden ``#curPageHid``, ``#totalCnt`` and
``#hidTurnPage``, and ``table.result-table-list`` rows with the real td classes and ``td.operat
a.icon-collect[data-dbname][data-filename]``. Patent rows are patent markup (``td.inventor``,
``td.applicant``, two ``td.date``: 申请日 then 公开日), some without ``icon-collect`` (the key then
in the link's query). Detail pages are hand-made (no real kcms2 page could be found) with the
classes of the 2026 Zotero translator and the irregularities CONTRACTS.md lists; the full
abstract is ``input#abstract_text``, the visible one cut at 100 characters.

The refusals are CNKI's own bytes: ``SOFT_BLOCK`` (105 bytes), the rejections with their reason
in ``no-content@value``, the -403 JSON, the ``vericodeForm`` page.

Speed matters (the site must serve 800 pages a second on one core), so a document's row is
rendered once into three byte strings around the parts that change per response (page number,
sequence number, session-bound ``v=`` token) and its detail page once into bytes; both are kept
on the cached :class:`~standin.corpus.Document`.
"""

from __future__ import annotations

from html import escape

from standin.catalogue import FOREIGN_DATABASES, Document, dbname_family

RESOURCES = {"patent": "PATENT", "paper": "JOURNAL", "achievement": "ACHIEVEMENTS"}
DBCODES = {
    "SCPD": "SCPD",
    "CJFQ": "CJFD",
    "CAPJ": "CJFD",
    "CMFD": "CDMD",
    "CDFD": "CDMD",
    "SNAD": "SNAD",
    **{db: db for db, _name in FOREIGN_DATABASES.values()},
}
HEADERS = {
    "patent": ("题名", "发明人", "申请人", "申请日", "公开日", "数据库", "操作"),
    "paper": ("题名", "作者", "来源", "发表时间", "数据库", "被引", "下载", "操作"),
    "achievement": ("题名", "完成人", "完成单位", "入库时间", "数据库", "被引", "下载", "操作"),
}
TURN_TITLE = "键盘的“← →”可以实现快速翻页"
ABSTRACT_SHOWN = 100  # characters of the abstract a detail page shows before "…"


def _e(text: str) -> str:
    return escape(text, quote=True)


# -- the list fragment ------------------------------------------------------------------------

ROW_HEAD = b'<tr><td class="seq"><input class="cbItem" type="checkbox" data-cur="'


def _people_links(doc: Document, names: str, base: str) -> str:
    x = doc.extra
    return "".join(
        f'<a class="KnowledgeNetLink" target="knet" href="{base}/kcms2/author/detail?v={x["cookie"][:24]}{k:02d}'
        f'&amp;uniplatform=NZKPT&amp;language=CHS">{_e(name)}</a>'
        for k, name in enumerate(names.split(";"))
    )


def _operat(doc: Document, collect: bool, base: str) -> str:
    f, x = doc.fields, doc.extra
    icon = (
        f'<a class="icon-collect" title="收藏" data-dbname="{f["dbname"]}" '
        f'data-resource="{RESOURCES[doc.doc_type]}" data-filename="{f["filename"]}"><i></i></a>'
        if collect
        else ""
    )
    return (
        f'<td class="operat"><a href="{base}/bar/download/order?id={x["cookie"]}&amp;language=CHS" target="_blank" '
        'class="downloadlink icon-download" title="下载"><i></i><b>下载</b></a>'
        f'{icon}<a class="icon-quote" title="引用" href="javascript:void(0)"><i></i></a></td></tr>'
    )


def row_parts(doc: Document, base: str, variant: str = "collect") -> tuple[bytes, bytes, bytes]:
    """A row as (after page number, after sequence number, after token): see ``list_fragment``.

    ``variant`` (patents only): ``collect`` (the key in ``a.icon-collect``), ``link`` (no
    icon-collect; the key in the detail link's own query) or ``bare`` (the key nowhere)."""
    cache = doc.row_parts
    if cache is None:
        cache = doc.row_parts = {}
    parts = cache.get(variant)
    if parts is not None:
        return parts
    f, x = doc.fields, doc.extra
    a = f'" name="CookieName" value="{x["cookie"]}" onclick="$(this).filenameClick()">'
    b = f'</td><td class="name"><a class="fz14" target="_blank" href="{base}/kcms2/article/abstract?v='
    marktip = '<b class="marktip">网络首发</b>' if x.get("first_online") else ""
    link_key = (
        f"&amp;dbcode={DBCODES[dbname_family(f['dbname'])]}&amp;dbname={f['dbname']}&amp;filename={f['filename']}"
        if variant == "link"
        else ""
    )
    head = (
        f'&amp;uniplatform=NZKPT&amp;language=CHS{link_key}">{_e(f["title"])}</a>{marktip}'
        '<i class="freeIdent is-hide" title="Free" style="display: none;">免费</i></td>'
    )
    if doc.doc_type == "patent":
        # CNKI's patent list: inventors, applicant, then two dates (申请日, then 公开日)
        c = (
            head + f'<td class="inventor">{_people_links(doc, f["inventors"], base)}</td>'
            f'<td class="applicant">{_e(f["applicant"])}</td>'
            f'<td class="date">{_e(f["application_date"])}</td><td class="date">{_e(f["date"])}</td>'
            f'<td class="data">{f["database"]}</td>' + _operat(doc, variant == "collect", base)
        )
    else:
        people = "authors" if doc.doc_type == "paper" else "completers"
        if doc.doc_type == "paper":
            source = (
                f'<p><a target="_blank" href="{base}/knavi/detail?p={x["cookie"][24:48]}'
                f'&amp;uniplatform=NZKPT&amp;language=CHS">{_e(f["source"])}</a></p>'
            )
        else:
            source = f"<p>{_e(f['source'])}</p>"
        # 被引: empty when nobody cited it; the number, inside a link on some rows (PROTOCOL.md
        # point 15 "a number, possibly inside a link")
        quote = str(x["cites"]) if x["cites"] else ""
        if x["cites"] and x["cites"] % 2:
            quote = f'<a class="KnowledgeNetLink" href="javascript:void(0);">{quote}</a>'
        c = (
            head + f'<td class="author">{_people_links(doc, f[people], base)}</td>'
            f'<td class="source"><!-- 会议 表名是 IPFDTEMP 或者 IPFDPREP 的跳转knavi不加链接 -->{source}</td>'
            f'<td class="date">{_e(f["date"])}</td><td class="data"><span>{f["database"]}</span></td>'
            f'<td class="quote">{quote}</td>'
            f'<td class="download"><div><a class="downloadCnt" href="javascript:void(0);">{x["downloads"]}</a></div></td>'
            + _operat(doc, True, base)
        )
    parts = cache[variant] = (a.encode(), b.encode(), c.encode())
    return parts


def td_header(doc_type: str) -> bytes:
    """A header row written in ``<td>`` cells inside ``tbody``, as some CNKI list pages have."""
    cells = "".join(f"<td>{h}</td>" for h in ("序号",) + HEADERS[doc_type])
    return f'<tr class="header">{cells}</tr>'.encode()


def list_fragment(
    doc_type: str, total: int, page: int, pages: int, rows: list[bytes], turn: str
) -> bytes:
    """The grid response for one page; ``rows`` are the rendered ``<tr>`` of that page."""
    nxt = page + 1
    top_turn = (
        f'<span class="topTurnSpan"><a id="Page_next_top" title="{TURN_TITLE}" data-curpage="{nxt}">&gt;&gt;</a></span>'
        if page < pages
        else ""
    )
    heads = "".join(f"<th>{h}</th>" for h in HEADERS[doc_type])
    first = max(1, min(page - 4, pages - 8))
    cur = ' class="cur"'
    nums = "".join(
        f'<div class="pagesnums"><a href="javascript:void(0);" title="{TURN_TITLE}"'
        f'{cur if n == page else ""} data-curpage="{n}">{n}</a></div>'
        for n in range(first, min(pages, first + 8) + 1)
    )
    prev = (
        f'<a class="pagesnums" href="javascript:void(0);" title="{TURN_TITLE}" id="PagePrev" '
        f'data-curpage="{page - 1}">上一页</a>'
        if page > 1
        else ""
    )
    nxt_link = (
        f'<a class="pagesnums" href="javascript:void(0);" title="{TURN_TITLE}" id="PageNext" '
        f'data-curpage="{nxt}">下一页</a>'
        if page < pages
        else ""
    )
    head = (
        '<div id="briefBox">\n      <div>\n        <div class="toolbar">\n'
        '    <div id="countPageDiv" class="result-con-r">\n'
        f'        <span class="pagerTitleCell"><span>共找到</span>\n            <em>{total:,}</em>\n'
        "            <span>条结果</span>\n        </span>\n"
        f'            <span class="countPageMark" data-pagenum="{pages}">{page}/{pages}</span>\n'
        f"            {top_turn}\n    </div>\n    </div>\n      </div>\n      <div>\n"
        '<div id="main-content" method="post" name="gridTableForm">\n'
        '    <div id="gridTable" class="search-result">\n        <div>\n'
        f'            <div><div><table class="result-table-list"><thead><tr><th></th>{heads}</tr></thead><tbody>'
    )
    tail = (
        '</tbody></table></div></div>\n        </div>\n    </div>\n    <div class="pages">\n'
        f'{prev}{nums}<div class="clear"></div>\n        {nxt_link}\n    </div>\n</div>\n      </div>\n'
        f'      <input id="curPageHid" type="hidden" value="{page}">\n'
        f'      <input id="totalCnt" type="hidden" value="{total}">\n'
        '      <input id="isSortHid" type="hidden" value="false">\n'
        f'      <input id="hidTurnPage" type="hidden" value="{turn}">\n</div>\n'
    )
    return head.encode() + b"".join(rows) + tail.encode()


NO_CONTENT = (
    '<div id="briefBox"><p class="no-content">抱歉，暂无数据，请调整检索条件</p></div>'.encode()
)
NO_DATA_RETRY = (
    '<div id="briefBox"><p class="no-content">抱歉，暂无数据，请稍后重试。</p></div>'.encode()
)
# The soft block, byte for byte as CNKI serves it (105 bytes: the fragment and three spaces).
SOFT_BLOCK = (
    '<div id="briefBox"><p class="no-content" value="">抱歉，暂无数据，请稍后重试。</p></div>'.encode()
).ljust(105, b" ")


def rejection(value: str) -> bytes:
    """CNKI's answer to a query it rejects: the reason in ``no-content@value``."""
    return (
        f'<div id="briefBox"><p class="no-content" value="{_e(value)}">'
        "抱歉，暂无数据，请稍后重试。</p></div>"
    ).encode()


#: a condition's Logic that is not 0 (AND), 1 (OR) or 2 (NOT): CNKI's check of a form field,
#: in the words it uses for pageSize
BAD_LOGIC = rejection("参数校验;字段【Logic】校验失败")
# An expert (专业检索) expression the site cannot read. CNKI's own words for it are not in any
# public capture (docs/QUERY.md): what matters is that it is a rejection (a non-empty value),
# never a zero, so a crawler that sends a broken expression stops instead of "finding nothing".
BAD_EXPERT = rejection("检索表达式错误，请检查检索式")
NO_CATEGORY = rejection("查询对象结构错误, 没有指定检索分类！")
BAD_PAGE_SIZE = rejection("参数校验;字段【pageSize】校验失败")
CURSOR_PAST_CAP = rejection("起始游标越界")


# -- detail pages -----------------------------------------------------------------------------


def _links(value: str, sep: str = ";") -> str:
    """People and other multi-valued values: <a> children separated by ';'."""
    return sep.join(f"<a>{_e(v)}</a>" for v in value.split(";")) if value else ""


def _row(label: str, value_html: str, cls: str = "rowtit") -> str:
    return f'<div class="row"><span class="{cls}">{label}：</span><p class="funds">{value_html}</p></div>'


def _pair(label1: str, value1: str, label2: str, value2: str) -> str:
    return (
        f'<div class="row"><div class="row-1"><span class="rowtit">{label1}：</span><p class="funds">{value1}</p></div>'
        f'<div class="row-2"><span class="rowtit2">{label2}：</span><p class="funds">{value2}</p></div></div>'
    )


def visible(text: str) -> str:
    """The abstract as the page shows it: cut at 100 characters (the full text is in
    ``input#abstract_text``)."""
    return text if len(text) <= ABSTRACT_SHOWN else text[:ABSTRACT_SHOWN] + "…"


def _page(doc: Document, top: str, body: str, abstract: str) -> bytes:
    f = doc.fields
    return (
        '<!DOCTYPE html>\n<html lang="zh-CN">\n<head>\n<meta charset="utf-8">\n'
        f'<title>{_e(f["title"])} - 中国知网</title>\n</head>\n<body>\n<div class="wrapper">\n'
        f'<input id="paramdbcode" type="hidden" value="{DBCODES[dbname_family(f["dbname"])]}">\n'
        f'<input id="paramdbname" type="hidden" value="{f["dbname"]}">\n'
        f'<input id="paramfilename" type="hidden" value="{f["filename"]}">\n'
        f'<input type="hidden" id="abstract_text" value="{_e(abstract)}">\n'
        '<div class="container"><div class="doc"><div class="doc-top">\n'
        f'{top}<div class="wx-tit"><h1>{_e(f["title"])}<span style="display:none">{f["filename"]}</span></h1>\n'
        f"{body}\n</div></div></div></div>\n</body>\n</html>\n"
    ).encode()


def _patent_body(doc: Document, broken: bool) -> str:
    f, x = doc.fields, doc.extra
    no_label = "申请（专利）号" if x["fullwidth_no"] else "申请(专利)号"
    date_label = " 申请日" if x["space_date"] else "申请日"
    address_label = " 地址" if x["space_address"] else "地址"
    rows = ["</div>", _row("专利类型", _e(f["patent_type"]))]
    if broken:  # break_ detail-fields: the page lost 申请日 and 申请人
        rows.append(_row(no_label, _e(f["application_no"])))
    else:
        rows.append(_pair(no_label, _e(f["application_no"]), date_label, _e(f["application_date"])))
    if f["publication_no"]:
        rows.append(
            _pair("申请公布号", _e(f["publication_no"]), "公开公告日", _e(f["publication_date"]))
        )
    else:
        rows.append(_row("公开公告日", _e(f["publication_date"])))
    if f["grant_no"]:
        rows.append(_pair("授权公布号", _e(f["grant_no"]), "授权公告日", _e(f["grant_date"])))
    if not broken:
        rows.append(_row("申请人", _links(f["applicant"])))
    rows.append(_row(address_label, _e(f["address"])))
    if f["co_applicants"]:
        rows.append(_row("共同申请人", _links(f["co_applicants"])))
    rows.append(_row("发明人", _links(f["inventors"])))
    rows.append(_pair("分类号", _links(f["ipc"]), "主分类号", _e(f["main_ipc"])))
    if f["agency"] and f["agent"]:
        rows.append(_pair("代理机构", _e(f["agency"]), "代理人", _links(f["agent"])))
    elif f["agency"]:
        rows.append(_row("代理机构", _e(f["agency"])))
    if f["pages"]:
        rows.append(_pair("国省代码", _e(f["province_code"]), "页数", _e(f["pages"])))
    else:
        rows.append(_row("国省代码", _e(f["province_code"])))
    rows.append(
        f'<div class="row"><span class="rowtit">摘要：</span><div class="abstract-text">{_e(visible(f["abstract"]))}</div></div>'
    )
    if x.get("old_claim"):  # older pages: the claim as a labelled row
        rows.append(
            f'<div class="row"><span class="rowtit">主权项：</span><div class="claim-text">{_e(f["claim"])}</div></div>'
        )
    else:
        rows.append(f'<div class="claim"><h5>主权项：</h5><div>{_e(f["claim"])}</div></div>')
    return "\n".join(rows)


def _paper_top(doc: Document) -> str:
    """The source line (.top-tip "焊接学报. 2020,41(04):157-165", the form translators_CN
    reads); a 网络首发 paper has no issue yet: the journal alone and the icon-shoufa mark
    (hand-made: no real kcms2 page is public). A thesis shows its university."""
    f, x = doc.fields, doc.extra
    source = f'<a href="/knavi/detail?p={x["cookie"][:16]}">{_e(f["source"])}</a>'
    if f["database"] != "期刊":
        return f'<div class="top-tip"><span>{source}</span></div>\n'
    if not f["year"]:
        return (
            f'<div class="top-tip"><span>{source}</span></div>\n'
            f'<span class="head-time"><i class="icon-shoufa"></i>网络首发时间：{_e(f["date"])}</span>\n'
        )
    line = f"{source}. {f['year']},{f['volume']}({int(f['issue']):02d})"
    if not x.get("pages_in_total") and f["page_range"]:
        line += f":{f['page_range']}"
    return f'<div class="top-tip"><span>{line}</span></div>\n'


def _paper_totals(doc: Document) -> str:
    """kcms2's counts line; 页码 there when the source line has no pages (translators_CN)."""
    f, x = doc.fields, doc.extra
    spans = f"<span>下载：{x['downloads']}</span>"
    if x.get("pages_in_total") and f["page_range"]:
        spans += f"<span>页码：{_e(f['page_range'])}</span>"
    return f'<div class="total-inform">{spans}<span>大小：1024K</span></div>'


def _paper_body(doc: Document, broken: bool) -> str:
    f, x = doc.fields, doc.extra
    institutions = f["institutions"].split(";")
    numbered = len(institutions) > 1  # CNKI numbers affiliations only when there are several
    authors = "".join(
        f"<span><a>{_e(name)}{'<sup>' + ','.join(map(str, aff)) + '</sup>' if numbered else ''}</a></span>"
        for name, aff in zip(f["authors"].split(";"), x["affiliations"], strict=True)
    )
    if broken:  # break_ detail-fields: the page lost its authors
        authors = ""
    insts = "".join(
        f"<span><a>{f'{k}. ' if numbered else ''}{_e(inst)}</a></span>"
        for k, inst in enumerate(institutions, 1)
    )
    parts = [
        f'<h3 class="author" id="authorpart">{authors}</h3>',
        f'<h3 class="author">{insts}</h3>',
        "</div>",
        '<div class="row"><span class="rowtit">摘要：</span>'
        f'<span class="abstract-text" id="ChDivSummary" name="ChDivSummary">{_e(visible(f["abstract"]))}</span></div>',
    ]
    if f["keywords"]:  # always, unless /_control drop_field took them away
        parts.append(
            '<div class="row"><span class="rowtit">关键词：</span><p class="keywords">'
            + "".join(f"<a>{_e(k)};</a>" for k in f["keywords"].split(";"))
            + "</p></div>"
        )
    if f["fund"]:
        parts.append(
            '<div class="row"><span class="rowtit">基金：</span><p class="funds">'
            + "".join(f"<a>{_e(v)};</a>" for v in f["fund"].split(";"))
            + "</p></div>"
        )
    items = []
    if f["doi"]:
        items.append(
            f'<li class="top-space"><span class="rowtit">DOI：</span><p>{_e(f["doi"])}</p></li>'
        )
    items.append(
        f'<li class="top-space"><span class="rowtit">专辑：</span><p>{_e(f["album"])}</p></li>'
    )
    items.append(
        f'<li class="top-space"><span class="rowtit">专题：</span><p>{_e(f["topic"])}</p></li>'
    )
    items.append(
        f'<li class="top-space"><span class="rowtit">分类号：</span><p class="clc-code">{_e(f["clc"])}</p></li>'
    )
    if f["issn"]:  # hand-made: a labelled row (older pages have it in div.sourinfo)
        items.append(
            f'<li class="top-space"><span class="rowtit">ISSN：</span><p>{_e(f["issn"])}</p></li>'
        )
    parts.append('<ul class="top-space-ul">' + "".join(items) + "</ul>")
    if f["supervisor"]:  # theses: 导师, as translators_CN reads it (data('导师'))
        parts.append(
            f'<div class="row"><span class="rowtit">导师：</span><p>{_e(f["supervisor"])}</p></div>'
        )
    parts.append(_paper_totals(doc))
    return "\n".join(parts)


def _achievement_body(doc: Document, broken: bool) -> str:
    f = doc.fields
    rows = ["</div>"]
    if not broken:  # break_ detail-fields: the page lost 成果完成人
        rows.append(_row("成果完成人", _links(f["completers"])))
    rows += [
        _row("第一完成单位", _e(f["first_unit"])),
        _row("关键词", _links(f["keywords"])),
        _pair("中图分类号", _e(f["clc"]), "学科分类号", _e(f["subject_code"])),
        '<div class="row"><span class="rowtit">成果简介：</span>'
        f'<div class="abstract-text">{_e(visible(f["summary"]))}</div></div>',
    ]
    rows.append(_pair("成果类别", _e(f["achievement_type"]), "成果入库时间", _e(f["entry_date"])))
    if f["level"]:
        rows.append(_row("成果水平", _e(f["level"])))
    if f["period"]:
        rows.append(_row("研究起止时间", _e(f["period"])))
    if f["evaluation"]:
        rows.append(_row("评价形式", _e(f["evaluation"])))
    return "\n".join(rows)


def detail_page(doc: Document, broken: bool = False, drop: str = "") -> bytes:
    """The kcms2 page of a document; ``broken``: without its main labelled fields; ``drop``: a
    field the page leaves out (/_control drop_field: CNKI changed its markup)."""
    if drop and doc.fields.get(drop):
        blank = Document(doc.doc_type, doc.ref, {**doc.fields, drop: ""}, doc.codes, doc.extra)
        if drop == "author_affiliations":  # the <sup> numbers are gone
            blank.extra = {**doc.extra, "affiliations": [[] for _ in doc.extra["affiliations"]]}
        return detail_page(blank, broken)
    if doc.detail_html is not None and not broken:
        return doc.detail_html
    if doc.doc_type == "patent":
        html = _page(doc, "", _patent_body(doc, broken), doc.fields["abstract"])
    elif doc.doc_type == "paper":
        html = _page(doc, _paper_top(doc), _paper_body(doc, broken), doc.fields["abstract"])
    else:
        html = _page(doc, "", _achievement_body(doc, broken), doc.fields["summary"])
    if not broken:
        doc.detail_html = html
    return html


# -- the other pages --------------------------------------------------------------------------

WARMUP_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
    <meta charset="UTF-8">
    <title>检索-中国知网</title>
    <script type="text/javascript">
        var APPPATH = "\\/kns8s";
        var UNIPLATFORM = "NZKPT";
        var LANGUAGE = "CHS";
    </script>
</head>
<body>
<div id="ModuleHeader"></div>
<div class="search-box">
    <input type="hidden" id="classid" value="WD0FTY92">
    <input type="hidden" id="CheckedDB" value="YSTT4HG0,LSTPFY1C,EMRPGLPA,JUP3MUPD,MPMFIG1A,WQ0UVIAA,BLZOG7CK,PWFIRAGL,NLBO1Z6R,NN3FJMUV">
    <ul class="doctype-menus">
        <li><a href="javascript:void(0)" name="classify" classid="WD0FTY92" resource="CROSSDB">总库</a></li>
        <li><a href="javascript:void(0)" name="classify" classid="YSTT4HG0" resource="JOURNAL" data-chs="CJFQ,CAPJ,ZHYX,CJTL">学术期刊</a></li>
        <li><a href="javascript:void(0)" name="classify" classid="LSTPFY1C" resource="DISSERTATION" data-chs="CDFD,CMFD">学位论文</a></li>
        <li><a href="javascript:void(0)" name="classify" classid="VUDIXAIY" resource="PATENT" data-lang="Both" data-chs="SCPD">专利</a></li>
        <li><a href="javascript:void(0)" name="classify" classid="BLZOG7CK" resource="ACHIEVEMENTS" data-chs="SNAD">成果</a></li>
    </ul>
</div>
<div id="ModuleSearchResult"></div>
</body>
</html>
""".encode()

HOME_PAGE = """<!DOCTYPE html>
<html lang="zh-CN"><head><meta charset="utf-8"><title>中国知网</title></head>
<body><div class="search-main"><a href="/kns8s/defaultresult/index">检索</a></div></body></html>
""".encode()

VERIFY_PAGE = """<!DOCTYPE html>
<html lang="zh-CN"><head><meta charset="utf-8"><title>超时验证</title></head>
<body><div class="verify-wrap"><p>您的访问超时或操作过于频繁，请完成验证后继续。</p>
<div id="verifyBox"></div></div></body></html>
""".encode()

#: The slider's geometry, in CSS pixels: the track's width, the piece's (and the gap's) side, and
#: how far from the gap's left edge a drag may end and still pass.
SLIDER_WIDTH = 310
PIECE_SIZE = 40
SLIDER_TOLERANCE = 5
#: How long a person's drag takes (milliseconds): a script's jump of 0 ms, or a drag left
#: standing for minutes, is no person sliding the puzzle.
DRAG_MS = (150, 60_000)


def slider_gap(params: dict[str, str]) -> int:
    """Where the gap is on the verify page of ``params`` (its left edge, CSS px): fixed by the
    page's ident and captchaId, so the check answers the page the person saw, and drawn from a
    hash rather than the site's seeded random source (whose sequence other answers depend on)."""
    import hashlib

    key = f"{params.get('ident', '')}|{params.get('captchaId', '')}".encode()
    room = SLIDER_WIDTH - PIECE_SIZE - 80
    return 70 + int.from_bytes(hashlib.sha256(key).digest()[:4], "big") % room


SLIDER_SCRIPT = """
(function () {
  var handle = document.getElementById('standin-slider');
  var piece = document.getElementById('standin-piece');
  var form = document.getElementById('standin-pass-form');
  var most = %(most)d, start = null, began = 0, left = 0;
  function place(x) {
    left = Math.max(0, Math.min(most, x));
    handle.style.left = left + 'px';
    piece.style.left = left + 'px';
  }
  handle.addEventListener('pointerdown', function (e) {
    start = e.clientX; began = performance.now();
    handle.setPointerCapture(e.pointerId);
    e.preventDefault();
  });
  handle.addEventListener('pointermove', function (e) {
    if (start !== null) place(e.clientX - start);
  });
  function release(e) {
    if (start === null) return;
    place(e.clientX - start);
    start = null;
    form.elements.x.value = String(Math.round(left));
    form.elements.dragMs.value = String(Math.round(performance.now() - began));
    form.submit();
  }
  handle.addEventListener('pointerup', release);
  handle.addEventListener('pointercancel', release);
})();
"""


def verify_page(params: dict[str, str]) -> bytes:
    """The 2026 verify page (AJ-Captcha's block puzzle) as a real slider.

    A piece, a gap at :func:`slider_gap` and a handle on a track: a person drags the handle
    (mouse, pen or touch: pointer events) until the piece covers the gap; on release the page
    posts where the piece stopped (``x``) and how long the drag took (``dragMs``) to AJ-Captcha's
    check path, which passes this browser's session only when both are a person's (see
    ``Site.verify_check``) and sends the browser back to ``returnUrl``; else to a fresh puzzle.
    The gap's place is in the page (``data-x``), as it is in the real puzzle's picture: a test
    client posting over HTTP reads it there (``standin.client.Client.pass_check``)."""
    hidden = "".join(
        f'<input type="hidden" name="{name}" value="{_e(params.get(name, ""))}">'
        for name in ("captchaType", "ident", "captchaId", "returnUrl")
    )
    gap = slider_gap(params)
    failed = (
        '<p class="verify-failed" id="standin-failed">验证失败，请重试</p>\n'
        if params.get("failed")
        else ""
    )
    box = f"position:absolute;top:0;width:{PIECE_SIZE}px;height:{PIECE_SIZE}px"
    script = SLIDER_SCRIPT % {"most": SLIDER_WIDTH - PIECE_SIZE}
    return (
        '<!DOCTYPE html>\n<html lang="zh-CN"><head><meta charset="utf-8"><title>安全验证</title>'
        '<meta name="viewport" content="width=device-width"></head>\n'
        '<body style="font-family:sans-serif"><div class="verify-wrap" id="captcha">\n'
        f"<p>请完成安全验证</p>\n{failed}"
        f'<div class="verify-img-panel" style="position:relative;width:{SLIDER_WIDTH}px;'
        f'height:{PIECE_SIZE + 60}px;background:#8ab">'
        f'<div id="standin-gap" data-x="{gap}" style="{box};left:{gap}px;margin-top:30px;'
        'background:#234"></div>'
        f'<div id="standin-piece" style="{box};left:0;margin-top:30px;background:#fc3"></div>'
        "</div>\n"
        f'<div class="verify-bar-area" style="position:relative;width:{SLIDER_WIDTH}px;'
        f'height:{PIECE_SIZE}px;background:#ddd;margin-top:6px">'
        '<span class="verify-msg" style="position:absolute;left:60px;top:10px">向右拖动滑块填充拼图</span>'
        f'<div class="verify-move-block" id="standin-slider" style="{box};left:0;'
        'background:#39f;cursor:pointer;touch-action:none"></div></div>\n'
        '<form id="standin-pass-form" method="post" action="/verify-api/web/check">'
        f'{hidden}<input type="hidden" name="x" value=""><input type="hidden" name="dragMs" '
        'value=""></form>\n'
        '<p class="standin-note">This is the CNKI stand-in (a test site): drag the blue handle '
        "until the yellow piece covers the dark gap.</p>\n"
        f"</div><script>{script}</script></body></html>\n"
    ).encode()


CAPTCHA_PAGE = """<!DOCTYPE html>
<html lang="zh-CN"><head><meta charset="utf-8"><title>安全验证</title>
<script src="https://turing.captcha.qcloud.com/TJCaptcha.js"></script></head>
<body><div class="verify-wrap"><p>请拖动下方滑块完成拼图验证</p>
<div id="TencentCaptcha" data-appid="2039519451" data-cbfn="callback"></div></div></body></html>
""".encode()


VERICODE_PAGE = """<!DOCTYPE html>
<html lang="zh-CN"><head><meta charset="utf-8"><title>验证码</title></head>
<body><div class="verify-wrap"><p>请输入验证码</p>
<form id="vericodeForm" action="/kns8s/brief/checkcode" method="post">
<img id="vericodeImg" src="/kns8s/brief/checkcode?t=1"><input id="vericode" name="vericode" type="text">
<input type="submit" value="提交"></form></div></body></html>
""".encode()


def json_403(message: str) -> bytes:
    """The 2026 grid challenge: ``{"code":-403,"message":"<verify URL>"}``."""
    return ('{"code":-403,"message":"' + message + '"}').encode()


def javascript_page(ident: str) -> bytes:
    """A 200 that holds only a script sending the browser elsewhere (an anti-bot hop)."""
    return (
        f'<script type="text/javascript">var _cnki_t="{ident}";'
        f'window.location.href="/verify/home?captchaType=clickWord&ident="+_cnki_t;</script>'
    ).encode()
