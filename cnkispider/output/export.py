"""Export stored documents as CSV or JSON lines, streamed: memory does not grow with the table.

Rows come from :func:`cnkispider.store.storage.iter_documents`, which reads one batch at a time by
keyset pagination (``WHERE id > last ORDER BY id LIMIT batch``), and each batch is written out
before the next is read. A million documents export in the memory of one batch.

Formats: ``csv`` is UTF-8 with a byte order mark (so Excel shows the Chinese) and RFC 4180
quoting; ``jsonl`` has no BOM and typed counts (``INT_FIELDS``: ``"pages": 14``). A CSV cell
that Excel would run as a formula gets a leading ``'`` unless ``raw_cells``. The reference
managers' formats (``ris``, ``bibtex``, ``endnote``, ``csljson``: one JSON array, streamed an item
at a time) come from :mod:`cnkispider.output.citations`. The details, and why: docs/INTERNALS.md and
docs/FIELDS.md.

A file is written beside its target under a fresh name (``tempfile``, created with O_EXCL, so
a file or symlink planted there is never opened or followed) and renamed over the target when
complete. A missing folder, or a target that cannot be written, is one clear line.

The rest of this module's story: docs/INTERNALS.md#cnkispideroutputexportpy.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from cnkispider.exceptions import InputError, UnknownName
from cnkispider.items import FIELDS, INTEGER_FIELDS
from cnkispider.output import citations
from cnkispider.store.schema import task
from cnkispider.store.storage import iter_documents
from cnkispider.words import i18n
from cnkispider.words.i18n import _
from cnkispider.words.vocabulary import word

FORMATS = ("csv", "jsonl", "ris", "bibtex", "endnote", "csljson", "xlsx")
# counts: JSON numbers (see the module docstring); the integer columns (cited, downloads, the
# online_first flag) are numbers already
INT_FIELDS = frozenset({"pages"}) | INTEGER_FIELDS
BATCH = 1000
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what spreadsheets take for a formula


#: Where a document came from (issue 39): the task that stored it, that task's query (empty for a
#: category task) and when (crawled_at), so an export of a query task says which search found it.
PROVENANCE = ("crawled_at", "task", "query")


def columns(doc_type: str) -> tuple[str, ...]:
    return (*FIELDS[doc_type], *PROVENANCE)


def with_provenance(engine: Engine, rows: Iterator[dict]) -> Iterator[dict]:
    """``rows`` with the name and query of the task that stored each (a task read once)."""
    tasks: dict[int | None, tuple[str, str]] = {None: ("", "")}
    for row in rows:
        task_id = row.get("task_id")
        if task_id not in tasks:
            with engine.connect() as conn:
                found = conn.execute(
                    sa.select(task.c.name, task.c.query).where(task.c.id == task_id)
                ).first()
            tasks[task_id] = (found.name, found.query or "") if found else ("", "")
        row["task"], row["query"] = tasks[task_id]
        yield row


def resolve_task(engine: Engine, key: str) -> int:
    """A task's id from its name (or its id written as a number)."""
    where = task.c.id == int(key) if key.isdigit() else task.c.name == key
    with engine.connect() as conn:
        found = conn.execute(sa.select(task.c.id).where(where)).scalar()
    if found is None:
        raise UnknownName(_("no task %(name)r") % {"name": key})
    return found


def write_documents(
    engine: Engine,
    doc_type: str,
    binary,
    fmt: str = "csv",
    *,
    since: str | None = None,
    task_id: int | None = None,
    batch: int = BATCH,
    raw_cells: bool = False,
) -> int:
    """Write the documents of ``doc_type`` to the binary stream ``binary``; return how many."""
    if fmt not in FORMATS:
        raise InputError(_("format must be one of %(formats)s") % {"formats": ", ".join(FORMATS)})
    names = columns(doc_type)
    # newline="": the csv module writes its own \r\n line ends and must see line breaks inside
    # values untranslated; JSON escapes them anyway.
    rows = with_provenance(
        engine, iter_documents(engine, doc_type, since=since, batch=batch, task_id=task_id)
    )
    if fmt == "xlsx":
        from cnkispider.output.spreadsheet import write_xlsx

        return write_xlsx(binary, (*names, *citations.LINK_COLUMNS), rows)
    text = io.TextIOWrapper(
        binary, encoding="utf-8-sig" if fmt == "csv" else "utf-8", newline="", write_through=True
    )
    count = 0
    try:
        if fmt == "csv":
            writer = csv.writer(text)
            writer.writerow(names)
            cell = _text if raw_cells else _safe_cell
            for row in rows:
                if not raw_cells and row.get("author_affiliations"):
                    # one flat column: 张三:单位A|单位B;李四:单位B
                    row["author_affiliations"] = citations.flat_affiliations(
                        row["author_affiliations"]
                    )
                writer.writerow([cell(row.get(name)) for name in names])
                count += 1
        elif fmt == "csljson":
            # one JSON array, written an item at a time: the brackets and commas around them
            text.write("[")
            for row in rows:
                text.write(",\n" if count else "\n")
                text.write(citations.csljson_record(row, doc_type))
                count += 1
            text.write("\n]\n")
        elif fmt in citations.WRITERS:
            record = citations.WRITERS[fmt]
            for row in rows:
                text.write(record(row, doc_type))
                count += 1
        else:
            for row in rows:
                record = {name: _typed(name, row.get(name)) for name in names}
                text.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
        text.flush()
    finally:
        text.detach()  # the caller owns ``binary`` (it may be stdout)
    return count


def _typed(name: str, value):
    """A JSON value: a count as a number (null when empty), the affiliations as a list of
    {"author", "institutions"}, the rest as text."""
    if name == "author_affiliations":
        return citations.parse_affiliations(value)
    if name in INT_FIELDS:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if isinstance(value, int):
            return value
        text = str(value).strip()
        if text.isdigit():
            return int(text)
        return text  # "12+3" or other page text: kept rather than lost
    return _text(value)


def _text(value) -> str:
    if value is None:
        return ""
    if hasattr(value, "strftime"):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return str(value)


def _safe_cell(value) -> str:
    """The text of a CSV cell that a spreadsheet shows, never runs (see the module's doc)."""
    text = _text(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _writable_target(out: str) -> Path:
    """``out`` as a path whose folder exists and which is not a folder itself, or InputError."""
    path = Path(out)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(
            _("--out %(out)s: the folder %(folder)s does not exist")
            % {"out": out, "folder": folder}
        )
    if path.is_dir():
        raise InputError(_("--out %(out)s: is a folder; give a file name") % {"out": out})
    return path


def export(
    engine: Engine,
    doc_type: str,
    out: str | None,
    fmt: str = "csv",
    *,
    since: str | None = None,
    task_id: int | None = None,
    batch: int = BATCH,
    raw_cells: bool = False,
) -> tuple[int, float]:
    """Export to the file ``out`` (``None`` or ``-``: stdout); return (documents, seconds).

    A file is written under a temporary name in the target's folder (created exclusively, never
    through a planted file or symlink) and renamed when complete, so an export cut short never
    leaves a file that looks whole. A missing folder or an unwritable target is an InputError
    with one clear line.
    """
    started = time.monotonic()
    options = {"since": since, "task_id": task_id, "batch": batch, "raw_cells": raw_cells}
    if fmt == "xlsx" and out in (None, "", "-"):
        raise InputError(_("--format xlsx: give a file with --out (a workbook is not text)"))
    if out in (None, "", "-"):
        count = write_documents(engine, doc_type, sys.stdout.buffer, fmt, **options)
        sys.stdout.flush()
        return count, time.monotonic() - started
    path = _writable_target(out)
    try:
        # mkstemp: O_CREAT | O_EXCL with a random name, mode 0600 until renamed below
        handle, partial = tempfile.mkstemp(
            prefix=f".{path.name}.", suffix=".part", dir=path.parent if str(path.parent) else "."
        )
    except OSError as exc:
        raise InputError(
            _("--out %(out)s: cannot write in %(folder)s: %(error)s")
            % {"out": out, "folder": path.parent, "error": exc.strerror}
        ) from None
    try:
        with os.fdopen(handle, "wb") as binary:
            count = write_documents(engine, doc_type, binary, fmt, **options)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(partial, 0o666 & ~umask)  # what open() would have given the file
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return count, time.monotonic() - started


def since_value(text: str) -> str:
    """``--since``: a day (``YYYY-MM-DD``: documents dated then or later) or a time
    (``YYYY-MM-DD HH:MM``, UTC as status shows it: documents stored or changed since then,
    what a task that follows today brought in; docs/FOLLOW.md), normalized; else InputError."""
    import datetime as dt

    from cnkispider.days import iso_day

    text = text.strip()
    try:
        return iso_day(text).isoformat()
    except ValueError:
        pass
    try:
        return dt.datetime.fromisoformat(text).replace(tzinfo=None).isoformat(sep=" ")
    except ValueError:
        raise InputError(
            _(
                "--since {value!r}: expected a day as YYYY-MM-DD or a time as YYYY-MM-DD HH:MM"
            ).format(value=text)
        ) from None


def export_command(
    config,
    *,
    doc_type: str,
    fmt: str,
    out: str | None,
    since: str | None = None,
    task: str | None = None,
    batch: int = BATCH,
    raw_cells: bool = False,
) -> int:
    """``cnkispider export --type T --format csv|jsonl|ris|bibtex|endnote|csljson|xlsx [--since DATE]
    [--task NAME] [--out PATH] [--raw-cells]``."""

    from cnkispider.store.db import open_database_readonly

    if since:
        since = since_value(since)
    if out not in (None, "", "-"):
        _writable_target(out)  # before opening the database: a typo in the folder fails at once
    engine = open_database_readonly(config.database_url)
    try:
        task_id = resolve_task(engine, task) if task else None
        try:
            count, seconds = export(
                engine,
                doc_type,
                out,
                fmt,
                since=since,
                task_id=task_id,
                batch=max(batch, 1),
                raw_cells=raw_cells,
            )
        except BrokenPipeError:
            # `cnkispider export | head`: the reader has gone, which is not an error of ours.
            # Point stdout at devnull so the interpreter's final flush does not fail again.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 0
    finally:
        engine.dispose()
    where = _("standard output") if out in (None, "", "-") else out
    said = {
        "n": i18n.number(count),
        "type": word(doc_type),
        "where": where,
        "seconds": i18n.number(seconds, 1),
    }
    if seconds > 0:
        line = _(
            "exported %(n)s %(type)s documents to %(where)s in %(seconds)s s, %(rate)s documents/s"
        ) % dict(said, rate=i18n.number(count / seconds))
    else:
        line = _("exported %(n)s %(type)s documents to %(where)s in %(seconds)s s") % said
    print(line, file=sys.stderr)
    return 0
