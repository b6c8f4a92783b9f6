"""The stand-in's corpus: CNKI documents generated lazily and deterministically from a seed.

Nothing is stored: every count, document and ordering is a pure function of the options, so
the same options give the same site, and a document can be regenerated from its filename alone.
This module holds the counts, the cheap per-document facts, the lookup by filename and the
ground truth; its parts are standin/searching.py (what a search finds, in list order),
standin/arrivals.py (late arrivals and the site's today), standin/generation.py (a document's
fields) and standin/catalogue.py (the types, fields, databases, trees and options).

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
from collections.abc import Iterable
from datetime import date
from pathlib import Path

from standin import vocab
from standin.arrivals import LateArrivals
from standin.catalogue import (
    DBNAME_TYPES,
    DEFAULT_TREES,
    DOC_TYPES,
    FOREIGN_INDEX,
    MAX_PER_LEAF,
    CategoryTree,
    CorpusOptions,
    Document,
    dbname_family,
    iso_day,
    mix,
    parse_day,
)
from standin.generation import Generation
from standin.query import compile_expert
from standin.searching import Searching

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


class Corpus(Searching, LateArrivals, Generation):
    """The corpus: its counts per (type, day, leaf), the cheap per-document facts, documents
    by filename, the doomed ones and the ground truth; searching, late arrivals and generation
    are the parts it is made of."""

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
        x = mix(self.leaf_base(doc_type, day, li), i, 1)
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
        tie = mix(base, i, 2)
        x = mix(base, i, 3)
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
            (mix(self.leaf_base(doc_type, day, li), i, 8), li, i)
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
                out.append({"date": iso_day(day), "category": code, "count": n})
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

    # people, institutions, codes

    # the three document types
