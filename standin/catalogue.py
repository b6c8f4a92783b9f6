"""What the stand-in's corpus is made of: the document types and their fields (in step with
``cnkispider.items.FIELDS``), CNKI's databases and their year-suffixed names, the category
trees, the corpus's options, a generated document, a list search, and the seeded hash that every
draw of the corpus starts from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TREES = {
    "patent": REPO / "tasks" / "categories" / "ipc.txt",
    "paper": REPO / "tasks" / "categories" / "clc.txt",
    "achievement": REPO / "tasks" / "categories" / "clc.txt",
}
DOC_TYPES = ("patent", "paper", "achievement")
MAX_PER_LEAF = 9999  # the filename keeps four digits for the index within a leaf
SORT_FIELDS = ("", "PT", "FFD", "CF", "DFR")

# Field names, kept in step with cnkispider/items.py (the stand-in does not import the crawler,
# so that it stays an independent judge; a test checks the two agree).
COMMON_FIELDS = ("dbname", "filename", "title", "source", "date", "database")
FIELDS = {
    "patent": COMMON_FIELDS
    + (
        "patent_type",
        "application_no",
        "application_date",
        "publication_no",
        "publication_date",
        "grant_no",
        "grant_date",
        "applicant",
        "address",
        "co_applicants",
        "inventors",
        "ipc",
        "main_ipc",
        "province_code",
        "agency",
        "agent",
        "pages",
        "abstract",
        "claim",
        "export_id",
    ),
    "paper": COMMON_FIELDS
    + (
        "authors",
        "institutions",
        "abstract",
        "keywords",
        "fund",
        "doi",
        "clc",
        "album",
        "topic",
        "year",
        "volume",
        "issue",
        "page_range",
        "issn",
        "author_affiliations",
        "supervisor",
        "degree",
        "cited",
        "downloads",
        "counted_at",
        "export_id",
        "online_first",
    ),
    "achievement": COMMON_FIELDS
    + (
        "completers",
        "first_unit",
        "keywords",
        "clc",
        "subject_code",
        "summary",
        "achievement_type",
        "entry_date",
        "level",
        "period",
        "evaluation",
        "cited",
        "downloads",
        "counted_at",
        "export_id",
    ),
}
# The list row's counts, as a crawler stores them (strings here): counted_at is when a crawler
# read them, so the truth leaves it "" and a comparison skips it.
UNTRUE_FIELDS = frozenset({"counted_at"})
# 总库 (CROSSDB) KuaKuCode class ids. A paper crawl lists journals and theses; the other ids of
# the browser's full list mix in rows of other databases, named here for illustration, that are
# not papers of this corpus's ground truth (a crawler must drop them by dbname).
PAPER_CLASSES = {"YSTT4HG0": ("CJFQ", "CAPJ"), "LSTPFY1C": ("CDFD", "CMFD")}
FOREIGN_DATABASES = {
    "JUP3MUPD": ("CPFD", "会议"),
    "MPMFIG1A": ("CCND", "报纸"),
    "EMRPGLPA": ("CYFD", "年鉴"),
    "WQ0UVIAA": ("IPFD", "国际会议"),
    "BLZOG7CK": ("CSAD", "成果"),
    "PWFIRAGL": ("CBBD", "图书"),
    "NN3FJMUV": ("SCSF", "标准"),
    "NLBO1Z6R": ("CCJD", "辑刊"),
}
FOREIGN_INDEX = {db: k for k, (db, _name) in enumerate(FOREIGN_DATABASES.values())}
PAPER_DBNAMES = ("CJFQ", "CAPJ", "CMFD", "CDFD")

DBNAME_TYPES = {
    "SCPD": "patent",
    "CJFQ": "paper",
    "CAPJ": "paper",
    "CMFD": "paper",
    "CDFD": "paper",
    "SNAD": "achievement",
}
# CNKI's database names carry a year (PROTOCOL.md point 12): the name's first letters say its
# family. CJFD* (CJFD2008, CJFDLAST2015, ...) is the journal family, shown by kns8s as CJFQ.
FAMILY_PREFIXES = (("CJFD", "CJFQ"), ("CJFQ", "CJFQ"), ("CAPJ", "CAPJ"), ("CMFD", "CMFD"))
FAMILY_PREFIXES += (("CDFD", "CDFD"), ("SCPD", "SCPD"), ("SNAD", "SNAD"))


def dbname_family(dbname: str) -> str:
    """The database family of a (possibly year-suffixed) name: ``SCPD2020`` -> ``SCPD``,
    ``CJFDLAST2015`` -> ``CJFQ``, ``CMFD202101`` -> ``CMFD``; other names as they are."""
    for prefix, family in FAMILY_PREFIXES:
        if dbname.startswith(prefix):
            return family
    return dbname


class CategoryTree:
    """A category tree file: ``CODE name`` per line, two spaces of indent per level."""

    def __init__(self, entries: list[tuple[str, int, str]], source: str = "<tree>"):
        self.source = source
        self.codes: list[str] = []
        self.names: dict[str, str] = {}
        self.children: dict[str, list[str]] = {}
        self.parent: dict[str, str | None] = {}
        stack: list[tuple[int, str]] = []
        for code, depth, name in entries:
            while stack and stack[-1][0] >= depth:
                stack.pop()
            parent = stack[-1][1] if stack else None
            self.codes.append(code)
            self.names[code] = name
            self.parent[code] = parent
            self.children.setdefault(code, [])
            if parent is not None:
                self.children[parent].append(code)
            stack.append((depth, code))
        self.top = [c for c in self.codes if self.parent[c] is None]
        self.leaves = [c for c in self.codes if not self.children[c]]
        self.leaf_index = {c: i for i, c in enumerate(self.leaves)}
        # leaf index -> the other leaves under the same top-level class
        top = [self.top_of(c) for c in self.leaves]
        self.family = [
            tuple(j for j in range(len(self.leaves)) if j != i and top[j] == top[i])
            for i in range(len(self.leaves))
        ]
        # longest leaf first, so owner() finds the most specific leaf that prefixes a code
        self._by_length = sorted(self.leaves, key=len, reverse=True)

    @classmethod
    def from_file(cls, path: str | Path) -> CategoryTree:
        entries = []
        for raw in Path(path).read_text(encoding="utf-8").splitlines():
            line = raw.split("#", 1)[0].rstrip()
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip(" "))
            code, _, name = line.strip().partition(" ")
            entries.append((code, indent // 2, name.strip()))
        if not entries:
            raise ValueError(f"{path}: no category codes")
        return cls(entries, str(path))

    def leaves_under(self, code: str) -> list[int]:
        """Indices of the leaves a search on ``code`` matches whole (leaf starts with code)."""
        return [i for i, leaf in enumerate(self.leaves) if leaf.startswith(code)]

    def leaves_above(self, code: str) -> list[int]:
        """Indices of leaves strictly shorter than ``code`` that prefix it (a partial match)."""
        return [i for i, leaf in enumerate(self.leaves) if code.startswith(leaf) and leaf != code]

    def owner(self, code: str) -> str | None:
        for leaf in self._by_length:
            if code.startswith(leaf):
                return leaf
        return None

    def top_of(self, code: str) -> str:
        while self.parent.get(code):
            code = self.parent[code]
        return code


@dataclass(frozen=True)
class Search:
    """One list search as the grid request describes it (days as ordinals, both inclusive)."""

    doc_type: str
    start: int
    end: int
    codes: tuple[str, ...] = ()  # prefixes (SUFFIX, CCL facet); no codes and no exact: every code
    title: str = ""  # "": no title filter
    sort_field: str = "PT"
    desc: bool = True
    exact: tuple[str, ...] = ()  # codes a document must carry exactly (CLC with TOPRANK)
    dbnames: tuple[str, ...] = ()  # papers: the databases kept (empty: all four)
    foreign: tuple[str, ...] = ()  # 总库 databases outside the corpus whose rows are mixed in
    # further prefix clauses AND'd with ``codes`` (each OR'd within): two 分类号 rows joined
    # by AND list the documents carrying a code under both
    also: tuple[tuple[str, ...], ...] = ()
    # a professional-search expression (standin/query.py), AND'ed with the rest; "": none
    expert: str = ""


@dataclass
class CorpusOptions:
    seed: int = 1
    scale: float = 1.0
    overflow: list[str] = field(default_factory=list)
    trees: dict[str, str] = field(default_factory=dict)
    doomed: int = 0
    title_variety: int = 0  # distinct titles per (type, day); 0: each document its own
    span: tuple[str, str] = ("2024-01-01", "2024-12-31")
    # database names as CNKI's real rows show them (SCPD2024, CJFDLAST2024, CMFD202401, ...);
    # off: the families' bare names (SCPD, CJFQ, CMFD, ...)
    # issue 26: added to every document's 被引 and 下载 (as CNKI's counts grow; /_control
    # count_shift changes it while the site runs, for `cnkispider refresh-counts`)
    count_shift: int = 0
    dbname_years: bool = True  # as CNKI's real rows (SCPD2017, CJFDLAST2015, CMFD202101)
    # how counts are spread over days and categories: "" (the hash spread above) or
    # "realistic-year" (publication weekdays, Zipf-skewed categories, surge days; PROFILES)
    profile: str = ""
    # realistic-year: documents of a surge day (a day over the cap), NOT scaled; the default is
    # 1.25 times CNKI's 6000, so a surge day splits at any scale (the patents' third surge day
    # and the papers' second are 3 and 4 times this, so their largest class splits too)
    surge_rows: int = 7500
    late: bool = False  # documents entered after their own date (Corpus.entry_lag)
    as_of: str = ""  # the site's today: what was entered after it is not there yet
    withdrawn: frozenset = frozenset()  # filenames CNKI no longer lists (/_control withdrawn)


class Document:
    """One generated document: its item fields plus what the markup needs beyond them."""

    __slots__ = ("doc_type", "ref", "fields", "codes", "extra", "row_parts", "detail_html")

    def __init__(self, doc_type, ref, fields, codes, extra):
        self.doc_type = doc_type
        self.ref = ref  # (day ordinal, leaf index, i)
        self.fields = fields
        self.codes = codes  # classification codes, main first (what a CLC search matches)
        self.extra = extra
        self.row_parts = None  # variant -> parts, cached by the markup module
        self.detail_html = None

    @property
    def key(self) -> tuple[str, str]:
        return self.fields["dbname"], self.fields["filename"]


_M64 = (1 << 64) - 1


def mix(base: int, i: int, salt: int) -> int:
    """splitmix64 of (base, i, salt): a cheap per-document hash under a per-leaf keyed base."""
    x = (base + (i * 8 + salt + 1) * 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def day_digits(day: int) -> str:
    return date.fromordinal(day).strftime("%Y%m%d")


def iso_day(day: int) -> str:
    return date.fromordinal(day).isoformat()


def issn_of(draw: int) -> str:
    """An ISSN with its check digit (weights 8..2, mod 11; 10 is X)."""
    digits = f"{draw % 10_000_000:07d}"
    check = -sum(int(d) * w for d, w in zip(digits, range(8, 1, -1), strict=True)) % 11
    return f"{digits[:4]}-{digits[4:]}{'X' if check == 10 else check}"


def parse_day(text: str) -> int:
    return date.fromisoformat(text).toordinal()
