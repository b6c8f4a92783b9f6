"""The words of the probe's verdicts: a check's line (:class:`Check`) and the sentences it is
made of (:class:`Said`), written in English for the record and shown in the reader's language.
Every group of checks (sessions.py, searches.py, records.py, facets.py) speaks through them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cnkispider.words import vocabulary
from cnkispider.words.i18n import _

PASS, FAIL, UNKNOWN = "PASS", "FAIL", "UNKNOWN"


class Said:
    """A sentence of a check's line: written in English and marked for the catalogue where it is
    written (``Said(N_("search: %(type)s"), type=...)``), with its values (URLs, counts, CNKI's
    words, reason slugs: shown as they are). The record keeps the English (:meth:`english`: a
    check's name is its identity, docs/PROBE.md and the tests key on it); the line the operator
    reads is in their language (:meth:`shown`)."""

    def __init__(self, message: str, **values: Any):
        self.message, self.values = message, values

    def english(self) -> str:
        return self.message % {k: _english(v) for k, v in self.values.items()}

    def shown(self) -> str:
        return _(self.message) % {k: _shown(v) for k, v in self.values.items()}


class AsIs(Said):
    """Words that are not ours (CNKI's, a parser's diagnostic): the same in every language."""

    def __init__(self, text: str):
        super().__init__("%(text)s", text=text)

    def shown(self) -> str:
        return self.english()


class Type:
    """A document type (``patent``): its name in the record, its word when shown (专利)."""

    def __init__(self, name: str):
        self.name = name

    def english(self) -> str:
        return self.name

    def shown(self) -> str:
        return vocabulary.word(self.name)


def _english(value: Any) -> Any:
    return value.english() if isinstance(value, (Said, Type)) else value


def _shown(value: Any) -> Any:
    return value.shown() if isinstance(value, (Said, Type)) else value


@dataclass
class Check:
    """The verdict on one assumption, with the evidence a maintainer needs to act on it.

    ``name`` and ``evidence`` are English, as written: the record of the run (a test, a script,
    docs/PROBE.md key on the name). ``shown_name`` and ``shown_evidence`` are the same words in
    the reader's language: what :meth:`line` prints."""

    name: str
    verdict: str
    evidence: str
    shown_name: str | None = None
    shown_evidence: str | None = None

    def line(self, english: bool = False) -> str:
        """The line printed (``english``: as recorded, for a log)."""
        name = self.name if english or self.shown_name is None else self.shown_name
        evidence = self.evidence if english or self.shown_evidence is None else self.shown_evidence
        return f"{self.verdict:<8}{name:<36}{evidence}"
