"""Export stored documents as CSV or JSON lines, streamed: memory does not grow with the table.

Rows come from :func:`cnkispider.storage.iter_documents`, which reads one batch at a time by
keyset pagination (``WHERE id > last ORDER BY id LIMIT batch``), and each batch is written out
before the next is read. A million documents export in the memory of one batch.

Formats
    csv    UTF-8 with a byte order mark, so Excel (which otherwise guesses the ANSI code page,
           GBK on a Chinese Windows) shows the Chinese text; RFC 4180 quoting (Python's ``excel``
           dialect), so commas, quotes and line breaks inside an abstract stay inside their cell.
           Columns: ``cnkispider.items.FIELDS[type]`` then ``crawled_at``.
    jsonl  one JSON object per line, UTF-8 without a BOM, the same keys.

Values are written exactly as stored (every field is text, ``;`` joins several values), so the
CSV read back with Python's ``csv`` module gives every field unchanged. ``crawled_at`` is
``YYYY-MM-DD HH:MM:SS`` (UTC), a form Excel recognises as a date and time.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
import time
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from cnkispider.items import FIELDS
from cnkispider.schema import task
from cnkispider.storage import iter_documents

FORMATS = ("csv", "jsonl")
BATCH = 1000


def columns(doc_type: str) -> tuple[str, ...]:
    return (*FIELDS[doc_type], "crawled_at")


def resolve_task(engine: Engine, key: str) -> int:
    """A task's id from its name (or its id written as a number)."""
    where = task.c.id == int(key) if key.isdigit() else task.c.name == key
    with engine.connect() as conn:
        found = conn.execute(sa.select(task.c.id).where(where)).scalar()
    if found is None:
        raise LookupError(f"no task {key!r}")
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
) -> int:
    """Write the documents of ``doc_type`` to the binary stream ``binary``; return how many."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}")
    names = columns(doc_type)
    # newline="": the csv module writes its own \r\n line ends and must see line breaks inside
    # values untranslated; JSON escapes them anyway.
    text = io.TextIOWrapper(
        binary, encoding="utf-8-sig" if fmt == "csv" else "utf-8", newline="", write_through=True
    )
    count = 0
    try:
        if fmt == "csv":
            writer = csv.writer(text)
            writer.writerow(names)
            for row in iter_documents(engine, doc_type, since=since, batch=batch, task_id=task_id):
                writer.writerow([_text(row.get(name)) for name in names])
                count += 1
        else:
            for row in iter_documents(engine, doc_type, since=since, batch=batch, task_id=task_id):
                record = {name: _text(row.get(name)) for name in names}
                text.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
        text.flush()
    finally:
        text.detach()  # the caller owns ``binary`` (it may be stdout)
    return count


def _text(value) -> str:
    if value is None:
        return ""
    if hasattr(value, "strftime"):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return str(value)


def export(
    engine: Engine,
    doc_type: str,
    out: str | None,
    fmt: str = "csv",
    *,
    since: str | None = None,
    task_id: int | None = None,
    batch: int = BATCH,
) -> tuple[int, float]:
    """Export to the file ``out`` (``None`` or ``-``: stdout); return (documents, seconds).

    A file is written as ``<out>.part`` and renamed when complete, so an export cut short never
    leaves a file that looks whole.
    """
    started = time.monotonic()
    if out in (None, "", "-"):
        count = write_documents(
            engine, doc_type, sys.stdout.buffer, fmt, since=since, task_id=task_id, batch=batch
        )
        sys.stdout.flush()
        return count, time.monotonic() - started
    path = Path(out)
    partial = path.with_name(path.name + ".part")
    try:
        with open(partial, "wb") as binary:
            count = write_documents(
                engine, doc_type, binary, fmt, since=since, task_id=task_id, batch=batch
            )
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return count, time.monotonic() - started


def export_command(
    config,
    *,
    doc_type: str,
    fmt: str,
    out: str | None,
    since: str | None = None,
    task: str | None = None,
    batch: int = BATCH,
) -> int:
    """``cnkispider export --type T --format csv|jsonl [--since DATE] [--task NAME] [--out PATH]``."""
    import datetime as dt

    from cnkispider.status import open_database_readonly

    if since:
        try:
            since = dt.date.fromisoformat(since).isoformat()
        except ValueError:
            raise ValueError(f"--since {since!r}: expected a date as YYYY-MM-DD") from None
    engine = open_database_readonly(config.database_url)
    try:
        task_id = resolve_task(engine, task) if task else None
        try:
            count, seconds = export(
                engine, doc_type, out, fmt, since=since, task_id=task_id, batch=max(batch, 1)
            )
        except BrokenPipeError:
            # `cnkispider export | head`: the reader has gone, which is not an error of ours.
            # Point stdout at devnull so the interpreter's final flush does not fail again.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 0
    finally:
        engine.dispose()
    where = "standard output" if out in (None, "", "-") else out
    rate = f", {count / seconds:,.0f} documents/s" if seconds > 0 else ""
    print(
        f"exported {count:,} {doc_type} documents to {where} in {seconds:.1f} s{rate}",
        file=sys.stderr,
    )
    return 0
