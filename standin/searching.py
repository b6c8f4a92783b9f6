"""The stand-in's searches: the documents a grid search finds (category prefixes and exact codes
with the extra codes a document carries, 总库's foreign rows, title and professional-search
filters, the databases kept) in the order the list pages show them.
"""

from __future__ import annotations

import random

from standin.catalogue import (
    FOREIGN_INDEX,
    PAPER_DBNAMES,
    Search,
    mix,
)
from standin.query import compile_expert


class Searching:
    """What a list search finds and in which order. A part of :class:`standin.corpus.Corpus`."""

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
        u = random.Random(mix(self.leaf_base("paper", day, li), i, 4)).random()
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
