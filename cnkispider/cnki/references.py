"""A paper's reference list: CNKI's citation API, its request and its JSON answer (pure).

``GET /restapi/citation-api/v1/literature/references?v=<v>&type=<TYPE>&start=1&size=10``
(PROTOCOL.md point 17; seen in public code, unconfirmed live: ``cnkispider probe`` asks it).
``v`` is the detail link's own token, so the request is bound to the session that listed the
document, as the detail page is. ``type`` names the citing document's database family
(:func:`reference_type`); ``start`` counts from 1 and ``size`` is at most :data:`MAX_SIZE`.

The answer is JSON: ``{"code":200,"data":{"total":N,"data":[{"metadata":[{"name":"TI",
"value":"..."}, ...], "dbname":..., "filename":...}, ...]}}``. Each entry's metadata names TI
(title), AU (authors), LY (source: journal, school, meeting) and YE (year); where CNKI links
the cited document the entry carries its ``dbname``/``filename`` (the names public code reads:
``dbname``/``dbName``/``sourceDb``, ``filename``/``fileName``). Anything else (the -403 JSON,
the soft block, HTML) is a refusal told apart by :mod:`cnkispider.cnki.refusals` first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode, urlsplit

from cnkispider.exceptions import RefusedPage

PATH = "/restapi/citation-api/v1/literature/references"
PAGE_SIZE = 10  # what the detail page's own script asks for
MAX_SIZE = 50  # the stand-in refuses more (CNKI's limit is unknown: the page asks 10)

# The citing document's database family -> the API's type (families matched by prefix, never by
# an exact name: CNKI's names carry a year, PROTOCOL.md point 12).
TYPES = (
    ("CJFD", "CJFDREF"),
    ("CJFQ", "CJFDREF"),
    ("CAPJ", "CJFDREF"),
    ("CDFD", "CDFDREF"),
    ("CMFD", "CMFDREF"),
    ("CPFD", "CPFDREF"),
    ("IPFD", "CPFDREF"),  # international conferences, as the conference database
)
KNOWN_TYPES = tuple(sorted({t for _, t in TYPES}))
#: metadata names -> Reference fields
_METADATA = {"TI": "title", "AU": "authors", "LY": "source", "YE": "year"}
_DBNAME_KEYS = ("dbname", "dbName", "DbName", "sourceDb", "dbcode")
_FILENAME_KEYS = ("filename", "fileName", "FileName")


def reference_type(dbname: str) -> str | None:
    """The API's ``type`` for a citing document of database ``dbname``, or None (no list)."""
    name = (dbname or "").strip().upper()
    for family, kind in TYPES:
        if name.startswith(family):
            return kind
    return None


def token_of(detail_url: str) -> str:
    """The ``v=`` token of a detail link ("" when it has none)."""
    values = parse_qs(urlsplit(detail_url or "").query).get("v")
    return values[0] if values else ""


def references_url(base_url: str, v: str, kind: str, start: int = 1, size: int = PAGE_SIZE) -> str:
    """One page of a reference list (``start`` counts from 1)."""
    if not v:
        raise ValueError("v: a reference list needs the detail link's v= token")
    if kind not in KNOWN_TYPES:
        raise ValueError(f"type: expected one of {', '.join(KNOWN_TYPES)}, got {kind!r}")
    if start < 1 or not 1 <= size <= MAX_SIZE:
        raise ValueError(f"start >= 1 and size 1..{MAX_SIZE} expected, got {start}, {size}")
    query = urlencode({"v": v, "type": kind, "start": start, "size": size})
    return f"{base_url.rstrip('/')}{PATH}?{query}"


@dataclass(frozen=True)
class Reference:
    """One entry of a reference list, as stored (``cited_*`` empty when CNKI links none)."""

    position: int  # 1-based, in CNKI's order
    title: str
    authors: str
    source: str
    year: str
    cited_dbname: str = ""
    cited_filename: str = ""


@dataclass(frozen=True)
class ReferencePage:
    total: int
    references: tuple[Reference, ...]


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ";".join(_text(v) for v in value if _text(v))
    return " ".join(str(value).split())


def _first(entry: dict, keys: tuple[str, ...]) -> str:
    for key in keys:
        if entry.get(key):
            return _text(entry[key])
    return ""


def parse_references(body: bytes | str, start: int = 1) -> ReferencePage:
    """The entries of one answer, numbered from ``start``; RefusedPage when it is not one.

    An answer without ``data.data`` (or with entries that are not objects) is not a reference
    list: "unexpected", never zero references."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        answer = json.loads(body)
    except ValueError:
        raise RefusedPage("not-json", f"reference answer is not JSON: {body[:80]!r}") from None
    data = answer.get("data") if isinstance(answer, dict) else None
    entries = data.get("data") if isinstance(data, dict) else None
    if entries is None and isinstance(data, dict) and not data.get("total"):
        entries = []  # an empty list may come without its array
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise RefusedPage("unexpected", f"reference answer without data.data: {body[:80]!r}")
    try:
        total = int(data.get("total", len(entries)) or 0)
    except (TypeError, ValueError):
        raise RefusedPage("unexpected", f"reference total is not a number: {body[:80]!r}") from None
    rows = []
    for offset, entry in enumerate(entries):
        fields = dict.fromkeys(_METADATA.values(), "")
        for item in entry.get("metadata") or ():
            if isinstance(item, dict) and item.get("name") in _METADATA:
                fields[_METADATA[item["name"]]] = _text(item.get("value"))
        dbname, filename = _first(entry, _DBNAME_KEYS), _first(entry, _FILENAME_KEYS)
        if not (dbname and filename):
            dbname = filename = ""  # half a key links nothing
        rows.append(
            Reference(start + offset, **fields, cited_dbname=dbname, cited_filename=filename)
        )
    return ReferencePage(max(total, start - 1 + len(rows)) if rows else total, tuple(rows))


def next_start(page: ReferencePage, start: int, size: int) -> int | None:
    """Where the next page starts, or None when the list is read (``start += size``)."""
    following = start + size
    if not page.references or following > page.total:
        return None
    return following
