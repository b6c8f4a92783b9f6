"""What a list search is: the document types and how kns8s addresses each (:data:`RESOURCES`,
a row of docs/CONTRACTS.md's resource table each) and :class:`Search`, one list search (a day
range, a category or a set of them OR'd, a title, a sort order, a task's query), plain JSON
data that travels in request meta. Pure, like the rest of ``cnkispider.cnki``; how a search is
asked (QueryJson, the grid's form): :mod:`cnkispider.cnki.protocol`.
"""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass
from typing import Any

# "" is CNKI's relevance order (the stand-in treats it as PT); the others are 发表时间, 被引,
# 下载 and 综合. Each order is deterministic, so desc + asc of one field reach twice the cap.
SORT_FIELDS = ("", "PT", "CF", "DFR", "FFD")
SORT_TYPES = ("desc", "asc")

# The 总库 (CROSSDB) database list a browser sends, in its order (PROTOCOL.md, 2026 point 1).
# A 总库 search without a KuaKuCode is rejected (查询对象结构错误, 没有指定检索分类！); listing
# only some class ids searches only those databases.
CROSSDB_ALL = (
    "YSTT4HG0,LSTPFY1C,JUP3MUPD,MPMFIG1A,EMRPGLPA,WQ0UVIAA,BLZOG7CK,PWFIRAGL,NN3FJMUV,NLBO1Z6R"
)
CROSSDB = "CROSSDB"


@dataclass(frozen=True)
class Resource:
    """How one document type is addressed on kns8s (a row of CONTRACTS.md's resource table)."""

    doc_type: str
    resource: str  # QueryJson "Resource"
    classid: str  # QueryJson "Classid"
    kuaku_code: str  # QueryJson "KuaKuCode": the 总库 class ids searched; "" for one database
    rlang: str  # QueryJson "Rlang"
    search_from: str  # grid form "searchFrom": the 资源范围 label
    referer_path: str  # the advanced-search page a browser would POST the grid from
    # A 总库 search: the database families kept, matched by prefix (CNKI's names carry a year or
    # an edition: CJFDLAST2015, CMFD202101; PROTOCOL.md 2026 evidence point 12); rows of other
    # families are dropped (and counted). A single-database search keeps every row it lists.
    dbnames: tuple[str, ...]

    @property
    def facet_group(self) -> str:
        """The QGroup key of the left-hand facets: SCDBGroup in 总库, MutiGroup in one database."""
        return "SCDBGroup" if self.resource == CROSSDB else "MutiGroup"


RESOURCES: dict[str, Resource] = {
    "patent": Resource(
        doc_type="patent",
        resource="PATENT",
        classid="VUDIXAIY",
        kuaku_code="",  # a single-database resource: the 总库 list here turns every hit into 0
        rlang="Both",  # patents are searched in Chinese and foreign text at once
        search_from="资源范围：专利",
        referer_path="/kns8s/AdvSearch?classid=VUDIXAIY",
        dbnames=("SCPD",),  # informative: a single-database search keeps every row
    ),
    "paper": Resource(
        doc_type="paper",
        resource=CROSSDB,
        classid="WD0FTY92",
        # 学术期刊 (CJFQ, CAPJ) + 学位论文 (CDFD, CMFD) inside 总库: one search per round for
        # both, instead of one per database.
        kuaku_code="YSTT4HG0,LSTPFY1C",
        rlang="CHINESE",
        search_from="资源范围：总库",
        referer_path="/kns8s/AdvSearch?classid=WD0FTY92",
        # The databases of the two classes searched (the real menu's data-chs: 学术期刊 CJFQ, CAPJ,
        # ZHYX, CJTL; 学位论文 CDFD, CMFD), and CJFD: the journal family's names on real rows and
        # links (CJFD2008 ... CJFDLAST2016, CJFDTEMP, CJFDHIS2)
        dbnames=("CJFD", "CJFQ", "CAPJ", "ZHYX", "CJTL", "CDFD", "CMFD"),
    ),
    "achievement": Resource(
        doc_type="achievement",
        resource="ACHIEVEMENTS",
        classid="BLZOG7CK",
        kuaku_code="",
        rlang="CHINESE",
        search_from="资源范围：成果",
        referer_path="/kns8s/AdvSearch?classid=BLZOG7CK",
        dbnames=("SNAD",),  # informative: a single-database search keeps every row
    ),
}


def _iso_day(value: Any, name: str) -> str:
    if isinstance(value, datetime.datetime):
        value = value.date()
    if isinstance(value, datetime.date):
        return value.isoformat()
    try:
        return datetime.date.fromisoformat(str(value)).isoformat()
    except ValueError:
        raise ValueError(f"Search.{name}: expected an ISO date YYYY-MM-DD, got {value!r}") from None


@dataclass(frozen=True)
class Search:
    """One list search: a document type, a publication-date range and its cuts.

    A round searches one day (``day_start == day_end``) in one category; an overflowing round
    is cut further by sort order, and a stale detail link is refreshed by a title search.
    It travels in request meta as :meth:`to_dict`, so it must stay plain JSON data.
    """

    doc_type: str
    day_start: str
    day_end: str
    category: str | None = None  # a category code, matched as a prefix; None = every code
    title: str | None = None  # a title search (contains); None = no title condition
    sort_field: str = ""
    sort_type: str = "desc"
    # several category codes OR'd in one group, as the search form sends several 分类号
    # conditions (a census over a task's categories, tasks/rounds.py); () = not that
    any_of: tuple[str, ...] = ()
    # the task's professional-search expression (cnkispider/cnki/query.py, already checked and
    # in its one spelling), AND'ed with the day and the category; None = a category task
    query: str | None = None

    def __post_init__(self) -> None:
        if self.doc_type not in RESOURCES:
            raise ValueError(
                f"Search.doc_type: expected one of {sorted(RESOURCES)}, got {self.doc_type!r}"
            )
        # Dates may be given as date objects; they are kept as ISO strings so the search
        # stays JSON data. object.__setattr__ because the dataclass is frozen.
        start = _iso_day(self.day_start, "day_start")
        end = _iso_day(self.day_end, "day_end")
        if start > end:
            raise ValueError(f"Search: day_start {start} is after day_end {end}")
        object.__setattr__(self, "day_start", start)
        object.__setattr__(self, "day_end", end)
        if self.sort_field not in SORT_FIELDS:
            raise ValueError(
                f"Search.sort_field: expected one of {SORT_FIELDS}, got {self.sort_field!r}"
            )
        sort_type = str(self.sort_type).lower()
        if sort_type not in SORT_TYPES:
            raise ValueError(
                f"Search.sort_type: expected one of {SORT_TYPES}, got {self.sort_type!r}"
            )
        object.__setattr__(self, "sort_type", sort_type)
        # "" and None both mean "no condition"; keep one spelling so equal searches compare equal.
        object.__setattr__(self, "category", self.category or None)
        object.__setattr__(self, "title", self.title or None)
        object.__setattr__(self, "query", self.query or None)
        any_of = tuple(str(c).strip() for c in (self.any_of or ()))
        if any_of and (self.category or self.title or not all(any_of)):
            # one group holds the OR'd codes alone: a category or title beside them would read
            # as (A OR B) AND ... to one parser and A OR (B AND ...) to another
            raise ValueError(f"Search.any_of {any_of!r}: codes alone, without category or title")
        object.__setattr__(self, "any_of", any_of)

    @classmethod
    def for_day(cls, doc_type: str, day: Any, category: str | None = None, **cuts: Any) -> Search:
        """The search of one round: one day, one category (``cuts``: sort_field, sort_type, title)."""
        return cls(doc_type=doc_type, day_start=day, day_end=day, category=category, **cuts)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if self.any_of:
            data["any_of"] = list(self.any_of)  # plain JSON: requests are stored in Redis
        else:
            del data["any_of"]  # the searches of one category read as before
        if not self.query:
            del data["query"]  # a category task's searches read as before
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Search:
        """Rebuild a search from :meth:`to_dict`.

        Unknown keys are ignored: request meta ``search`` dicts also carry the page, and a
        request written to Redis by another version of the crawler must still load.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
