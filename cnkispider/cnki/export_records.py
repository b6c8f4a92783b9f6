"""CNKI's citation export (``POST /dm8/API/GetExport``) read into documents' fields. Pure.

The answer (PROTOCOL.md, 2026 evidence point 16) is JSON::

    {"code":1,"data":[{"key":"GB/T 7714-2015 格式引文","value":[...]},
                      {"key":"知网研学（原E-Study）","value":[...]},
                      {"key":"EndNote","value":["%0 Journal Article<br>%A ...<br>%T ...", ...]}]}

Only the EndNote entry is read: it is the one whose tags carry the fields one by one (the GB/T
line is a formatted citation). A value is one record, or several records one after another
when CNKI joins a batch into one string: a record starts at each ``%0`` line. Lines are split
at ``<br>`` (any case, ``<br/>``) and real line breaks; a line that does not start with a tag
continues the previous tag's value (an abstract with a line break in it).

The forms accepted for each tag, and where each comes from: docs/DEPTH.md#the-endnote-tags.

Field names are the items' (:mod:`cnkispider.items`) and issue 26's (``year``, ``volume``,
``issue``, ``page_range``, ``issn``, ``author_affiliations``, ``supervisor``, ``degree``).
Every value is a plain string ("" when the record does not carry it), but
``author_affiliations``, a list of ``{"author", "institutions"}`` (empty when unknown).
"""

from __future__ import annotations

import html
import json
import re
import unicodedata
from dataclasses import dataclass, field

ENDNOTE_KEY = "EndNote"
ENDNOTE_MODE = "ENDNOTE"
# what a request must ask for: CNKI answers 暂无数据 when it gets one mode alone
DISPLAY_MODES = ("GBTREFER", "elearning", "EndNote")

_BR_RE = re.compile(r"<br\s*/?>|\r\n|\r|\n", re.I)
_TAG_RE = re.compile(r"^%([0-9A-Za-z@+!#$&()*\[\]^<>=~?])(?:\s(.*))?$")
_LIST_SPLIT_RE = re.compile(r"\s*[;；,，]\s*")
_PEOPLE_SPLIT_RE = re.compile(r"\s*[;；,，]\s*")
_GRANT_KINDS = ("B", "C", "U", "Y", "S")
_YEAR_RE = re.compile(r"(1[89]\d\d|20\d\d)")
_SPACE_RE = re.compile(r"\s+")


class ExportAnswerError(ValueError):
    """The body is not a usable GetExport answer (not JSON, code not 1, no EndNote entry)."""


@dataclass
class ExportRecord:
    """One EndNote record: its type (``%0``), its fields, and its raw tags."""

    kind: str  # "paper", "thesis", "patent" or "achievement"
    reference_type: str  # the %0 text as CNKI wrote it
    fields: dict = field(default_factory=dict)
    tags: dict = field(default_factory=dict)  # tag letter -> list of values, in order

    @property
    def title(self) -> str:
        return self.fields.get("title", "")

    @property
    def people(self) -> str:
        """Authors, inventors or completers, ``;``-joined (what content matching compares)."""
        f = self.fields
        return f.get("authors") or f.get("inventors") or f.get("completers") or ""


def endnote_values(body: bytes | str) -> list[str]:
    """The EndNote entry's values of a GetExport answer; ExportAnswerError if there is none."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        data = json.loads(body)
    except ValueError:
        raise ExportAnswerError(f"export answer is not JSON: {body[:80]!r}") from None
    if not isinstance(data, dict):
        raise ExportAnswerError(f"export answer is not a JSON object: {body[:80]!r}")
    if str(data.get("code")) != "1":
        raise ExportAnswerError(f"export answer with code {data.get('code')!r}: {body[:80]!r}")
    entries = data.get("data")
    if not isinstance(entries, list):
        raise ExportAnswerError(f"export answer without a data list: {body[:80]!r}")
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        key = str(entry.get("key") or "")
        mode = str(entry.get("mode") or "")
        if key == ENDNOTE_KEY or mode.upper() == ENDNOTE_MODE:
            values = entry.get("value") or []
            if isinstance(values, str):
                values = [values]
            return [str(v) for v in values if v]
    raise ExportAnswerError("export answer without an EndNote entry")


def _lines(text: str) -> list[str]:
    return [html.unescape(line).strip() for line in _BR_RE.split(text)]


def split_records(value: str) -> list[list[tuple[str, str]]]:
    """One value as records, each a list of (tag, text) in order."""
    records: list[list[tuple[str, str]]] = []
    current: list[tuple[str, str]] | None = None
    for line in _lines(value):
        if not line:
            continue
        match = _TAG_RE.match(line)
        if match is None:
            if current:  # a continuation of the previous tag's value
                tag, text = current[-1]
                current[-1] = (tag, f"{text}\n{line}" if text else line)
            continue
        tag, text = match.group(1), (match.group(2) or "").strip()
        if tag == "0" or current is None:
            current = []
            records.append(current)
        current.append((tag, text))
    return [r for r in records if r and r[0][0] == "0"]


def _kind(reference_type: str) -> str:
    t = reference_type.strip().lower()
    if "journal" in t or "conference" in t or "newspaper" in t:
        return "paper"
    if "thesis" in t or "dissertation" in t:
        return "thesis"
    if "patent" in t:
        return "patent"
    return "achievement"


def _split(text: str, pattern: re.Pattern = _LIST_SPLIT_RE) -> list[str]:
    return [part for part in pattern.split(text.strip()) if part]


def _joined(values: list[str], pattern: re.Pattern = _LIST_SPLIT_RE) -> list[str]:
    out: list[str] = []
    for value in values:
        for part in _split(value, pattern):
            if part not in out:
                out.append(part)
    return out


def _first(tags: dict, tag: str) -> str:
    values = tags.get(tag) or []
    return values[0].strip() if values else ""


def _year(text: str) -> str:
    match = _YEAR_RE.search(text or "")
    return match.group(1) if match else ""


def _pages(text: str) -> str:
    """``157-165`` as CNKI writes it; an en dash or 〜 becomes ``-``, spaces go."""
    text = _SPACE_RE.sub("", text or "")
    return re.sub(r"[–—~〜－]", "-", text).strip("+")


def _issue(text: str) -> str:
    """An issue or volume as the items store it: ``04`` is ``4`` (CNKI writes issues with a
    leading zero); a non-number (``S1``, ``增刊``) stays as written."""
    text = (text or "").strip()
    return str(int(text)) if text.isdigit() else text


def parse_record(pairs: list[tuple[str, str]]) -> ExportRecord:
    """One record's (tag, text) pairs as an :class:`ExportRecord`."""
    tags: dict[str, list[str]] = {}
    for tag, text in pairs:
        tags.setdefault(tag, []).append(text)
    reference_type = _first(tags, "0")
    kind = _kind(reference_type)
    people = _joined(tags.get("A", []), _PEOPLE_SPLIT_RE)
    places = _joined(tags.get("+", []))
    keywords = _joined(tags.get("K", []))
    f: dict = {
        "title": _SPACE_RE.sub(" ", _first(tags, "T")),
        "keywords": ";".join(keywords),
        "year": _year(_first(tags, "D")),
    }
    abstract = "\n".join(v for v in tags.get("X", []) if v).strip()
    if kind in ("paper", "thesis"):
        f.update(
            authors=";".join(people),
            institutions=";".join(places),
            author_affiliations=(
                [{"author": a, "institutions": list(places)} for a in people]
                if len(places) == 1
                else []
            ),
            abstract=abstract,
            doi=_first(tags, "R"),
            url=_first(tags, "U"),
        )
        if kind == "paper":
            f.update(
                source=_first(tags, "J"),
                volume=_issue(_first(tags, "V")),
                issue=_issue(_first(tags, "N")),
                page_range=_pages(_first(tags, "P")),
                issn=_first(tags, "@"),
            )
        else:
            f.update(
                source=_first(tags, "I") or (places[0] if places else ""),
                supervisor=";".join(_joined(tags.get("Y", []), _PEOPLE_SPLIT_RE)),
                degree=_first(tags, "9"),
            )
    elif kind == "patent":
        number = _first(tags, "@").replace(" ", "")
        day = _first(tags, "8")
        granted = bool(number) and number[-1:].upper() in _GRANT_KINDS
        f.update(
            inventors=";".join(people),
            address=";".join(places),
            applicant=_first(tags, "I"),
            abstract=abstract,
            publication_no="" if granted else number,
            grant_no=number if granted else "",
            publication_date=day,
            grant_date=day if granted else "",
            patent_type=_first(tags, "9"),
        )
    else:
        f.update(
            completers=";".join(people),
            first_unit=places[0] if places else "",
            summary=abstract,
            entry_date=_first(tags, "8"),
            achievement_type=_first(tags, "9"),
        )
    return ExportRecord(kind, reference_type, f, tags)


def parse_export(body: bytes | str) -> list[ExportRecord]:
    """Every EndNote record of a GetExport answer, in the order CNKI sent them."""
    return [parse_record(pairs) for value in endnote_values(body) for pairs in split_records(value)]


def normal_title(text: str) -> str:
    """A title as content matching compares it: NFKC, no spaces or punctuation, casefolded
    (the export and the list row may differ in full-width forms and spacing)."""
    text = unicodedata.normalize("NFKC", html.unescape(text or "")).casefold()
    return "".join(ch for ch in text if ch.isalnum())


def normal_people(text: str) -> tuple[str, ...]:
    """Names as content matching compares them (order kept, each NFKC without spaces)."""
    return tuple(
        unicodedata.normalize("NFKC", name).replace(" ", "").casefold()
        for name in _split(text or "", _PEOPLE_SPLIT_RE)
    )
