"""`cnkispider export` (issue: watching and exporting): CSV that Excel opens and Python's csv
module reads back field for field, JSON lines, the --since and --task filters, and streaming
(one batch in memory, never the table)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math

import pytest
import sqlalchemy as sa

from cnkispider.cli import main
from cnkispider.items import FIELDS
from cnkispider.output.export import columns, write_documents
from cnkispider.store.db import open_database
from cnkispider.store.schema import task
from cnkispider.store.storage import row_for, upsert_documents

CRAWLED = dt.datetime(2024, 5, 6, 7, 8, 9)
# Values a CSV writer can get wrong: separators, quotes, every kind of line break, a leading
# formula sign and leading zeros, text outside the Basic Multilingual Plane, empty values.
AWKWARD = [
    "一种基于深度学习的图像识别方法，包括：步骤一, 步骤二",
    'the "quoted" claim; a comma, a semicolon',
    "line one\nline two\r\nline three\rline four",
    "=SUM(A1:A2)",
    "007",
    "𠀀 CJK extension B and emoji 🙂",
    "",
    "  leading and trailing spaces  ",
    "tab\tinside",
]


def document(i: int, date: str = "2024-01-01", **values) -> dict:
    row = {name: f"{name} {i}" for name in FIELDS["patent"]}
    row.update(dbname="SCPD", filename=f"CN{i:08d}A", date=date)
    row["abstract"] = AWKWARD[i % len(AWKWARD)]
    row["claim"] = AWKWARD[(i + 3) % len(AWKWARD)]
    row["title"] = f"专利 {i}: " + AWKWARD[(i + 5) % len(AWKWARD)]
    row.update(values)
    return row


def store(engine, docs: list[dict], task_id: int | None = 1) -> None:
    with engine.begin() as conn:
        upsert_documents(conn, "patent", [row_for("patent", d, task_id, CRAWLED) for d in docs])


@pytest.fixture
def config(tmp_path, db_url):
    """A config.ini pointing at a fresh database (SQLite, then the real MariaDB)."""
    path = tmp_path / "config.ini"
    path.write_text(f"[database]\nurl = {db_url}\n[task]\ntype = patent\n", encoding="utf-8")
    engine = open_database(db_url)
    yield path, engine
    engine.dispose()


def export(config_path, *args) -> None:
    assert main(["--config", str(config_path), "export", *args]) == 0


def read_csv(path) -> list[dict]:
    with open(path, encoding="utf-8-sig", newline="") as fh:
        return list(csv.DictReader(fh))


def expected(doc: dict) -> dict:
    return {
        **{name: doc[name] for name in FIELDS["patent"]},
        "crawled_at": "2024-05-06 07:08:09",
        "task": "",  # stored by no task: no provenance to tell
        "query": "",
    }


def test_csv_round_trips_through_the_csv_module_with_every_field_intact(config, tmp_path):
    path, engine = config
    docs = [document(i) for i in range(len(AWKWARD) * 2)]
    store(engine, docs)
    out = tmp_path / "patents.csv"
    export(path, "--type", "patent", "--format", "csv", "--out", str(out), "--raw-cells")
    raw = out.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf" + b"dbname,filename,title,")  # the BOM Excel looks for
    rows = read_csv(out)
    assert list(rows[0]) == list(columns("patent"))
    assert rows == [expected(d) for d in docs]
    assert not (tmp_path / "patents.csv.part").exists()


def test_csv_cells_a_spreadsheet_would_run_get_a_quote_by_default(config, tmp_path):
    """CSV injection: a document's text starting with = + - @ (or a tab or CR) reaches Excel as
    text, not as a formula; everything else is exact, and --raw-cells writes all exactly."""
    path, engine = config
    formulas = ['=HYPERLINK("http://x")', "+1+1", "-2+3", "@SUM(A1)", "\tcmd", "\rcmd"]
    plain = ["007", "a=b", "2024-01-01", "一种-方法", ""]
    docs = [document(i, abstract=value) for i, value in enumerate(formulas + plain)]
    store(engine, docs)
    out = tmp_path / "safe.csv"
    export(path, "--out", str(out))
    abstracts = [row["abstract"] for row in read_csv(out)]
    assert abstracts == ["'" + f for f in formulas] + plain
    export(path, "--out", str(out), "--raw-cells")
    assert [row["abstract"] for row in read_csv(out)] == formulas + plain


def test_a_symlink_planted_at_the_part_file_is_not_followed(config, tmp_path):
    """The old export opened OUT.part with O_TRUNC, following a symlink someone planted there."""
    path, engine = config
    store(engine, [document(1)])
    victim = tmp_path / "victim.txt"
    victim.write_text("precious", encoding="utf-8")
    out = tmp_path / "patents.csv"
    (tmp_path / "patents.csv.part").symlink_to(victim)
    export(path, "--out", str(out))
    assert victim.read_text(encoding="utf-8") == "precious"
    assert read_csv(out)[0]["filename"] == "CN00000001A"
    assert (tmp_path / "patents.csv.part").is_symlink()  # not ours: left alone
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part") and not p.is_symlink()]


def test_a_missing_folder_is_one_line_and_exit_2(config, tmp_path, capsys):
    path, engine = config
    store(engine, [document(1)])
    out = tmp_path / "no" / "such" / "patents.csv"
    assert main(["--config", str(path), "export", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: --out {out}: the folder {out.parent} does not exist"
    assert main(["--config", str(path), "export", "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_jsonl_round_trips_with_every_field_intact(config, tmp_path):
    path, engine = config
    docs = [document(i) for i in range(len(AWKWARD))]
    store(engine, docs)
    out = tmp_path / "patents.jsonl"
    export(path, "--format", "jsonl", "--out", str(out))  # --type defaults to [task] type
    raw = out.read_bytes()
    assert not raw.startswith(b"\xef\xbb\xbf")
    assert [json.loads(line) for line in raw.decode("utf-8").splitlines()] == [
        expected(d) for d in docs
    ]


def test_since_keeps_documents_dated_that_day_or_later(config, tmp_path):
    path, engine = config
    store(engine, [document(1, "2023-12-31"), document(2, "2024-01-01"), document(3, "2024-02-01")])
    out = tmp_path / "since.csv"
    export(path, "--since", "2024-01-01", "--out", str(out))
    assert [r["date"] for r in read_csv(out)] == ["2024-01-01", "2024-02-01"]


def test_task_keeps_the_documents_of_that_task(config, tmp_path):
    path, engine = config
    with engine.begin() as conn:
        for name in ("first", "second"):
            conn.execute(
                task.insert().values(
                    name=name, type="patent", start_date="2024-01-01", categories="G06"
                )
            )
        second = conn.execute(sa.select(task.c.id).where(task.c.name == "second")).scalar()
    store(engine, [document(1), document(2)], task_id=second - 1)
    store(engine, [document(3)], task_id=second)
    out = tmp_path / "task.csv"
    export(path, "--task", "second", "--out", str(out))
    assert [r["filename"] for r in read_csv(out)] == ["CN00000003A"]


def test_each_document_says_which_task_and_query_found_it_and_when(config, tmp_path):
    """Provenance (issue 39): the task's name and its query beside crawled_at, in every format
    that has columns."""
    path, engine = config
    with engine.begin() as conn:
        conn.execute(
            task.insert().values(
                name="carbon",
                type="patent",
                start_date="2024-01-01",
                categories="builtin",
                query="SQR='华为' AND SU='碳中和'",
            )
        )
        conn.execute(
            task.insert().values(
                name="plain", type="patent", start_date="2024-01-01", categories="G06"
            )
        )
        ids = dict(conn.execute(sa.select(task.c.name, task.c.id)).all())
    store(engine, [document(1)], task_id=ids["carbon"])
    store(engine, [document(2)], task_id=ids["plain"])
    out = tmp_path / "p.jsonl"
    export(path, "--format", "jsonl", "--out", str(out))
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(r["task"], r["query"]) for r in records] == [
        ("carbon", "SQR='华为' AND SU='碳中和'"),
        ("plain", ""),
    ]
    assert all(r["crawled_at"] for r in records)


def test_export_to_stdout(config, capfdbinary):
    path, engine = config
    store(engine, [document(1)])
    export(path)
    out = capfdbinary.readouterr()
    assert out.out.startswith(b"\xef\xbb\xbfdbname,") and out.out.count(b"CN00000001A") == 1
    assert b"exported 1 patent documents to standard output" in out.err


def test_a_bad_since_is_one_line_and_exit_2(config, capsys):
    path, _ = config
    assert main(["--config", str(path), "export", "--since", "2024-13-01"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1  # the one date message of every command
    assert (
        "--since '2024-13-01' is not a real day (month or day out of range); expected YYYY-MM-DD"
        in err
    )


def test_export_streams_one_batch_at_a_time(config):
    """25 documents in batches of 10: three keyset queries (and one that finds the end), each
    LIMIT 10, and the first rows are written before the second query runs."""
    _, engine = config
    store(engine, [document(i) for i in range(25)])
    queries: list[str] = []
    writes_before_query: list[int] = []
    sink = _CountingSink()

    def on_query(conn, cursor, statement, parameters, context, executemany):
        if "FROM patent" in statement:
            queries.append(statement)
            writes_before_query.append(sink.rows)

    sa.event.listen(engine, "before_cursor_execute", on_query)
    try:
        assert write_documents(engine, "patent", sink, "csv", batch=10) == 25
    finally:
        sa.event.remove(engine, "before_cursor_execute", on_query)
    assert len(queries) == math.ceil(25 / 10) + 1
    assert all("LIMIT" in q for q in queries)
    assert writes_before_query[1] >= 10  # the first batch left before the second came in


class _CountingSink(io.RawIOBase):
    """A binary stream that keeps nothing, counting the CSV lines that reached it."""

    def __init__(self):
        self.rows = 0

    def writable(self):
        return True

    def write(self, data):
        self.rows += bytes(data).count(b"\r\n")
        return len(data)


def test_jsonl_writes_counts_as_numbers_and_text_as_text(config, tmp_path):
    """issue 14 (5): `"pages": 14`, not "14"; an empty count is null; other fields stay text."""
    path, engine = config
    store(
        engine,
        [document(1, pages="14"), document(2, pages=""), document(3, pages="007", main_ipc="123")],
    )
    out = tmp_path / "typed.jsonl"
    export(path, "--format", "jsonl", "--out", str(out))
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["pages"] for r in records] == [14, None, 7]
    assert records[2]["main_ipc"] == "123" and records[0]["date"] == "2024-01-01"
    assert records[0]["crawled_at"] == "2024-05-06 07:08:09"
