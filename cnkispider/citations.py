"""Stored documents as the records researchers' tools import: RIS, BibTeX and EndNote.

Pure: a stored row (a dict of ``cnkispider.items.FIELDS`` plus ``crawled_at``) in, the text of one
record out; :mod:`cnkispider.export` streams them into a file. docs/FIELDS.md has the mapping.

Types
    paper        journal articles: RIS ``JOUR`` / ``@article`` / EndNote ``Journal Article``;
                 theses (database 博士/硕士, or a degree): ``THES`` / ``@phdthesis`` or
                 ``@mastersthesis`` / ``Thesis``
    patent       ``PAT`` / ``@misc`` / ``Patent``, with the application, publication and grant
                 numbers and dates kept apart
    achievement  ``RPRT`` / ``@misc`` / ``Report``

Names stay whole: a Chinese name has no given/family split that a tool could get right, so RIS
and EndNote write each name as it stands and BibTeX wraps each in braces (``{张三} and {Wang
Wu}``), which BibTeX reads as one unsplittable name.
"""

from __future__ import annotations

import json
import re

__all__ = ["FORMATS", "bibtex_record", "endnote_record", "flat_affiliations", "ris_record"]

FORMATS = ("ris", "bibtex", "endnote")

_NEWLINES = re.compile(r"\s*[\r\n]+\s*")


def _one_line(value) -> str:
    """A value on one line (the tagged formats end a value at the line's end)."""
    if value is None:
        return ""
    if hasattr(value, "strftime"):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return _NEWLINES.sub(" ", str(value)).strip()


def _list(value) -> list[str]:
    return [part for part in (p.strip() for p in _one_line(value).split(";")) if part]


def is_thesis(row: dict) -> bool:
    return bool(row.get("degree")) or row.get("database") in ("博士", "硕士")


def _pages(row: dict) -> tuple[str, str]:
    """(start, end) of ``page_range`` "157-165"; pages in pieces ("1-7,12") keep the rest."""
    text = _one_line(row.get("page_range"))
    start, _, end = text.partition("-")
    return start, end


def _year(row: dict) -> str:
    return _one_line(row.get("year")) or _one_line(row.get("date"))[:4]


def flat_affiliations(value) -> str:
    """``author_affiliations`` JSON as one flat CSV cell: ``张三:单位A|单位B;李四:单位B``."""
    people = parse_affiliations(value)
    return ";".join(f"{p['author']}:{'|'.join(p['institutions'])}" for p in people)


def parse_affiliations(value) -> list[dict]:
    """The stored JSON text of ``author_affiliations`` as a list ([] when empty)."""
    if not value:
        return []
    try:
        people = json.loads(value)
    except ValueError:
        return []
    return people if isinstance(people, list) else []


def _notes(row: dict, doc_type: str) -> list[str]:
    """What has no tag of its own, as "标签: 值" notes."""
    notes = []
    if row.get("cited") is not None and doc_type != "patent":
        notes.append(f"被引: {row['cited']}")
    if row.get("downloads") is not None and doc_type != "patent":
        notes.append(f"下载: {row['downloads']}")
    if row.get("counted_at"):
        notes.append(f"计数时间: {_one_line(row['counted_at'])}")
    if row.get("online_first"):
        notes.append("网络首发")
    return notes


# -- RIS ------------------------------------------------------------------------------------


def ris_record(row: dict, doc_type: str) -> str:
    """One RIS record (``TY`` ... ``ER``), CRLF line ends as the format asks."""
    tags: list[tuple[str, object]] = []
    add = tags.append
    key = f"{row['dbname']}/{row['filename']}"
    if doc_type == "paper":
        thesis = is_thesis(row)
        add(("TY", "THES" if thesis else "JOUR"))
        add(("TI", row.get("title")))
        for name in _list(row.get("authors")):
            add(("AU", name))
        for inst in _list(row.get("institutions")):
            add(("AD", inst))
        if thesis:
            add(("PB", row.get("source")))  # the university
            for name in _list(row.get("supervisor")):
                add(("A3", name))
            add(("M3", row.get("degree") or row.get("database")))
        else:
            add(("T2", row.get("source")))
            add(("VL", row.get("volume")))
            add(("IS", row.get("issue")))
            start, end = _pages(row)
            add(("SP", start))
            add(("EP", end))
            add(("SN", row.get("issn")))
        add(("PY", _year(row)))
        add(("DA", row.get("date")))
        add(("DO", row.get("doi")))
        for word in _list(row.get("keywords")):
            add(("KW", word))
        add(("AB", row.get("abstract")))
        add(("C1", row.get("fund")))
    elif doc_type == "patent":
        add(("TY", "PAT"))
        add(("TI", row.get("title")))
        for name in _list(row.get("inventors")):
            add(("AU", name))
        for name in _list(row.get("applicant")):
            add(("A2", name))  # the assignee
        add(("PB", row.get("applicant")))
        add(("CY", row.get("address")))
        add(("M1", row.get("application_no")))  # 申请(专利)号
        add(("SN", row.get("publication_no")))  # 申请公布号
        add(("M3", row.get("patent_type")))
        add(("PY", _one_line(row.get("date"))[:4]))
        add(("DA", row.get("publication_date") or row.get("date")))
        for word in _list(row.get("ipc")):
            add(("KW", word))
        add(("AB", row.get("abstract")))
        for label, name in _PATENT_NOTES:
            if row.get(name):
                add(("N1", f"{label}: {_one_line(row[name])}"))
    else:
        add(("TY", "RPRT"))
        add(("TI", row.get("title")))
        for name in _list(row.get("completers")):
            add(("AU", name))
        add(("PB", row.get("first_unit")))
        add(("PY", _one_line(row.get("date"))[:4]))
        add(("DA", row.get("date")))
        for word in _list(row.get("keywords")):
            add(("KW", word))
        add(("AB", row.get("summary")))
        add(("M3", row.get("achievement_type")))
    for note in _notes(row, doc_type):
        add(("N1", note))
    add(("AN", key))
    add(("DB", "CNKI"))
    lines = [f"{tag}  - {_one_line(value)}" for tag, value in tags if _one_line(value)]
    return "\r\n".join(lines) + "\r\nER  - \r\n\r\n"


# Patent numbers and dates exactly as the page labels them, one note each.
_PATENT_NOTES = (
    ("申请(专利)号", "application_no"),
    ("申请日", "application_date"),
    ("申请公布号", "publication_no"),
    ("公开公告日", "publication_date"),
    ("授权公布号", "grant_no"),
    ("授权公告日", "grant_date"),
)


# -- BibTeX ---------------------------------------------------------------------------------


def _bib(value) -> str:
    """A BibTeX field value: braces and backslashes escaped, so the value's own braces cannot
    end it early."""
    text = _one_line(value)
    return text.replace("\\", "\\\\").replace("{", "\\{").replace("}", "\\}")


def _bib_names(value) -> str:
    return " and ".join("{" + _bib(name) + "}" for name in _list(value))


def bibtex_key(row: dict) -> str:
    return re.sub(r"[^A-Za-z0-9_.:-]", "_", f"{row['dbname']}_{row['filename']}")


def bibtex_record(row: dict, doc_type: str) -> str:
    fields: list[tuple[str, str]] = []

    def add(name: str, value, names: bool = False) -> None:
        text = _bib_names(value) if names else _bib(value)
        if text:
            fields.append((name, text))

    if doc_type == "paper":
        if is_thesis(row):
            degree = row.get("degree") or row.get("database")
            entry = "phdthesis" if degree == "博士" else "mastersthesis"
            add("author", row.get("authors"), names=True)
            add("title", row.get("title"))
            add("school", row.get("source"))
            add("year", _year(row))
            add("supervisor", row.get("supervisor"), names=True)
            add("type", degree)
        else:
            entry = "article"
            add("author", row.get("authors"), names=True)
            add("title", row.get("title"))
            add("journal", row.get("source"))
            add("year", _year(row))
            add("volume", row.get("volume"))
            add("number", row.get("issue"))
            add("pages", _one_line(row.get("page_range")).replace("-", "--"))
            add("issn", row.get("issn"))
        add("doi", row.get("doi"))
        add("keywords", ", ".join(_list(row.get("keywords"))))
        add("abstract", row.get("abstract"))
        add("affiliation", "; ".join(_list(row.get("institutions"))))
    elif doc_type == "patent":
        entry = "misc"
        add("author", row.get("inventors"), names=True)
        add("title", row.get("title"))
        add("howpublished", row.get("patent_type"))
        add("year", _one_line(row.get("date"))[:4])
        add("number", row.get("publication_no") or row.get("application_no"))
        for _label, name in _PATENT_NOTES:
            add(name, row.get(name))
        add("assignee", row.get("applicant"))
        add("address", row.get("address"))
        add("keywords", ", ".join(_list(row.get("ipc"))))
        add("abstract", row.get("abstract"))
    else:
        entry = "misc"
        add("author", row.get("completers"), names=True)
        add("title", row.get("title"))
        add("institution", row.get("first_unit"))
        add("year", _one_line(row.get("date"))[:4])
        add("howpublished", row.get("achievement_type"))
        add("keywords", ", ".join(_list(row.get("keywords"))))
        add("abstract", row.get("summary"))
    add("note", "; ".join(_notes(row, doc_type)))
    body = ",\n".join(f"  {name} = {{{value}}}" for name, value in fields)
    return f"@{entry}{{{bibtex_key(row)},\n{body}\n}}\n\n"


# -- EndNote (the tagged import format; CNKI's own GetExport answers it) ----------------------


def endnote_record(row: dict, doc_type: str) -> str:
    tags: list[tuple[str, object]] = []
    add = tags.append
    if doc_type == "paper":
        thesis = is_thesis(row)
        add(("%0", "Thesis" if thesis else "Journal Article"))
        for name in _list(row.get("authors")):
            add(("%A", name))
        add(("%+", row.get("institutions")))
        add(("%T", row.get("title")))
        if thesis:
            add(("%I", row.get("source")))
            for name in _list(row.get("supervisor")):
                add(("%Y", name))
            add(("%9", row.get("degree") or row.get("database")))
        else:
            add(("%J", row.get("source")))
            add(("%V", row.get("volume")))
            add(("%N", row.get("issue")))
            add(("%P", row.get("page_range")))
            add(("%@", row.get("issn")))
        add(("%D", _year(row)))
        add(("%K", row.get("keywords")))
        add(("%X", row.get("abstract")))
        add(("%R", row.get("doi")))
    elif doc_type == "patent":
        add(("%0", "Patent"))
        for name in _list(row.get("inventors")):
            add(("%A", name))
        add(("%T", row.get("title")))
        add(("%I", row.get("applicant")))
        add(("%+", row.get("address")))
        add(("%@", row.get("publication_no") or row.get("application_no")))
        add(("%8", row.get("publication_date") or row.get("date")))
        add(("%D", _one_line(row.get("date"))[:4]))
        add(("%9", row.get("patent_type")))
        add(("%K", row.get("ipc")))
        add(("%X", row.get("abstract")))
        for label, name in _PATENT_NOTES:
            if row.get(name):
                add(("%Z", f"{label}: {_one_line(row[name])}"))
    else:
        add(("%0", "Report"))
        for name in _list(row.get("completers")):
            add(("%A", name))
        add(("%T", row.get("title")))
        add(("%I", row.get("first_unit")))
        add(("%D", _one_line(row.get("date"))[:4]))
        add(("%9", row.get("achievement_type")))
        add(("%K", row.get("keywords")))
        add(("%X", row.get("summary")))
    for note in _notes(row, doc_type):
        add(("%Z", note))
    add(("%M", f"{row['dbname']}/{row['filename']}"))
    add(("%W", "CNKI"))
    lines = [f"{tag} {_one_line(value)}" for tag, value in tags if _one_line(value)]
    return "\n".join(lines) + "\n\n"


WRITERS = {"ris": ris_record, "bibtex": bibtex_record, "endnote": endnote_record}
