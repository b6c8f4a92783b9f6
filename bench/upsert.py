"""The document upsert: built once and run as executemany, against built and compiled per batch.

    python bench/upsert.py [--documents 5000] [--mysql mysql+pymysql://root@127.0.0.1:3306]

Writes ``--documents`` patents in batches of 1 to 50 (the sizes a crawl's pipeline hands over),
then writes them all again one depth deeper (every row an update), into a fresh SQLite file and,
with ``--mysql``, a fresh database on that MariaDB server (dropped afterwards), two ways:

  per batch  what the pipeline did before: a multi-row ``INSERT ... VALUES`` of the batch's rows
             with its ON DUPLICATE / ON CONFLICT clause, built and compiled for each batch
  once       ``storage.upsert_documents``: the statement built once per type and column set,
             the rows sent as executemany (pymysql turns it into one multi-row INSERT)

and prints, for each way, CPU seconds of this process per 1,000 documents written, the
statements MariaDB counted per batch (``Questions``), and the ratio of the two CPU figures. The
stored rows of both ways are compared: the same rows, or the benchmark fails.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402

from cnkispider.items import FIELDS, INTEGER_FIELDS, TIME_FIELDS  # noqa: E402
from cnkispider.store import storage  # noqa: E402
from cnkispider.store.db import open_database  # noqa: E402
from cnkispider.store.schema import documents  # noqa: E402

NOW = dt.datetime(2026, 11, 26, 12, 0, 0)


def per_batch(conn, doc_type: str, rows: list[dict]) -> None:
    """The upsert as the pipeline wrote it before: a new multi-row statement for each batch."""
    unique = list({(r["dbname"], r["filename"]): r for r in rows}.values())
    statement = storage._upsert.__wrapped__(conn.dialect.name, doc_type, tuple(unique[0]))
    conn.execute(statement.values(unique))


def batches(count: int, seed: int) -> list[list[dict]]:
    """``count`` patents in batches of 1 to 50, as items of the pipeline (list depth)."""
    rng = random.Random(seed)
    items, number = [], 0
    while number < count:
        size = min(rng.randint(1, 50), count - number)
        batch = []
        for n in range(number, number + size):
            values = {f: f"{f} {n}" for f in FIELDS["patent"]}
            values.update({f: str(n % 97) for f in FIELDS["patent"] if f in INTEGER_FIELDS})
            values.update({f: "" for f in FIELDS["patent"] if f in TIME_FIELDS})
            values.update(dbname="SCPD", filename=f"CN{n:09d}A", date="2024-03-05")
            batch.append(values)
        items.append(batch)
        number += size
    return items


def write(engine, way, items: list[list[dict]]) -> tuple[float, float]:
    """Write every batch at list depth, then again at detail depth: (CPU seconds, statements a
    batch on MariaDB, or 0 on SQLite)."""
    statements = 0
    cpu = time.process_time()
    for depth in ("list", "detail"):
        for batch in items:
            rows = [
                storage.row_for("patent", {**v, storage.DEPTH_KEY: depth}, 1, NOW) for v in batch
            ]
            with engine.begin() as conn:
                before = _questions(conn)
                way(conn, "patent", rows)
                statements += _questions(conn) - before - 1  # the second SHOW counts itself
    cpu = time.process_time() - cpu
    return cpu, statements / (2 * len(items)) if engine.dialect.name == "mysql" else 0.0


def _questions(conn) -> int:
    if conn.dialect.name != "mysql":
        return 0
    return int(conn.exec_driver_sql("SHOW SESSION STATUS LIKE 'Questions'").one()[1])


def stored(engine) -> list[tuple]:
    table = documents["patent"]
    columns = [c for c in table.c if c.name not in ("id", "crawled_at")]
    with engine.connect() as conn:
        return conn.execute(sa.select(*columns).order_by(table.c.filename)).all()


def measure(name: str, urls: list[str], documents_count: int) -> list[tuple]:
    items = batches(documents_count, seed=1)
    rows, results = [], {}
    for way_name, way in (("per batch", per_batch), ("once", storage.upsert_documents)):
        engine = open_database(urls.pop(0))
        try:
            cpu, statements = write(engine, way, items)
            results[way_name] = stored(engine)
        finally:
            engine.dispose()
        rows.append((name, way_name, 1000 * cpu / (2 * documents_count), statements))
    if results["per batch"] != results["once"]:
        raise SystemExit(f"{name}: the two ways stored different rows")
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, default=5000)
    parser.add_argument("--mysql", default=None, metavar="URL", help="a MariaDB server to use too")
    args = parser.parse_args(argv)
    table = []
    with tempfile.TemporaryDirectory() as tmp:
        urls = [f"sqlite:///{tmp}/per-batch.db", f"sqlite:///{tmp}/once.db"]
        table += measure("SQLite", urls, args.documents)
    if args.mysql:
        server = sa.create_engine(args.mysql.rstrip("/") + "/", isolation_level="AUTOCOMMIT")
        names = [f"bench_upsert_{uuid.uuid4().hex[:8]}" for _ in range(2)]
        try:
            urls = [f"{args.mysql.rstrip('/')}/{n}" for n in names]
            table += measure("MariaDB", urls, args.documents)
        finally:
            with server.connect() as conn:
                for n in names:
                    conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {n}")
            server.dispose()
    print(f"{args.documents:,} documents written twice (list, then detail), batches of 1 to 50")
    print(f"{'database':<9} {'way':<10} {'CPU s / 1,000 docs':>19} {'statements / batch':>19}")
    for name, way, cpu, statements in table:
        shown = f"{statements:.2f}" if name == "MariaDB" else "-"
        print(f"{name:<9} {way:<10} {cpu:>19.3f} {shown:>19}")
    for name in dict.fromkeys(n for n, *_ in table):
        before, after = (cpu for n, _, cpu, _ in table if n == name)
        print(f"{name}: per batch / once = {before / after:.1f} times the CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
