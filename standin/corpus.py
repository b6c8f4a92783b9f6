"""The stand-in's corpus: CNKI documents generated lazily and deterministically from a seed.

Nothing is stored: every count, document and ordering is a pure function of the options, so
the same options give the same site, and a document can be regenerated from its filename alone.

Options (``CorpusOptions``):
  seed          every count, document and order derives from it.
  scale         multiplies the natural counts; a non-zero count stays at least 1.
  overflow      ``TYPE:YYYY-MM-DD:CODE:COUNT`` forces counts. On a leaf code it sets that leaf's
                count (at most 9999); on an inner code it spreads COUNT evenly over the code's
                leaves, so the code overflows CNKI's cap while (ideally) its children do not.
  trees         doc type -> category tree file (default: the project's ``tasks/categories``).
  doomed        N documents per (type, day) whose detail page always fails (the N smallest
                "doom" hashes of the day); the server may add more by filename.
  span          the dates a search without a PT range covers.
  profile       "realistic-year": counts by publication weekday, Zipf-skewed classes and surge
                days (``REALISTIC``, :meth:`Corpus.realistic_count`) instead of the hash spread.
  surge_rows    realistic-year: documents of a surge day (not scaled).
  late          each document is entered some days after its own date, as CNKI enters journal
                issues, patents and theses late (PROTOCOL.md point 21): a lag drawn per
                document (:meth:`Corpus.entry_lag`: seven in ten within a week, two in ten
                within a month, the rest up to four months).
  as_of         the site's today (``YYYY-MM-DD``; "" none): a document entered after it is not
                listed, found or counted in the ground truth yet. Tests set it and move it
                (``/_control`` ``as_of``) to play the days passing.
  withdrawn     filenames no longer listed (``/_control`` ``withdrawn``: a document CNKI took
                back; its detail page is gone too).

The universe of classification codes is the leaves of the type's tree. ``count(type, day, leaf)``
comes from hash(seed, type, day, leaf): 40% are 0, 45% 1-30, 10% 31-300, 4% 301-1500 and 1%
1501-4000, so most rounds are empty or small and a few top-level codes pass CNKI's 6000 cap.
Document ``i`` of (type, day, leaf) is generated from hash(seed, type, day, leaf, i). Its main
classification code starts with the leaf; a quarter of the documents carry one or two more codes of
related leaves, and a search matches any of them, so one document can turn up in several rounds,
as on CNKI. Extra codes come from leaves under the same top-level class that have documents of
their own that day, so an empty leaf stays empty. Titles are a bijection of (leaf, i) into 1,080,000 combinations per (type, day), so
they are unique within a day and type (for trees of at most 108 leaves).

Papers searched through 总库 with the browser's full KuaKuCode list also meet "foreign" rows of
other databases (``FOREIGN_DATABASES``): a few per (day, leaf) of papers, paper-like documents
with negative indices, never in the ground truth. A patent's ``date`` is its 公开日.

Filenames encode (day, leaf index, i): patents ``CN{yyyymmdd}{leaf:03d}{i:04d}{A|B|U}``, papers
``{journal or university code}{yyyymmdd}{leaf:03d}{i:04d}``, achievements
``SNAD{yyyymmdd}{leaf:03d}{i:04d}``, foreign rows ``{db}{yyyymmdd}{leaf:03d}{k:04d}``. Field values are exactly what a correct parser extracts
(``cnkispider.items.FIELDS``): strings, several values joined by ``;``, ``""`` when absent.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from standin import vocab
from standin.query import compile_expert

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


# The "realistic-year" profile (CorpusOptions.profile). Documents of an ordinary day at scale 1
# (the order of magnitude of CNKI's own: about 3.7 million Chinese patents a year over 104-105
# publication days; about 1.6 million journal papers and theses a year), the weekdays a type
# publishes on (date.weekday(): Monday 0; CNIPA publishes on Tuesdays and Fridays), a factor for
# the other days (papers only: fewer at weekends), the top-level classes from the largest down
# (a Zipf spread: the k-th has weight 1/k; classes not named follow in tree order), and the
# surge days of a year as multiples of ``surge_rows``.
PROFILES = ("realistic-year",)
REALISTIC = {
    "patent": {
        "day": 36000,
        "weekdays": (1, 4),
        "off_days": 0.0,
        "top_order": "GHBAFCED",
        "surges": (1, 1, 3),
    },
    "paper": {
        "day": 5500,
        "weekdays": (0, 1, 2, 3, 4),
        "off_days": 0.4,
        "top_order": ("T", "R", "F", "G", "S", "O", "X", "D", "K", "I", "Q", "P", "U"),
        "surges": (1, 4),
    },
}
REALISTIC["achievement"] = dict(REALISTIC["paper"], day=150, surges=(1,))
DAY_JITTER = 0.2  # an ordinary day's total varies by up to this share either way
LEAF_JITTER = 0.15  # and each leaf's share of it

_TITLE_PRIME = 7919  # coprime with the title space, so n -> n * P + offset is a bijection


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


def _mix(base: int, i: int, salt: int) -> int:
    """splitmix64 of (base, i, salt): a cheap per-document hash under a per-leaf keyed base."""
    x = (base + (i * 8 + salt + 1) * 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _day_digits(day: int) -> str:
    return date.fromordinal(day).strftime("%Y%m%d")


def _iso(day: int) -> str:
    return date.fromordinal(day).isoformat()


def _issn(draw: int) -> str:
    """An ISSN with its check digit (weights 8..2, mod 11; 10 is X)."""
    digits = f"{draw % 10_000_000:07d}"
    check = -sum(int(d) * w for d, w in zip(digits, range(8, 1, -1), strict=True)) % 11
    return f"{digits[:4]}-{digits[4:]}{'X' if check == 10 else check}"


def parse_day(text: str) -> int:
    return date.fromisoformat(text).toordinal()


class Corpus:
    def __init__(self, options: CorpusOptions | None = None):
        self.options = options = options or CorpusOptions()
        self.seed = options.seed
        self._key = hashlib.blake2b(
            f"cnki-stand-in|{options.seed}".encode(), digest_size=32
        ).digest()
        paths = dict(DEFAULT_TREES)
        paths.update({k: Path(v) for k, v in options.trees.items()})
        unknown = set(paths) - set(DOC_TYPES)
        if unknown:
            raise ValueError(f"unknown document type(s) for a category file: {sorted(unknown)}")
        cache: dict[Path, CategoryTree] = {}
        self.trees = {}
        for doc_type, path in paths.items():
            if path not in cache:
                cache[path] = CategoryTree.from_file(path)
            self.trees[doc_type] = cache[path]
        self.span = (parse_day(options.span[0]), parse_day(options.span[1]))
        self._overrides = self._parse_overflow(options.overflow)
        if options.profile and options.profile not in PROFILES:
            raise ValueError(
                f"unknown corpus profile {options.profile!r} (known: {', '.join(PROFILES)})"
            )
        self._leaf_weights = functools.lru_cache(maxsize=8)(self._make_leaf_weights)
        self.surge_days = functools.lru_cache(maxsize=64)(self._surge_days)
        self.counts = functools.lru_cache(maxsize=4096)(self._counts)
        self.document = functools.lru_cache(maxsize=8192)(self._document)
        self.results = functools.lru_cache(maxsize=128)(self._results)
        self._secondary_index = functools.lru_cache(maxsize=256)(self._make_secondary_index)
        self.doomed_refs = functools.lru_cache(maxsize=1024)(self._doomed_refs)
        self.leaf_base = functools.lru_cache(maxsize=65536)(self._leaf_base)
        self.family = functools.lru_cache(maxsize=65536)(self._family)
        self.title_offset = functools.lru_cache(maxsize=4096)(functools.partial(self.h, "title"))

    # -- hashing ---------------------------------------------------------------------------

    def _digest(self, *parts, size: int = 8) -> bytes:
        text = "\x1f".join(map(str, parts)).encode()
        return hashlib.blake2b(text, digest_size=size, key=self._key).digest()

    def h(self, *parts) -> int:
        """A 64-bit hash of the parts under this seed."""
        return int.from_bytes(self._digest(*parts), "big")

    # -- counts ----------------------------------------------------------------------------

    def _parse_overflow(self, specs: Iterable[str]) -> dict[tuple[str, int], dict[int, int]]:
        overrides: dict[tuple[str, int], dict[int, int]] = {}
        for spec in specs:
            try:
                doc_type, day, code, count = spec.split(":")
                day_ord, count = parse_day(day), int(count)
            except ValueError:
                raise ValueError(
                    f"--overflow {spec!r}: expected TYPE:YYYY-MM-DD:CODE:COUNT"
                ) from None
            if doc_type not in DOC_TYPES:
                raise ValueError(f"--overflow {spec!r}: unknown type {doc_type!r}")
            tree = self.trees[doc_type]
            leaves = tree.leaves_under(code)
            if not leaves:
                raise ValueError(f"--overflow {spec!r}: {code!r} is not a code of {tree.source}")
            base, rest = divmod(count, len(leaves))
            slot = overrides.setdefault((doc_type, day_ord), {})
            for k, li in enumerate(leaves):
                n = base + (1 if k < rest else 0)
                if n > MAX_PER_LEAF:
                    raise ValueError(
                        f"--overflow {spec!r}: {n} documents on leaf "
                        f"{tree.leaves[li]} (at most {MAX_PER_LEAF})"
                    )
                slot[li] = n
        return overrides

    def natural_count(self, doc_type: str, day: int, li: int) -> int:
        if self.options.profile == "realistic-year":
            return self.realistic_count(doc_type, day, li)
        b = self._digest("count", doc_type, day, li, size=4)
        u = int.from_bytes(b[:2], "big") / 65536.0
        v = int.from_bytes(b[2:], "big")
        if u < 0.40:
            n = 0
        elif u < 0.85:
            n = 1 + v % 30
        elif u < 0.95:
            n = 31 + v % 270
        elif u < 0.99:
            n = 301 + v % 1200
        else:
            n = 1501 + v % 2500
        if n == 0 or self.options.scale == 1.0:
            return n
        return (
            min(MAX_PER_LEAF, max(1, round(n * self.options.scale)))
            if self.options.scale > 0
            else 0
        )

    # -- the realistic-year profile ----------------------------------------------------------

    def _unit(self, *parts) -> float:
        """A uniform draw in [0, 1) from the parts under this seed."""
        return int.from_bytes(self._digest(*parts, size=4), "big") / 2.0**32

    def _make_leaf_weights(self, doc_type: str) -> tuple[float, ...]:
        """Each leaf's share of a day (they add up to 1): Zipf over the top-level classes in
        REALISTIC's order, then Zipf again among each node's children, ranked by a draw under
        the seed (so one child of a class is its big one, as TP is of T and G06 of G)."""
        tree = self.trees[doc_type]
        named = [c for c in REALISTIC[doc_type]["top_order"] if c in tree.top]
        order = named + [c for c in tree.top if c not in named]

        def zipf(codes: list[str]) -> dict[str, float]:
            raw = {c: 1.0 / (k + 1) for k, c in enumerate(codes)}
            total = sum(raw.values())
            return {c: w / total for c, w in raw.items()}

        weight = zipf(order)
        for code in tree.codes:  # tree order: a parent before its children
            children = tree.children[code]
            if children:
                ranked = sorted(children, key=lambda c: self.h("rank", doc_type, c))
                for child, share in zipf(ranked).items():
                    weight[child] = weight[code] * share
        return tuple(weight[leaf] for leaf in tree.leaves)

    def _surge_days(self, doc_type: str, year: int) -> dict[int, int]:
        """day ordinal -> documents, for the year's surge days: the publication days with the
        smallest draws, one per entry of REALISTIC's ``surges``."""
        plan = REALISTIC[doc_type]
        first, last = date(year, 1, 1).toordinal(), date(year, 12, 31).toordinal()
        days = [
            d for d in range(first, last + 1) if date.fromordinal(d).weekday() in plan["weekdays"]
        ]
        days.sort(key=lambda d: self.h("surge", doc_type, d))
        return {
            d: round(self.options.surge_rows * factor)
            for d, factor in zip(days, plan["surges"], strict=False)
        }

    def day_target(self, doc_type: str, day: int) -> float:
        """The documents a day of the realistic year is drawn around (0: nothing published)."""
        plan = REALISTIC[doc_type]
        surge = self.surge_days(doc_type, date.fromordinal(day).year).get(day)
        if surge is not None:
            return float(surge)  # not scaled: a surge day is there to pass the cap
        factor = 1.0 if date.fromordinal(day).weekday() in plan["weekdays"] else plan["off_days"]
        jitter = 1.0 + DAY_JITTER * (2.0 * self._unit("day", doc_type, day) - 1.0)
        return plan["day"] * factor * jitter * max(0.0, self.options.scale)

    def realistic_count(self, doc_type: str, day: int, li: int) -> int:
        """Leaf ``li``'s documents on ``day``: the day's target times the leaf's Zipf share
        (jittered), rounded up or down by a draw so that small shares are often 0 and the
        expected total is kept."""
        target = self.day_target(doc_type, day)
        if target <= 0:
            return 0
        jitter = 1.0 + LEAF_JITTER * (2.0 * self._unit("leaf", doc_type, day, li) - 1.0)
        x = target * self._leaf_weights(doc_type)[li] * jitter
        n = int(x) + (1 if self._unit("round", doc_type, day, li) < x - int(x) else 0)
        return min(MAX_PER_LEAF, n)

    def _counts(self, doc_type: str, day: int) -> tuple[int, ...]:
        tree = self.trees[doc_type]
        counts = [self.natural_count(doc_type, day, li) for li in range(len(tree.leaves))]
        for li, n in self._overrides.get((doc_type, day), {}).items():
            counts[li] = n
        return tuple(counts)

    # -- cheap per-document facts (no full generation) -------------------------------------

    def _leaf_base(self, doc_type: str, day: int, li: int) -> int:
        return self.h("leaf", doc_type, day, li)

    def _family(self, doc_type: str, day: int, li: int) -> tuple[int, ...]:
        """Leaves an extra code of leaf ``li`` may come from: its relatives under the same
        top-level class that have documents of their own that day (so an empty leaf's round
        stays empty)."""
        counts = self.counts(doc_type, day)
        return tuple(s for s in self.trees[doc_type].family[li] if counts[s])

    def secondary_leaves(self, doc_type: str, day: int, li: int, i: int) -> tuple[int, ...]:
        """Leaves of the extra classification codes a document carries (most carry none)."""
        x = _mix(self.leaf_base(doc_type, day, li), i, 1)
        if (x & 0xFF) >= 64:  # three documents in four carry one code only
            return ()
        family = self.family(doc_type, day, li)
        if not family:
            return ()
        first = family[(x >> 8 & 0xFFFF) % len(family)]
        if (x & 0xFF) >= 16 or len(family) < 2:
            return (first,)
        second = family[(x >> 24 & 0xFFFF) % len(family)]
        return (first,) if second == first else (first, second)

    def rank(self, doc_type: str, day: int, li: int, i: int) -> tuple[int, int, int]:
        """(tie-break, cited count, download count): what the list orders sort on."""
        base = self.leaf_base(doc_type, day, li)
        tie = _mix(base, i, 2)
        x = _mix(base, i, 3)
        cites = 0 if (x & 0xFF) < 170 else 1 + (x >> 8 & 0xFF) % 60
        downloads = int(((x >> 16 & 0xFFFF) / 65536.0) ** 3 * 1500)
        return tie, cites, downloads

    def title_parts(self, doc_type: str, day: int, li: int, i: int) -> tuple[str, int, int, int]:
        """The title and its (technique, object, action) slot indices."""
        templates = {
            "patent": vocab.PATENT_TITLES,
            "paper": vocab.PAPER_TITLES,
            "achievement": vocab.ACHIEVEMENT_TITLES,
        }[doc_type]
        nt, no, na, nk = len(vocab.TECHS), len(vocab.OBJECTS), len(vocab.ACTIONS), len(templates)
        space = nt * no * na * nk
        offset = self.title_offset(doc_type, day) % space
        slot = li * 10000 + i
        if self.options.title_variety > 0:  # a common title: many documents of the day share it
            slot %= self.options.title_variety
        n = (slot * _TITLE_PRIME + offset) % space
        ti, n = n % nt, n // nt
        oi, n = n % no, n // no
        ai, k = n % na, n // na
        text = templates[k].format(t=vocab.TECHS[ti], o=vocab.OBJECTS[oi], a=vocab.ACTIONS[ai])
        return text, ti, oi, ai

    def title(self, doc_type: str, day: int, li: int, i: int) -> str:
        return self.title_parts(doc_type, day, li, i)[0]

    # -- search ----------------------------------------------------------------------------

    def _make_secondary_index(self, doc_type: str, day: int) -> dict[int, list[tuple[int, int]]]:
        """leaf index -> documents of other leaves of this day that carry a code of it."""
        index: dict[int, list[tuple[int, int]]] = {}
        for li, n in enumerate(self.counts(doc_type, day)):
            for i in range(n):
                for s in self.secondary_leaves(doc_type, day, li, i):
                    index.setdefault(s, []).append((li, i))
        return index

    def match_refs(
        self, doc_type: str, start: int, end: int, codes: tuple[str, ...]
    ) -> list[tuple]:
        """Every document of the days whose codes match one of ``codes`` (all if empty),
        deduplicated, in (day, leaf, i) order."""
        tree = self.trees[doc_type]
        if not codes:
            whole, partial = set(range(len(tree.leaves))), {}
        else:
            whole = {li for c in codes for li in tree.leaves_under(c)}
            partial = {}  # leaf index -> codes longer than the leaf that start with it
            for c in codes:
                for li in tree.leaves_above(c):
                    if li not in whole:
                        partial.setdefault(li, []).append(c)
        refs: list[tuple] = []
        for day in range(start, end + 1):
            counts = self.counts(doc_type, day)
            found: set[tuple[int, int]] = set()
            for li in whole:
                found.update((li, i) for i in range(counts[li]))
            if codes:
                index = self._secondary_index(doc_type, day)
                for li in whole:
                    found.update(index.get(li, ()))
                for li, longer in partial.items():
                    candidates = [(li, i) for i in range(counts[li])] + index.get(li, [])
                    for ref in candidates:
                        if ref in found:
                            continue
                        doc = self.document(doc_type, day, *ref)
                        if any(code.startswith(c) for code in doc.codes for c in longer):
                            found.add(ref)
            refs.extend((day, li, i) for li, i in sorted(found))
        return refs

    def exact_refs(
        self, doc_type: str, start: int, end: int, codes: tuple[str, ...]
    ) -> list[tuple]:
        """Documents carrying one of ``codes`` exactly (TOPRANK: no child codes)."""
        tree = self.trees[doc_type]
        leaves = {
            li
            for c in codes
            for li, leaf in enumerate(tree.leaves)
            if c.startswith(leaf) or leaf.startswith(c)
        }
        refs = []
        for day in range(start, end + 1):
            counts = self.counts(doc_type, day)
            index = self._secondary_index(doc_type, day)
            found = set()
            for li in leaves:
                for ref in [(li, i) for i in range(counts[li])] + index.get(li, []):
                    if ref not in found and set(self.document(doc_type, day, *ref).codes) & set(
                        codes
                    ):
                        found.add(ref)
            refs.extend((day, li, i) for li, i in sorted(found))
        return refs

    def paper_dbname(self, day: int, li: int, i: int) -> str:
        """A paper's database without generating it (the first draw of ``_paper``)."""
        u = random.Random(_mix(self.leaf_base("paper", day, li), i, 4)).random()
        return "CJFQ" if u < 0.55 else "CAPJ" if u < 0.70 else "CMFD" if u < 0.92 else "CDFD"

    def foreign_count(self, day: int, li: int, db: str) -> int:
        """Rows of the foreign database ``db`` under paper leaf ``li`` that day (a few where the
        leaf has papers, none where it has none)."""
        n = self.counts("paper", day)[li]
        return self.h("foreign", day, li, db) % (2 + n // 8) if n else 0

    @staticmethod
    def foreign_ref(db: str, k: int) -> int:
        """The (negative) document index of foreign row ``k`` of ``db``."""
        return -1 - FOREIGN_INDEX[db] * 10000 - k

    def foreign_refs(self, start: int, end: int, codes, exact, dbs) -> list[tuple]:
        tree = self.trees["paper"]
        out = []
        for day in range(start, end + 1):
            for li, leaf in enumerate(tree.leaves):
                if codes or exact:
                    whole = any(leaf.startswith(c) for c in codes)
                    maybe = whole or any(
                        c.startswith(leaf) or leaf.startswith(c) for c in codes + exact
                    )
                    if not maybe:
                        continue
                else:
                    whole = True
                for db in dbs:
                    for k in range(self.foreign_count(day, li, db)):
                        ref = (day, li, self.foreign_ref(db, k))
                        if not whole:
                            doc_codes = self.document("paper", *ref).codes
                            if not any(
                                code.startswith(codes) or code in exact for code in doc_codes
                            ):
                                continue
                        out.append(ref)
        return out

    def _results(self, search: Search) -> tuple[tuple[int, int, int], ...]:
        """The search's documents in the order the list pages show them."""
        start, end = search.start, search.end
        t = search.doc_type
        if search.exact:
            refs = self.exact_refs(t, start, end, search.exact)
            if search.codes:
                refs = sorted(set(refs) | set(self.match_refs(t, start, end, search.codes)))
        else:
            refs = self.match_refs(t, start, end, search.codes)
        for clause in search.also:
            keep = set(self.match_refs(t, start, end, clause))
            refs = [r for r in refs if r in keep]
        if search.dbnames and set(PAPER_DBNAMES) - set(search.dbnames):
            keep = set(search.dbnames)
            refs = [r for r in refs if self.paper_dbname(*r) in keep]
        if search.foreign:
            refs = refs + self.foreign_refs(start, end, search.codes, search.exact, search.foreign)
        if search.title:
            refs = [r for r in refs if search.title in self.title(t, *r)]
        if search.expert:
            matches = compile_expert(search.expert, t)
            refs = [r for r in refs if matches(self.document(t, *r))]
        refs = self.entered_by(t, refs)
        rank = self.rank
        field_ = search.sort_field
        if field_ in ("", "PT"):
            keyed = [((r[0], rank(t, *r)[0]), r) for r in refs]
        elif field_ == "FFD":  # another stable order within a day
            keyed = [((r[0], rank(t, *r)[0] ^ 0x5DEECE66D5DEECE6), r) for r in refs]
        elif field_ == "CF":
            keyed = [((rank(t, *r)[1], rank(t, *r)[0]), r) for r in refs]
        else:  # DFR
            keyed = [((rank(t, *r)[2], rank(t, *r)[0]), r) for r in refs]
        # the ref itself breaks any remaining tie, so asc is exactly the reverse of desc
        keyed.sort(reverse=search.desc)
        return tuple(r for _, r in keyed)

    # -- the site's clock: late arrivals ------------------------------------------------------

    def entry_lag(self, doc_type: str, day: int, li: int, i: int) -> int:
        """Days between a document's own date and the day CNKI enters it (0 unless ``late``):
        seven in ten within a week, two in ten within a month, one in ten up to four months
        (the long tail of journal issues listed while "该刊数据正在更新中")."""
        if not self.options.late:
            return 0
        u = (_mix(self.leaf_base(doc_type, day, li), i, 9) >> 11) / float(1 << 53)
        if u < 0.70:
            return int(u / 0.70 * 8)  # 0..7
        if u < 0.90:
            return 8 + int((u - 0.70) / 0.20 * 23)  # 8..30
        return 31 + int((u - 0.90) / 0.10 * 90)  # 31..120

    def entered_by(self, doc_type: str, refs) -> list:
        """The refs whose document is entered by the site's today (``as_of``; none set: all) and
        not withdrawn."""
        refs = list(refs)
        if self.options.withdrawn:  # no longer listed (a document CNKI took back)
            gone = self.options.withdrawn
            refs = [r for r in refs if self.document(doc_type, *r).fields["filename"] not in gone]
        if not self.options.as_of:
            return refs
        today = parse_day(self.options.as_of)
        lag = self.entry_lag
        return [r for r in refs if r[0] + lag(doc_type, *r) <= today]

    # -- filenames -------------------------------------------------------------------------

    def locate(self, dbname: str, filename: str) -> Document | None:
        """The document behind a (dbname, filename), or None if this corpus has none."""
        doc_type = DBNAME_TYPES.get(dbname_family(dbname))
        if doc_type is None:
            return self._locate_foreign(dbname, filename)
        core = filename[2:-1] if doc_type == "patent" else filename[4:]
        if len(core) != 15 or not core.isdigit():
            return None
        try:
            day = date(int(core[:4]), int(core[4:6]), int(core[6:8])).toordinal()
        except ValueError:
            return None
        li, i = int(core[8:11]), int(core[11:])
        tree = self.trees[doc_type]
        if li >= len(tree.leaves) or i >= self.counts(doc_type, day)[li]:
            return None
        if not self.entered_by(doc_type, [(day, li, i)]):
            return None  # not entered yet (the site's today is before its entry)
        doc = self.document(doc_type, day, li, i)
        return doc if doc.key == (dbname, filename) else None

    def _locate_foreign(self, dbname: str, filename: str) -> Document | None:
        core = filename[4:]
        if dbname not in FOREIGN_INDEX or len(core) != 15 or not core.isdigit():
            return None
        try:
            day = date(int(core[:4]), int(core[4:6]), int(core[6:8])).toordinal()
        except ValueError:
            return None
        li, k = int(core[8:11]), int(core[11:])
        if li >= len(self.trees["paper"].leaves) or k >= self.foreign_count(day, li, dbname):
            return None
        doc = self.document("paper", day, li, self.foreign_ref(dbname, k))
        return doc if doc.key == (dbname, filename) else None

    def doc_type_of(self, dbname: str) -> str | None:
        return DBNAME_TYPES.get(dbname_family(dbname))

    def _doomed_refs(self, doc_type: str, day: int) -> frozenset:
        n = self.options.doomed
        if n <= 0:
            return frozenset()
        refs = [
            (_mix(self.leaf_base(doc_type, day, li), i, 8), li, i)
            for li, c in enumerate(self.counts(doc_type, day))
            for i in range(c)
        ]
        refs.sort()
        return frozenset((li, i) for _, li, i in refs[:n])

    def is_doomed(self, doc: Document) -> bool:
        day, li, i = doc.ref
        return (li, i) in self.doomed_refs(doc.doc_type, day)

    # -- ground truth ----------------------------------------------------------------------

    def truth(
        self, doc_type: str, start: str, end: str, categories: Iterable[str] = (), expert: str = ""
    ) -> list[dict]:
        """Every document of the task's rounds, all fields, in (day, leaf, index) order; with
        ``expert``, only those its professional-search expression finds."""
        refs = self.match_refs(doc_type, parse_day(start), parse_day(end), tuple(categories))
        docs = (self.document(doc_type, *r) for r in self.entered_by(doc_type, refs))
        if expert:
            matches = compile_expert(expert, doc_type)
            docs = (d for d in docs if matches(d))
        return [dict(d.fields) for d in docs]

    def rounds(
        self, doc_type: str, start: str, end: str, categories: Iterable[str] = ()
    ) -> list[dict]:
        """How many documents a search on each (day, category) finds."""
        categories = list(categories) or self.trees[doc_type].top
        out = []
        for day in range(parse_day(start), parse_day(end) + 1):
            for code in categories:
                n = len(self.entered_by(doc_type, self.match_refs(doc_type, day, day, (code,))))
                out.append({"date": _iso(day), "category": code, "count": n})
        return out

    def doomed_in(
        self, doc_type: str, start: str, end: str, categories: Iterable[str] = ()
    ) -> list[str]:
        """Filenames of the documents doomed by --doomed among a task's rounds."""
        refs = self.match_refs(doc_type, parse_day(start), parse_day(end), tuple(categories))
        return [
            self.document(doc_type, *r).fields["filename"]
            for r in self.entered_by(doc_type, refs)
            if (r[1], r[2]) in self.doomed_refs(doc_type, r[0])
        ]

    # -- document generation ---------------------------------------------------------------

    def _document(self, doc_type: str, day: int, li: int, i: int) -> Document:
        rnd = random.Random(_mix(self.leaf_base(doc_type, day, li), i, 4))
        title, ti, oi, ai = self.title_parts(doc_type, day, li, i)
        _, cites, downloads = self.rank(doc_type, day, li, i)
        words = {"t": vocab.TECHS[ti], "o": vocab.OBJECTS[oi], "a": vocab.ACTIONS[ai]}
        tree = self.trees[doc_type]
        leaf = tree.leaves[li]
        make = {"patent": self._patent, "paper": self._paper, "achievement": self._achievement}[
            doc_type
        ]
        fields, codes, extra = make(rnd, day, li, i, leaf, title, words)
        if i < 0:  # a foreign 总库 row: a paper-like document of another database
            db_index, k = divmod(-1 - i, 10000)
            db, name = list(FOREIGN_DATABASES.values())[db_index]
            fields.update(
                dbname=db,
                filename=f"{db}{_day_digits(day)}{li:03d}{k:04d}",
                database=name,
                date=_iso(day),
            )
            extra["first_online"] = False
        shift = self.options.count_shift if i >= 0 else 0
        extra["cites"] = cites = cites + shift
        extra["downloads"] = downloads = downloads + shift
        base = self.leaf_base(doc_type, day, li)
        if doc_type == "paper":
            # drawn from a generator of their own, so that every older field keeps its value
            self._citation_fields(random.Random(_mix(base, i, 13)), day, fields, extra)
        if self.options.dbname_years and i >= 0:
            fields["dbname"] = self._year_dbname(fields["dbname"], day, _mix(base, i, 9))
        extra["cookie"] = "".join(f"{_mix(base, i, k):016x}" for k in (5, 6, 7))
        # the list row's fields: the opaque export id (input.cbItem) of every type, the counts
        # of papers and achievements (patent rows have none), 网络首发 of papers
        fields["export_id"] = extra["cookie"]
        if doc_type != "patent":
            fields["cited"] = str(cites)
            fields["downloads"] = str(downloads)
            fields["counted_at"] = ""
        if doc_type == "paper":
            fields["online_first"] = "1" if extra.get("first_online") else "0"
        fields = {name: fields.get(name, "") for name in FIELDS[doc_type]}
        return Document(doc_type, (day, li, i), fields, codes, extra)

    def _citation_fields(self, rnd: random.Random, day: int, fields: dict, extra: dict) -> None:
        """A paper's source line, ISSN, affiliations and thesis fields (issue 26), as a correct
        parser stores them: a journal issue of the day's year (网络首发 papers have none yet),
        the journal's ISSN, each author's institutions, a thesis's supervisor and degree."""
        journal = fields["database"] == "期刊"
        year = str(date.fromordinal(day).year)
        cited = {name: "" for name in ("year", "volume", "issue", "page_range", "issn")}
        if journal:
            cited["issn"] = _issn(self.h("issn", fields["source"]))
            if not extra.get("first_online"):
                first = rnd.randint(1, 300)
                cited.update(
                    year=year,
                    volume=str(int(year) - 1980 + self.h("volume", fields["source"]) % 5),
                    issue=str(rnd.randint(1, 12)),
                    page_range=f"{first}-{first + rnd.randint(2, 15)}",
                )
                # some pages give 页码 in .total-inform instead of the source line
                extra["pages_in_total"] = rnd.random() < 0.2
        institutions = fields["institutions"].split(";") if fields["institutions"] else []
        numbered = len(institutions) > 1
        affiliations = [
            {
                "author": name,
                "institutions": [institutions[k - 1] for k in aff] if numbered else institutions,
            }
            for name, aff in zip(fields["authors"].split(";"), extra["affiliations"], strict=True)
        ]
        thesis = fields["database"] in ("博士", "硕士")
        fields.update(
            cited,
            author_affiliations=json.dumps(affiliations, ensure_ascii=False, separators=(",", ":"))
            if affiliations
            else "",
            supervisor=";".join(self._people(rnd, 1, 2)) if thesis else "",
            degree=fields["database"] if thesis else "",
        )

    @staticmethod
    def _year_dbname(family: str, day: int, draw: int) -> str:
        """A document's database name with its year, in the shapes of CNKI's real pages:
        patents ``SCPD`` + the publication year (``SCPD2017`` on old_patent_list_p3.html);
        journals ``CJFQ`` (kns8s) or ``CJFDLAST2015``/``CJFD2008`` (old_journal_list_p3.html);
        ``CAPJ`` as it is; theses ``CMFD202101``/``CDFD202101``-style; achievements ``SNAD``."""
        year = date.fromordinal(day).year
        u = (draw & 0xFFFF) / 65536.0
        if family == "SCPD":
            return f"SCPD{year}"
        if family == "CJFQ":
            return "CJFQ" if u < 0.34 else f"CJFDLAST{year}" if u < 0.67 else f"CJFD{year}"
        if family in ("CMFD", "CDFD"):
            return f"{family}{year}{1 + (draw >> 16) % 2:02d}"
        return family

    # people, institutions, codes

    @staticmethod
    def _person(rnd: random.Random) -> str:
        name = rnd.choice(vocab.SURNAMES) + rnd.choice(vocab.GIVEN)
        return name + rnd.choice(vocab.GIVEN) if rnd.random() < 0.7 else name

    def _people(self, rnd: random.Random, lo: int, hi: int) -> list[str]:
        people: list[str] = []
        want = rnd.randint(lo, hi)
        while len(people) < want:
            p = self._person(rnd)
            if p not in people:
                people.append(p)
        return people

    @staticmethod
    def _address(rnd: random.Random, province: int) -> str:
        prov, _code, post, cities = vocab.PROVINCES[province]
        city, district, road = rnd.choice(cities)
        postcode = f"{post}{rnd.randint(0, 99):02d}{rnd.randint(0, 9)}"[:6]
        return f"{postcode} {prov}{city}{district}{road}{rnd.randint(1, 999)}号"

    @staticmethod
    def _organisation(rnd: random.Random) -> tuple[str, int]:
        """A patent applicant or research unit: (name, province index)."""
        u = rnd.random()
        if u < 0.45:
            province = rnd.randrange(len(vocab.PROVINCES))
            prov_name = vocab.PROVINCES[province][0]
            city = vocab.PROVINCES[province][3][0][0] or prov_name
            name = f"{city.removesuffix('市')}{rnd.choice(vocab.FIRM_WORDS)}{rnd.choice(vocab.FIRM_TRADES)}有限公司"
            return name, province
        if u < 0.75:
            name, _code, province = rnd.choice(vocab.UNIVERSITIES)
            return name, province
        return rnd.choice(vocab.INSTITUTES)

    def _code(self, rnd: random.Random, doc_type: str, leaf: str) -> str:
        """A full classification code under ``leaf`` (IPC for patents, CLC otherwise)."""
        tree = self.trees[doc_type]
        for _ in range(8):
            if doc_type == "patent":
                code = leaf
                if len(code) == 1:
                    code += f"{rnd.randint(1, 99):02d}"
                if len(code) == 3:
                    code += rnd.choice("BCDFGHJKLMNPQ")
                code += f"{rnd.randint(1, 99)}/{rnd.choice((0, 2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 32, 40)):02d}"
            else:
                letters = len(leaf) - len(leaf.lstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
                digits = len(leaf) - letters
                code = leaf + "".join(str(rnd.randint(0, 9)) for _ in range(max(0, 3 - digits)))
                if rnd.random() < 0.7:
                    code += "." + str(rnd.randint(1, 99))
            if tree.owner(code) == leaf:
                return code
        return leaf

    def _codes(self, rnd, doc_type, day, li, i, leaf) -> list[str]:
        tree = self.trees[doc_type]
        codes = [self._code(rnd, doc_type, leaf)]
        for s in self.secondary_leaves(doc_type, day, li, i):
            codes.append(self._code(rnd, doc_type, tree.leaves[s]))
        return codes

    def _keywords(self, rnd, words, leaf_name) -> list[str]:
        pool = [
            words["t"],
            words["o"],
            words["o"] + words["a"],
            leaf_name.split("、")[0].split("；")[0],
        ]
        pool += rnd.sample(vocab.TECHS, 3)
        out: list[str] = []
        for w in pool:
            if w and w not in out:
                out.append(w)
        return out[: rnd.randint(3, 6)]

    # the three document types

    def _patent(self, rnd, day, li, i, leaf, title, w):
        tree = self.trees["patent"]
        u = rnd.random()
        kind, patent_type = (
            ("A", "发明公开") if u < 0.55 else ("B", "发明授权") if u < 0.75 else ("U", "实用新型")
        )
        filename = f"CN{_day_digits(day)}{li:03d}{i:04d}{kind}"
        applicant, province = self._organisation(rnd)
        co = []
        if rnd.random() < 0.35:
            for _ in range(rnd.randint(1, 2)):
                other, _p = self._organisation(rnd)
                if other != applicant and other not in co:
                    co.append(other)
        inventors = self._people(rnd, 1, 7)
        codes = self._codes(rnd, "patent", day, li, i, leaf)
        app_day = day - rnd.randint(60, 900)
        app_year = date.fromordinal(app_day).year
        application_no = f"CN{app_year}{2 if kind == 'U' else 1}{rnd.randint(0, 9999999):07d}.{rnd.choice('0123456789X')}"
        if kind == "A":
            publication_no, grant_no, grant_date = filename, "", ""
        else:
            grant_no, grant_date = filename, _iso(day)
            publication_no = (
                f"CN1{rnd.randint(10000000, 19999999)}A"
                if kind == "B" and rnd.random() < 0.7
                else ""
            )
        agency = rnd.choice(vocab.AGENCIES) if rnd.random() < 0.7 else ""
        agent = ";".join(self._people(rnd, 1, 2)) if agency and rnd.random() < 0.85 else ""
        pages = str(rnd.randint(6, 32)) if rnd.random() < 0.8 else ""
        leaf_name = tree.names[leaf]
        sig = rnd.choice(("振动", "图像", "温度", "电流", "声学", "光谱", "压力", "位移"))
        core = title.removeprefix("一种")
        benefit = rnd.choice(vocab.BENEFITS).format(a=w["a"])
        abstract = (
            f"本发明公开了{core}，涉及{leaf_name.split('；')[0]}技术领域。该方法包括：获取{w['o']}的{sig}数据；"
            f"采用{w['t']}对所述{sig}数据进行特征提取，得到特征向量；根据所述特征向量完成{w['o']}的{w['a']}。"
            f"本发明{benefit}，具有结构简单、易于实施的优点。"
        )
        claim = (
            f"1.{title}，其特征在于，包括以下步骤：S1、采集{w['o']}的{sig}数据并进行预处理；"
            f"S2、构建基于{w['t']}的{w['a']}模型，将预处理后的{sig}数据输入所述模型；"
            f"S3、根据所述模型的输出结果完成{w['o']}的{w['a']}。"
        )
        fields = {
            "dbname": "SCPD",
            "filename": filename,
            "title": title,
            "source": applicant,
            "date": _iso(day),
            "database": "中国专利",
            "patent_type": patent_type,
            "application_no": application_no,
            "application_date": _iso(app_day),
            "publication_no": publication_no,
            "publication_date": _iso(day),
            "grant_no": grant_no,
            "grant_date": grant_date,
            "applicant": applicant,
            "address": self._address(rnd, province),
            "co_applicants": ";".join(co),
            "inventors": ";".join(inventors),
            "ipc": ";".join(codes),
            "main_ipc": codes[0],
            "province_code": vocab.PROVINCES[province][1],
            "agency": agency,
            "agent": agent,
            "pages": pages,
            "abstract": abstract,
            "claim": claim,
        }
        # CNKI's irregularities, fixed per document: labels with a leading space, the
        # full-width brackets, optional keys simply missing (the empty fields above).
        extra = {
            "space_date": rnd.random() < 0.15,
            "space_address": rnd.random() < 0.15,
            "fullwidth_no": rnd.random() < 0.3,
            "old_claim": rnd.random() < 0.2,  # the claim as an older page's div.claim-text
            "keyless": rnd.random(),  # under the collect_missing share: no a.icon-collect
        }
        return fields, codes, extra

    def _paper(self, rnd, day, li, i, leaf, title, w):
        tree = self.trees["paper"]
        u = rnd.random()
        dbname = "CJFQ" if u < 0.55 else "CAPJ" if u < 0.70 else "CMFD" if u < 0.92 else "CDFD"
        thesis = dbname in ("CMFD", "CDFD")
        if thesis:
            source, code4, _prov = rnd.choice(vocab.UNIVERSITIES)
            authors = self._people(rnd, 1, 1)
            institutions = [source]
        else:
            source, code4 = rnd.choice(vocab.JOURNALS.get(leaf[0], vocab.JOURNALS["*"]))
            authors = self._people(rnd, 1, 6)
            institutions = []
            for _ in range(rnd.randint(1, 3)):
                if rnd.random() < 0.8:
                    inst = rnd.choice(vocab.UNIVERSITIES)[0] + rnd.choice(vocab.SCHOOLS)
                else:
                    inst = rnd.choice(vocab.INSTITUTES)[0]
                if inst not in institutions:
                    institutions.append(inst)
        # which institutions each author belongs to (the <sup> indexes on the page)
        affiliations = [
            sorted(
                rnd.sample(
                    range(1, len(institutions) + 1), rnd.randint(1, min(2, len(institutions)))
                )
            )
            for _ in authors
        ]
        filename = f"{code4}{_day_digits(day)}{li:03d}{i:04d}"
        year = date.fromordinal(day).year
        if thesis:
            doi = (
                f"10.27{rnd.randint(0, 999):03d}/d.cnki.g{code4.lower()}.{year}.{rnd.randint(0, 9999):06d}"
                if rnd.random() < 0.5
                else ""
            )
            funds = (
                [f"{rnd.choice(vocab.FUNDS)}({rnd.randint(61000000, 62399999)})"]
                if rnd.random() < 0.2
                else []
            )
        else:
            doi = (
                f"10.{rnd.randint(1000, 19999)}/j.cnki.{code4.lower()}.{year}.{rnd.randint(1, 24):02d}.{rnd.randint(1, 400):03d}"
                if rnd.random() < 0.75
                else ""
            )
            funds = []
            if rnd.random() < 0.7:
                for _ in range(rnd.randint(1, 2)):
                    fund = f"{rnd.choice(vocab.FUNDS)}({rnd.choice(('6', '7', '2022YFB', '2023YFC'))}{rnd.randint(1000000, 3999999)})"
                    if fund not in funds:
                        funds.append(fund)
        codes = self._codes(rnd, "paper", day, li, i, leaf)
        topics = [tree.names[leaf]]
        sibling = rnd.choice(tree.leaves)
        if rnd.random() < 0.3 and tree.names[sibling] not in topics:
            topics.append(tree.names[sibling])
        problem = rnd.choice(vocab.PROBLEMS)
        metric = rnd.choice(vocab.METRICS)
        abstract = (
            f"针对{w['o']}{w['a']}过程中存在的{problem}等问题，提出了一种基于{w['t']}的{w['o']}{w['a']}方法。"
            f"首先，构建了{w['o']}的多源数据集并完成预处理；其次，利用{w['t']}提取关键特征并建立{w['a']}模型；"
            f"最后，在实测数据上进行了对比实验。实验结果表明，与现有方法相比，所提方法的{metric}提高了"
            f"{rnd.randint(20, 199) / 10:.1f}%，为{w['o']}{w['a']}提供了新的思路。"
        )
        date_text = _iso(day)
        if dbname == "CAPJ":  # 网络首发 rows carry a time as well, as on the real list page
            date_text += f" {rnd.randint(8, 21):02d}:{rnd.randint(0, 59):02d}"
        leaf_letter = leaf[:2] if leaf[:2] in ("TN", "TP") else leaf[0]
        album = "信息科技" if leaf_letter in ("TN", "TP") else vocab.ALBUMS.get(leaf[0], "基础科学")
        fields = {
            "dbname": dbname,
            "filename": filename,
            "title": title,
            "source": source,
            "date": date_text,
            "database": {"CJFQ": "期刊", "CAPJ": "期刊", "CMFD": "硕士", "CDFD": "博士"}[dbname],
            "authors": ";".join(authors),
            "institutions": ";".join(institutions),
            "abstract": abstract,
            "keywords": ";".join(self._keywords(rnd, w, tree.names[leaf])),
            "fund": ";".join(funds),
            "doi": doi,
            "clc": ";".join(codes),
            "album": album,
            "topic": ";".join(topics),
        }
        extra = {"affiliations": affiliations, "first_online": dbname == "CAPJ"}
        return fields, codes, extra

    def _achievement(self, rnd, day, li, i, leaf, title, w):
        tree = self.trees["achievement"]
        unit, _province = self._organisation(rnd)
        completers = self._people(rnd, 2, 8)
        codes = self._codes(rnd, "achievement", day, li, i, leaf)
        subjects = [
            f"{rnd.choice((120, 413, 460, 510, 520, 530, 570, 580, 610, 620, 790, 810))}.{rnd.randint(10, 99)}"
        ]
        if rnd.random() < 0.3:
            subjects.append(f"{rnd.choice((120, 413, 520, 580, 620))}.{rnd.randint(10, 99)}")
        y1 = date.fromordinal(day).year - rnd.randint(0, 2)
        y0 = y1 - rnd.randint(1, 4)
        period = (
            f"{y0}-{rnd.randint(1, 12):02d}~{y1}-{rnd.randint(1, 12):02d}"
            if rnd.random() < 0.9
            else ""
        )
        summary = (
            f"该成果针对{w['o']}{w['a']}中{rnd.choice(vocab.PROBLEMS)}的难题，系统研究了{w['t']}的关键技术，"
            f"研制了{w['o']}{w['a']}原型系统，形成了{rnd.randint(2, 9)}项核心技术。成果已在"
            f"{rnd.randint(2, 30)}家单位推广应用，累计新增产值{rnd.randint(100, 9000)}万元，经济和社会效益显著。"
        )
        fields = {
            "dbname": "SNAD",
            "filename": f"SNAD{_day_digits(day)}{li:03d}{i:04d}",
            "title": title,
            "source": unit,
            "date": _iso(day),
            "database": "成果",
            "completers": ";".join(completers),
            "first_unit": unit,
            "keywords": ";".join(self._keywords(rnd, w, tree.names[leaf])),
            "clc": ";".join(codes),
            "subject_code": ";".join(subjects),
            "summary": summary,
            "achievement_type": rnd.choice(vocab.ACHIEVEMENT_TYPES),
            "entry_date": _iso(day),
            "level": rnd.choice(vocab.LEVELS) if rnd.random() < 0.8 else "",
            "period": period,
            "evaluation": rnd.choice(vocab.EVALUATIONS) if rnd.random() < 0.9 else "",
        }
        return fields, codes, {}
