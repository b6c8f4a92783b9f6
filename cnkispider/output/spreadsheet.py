"""Stored documents as an Excel workbook (.xlsx), streamed: memory stays flat on a million rows.

XlsxWriter's ``constant_memory`` mode writes each row to a temporary file as soon as the next
row begins, and zips the sheets when the workbook closes: the rows are never all in memory.

Typed columns: counts (``cited``, ``downloads``, ``online_first``, a patent's ``pages``) are
numbers; dates and times (``date``, the patent dates, ``entry_date``, ``counted_at``,
``crawled_at``) are Excel dates when their text is one (a date CNKI wrote otherwise stays text);
everything else is text. Text is always written as a text cell, never as a formula, so a
document whose title starts with ``=`` cannot run in Excel (the CSV's guard, by construction);
URL-looking text stays text too. ``author_affiliations`` is the CSV's flat column. The columns
``url`` and ``language`` (:data:`cnkispider.store.record_links.LINK_COLUMNS`), when asked for, are the
record's CNKI address and language as every citation format gives them.

A sheet holds at most 1,048,575 rows under its header: past that the rows go on in a new sheet
(``paper``, ``paper 2``, ...). A cell holds at most 32,767 characters: a longer value (a very long
abstract) is cut there and the cell marked with a comment, never dropped silently.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

import xlsxwriter

from cnkispider.items import INTEGER_FIELDS
from cnkispider.output import citations
from cnkispider.store.record_links import record_language, record_url

#: Columns that hold a count.
NUMBER_COLUMNS = INTEGER_FIELDS | {"pages"}
#: Columns that hold a date or a time.
DATE_COLUMNS = frozenset(
    {
        "date",
        "application_date",
        "publication_date",
        "grant_date",
        "entry_date",
        "counted_at",
        "crawled_at",
    }
)
MAX_ROWS = 1_048_576  # Excel's rows per sheet, the header included
MAX_CELL = 32_767  # Excel's characters per cell
# the columns made from a row rather than read from it
_LINKS = {"url": record_url, "language": record_language}


def write_xlsx(
    binary, names: tuple[str, ...], rows: Iterable[dict], sheet: str = "documents"
) -> int:
    """Write ``rows`` into a workbook on the binary stream ``binary``; return how many."""
    book = xlsxwriter.Workbook(
        binary,
        {
            "constant_memory": True,
            "strings_to_formulas": False,
            "strings_to_urls": False,
            "strings_to_numbers": False,
        },
    )
    day = book.add_format({"num_format": "yyyy-mm-dd"})
    moment = book.add_format({"num_format": "yyyy-mm-dd hh:mm:ss"})
    bold = book.add_format({"bold": True})
    count = 0
    sheets = 0
    ws = None
    line = MAX_ROWS
    for row in rows:
        if line >= MAX_ROWS:
            sheets += 1
            ws = book.add_worksheet(sheet if sheets == 1 else f"{sheet} {sheets}")
            for col, name in enumerate(names):
                ws.write_string(0, col, name, bold)
            ws.freeze_panes(1, 0)
            line = 1
        for col, name in enumerate(names):
            value = _LINKS[name](row) if name in _LINKS else row.get(name)
            if value is None or value == "":
                continue
            if name == "author_affiliations":
                value = citations.flat_affiliations(value)
            if name in NUMBER_COLUMNS:
                number = _number(value)
                if number is not None:
                    ws.write_number(line, col, number)
                    continue
            if name in DATE_COLUMNS:
                when = _when(value)
                if when is not None:
                    fmt = moment if isinstance(when, dt.datetime) else day
                    ws.write_datetime(line, col, when, fmt)
                    continue
            text = value.strftime("%Y-%m-%d %H:%M:%S") if hasattr(value, "strftime") else str(value)
            if len(text) > MAX_CELL:
                ws.write_comment(line, col, f"cut at {MAX_CELL} of {len(text)} characters")
                text = text[:MAX_CELL]
            ws.write_string(line, col, text)
        line += 1
        count += 1
    if ws is None:  # no rows: the header alone
        ws = book.add_worksheet(sheet)
        for col, name in enumerate(names):
            ws.write_string(0, col, name, bold)
    book.close()
    return count


def _number(value) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    text = str(value).strip()
    return int(text) if text.isdigit() else None


def _when(value) -> dt.date | dt.datetime | None:
    """A date (``2024-01-30``) or a time (``2026-06-24 09:14``) from a stored value, else None."""
    if isinstance(value, dt.datetime):
        return value
    if isinstance(value, dt.date):
        return value
    text = str(value).strip()
    try:
        if len(text) == 10:
            return dt.date.fromisoformat(text)
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return None
