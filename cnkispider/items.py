"""Items: one class per document type, each field named in the crawler's words.

A document's natural key is ``(dbname, filename)`` (CNKI's stable ids, from the list row's
``a.icon-collect`` or its detail link's own parameters), never the detail URL, whose ``v=`` token changes per session. Every
field is a plain string ("" when the page does not carry it); fields with several values
(people, keywords) are joined with ``;`` the way CNKI writes them, so rows stay flat for
SQL and CSV.

The stand-in site's ground truth uses exactly these field names, so a crawl can be compared
with it field by field. ``LIST_FIELDS`` come from the result-list row, the rest from the
detail page.
"""

from __future__ import annotations

import scrapy

from cnkispider import default_settings
from cnkispider.exceptions import InputError
from cnkispider.words.i18n import _

# Fields that every type shares. ``source``, ``date`` and ``database`` are the list row's
# 来源 / 日期 / 数据库 cells; ``title`` comes from the detail page's ``.wx-tit h1``.
COMMON_FIELDS = ("dbname", "filename", "title", "source", "date", "database")
# Fields only a list row gives (no detail page is asked for them). The counts and the export id
# cost no request: they ride on the list page that is fetched anyway (PROTOCOL.md point 15).
#   cited       被引 (td.quote; an empty cell is 0), an integer column
#   downloads   下载 (td.download a.downloadCnt), an integer column
#   counted_at  when the counts were read (the list page's time, UTC): they change, and
#               ``cnkispider refresh-counts`` reads them again
#   export_id   td.seq input.cbItem@value: CNKI's opaque id for its citation export (GetExport),
#               never dbname!filename
LIST_FIELDS = ("source", "date", "database", "cited", "downloads", "counted_at", "export_id")
COUNT_FIELDS = ("cited", "downloads", "counted_at")
# What a list row gives per type, carried to its detail request (a non-empty value of the
# detail page wins). A patent's row also holds its 申请日 (the first td.date; the second,
# 公开日, is its ``date``); the detail page repeats it, so it stays a detail field as well.
# ``online_first`` (网络首发, "1" or "") is the row's b.marktip, and the detail page's mark too.
# ``counted_at`` is not the row's: the spider stamps it when it reads the row.
ROW_FIELDS = {
    "patent": ("source", "date", "database", "application_date", "export_id"),
    "paper": ("source", "date", "database", "cited", "downloads", "export_id", "online_first"),
    "achievement": ("source", "date", "database", "cited", "downloads", "export_id"),
}
# Stored as numbers or times, not text (cnkispider/store/storage.py converts the item's strings).
INTEGER_FIELDS = frozenset({"cited", "downloads", "online_first"})
TIME_FIELDS = frozenset({"counted_at"})

PATENT_FIELDS = COMMON_FIELDS + (
    "patent_type",  # 专利类型
    "application_no",  # 申请(专利)号 / 申请（专利）号
    "application_date",  # 申请日 (also the first td.date of its list row)
    "publication_no",  # 申请公布号
    "publication_date",  # 公开公告日
    "grant_no",  # 授权公布号
    "grant_date",  # 授权公告日
    "applicant",  # 申请人
    "address",  # 地址
    "co_applicants",  # 共同申请人
    "inventors",  # 发明人
    "ipc",  # 分类号
    "main_ipc",  # 主分类号
    "province_code",  # 国省代码
    "agency",  # 代理机构
    "agent",  # 代理人
    "pages",  # 页数
    "abstract",  # input#abstract_text@value (the visible div.abstract-text may be cut)
    "claim",  # 主权项: .claim > h5 + div (older pages div.claim-text)
    "export_id",  # the list row's input.cbItem (patent rows carry no counts)
)

PAPER_FIELDS = COMMON_FIELDS + (
    "authors",  # h3#authorpart span a (affiliation <sup> dropped)
    "institutions",  # the second h3.author
    "abstract",  # input#abstract_text@value (the visible #ChDivSummary may be cut)
    "keywords",  # p.keywords a (trailing ";" dropped)
    "fund",  # 基金
    "doi",  # DOI
    "clc",  # 分类号 (中图分类号): p.clc-code
    "album",  # 专辑
    "topic",  # 专题
    # the source line (.top-tip "焊接学报. 2020,41(04):157-165"; older pages div.sourinfo
    # "1987年12期" and 页码), as the public translators read it
    "year",
    "volume",
    "issue",  # without leading zeros: (04) is "4"
    "page_range",  # "157-165"
    "issn",  # ISSN (older pages div.sourinfo; a labelled row)
    # each author with the institutions their <sup> numbers point to in the second h3.author:
    # JSON text [{"author": "张三", "institutions": ["华中科技大学"]}, ...]
    "author_affiliations",
    "supervisor",  # theses: 导师 (several joined with ";")
    "degree",  # theses: 博士 (CDFD) or 硕士 (CMFD, CDMH)
    "cited",  # 被引 (list row)
    "downloads",  # 下载 (list row)
    "counted_at",  # when cited/downloads were read
    "export_id",  # input.cbItem (list row)
    "online_first",  # 网络首发: 1 when the row's b.marktip or the page marks it, else 0
)

ACHIEVEMENT_FIELDS = COMMON_FIELDS + (
    "completers",  # 成果完成人
    "first_unit",  # 第一完成单位
    "keywords",  # 关键词
    "clc",  # 中图分类号
    "subject_code",  # 学科分类号
    "summary",  # 成果简介 (input#abstract_text@value when the page has it)
    "achievement_type",  # 成果类别
    "entry_date",  # 成果入库时间
    "level",  # 成果水平
    "period",  # 研究起止时间
    "evaluation",  # 评价形式
    "cited",  # 被引 (list row)
    "downloads",  # 下载 (list row)
    "counted_at",  # when cited/downloads were read
    "export_id",  # input.cbItem (list row)
)

FIELDS = {"patent": PATENT_FIELDS, "paper": PAPER_FIELDS, "achievement": ACHIEVEMENT_FIELDS}
DOC_TYPES = tuple(FIELDS)


def has_counts(doc_type: str) -> bool:
    """Do the type's list rows carry counts (被引, 下载: ``refresh-counts``)?"""
    return all(name in FIELDS[doc_type] for name in COUNT_FIELDS)


# How deep a task crawls (docs/DEPTH.md): ``list`` stores documents from their list rows alone,
# ``export`` adds CNKI's citation export (GetExport, many rows a request), ``detail`` fetches
# every detail page (today's crawl). Each stored document records the depth it was stored at
# (its ``depth`` column; NULL: stored before depths, at detail); a deeper pass later fills what
# a shallower one could not, never the reverse (cnkispider/store/storage.py).
DEPTHS = ("list", "export", "detail")  # shallowest first: the rank is the index
DEFAULT_DEPTH = default_settings.TASKS_DEPTH  # detail: written once, as the setting's default


def check_depth(value, name: str = "depth") -> str:
    """A depth from configuration, the command line or a task row; InputError naming it."""
    text = str(value if value is not None else "").strip().lower()
    if text not in DEPTHS:
        raise InputError(
            _("%(name)s: expected one of %(depths)s, got %(value)r")
            % {"name": name, "depths": ", ".join(DEPTHS), "value": value}
        )
    return text


def depth_rank(value: str | None) -> int:
    """0 for list, 1 for export, 2 for detail (and for None: rows older than depths)."""
    return DEPTHS.index(value) if value in DEPTHS else DEPTHS.index(DEFAULT_DEPTH)


def _item_class(name: str, fields: tuple[str, ...]) -> type[scrapy.Item]:
    return type(name, (scrapy.Item,), {f: scrapy.Field() for f in fields})


PatentItem = _item_class("PatentItem", PATENT_FIELDS)
PaperItem = _item_class("PaperItem", PAPER_FIELDS)
AchievementItem = _item_class("AchievementItem", ACHIEVEMENT_FIELDS)

ITEM_CLASSES = {"patent": PatentItem, "paper": PaperItem, "achievement": AchievementItem}


def doc_type_of(item: scrapy.Item) -> str:
    for doc_type, cls in ITEM_CLASSES.items():
        if isinstance(item, cls):
            return doc_type
    raise TypeError(f"not a cnkispider document item: {type(item).__name__}")
