"""The way back to a stored record on CNKI, and its language, as every export format gives them.

Pure: a stored row (``dbname``, ``filename``, ``title``) in, a URL or a language tag out. Used by
:mod:`cnkispider.output.citations` (RIS, BibTeX, EndNote, CSL JSON) and :mod:`cnkispider.output.spreadsheet`
(the ``url`` and ``language`` columns). docs/FIELDS.md says which URL form and why.
"""

from __future__ import annotations

import re
from urllib.parse import quote

__all__ = ["LANGIDS", "LINK_COLUMNS", "record_language", "record_url"]

#: The columns a spreadsheet adds for them (after the stored fields).
LINK_COLUMNS = ("url", "language")

# The dbcode of a database by its name's prefix (CJFDLAST2024 is a journal row, CMFD202401 a
# master's thesis): what CNKI's own links and #paramdbcode carry. A name not listed is its own
# code (CNKI resolves a record by dbname and filename; the code only names the product).
_DBCODES = (
    ("CJFD", "CJFD"),
    ("CJFQ", "CJFD"),
    ("CAPJ", "CAPJ"),
    ("CMFD", "CMFD"),
    ("CDFD", "CDFD"),
    ("SCPD", "SCPD"),
    ("SNAD", "SNAD"),
)
_RECORD_URL = "https://kns.cnki.net/kcms/detail/detail.aspx?dbcode={code}&dbname={db}&filename={fn}"
_CJK = re.compile(r"[\u3400-\u9fff]")


def record_url(row: dict) -> str:
    """The stable address of the record on CNKI: ``kcms/detail/detail.aspx`` with dbcode, dbname
    and filename, which CNKI still answers (by redirecting to the kcms2 page with a fresh
    ``v=``), where a kcms2 ``abstract?v=`` link stops working when its token expires. The form
    Zotero's CNKI translator (translators_CN) writes into the URL field."""
    dbname, filename = str(row.get("dbname") or "").strip(), str(row.get("filename") or "").strip()
    if not dbname or not filename:
        return ""
    code = next((c for prefix, c in _DBCODES if dbname.upper().startswith(prefix)), dbname[:4])
    return _RECORD_URL.format(code=quote(code), db=quote(dbname), fn=quote(filename))


def record_language(row: dict) -> str:
    """``zh-CN`` for a record whose title is Chinese (every CNKI patent, thesis and achievement,
    and nearly every paper), ``en`` for a foreign-language one (a title without a Chinese
    character: an English paper of a Chinese journal, an international conference)."""
    return "zh-CN" if _CJK.search(str(row.get("title") or "")) else "en"


# biblatex's langid takes a babel/polyglossia name (biblatex-gb7714-2015 reads "chinese")
LANGIDS = {"zh-CN": "chinese", "en": "english"}
