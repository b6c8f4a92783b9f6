"""Issue 26: export as RIS, BibTeX, EndNote and .xlsx, read back by the readers reference managers
use (rispy, bibtexparser, openpyxl) and compared with the database, for every type. Issue 41: CSL
JSON, and citations rendered from it by pandoc's citeproc."""

from __future__ import annotations

import datetime as dt
import json
import sys

import bibtexparser
import openpyxl
import pytest
import rispy

from cnkispider.output.export import columns
from tests.fixtures import launcher
from tests.fixtures.formats import endnote_records, export_file, rendered_bibliography, stored_truth


def _names(value) -> list[str]:
    return [n for n in (value or "").split(";") if n]


PEOPLE = {"paper": "authors", "patent": "inventors", "achievement": "completers"}
TEXT = {"paper": "abstract", "patent": "abstract", "achievement": "summary"}


@pytest.mark.parametrize("doc_type", ["paper", "patent", "achievement"])
def test_ris_is_read_back_by_rispy(sqlite_url, tmp_path, doc_type):
    stored = stored_truth(sqlite_url, doc_type)
    count, out = export_file(sqlite_url, doc_type, "ris", tmp_path)
    records = rispy.loads(out.read_text(encoding="utf-8"))
    assert count == len(records) == len(stored)
    by_key = {r["accession_number"]: r for r in records}
    for row in stored:
        r = by_key[f"{row['dbname']}/{row['filename']}"]
        assert r["title"] == row["title"]
        assert r.get("authors", []) == _names(row[PEOPLE[doc_type]])  # whole names, in order
        assert r.get("abstract", "") == row[TEXT[doc_type]]
        notes = r.get("notes", [])
        if doc_type == "paper":
            thesis = row["database"] in ("博士", "硕士")
            assert r["type_of_reference"] == ("THES" if thesis else "JOUR")
            assert r.get("keywords", []) == _names(row["keywords"])
            assert r.get("doi", "") == row["doi"]
            if thesis:
                assert r["publisher"] == row["source"]
                assert r.get("tertiary_authors", []) == _names(row["supervisor"])
                assert r["type_of_work"] == row["degree"]
            else:
                assert r["secondary_title"] == row["source"]
                assert r.get("volume", "") == row["volume"]
                assert r.get("number", "") == row["issue"]
                assert (
                    "-".join(filter(None, (r.get("start_page"), r.get("end_page"))))
                    == (row["page_range"])
                )
                assert r["issn"] == row["issn"]
            assert f"被引: {row['cited']}" in notes and f"下载: {row['downloads']}" in notes
        elif doc_type == "patent":
            assert r["type_of_reference"] == "PAT"
            # the tags Zotero's RIS translator reads: SN the patent number (the grant's
            # publication, else the application's), M1 the application number, PB the
            # assignee, CY the country (never the street address), DA the issue date
            granted = bool(row["grant_no"])
            number = row["grant_no"] if granted else row["publication_no"]
            assert r["issn"] == number and r["note"] == row["application_no"]
            assert r["date"] == (row["grant_date"] if granted else row["publication_date"])
            assert r["publisher"] == "; ".join(
                _names(row["applicant"]) + _names(row["co_applicants"])
            )
            assert r["place_published"] == "中国" and row["address"] not in r["place_published"]
            assert "secondary_authors" not in r  # the applicant is no editor
            assert r.get("authors", []) == _names(row["inventors"])
            for label, name in (
                ("申请(专利)号", "application_no"),
                ("申请公布号", "publication_no"),
                ("公开公告日", "publication_date"),
                ("授权公布号", "grant_no"),
                ("授权公告日", "grant_date"),
            ):
                assert (f"{label}: {row[name]}" in notes) == bool(row[name]), name
        else:
            assert r["type_of_reference"] == "RPRT"
            assert r["publisher"] == row["first_unit"]
            assert f"被引: {row['cited']}" in notes


@pytest.mark.parametrize("doc_type", ["paper", "patent", "achievement"])
def test_bibtex_is_read_back_by_bibtexparser(sqlite_url, tmp_path, doc_type):
    stored = stored_truth(sqlite_url, doc_type)
    count, out = export_file(sqlite_url, doc_type, "bibtex", tmp_path)
    library = bibtexparser.parse_string(out.read_text(encoding="utf-8"))
    assert not library.failed_blocks
    assert count == len(library.entries) == len(stored)
    by_key = {e.key: e for e in library.entries}

    def get(entry, name):
        field = entry.fields_dict.get(name)
        return field.value.replace("\\{", "{").replace("\\}", "}") if field else ""

    for row in stored:
        e = by_key[f"{row['dbname']}_{row['filename']}"]
        assert get(e, "title") == row["title"]
        people = get(e, "author")
        assert people == " and ".join("{" + n + "}" for n in _names(row[PEOPLE[doc_type]]))
        if doc_type == "paper":
            if row["database"] in ("博士", "硕士"):
                want = "phdthesis" if row["degree"] == "博士" else "mastersthesis"
                assert e.entry_type == want and get(e, "school") == row["source"]
                assert get(e, "supervisor") == " and ".join(
                    "{" + n + "}" for n in _names(row["supervisor"])
                )
            else:
                assert e.entry_type == "article" and get(e, "journal") == row["source"]
                assert (get(e, "volume"), get(e, "number")) == (row["volume"], row["issue"])
                assert get(e, "pages") == row["page_range"].replace("-", "--")
                assert get(e, "issn") == row["issn"]
        elif doc_type == "patent":
            # biblatex's @patent: number, holder (the applicants), type, date, location
            assert e.entry_type == "patent"
            granted = bool(row["grant_no"])
            assert get(e, "number") == (row["grant_no"] if granted else row["publication_no"])
            applicants = _names(row["applicant"]) + _names(row["co_applicants"])
            assert get(e, "holder") == " and ".join("{" + n + "}" for n in applicants)
            assert get(e, "type") == row["patent_type"]
            assert get(e, "date") == (row["grant_date"] if granted else row["publication_date"])
            assert get(e, "location") == "中国" and "address" not in e.fields_dict
            for name in ("application_no", "publication_no", "grant_no", "grant_date"):
                assert get(e, name) == row[name], name
        else:
            assert e.entry_type == "techreport" and get(e, "institution") == row["first_unit"]


@pytest.mark.parametrize("doc_type", ["paper", "patent", "achievement"])
def test_endnote_records(sqlite_url, tmp_path, doc_type):
    stored = stored_truth(sqlite_url, doc_type)
    count, out = export_file(sqlite_url, doc_type, "endnote", tmp_path)
    records = {r["%M"][0]: r for r in endnote_records(out.read_text(encoding="utf-8"))}
    assert count == len(records) == len(stored)
    kinds = {
        "paper": ("Journal Article", "Thesis"),
        "patent": ("Patent",),
        "achievement": ("Report",),
    }
    for row in stored:
        r = records[f"{row['dbname']}/{row['filename']}"]
        assert r["%0"][0] in kinds[doc_type]
        assert r["%T"] == [row["title"]] and r.get("%A", []) == _names(row[PEOPLE[doc_type]])
        if doc_type == "paper" and r["%0"] == ["Journal Article"]:
            assert r["%J"] == [row["source"]] and r.get("%P", [""]) == [row["page_range"]]
        if doc_type == "paper" and r["%0"] == ["Thesis"]:
            assert r["%Y"] == _names(row["supervisor"]) and r["%9"] == [row["degree"]]


def _csl_date(text: str) -> list[int]:
    return [int(part) for part in text[:10].split("-")]


@pytest.mark.parametrize("doc_type", ["paper", "patent", "achievement"])
def test_csljson_items_carry_what_citation_styles_read(sqlite_url, tmp_path, doc_type):
    """CSL JSON, the format citeproc reads (pandoc, Zotero, Quarto): one array, an item per
    document, with the variables the styles print for each type."""
    stored = stored_truth(sqlite_url, doc_type)
    count, out = export_file(sqlite_url, doc_type, "csljson", tmp_path)
    items = json.loads(out.read_text(encoding="utf-8"))
    assert count == len(items) == len(stored)
    by_id = {item["id"]: item for item in items}
    for row in stored:
        item = by_id[f"{row['dbname']}_{row['filename']}"]
        assert item["title"] == row["title"] and item["source"] == "CNKI"
        people = [name["literal"] for name in item.get("author", [])]
        assert people == _names(row[PEOPLE[doc_type]])  # whole names, never split
        if doc_type == "paper" and row["database"] in ("博士", "硕士"):
            assert item["type"] == "thesis" and item["publisher"] == row["source"]
            assert item["genre"] == {"博士": "博士学位论文", "硕士": "硕士学位论文"}[row["degree"]]
            assert [n["literal"] for n in item["contributor"]] == _names(row["supervisor"])
        elif doc_type == "paper":
            assert item["type"] == "article-journal" and item["container-title"] == row["source"]
            assert item.get("page", "") == row["page_range"]
            assert (item.get("volume", ""), item.get("issue", "")) == (row["volume"], row["issue"])
            year = row["year"] or row["date"][:4]
            assert item["issued"]["date-parts"][0][0] == int(year)
        elif doc_type == "patent":
            granted = bool(row["grant_no"])
            assert item["type"] == "patent" and item["genre"] == row["patent_type"]
            assert item["number"] == (row["grant_no"] if granted else row["publication_no"])
            assert item["call-number"] == row["application_no"]  # Zotero's applicationNumber
            assert item["authority"] == "国家知识产权局" and item["publisher-place"] == "中国"
            applicants = _names(row["applicant"]) + _names(row["co_applicants"])
            assert item["publisher"] == "; ".join(applicants)
            issued = row["grant_date"] if granted else row["publication_date"]
            assert item["issued"] == {"date-parts": [_csl_date(issued)]}
            assert item["submitted"] == {"date-parts": [_csl_date(row["application_date"])]}
            assert row["address"] not in json.dumps(item, ensure_ascii=False)
        else:
            assert item["type"] == "report" and item["publisher"] == row["first_unit"]
            assert item["issued"] == {"date-parts": [_csl_date(row["date"])]}
    # a type with nothing stored is an empty array, still JSON
    other = "achievement" if doc_type == "patent" else "patent"
    count, out = export_file(sqlite_url, other, "csljson", tmp_path)
    assert count == 0 and json.loads(out.read_text(encoding="utf-8")) == []


def test_pandoc_citeproc_renders_each_type(sqlite_url, tmp_path):
    """Issue 41: a patent, a journal article, a thesis and an achievement, exported as CSL JSON,
    rendered by pandoc 3's citeproc in its default style (Chicago author-date) and in APA 7:
    each entry shows what its reader looks it up by. Chicago cites a patent by its inventors,
    office and number (CMOS 14.158), APA adds the applicant."""
    import pypandoc

    assert pypandoc.get_pandoc_version().split(".")[0] == "3"
    # the first row of each type has the hostile title (stored_truth), whose quotes a style rewrites
    rows = {
        t: [r for r in stored_truth(sqlite_url, t) if not r["title"].startswith("=")]
        for t in ("paper", "patent", "achievement")
    }
    picks = {
        "patent": next(r for r in rows["patent"] if r["grant_no"]),
        "article": next(r for r in rows["paper"] if r["database"] == "期刊" and r["page_range"]),
        "thesis": next(r for r in rows["paper"] if r["database"] == "博士"),
        "achievement": rows["achievement"][0],
    }
    items = []
    for doc_type in ("paper", "patent", "achievement"):
        _count, out = export_file(sqlite_url, doc_type, "csljson", tmp_path)
        wanted = {f"{r['dbname']}_{r['filename']}" for r in picks.values()}
        items += [i for i in json.loads(out.read_text(encoding="utf-8")) if i["id"] in wanted]
    assert len(items) == 4
    bibliography = tmp_path / "cited.json"
    bibliography.write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")

    def entry(lines: list[str], title: str) -> str:
        (found,) = [line for line in lines if title in line]
        return found.replace("\u2013", "-")  # the styles' page ranges take an en dash

    patent, article = picks["patent"], picks["article"]
    thesis, achievement = picks["thesis"], picks["achievement"]
    first, last = article["page_range"].split("-")
    rendered = {style: rendered_bibliography(bibliography, style) for style in (None, "apa")}
    for style, lines in rendered.items():
        assert len(lines) == 4, lines
        text = entry(lines, patent["title"])
        assert patent["grant_no"] in text and patent["grant_date"][:4] in text
        assert _names(patent["inventors"])[0] in text
        text = entry(lines, article["title"])
        assert article["source"] in text and article["year"] in text
        # Chicago shortens a range (201-15), APA writes it whole
        assert f"{first}-" in text and (not style or f"{first}-{last}" in text)
        text = entry(lines, thesis["title"])
        assert thesis["source"] in text and thesis["date"][:4] in text and "博士学位论文" in text
        text = entry(lines, achievement["title"])
        assert achievement["first_unit"] in text and achievement["date"][:4] in text
    # APA names the applicant (the patent's publisher); Chicago, by design, does not
    assert patent["applicant"] in entry(rendered["apa"], patent["title"])
    assert "国家知识产权局" in entry(rendered[None], patent["title"])


@pytest.mark.parametrize("doc_type", ["paper", "patent", "achievement"])
def test_xlsx_has_typed_columns_and_no_formula(db_url, tmp_path, doc_type):
    stored = stored_truth(db_url, doc_type)
    count, out = export_file(db_url, doc_type, "xlsx", tmp_path)
    book = openpyxl.load_workbook(out, read_only=True)
    sheet = book.worksheets[0]
    rows = list(sheet.iter_rows(values_only=True))
    header = list(rows[0])
    assert header == [*columns(doc_type), "url", "language"] and count == len(rows) - 1 == len(
        stored
    )
    by_key = {(r[0], r[1]): dict(zip(header, r, strict=True)) for r in rows[1:]}
    for row in stored:
        cells = by_key[(row["dbname"], row["filename"])]
        assert cells["title"] == row["title"]  # text, even when it starts with =
        assert isinstance(cells["crawled_at"], dt.datetime)
        if doc_type != "patent":
            assert cells["cited"] == row["cited"] and isinstance(cells["cited"], int)
            assert cells["downloads"] == row["downloads"]
            assert cells["counted_at"] == dt.datetime(2026, 11, 26, 9, 0)
        if doc_type == "patent":
            assert cells["application_date"] == dt.datetime.fromisoformat(row["application_date"])
        if doc_type == "paper":
            people = json.loads(row["author_affiliations"])
            flat = ";".join(f"{p['author']}:{'|'.join(p['institutions'])}" for p in people)
            assert cells["author_affiliations"] == flat
    # formula-injection safe: no cell of the workbook is a formula
    typed = openpyxl.load_workbook(out)  # not read-only: each cell's data_type
    assert all(c.data_type != "f" for r in typed.worksheets[0].iter_rows() for c in r)
    assert typed.worksheets[0].cell(2, 3).value.startswith("=HYPERLINK") or any(
        str(c.value).startswith("=HYPERLINK") for r in typed.worksheets[0].iter_rows() for c in r
    )


@pytest.mark.slow  # over a second alone: five exports, each in a subprocess
def test_export_command_writes_each_format(sqlite_url, tmp_path):
    stored = stored_truth(sqlite_url, "achievement")
    config = tmp_path / "config.ini"
    config.write_text(f"[database]\nurl = {sqlite_url}\n[task]\nname = t\ntype = achievement\n")
    for fmt in ("ris", "bibtex", "endnote", "csljson", "xlsx"):
        out = tmp_path / f"out.{fmt}"
        result = launcher.run(
            [
                sys.executable,
                "-m",
                "cnkispider.cli",
                "--config",
                str(config),
                "export",
                "--format",
                fmt,
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        assert f"exported {len(stored)} achievement documents" in result.stderr
    result = launcher.run(
        [
            sys.executable,
            "-m",
            "cnkispider.cli",
            "--config",
            str(config),
            "export",
            "--format",
            "xlsx",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "give a file with --out" in result.stderr
    assert result.stderr.strip().count("\n") == 0


def _rows(n: int):
    for i in range(n):
        yield {
            "dbname": "CJFQ",
            "filename": f"X{i:08d}",
            "title": f"标题{i}" * 5,
            "abstract": "摘要" * 200,
            "cited": i % 50,
            "downloads": i,
            "date": "2024-01-01",
            "counted_at": dt.datetime(2026, 11, 26, 9, 0),
        }


def _peak(n: int, fmt: str, tmp_path) -> int:
    import tracemalloc

    from cnkispider.output import citations
    from cnkispider.output.spreadsheet import write_xlsx

    names = ("dbname", "filename", "title", "abstract", "cited", "downloads", "date", "counted_at")
    tracemalloc.start()
    try:
        with open(tmp_path / f"m{n}.{fmt}", "wb") as binary:
            if fmt == "xlsx":
                assert write_xlsx(binary, names, _rows(n)) == n
            else:
                for row in _rows(n):
                    binary.write(citations.ris_record(row, "paper").encode())
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("fmt", ["xlsx", "ris"])
@pytest.mark.slow  # over a second alone: exports of 1,500 and 12,000 rows
def test_export_memory_stays_flat(tmp_path, fmt):
    """Eight times the rows, about the same peak: rows are written, not kept."""
    small, large = _peak(1_500, fmt, tmp_path), _peak(12_000, fmt, tmp_path)
    assert large < small * 1.5 + 256 * 1024, (small, large)
