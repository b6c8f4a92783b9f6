"""The stand-in's late arrivals: the day CNKI enters each document (``late``: days to months after
its own date, PROTOCOL.md point 21), and which documents the site's today (``as_of``) lists,
withdrawn ones left out. Searches, the detail page and the ground truth all ask it.
"""

from __future__ import annotations

from standin.catalogue import (
    mix,
    parse_day,
)


class LateArrivals:
    """The site's today over the corpus. A part of :class:`standin.corpus.Corpus`."""

    def entry_lag(self, doc_type: str, day: int, li: int, i: int) -> int:
        """Days between a document's own date and the day CNKI enters it (0 unless ``late``):
        seven in ten within a week, two in ten within a month, one in ten up to four months
        (the long tail of journal issues listed while "该刊数据正在更新中")."""
        if not self.options.late:
            return 0
        u = (mix(self.leaf_base(doc_type, day, li), i, 9) >> 11) / float(1 << 53)
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
