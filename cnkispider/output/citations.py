"""Stored documents as the records researchers' tools import: RIS, BibTeX, EndNote and CSL JSON.

Pure: a stored row (a dict of ``cnkispider.items.FIELDS`` plus ``crawled_at``) in, one record out;
:mod:`cnkispider.output.export` streams them into a file. docs/FIELDS.md has the mapping, and why.

Types
    paper        journal articles: RIS ``JOUR`` / ``@article`` / EndNote ``Journal Article`` /
                 CSL ``article-journal`` (conference papers and newspaper articles: CSL
                 ``paper-conference`` and ``article-newspaper``); theses (database 博士/硕士, or a
                 degree): ``THES`` / ``@phdthesis`` or ``@mastersthesis`` / ``Thesis`` / ``thesis``
    patent       ``PAT`` / biblatex ``@patent`` / ``Patent`` / ``patent``: the patent number,
                 the applicant as the assignee (holder), the country as the place, the
                 application, publication and grant numbers and dates kept apart
    achievement  ``RPRT`` / ``@techreport`` / ``Report`` / ``report``

The formats' own syntax is left to the libraries that read them: RIS is written with rispy and
BibTeX with bibtexparser (the same two that read the files back in the tests), so this module
only decides what goes where. EndNote's tagged format and CSL JSON (plain JSON) need none.

Every record carries the way back to CNKI and its language (issue 48.6), from
:mod:`cnkispider.store.record_links`.

Names stay whole: a Chinese name has no given/family split that a tool could get right, so RIS
and EndNote write each name as it stands, BibTeX wraps each in braces (``{张三} and {Wang
Wu}``), which BibTeX reads as one unsplittable name, and CSL JSON gives each as a ``literal``.
"""

from __future__ import annotations

import json
import re

import bibtexparser
import rispy
from bibtexparser.library import Library
from bibtexparser.middlewares import AddEnclosingMiddleware
from bibtexparser.model import Entry, Field
from bibtexparser.writer import BibtexFormat

from cnkispider.store.record_links import LANGIDS, LINK_COLUMNS, record_language, record_url

__all__ = [
    "FORMATS",
    "LINK_COLUMNS",
    "bibtex_record",
    "csl_item",
    "endnote_record",
    "flat_affiliations",
    "record_language",
    "record_url",
    "ris_record",
]

FORMATS = ("ris", "bibtex", "endnote", "csljson")

_NEWLINES = re.compile(r"\s*[\r\n]+\s*")
_DATE = re.compile(r"(\d{4})(?:-(\d{1,2})(?:-(\d{1,2}))?)?")


def _one_line(value) -> str:
    """A value on one line (the tagged formats end a value at the line's end)."""
    if value is None:
        return ""
    if hasattr(value, "strftime"):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return _NEWLINES.sub(" ", str(value)).strip()


def _day(value) -> str:
    """The date alone of a stored date or time ("2024-01-01 10:23" -> "2024-01-01")."""
    if hasattr(value, "strftime"):
        return value.strftime("%Y-%m-%d")
    match = _DATE.match(_one_line(value))
    return match.group(0) if match else _one_line(value)


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


# -- patents: the number a citation gives, and where it was issued --------------------------

# The issuing office and the country of a patent, by its number's prefix (CNKI's 中国专利 are
# all CN; a number with another prefix gets neither rather than a wrong one).
_OFFICES = {"CN": ("中国", "国家知识产权局")}


def patent_number(row: dict) -> tuple[str, str]:
    """(number, date) of the published document a citation names: the grant publication
    (授权公布号, 授权公告日) of a granted patent, else the application's publication (申请公布号,
    公开公告日), else the application number (申请(专利)号) with the row's date.

    What Zotero calls the patent number (translators_CN's CNKI.js takes 申请公布号) and what
    Chicago, APA, IEEE and GB/T 7714-2015 print after the title; the application number has a
    variable of its own in every format (docs/FIELDS.md)."""
    for number, date in (("grant_no", "grant_date"), ("publication_no", "publication_date")):
        if _one_line(row.get(number)):
            return _one_line(row[number]), _one_line(row.get(date)) or _one_line(row.get("date"))
    return _one_line(row.get("application_no")), _one_line(row.get("date"))


def patent_office(row: dict) -> tuple[str, str]:
    """(country, issuing office) from the patent's number: ("中国", "国家知识产权局") for CN."""
    number = patent_number(row)[0] or _one_line(row.get("application_no"))
    return _OFFICES.get(number[:2].upper(), ("", ""))


def _applicants(row: dict) -> list[str]:
    """The applicant and the co-applicants (共同申请人), each once, in the page's order."""
    names = _list(row.get("applicant")) + _list(row.get("co_applicants"))
    return list(dict.fromkeys(names))


# -- RIS ------------------------------------------------------------------------------------


class _RisWriter(rispy.RisWriter):
    """rispy's writer as the format asks: CRLF line ends, and no "1." line before a record
    (rispy's header, which is no RIS tag); a list value gives one line each (``AD``)."""

    NEWLINE = "\r\n"
    SEPARATOR = None

    def set_header(self, count: int) -> str:
        return ""


_RIS = _RisWriter(enforce_list_tags=False)


def ris_record(row: dict, doc_type: str) -> str:
    """One RIS record (``TY`` ... ``ER``) and the blank line after it.

    The keys are rispy's names for the tags (``publisher`` is ``PB``, ``note`` is ``M1``, ...);
    for a patent they are the tags Zotero's RIS translator reads: ``SN`` the patent number,
    ``M1`` the application number, ``PB`` the assignee (the applicant), ``CY`` the country,
    ``DA`` the issue date, ``C1`` the filing date. No ``A2`` (Zotero's issuing authority): the
    generic readers (rispy, pandoc) take it for a second author, an editor."""
    ref: dict[str, object] = {}
    notes: list[str] = []
    if doc_type == "paper":
        thesis = is_thesis(row)
        ref["type_of_reference"] = "THES" if thesis else "JOUR"
        ref["title"] = row.get("title")
        ref["authors"] = _list(row.get("authors"))
        ref["author_address"] = _list(row.get("institutions"))  # AD, one line each
        if thesis:
            ref["publisher"] = row.get("source")  # the university
            ref["tertiary_authors"] = _list(row.get("supervisor"))
            ref["type_of_work"] = row.get("degree") or row.get("database")
        else:
            ref["secondary_title"] = row.get("source")
            ref["volume"] = row.get("volume")
            ref["number"] = row.get("issue")  # IS
            ref["start_page"], ref["end_page"] = _pages(row)
            ref["issn"] = row.get("issn")
        ref["year"] = _year(row)
        ref["date"] = _day(row.get("date"))
        ref["doi"] = row.get("doi")
        ref["keywords"] = _list(row.get("keywords"))
        ref["abstract"] = row.get("abstract")
        ref["custom1"] = row.get("fund")  # C1
    elif doc_type == "patent":
        number, issued = patent_number(row)
        country, _office = patent_office(row)
        ref["type_of_reference"] = "PAT"
        ref["title"] = row.get("title")
        ref["authors"] = _list(row.get("inventors"))
        ref["publisher"] = "; ".join(_applicants(row))  # PB: the assignee
        ref["place_published"] = country  # CY: the country, never the street address
        ref["issn"] = number  # SN: the patent number
        ref["note"] = row.get("application_no")  # M1: 申请(专利)号
        ref["type_of_work"] = row.get("patent_type")  # M3
        ref["year"] = issued[:4]
        ref["date"] = _day(issued)
        ref["custom1"] = row.get("application_date")  # C1: the filing date (Zotero)
        ref["start_page"] = row.get("pages")  # SP: the page count, Zotero's pages
        ref["keywords"] = _list(row.get("ipc"))
        ref["abstract"] = row.get("abstract")
        notes += [
            f"{label}: {_one_line(row[name])}" for label, name in _PATENT_NOTES if row.get(name)
        ]
        if row.get("address"):
            notes.append(f"地址: {_one_line(row['address'])}")
    else:
        ref["type_of_reference"] = "RPRT"
        ref["title"] = row.get("title")
        ref["authors"] = _list(row.get("completers"))
        ref["publisher"] = row.get("first_unit")
        ref["year"] = _one_line(row.get("date"))[:4]
        ref["date"] = _day(row.get("date"))
        ref["keywords"] = _list(row.get("keywords"))
        ref["abstract"] = row.get("summary")
        ref["type_of_work"] = row.get("achievement_type")
    ref["notes"] = notes + _notes(row, doc_type)
    ref["accession_number"] = f"{row['dbname']}/{row['filename']}"
    ref["name_of_database"] = "CNKI"
    ref["urls"] = [record_url(row)]  # UR
    ref["language"] = record_language(row)  # LA
    kept = {}
    for key, value in ref.items():
        if isinstance(value, list):
            value = [text for text in (_one_line(v) for v in value) if text]
        else:
            value = _one_line(value)
        if value:
            kept[key] = value
    return _RIS.formats([kept]) + "\r\n"


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


def _bib_names(names: list[str]) -> str:
    return " and ".join("{" + _bib(name) + "}" for name in names)


def bibtex_key(row: dict) -> str:
    return re.sub(r"[^A-Za-z0-9_.:-]", "_", f"{row['dbname']}_{row['filename']}")


_BIB_FORMAT = BibtexFormat()
_BIB_FORMAT.indent = "  "
# bibtexparser writes the entry; this only wraps each value in braces (in place: the entry is
# ours and written once, so nothing is copied)
_BIB_STACK = [
    AddEnclosingMiddleware(
        allow_inplace_modification=True,
        reuse_previous_enclosing=False,
        enclose_integers=True,
        default_enclosing="{",
    )
]


def bibtex_record(row: dict, doc_type: str) -> str:
    """One BibTeX entry and the blank line after it. A patent is biblatex's ``@patent``
    (``number``, ``holder``, ``type``, ``date``, ``location``), which biblatex, Zotero,
    JabRef and pandoc read; plain BibTeX styles print it as ``@misc``."""
    fields: list[Field] = []

    def add(name: str, value) -> None:
        text = _bib(value)
        if text:
            fields.append(Field(name, text))

    def add_names(name: str, names: list[str]) -> None:
        if names:
            fields.append(Field(name, _bib_names(names)))

    if doc_type == "paper":
        if is_thesis(row):
            degree = row.get("degree") or row.get("database")
            entry = "phdthesis" if degree == "博士" else "mastersthesis"
            add_names("author", _list(row.get("authors")))
            add("title", row.get("title"))
            add("school", row.get("source"))
            add("year", _year(row))
            add_names("supervisor", _list(row.get("supervisor")))
            add("type", degree)
        else:
            entry = "article"
            add_names("author", _list(row.get("authors")))
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
        entry = "patent"
        number, issued = patent_number(row)
        country, _office = patent_office(row)
        add_names("author", _list(row.get("inventors")))
        add("title", row.get("title"))
        add("number", number)
        add_names("holder", _applicants(row))  # biblatex: the patent's holder, a name list
        add("assignee", "; ".join(_applicants(row)))  # what Zotero's BibTeX import reads
        add("type", row.get("patent_type"))  # as CNKI names it: 发明公开, 发明授权, 实用新型
        add("date", issued)
        add("location", country)  # biblatex: the country; never the street address
        add("pagetotal", row.get("pages"))
        for _label, name in _PATENT_NOTES:
            add(name, row.get(name))
        add("keywords", ", ".join(_list(row.get("ipc"))))
        add("abstract", row.get("abstract"))
    else:
        entry = "techreport"  # the first unit is the institution, which @misc does not print
        add_names("author", _list(row.get("completers")))
        add("title", row.get("title"))
        add("institution", row.get("first_unit"))
        add("year", _one_line(row.get("date"))[:4])
        add("type", row.get("achievement_type"))
        add("keywords", ", ".join(_list(row.get("keywords"))))
        add("abstract", row.get("summary"))
    add("note", "; ".join(_notes(row, doc_type)))
    add("url", record_url(row))
    language = record_language(row)
    add("langid", LANGIDS[language])  # biblatex: hyphenation, and gb7714's Chinese entries
    add("language", language)  # what Zotero's BibTeX import reads into Language
    library = Library([Entry(entry, bibtex_key(row), fields)])
    text = bibtexparser.write_string(library, unparse_stack=_BIB_STACK, bibtex_format=_BIB_FORMAT)
    return text + "\n"


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
        number, issued = patent_number(row)
        add(("%@", number))
        add(("%8", issued))
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
    add(("%U", record_url(row)))
    add(("%G", record_language(row)))
    lines = [f"{tag} {_one_line(value)}" for tag, value in tags if _one_line(value)]
    return "\n".join(lines) + "\n\n"


# -- CSL JSON (what citeproc reads: pandoc, Zotero, Mendeley, Quarto, citation.js) ------------

# The CSL type of a paper by its database (the list row's 数据库); any other is a journal article,
# as in RIS and BibTeX.
_CSL_PAPER_TYPES = {
    "博士": "thesis",
    "硕士": "thesis",
    "会议": "paper-conference",
    "国际会议": "paper-conference",
    "报纸": "article-newspaper",
}
_DEGREES = {"博士": "博士学位论文", "硕士": "硕士学位论文"}


def _csl_date(text: str, year: str = "") -> dict | None:
    """A CSL date ({"date-parts": [[2020, 4, 15]]}) from "2020-04-15" (or "2020"); the year
    alone when the date names another year (a journal issue's year wins over the list's
    date); {"raw": text} for what is no date."""
    match = _DATE.match(text)
    if year and (not match or match.group(1) != year):
        return {"date-parts": [[int(year)]]} if year.isdigit() else {"raw": year}
    if not match:
        return {"raw": text} if text else None
    return {"date-parts": [[int(part) for part in match.groups() if part]]}


def _csl_names(names: list[str]) -> list[dict]:
    return [{"literal": name} for name in names]


def csl_item(row: dict, doc_type: str) -> dict:
    """One CSL JSON item (CSL 1.0.2 variables; docs/FIELDS.md says why each).

    A patent: ``number`` the patent number (:func:`patent_number`), ``call-number`` the
    application number (Zotero's home for it, which GB/T 7714-2025 prints first), ``authority``
    the issuing office, ``publisher`` the applicant (APA, MLA, Harvard and GB/T 7714-2025 print
    it; Chicago cites a patent by its inventors alone), ``publisher-place`` the country,
    ``issued`` the publication's date and ``submitted`` the filing date."""
    item: dict[str, object] = {"id": bibtex_key(row)}
    if doc_type == "paper":
        database = _one_line(row.get("database"))
        kind = "thesis" if is_thesis(row) else _CSL_PAPER_TYPES.get(database, "article-journal")
        item["type"] = kind
        item["title"] = row.get("title")
        item["author"] = _csl_names(_list(row.get("authors")))
        if kind == "thesis":
            degree = row.get("degree") or database
            item["genre"] = _DEGREES.get(degree, degree)
            item["publisher"] = row.get("source")  # the university
            item["contributor"] = _csl_names(_list(row.get("supervisor")))
        else:
            item["container-title"] = row.get("source")
            item["volume"] = row.get("volume")
            item["issue"] = row.get("issue")
            item["page"] = row.get("page_range")
            item["ISSN"] = row.get("issn")
        item["issued"] = _csl_date(_one_line(row.get("date")), _one_line(row.get("year")))
        item["DOI"] = row.get("doi")
        item["keyword"] = ", ".join(_list(row.get("keywords")))
        item["abstract"] = row.get("abstract")
    elif doc_type == "patent":
        number, issued = patent_number(row)
        country, office = patent_office(row)
        item["type"] = "patent"
        item["title"] = row.get("title")
        item["author"] = _csl_names(_list(row.get("inventors")))
        item["number"] = number
        item["call-number"] = row.get("application_no")
        item["authority"] = office
        item["publisher"] = "; ".join(_applicants(row))
        item["publisher-place"] = country
        item["genre"] = row.get("patent_type")
        item["issued"] = _csl_date(issued)
        item["submitted"] = _csl_date(_one_line(row.get("application_date")))
        item["number-of-pages"] = row.get("pages")
        item["keyword"] = ", ".join(_list(row.get("ipc")))
        item["abstract"] = row.get("abstract")
    else:
        item["type"] = "report"
        item["title"] = row.get("title")
        item["author"] = _csl_names(_list(row.get("completers")))
        item["publisher"] = row.get("first_unit")  # the report's institution
        item["genre"] = row.get("achievement_type")
        item["issued"] = _csl_date(_one_line(row.get("date")))
        item["keyword"] = ", ".join(_list(row.get("keywords")))
        item["abstract"] = row.get("summary")
    item["source"] = "CNKI"  # the catalogue it came from (Zotero's "Library Catalog")
    item["URL"] = record_url(row)
    item["language"] = record_language(row)  # zh-CN: citeproc joins names and dates as Chinese
    kept = {}
    for name, value in item.items():
        if isinstance(value, str) or value is None or hasattr(value, "strftime"):
            value = _one_line(value) if name != "abstract" else str(value or "").strip()
        if value:
            kept[name] = value
    return kept


def csljson_record(row: dict, doc_type: str) -> str:
    """One item of a CSL JSON array, on one line (the array's brackets and commas are the
    caller's)."""
    return json.dumps(csl_item(row, doc_type), ensure_ascii=False)


WRITERS = {
    "ris": ris_record,
    "bibtex": bibtex_record,
    "endnote": endnote_record,
    "csljson": csljson_record,
}
