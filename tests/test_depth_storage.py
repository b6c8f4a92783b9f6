"""Depths in storage: each document records the depth it was stored at, a deeper pass fills
what a shallower one could not, never the reverse (a list-depth pass never blanks an abstract),
on SQLite and the real MariaDB; an older database gets the depth columns by migrate.upgrade."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from cnkispider.items import check_depth, depth_rank
from cnkispider.store import schema
from cnkispider.store.db import open_database
from cnkispider.store.storage import DEPTH_KEY, fetch_all, row_for, upsert_documents

NOW = dt.datetime(2026, 11, 26, 10, 0, 0)


def _write(engine, depth: str | None, **values) -> None:
    doc = {"dbname": "CJFQ", "filename": "HJXB202403005", **values}
    if depth is not None:
        doc[DEPTH_KEY] = depth
    with engine.begin() as conn:
        upsert_documents(conn, "paper", [row_for("paper", doc, 1, NOW)])


def _stored(engine) -> dict:
    (row,) = fetch_all(engine, "paper")
    return row


def test_a_list_pass_after_a_detail_pass_blanks_nothing_and_overwrites_nothing(db_url):
    engine = open_database(db_url)
    _write(
        engine, "detail", title="题名", abstract="完整摘要", source="焊接学报", date="2024-03-05"
    )
    _write(engine, "list", title="题名（列表）", abstract="", source="焊接学报", date="2024-03-06")
    row = _stored(engine)
    assert (row["abstract"], row["title"], row["date"]) == ("完整摘要", "题名", "2024-03-05")
    assert row["depth"] == "detail"


def test_a_deeper_pass_fills_and_corrects_what_a_shallower_one_stored(db_url):
    engine = open_database(db_url)
    _write(engine, "list", title="题名", source="焊接学报", date="2024-03-05")
    assert _stored(engine)["depth"] == "list"
    _write(engine, "export", title="题名", abstract="导出的摘要", doi="10.1/x", date="")
    row = _stored(engine)
    assert (row["abstract"], row["doi"], row["date"], row["depth"]) == (
        "导出的摘要",
        "10.1/x",
        "2024-03-05",  # the export said nothing of it: the list's value stays
        "export",
    )
    _write(engine, "detail", title="题名（详情）", abstract="详情摘要", fund="基金")
    row = _stored(engine)
    assert (row["title"], row["abstract"], row["fund"], row["doi"], row["depth"]) == (
        "题名（详情）",
        "详情摘要",
        "基金",
        "10.1/x",
        "detail",
    )


def test_a_shallower_pass_fills_a_field_the_deeper_one_left_empty(db_url):
    engine = open_database(db_url)
    _write(engine, "detail", title="题名", source="")
    _write(engine, "list", title="别的", source="焊接学报")
    row = _stored(engine)
    assert (row["title"], row["source"], row["depth"]) == ("题名", "焊接学报", "detail")


def test_an_item_without_a_depth_is_stored_at_detail(db_url):
    engine = open_database(db_url)
    _write(engine, None, title="题名")
    assert _stored(engine)["depth"] == "detail"


def test_an_older_database_gets_the_depth_columns(sqlite_url):
    engine = sa.create_engine(sqlite_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE task (id INTEGER PRIMARY KEY, name VARCHAR(100))")
        conn.exec_driver_sql(
            "CREATE TABLE paper (id INTEGER PRIMARY KEY, dbname VARCHAR(20), filename VARCHAR(64))"
        )
        conn.exec_driver_sql("CREATE TABLE schema_version (id INTEGER PRIMARY KEY, version INT)")
        conn.exec_driver_sql("INSERT INTO schema_version VALUES (1, 5)")
        conn.exec_driver_sql("INSERT INTO paper VALUES (1, 'CJFQ', 'OLD1')")
    engine.dispose()
    upgraded = open_database(sqlite_url)
    with upgraded.connect() as conn:
        for table in ("task", "paper", "patent", "achievement"):
            columns = {c["name"] for c in sa.inspect(conn).get_columns(table)}
            assert "depth" in columns, table
        assert (
            conn.execute(sa.select(schema.schema_version.c.version)).scalar()
            == schema.SCHEMA_VERSION
        )
        assert conn.exec_driver_sql("SELECT depth FROM paper").scalar() is None
    assert depth_rank(None) == depth_rank("detail")


@pytest.mark.parametrize("bad", ["", "deep", None, "details"])
def test_a_bad_depth_is_refused_naming_the_choices(bad):
    with pytest.raises(ValueError, match="list, export, detail"):
        check_depth(bad)


def test_counts_take_the_newest_read_whatever_the_depth_and_zero_is_a_count(db_url):
    engine = open_database(db_url)
    _write(engine, "detail", title="题名", cited="5", downloads="40", export_id="id-a")
    _write(engine, "list", title="题名", cited="0", downloads="41", export_id="id-b")
    row = _stored(engine)
    assert (row["cited"], row["downloads"], row["export_id"]) == (0, 41, "id-b")
    _write(engine, "list", title="题名", cited="", downloads="")  # not read: kept
    row = _stored(engine)
    assert (row["cited"], row["downloads"], row["depth"]) == (0, 41, "detail")


def test_a_batch_is_one_statement_on_mariadb_and_each_row_merges_by_its_own_depth(mysql_url):
    """A batch of 50 (new rows and stored ones, at several depths) is one INSERT on MariaDB (and
    one for its task links): a home PC's line pays two round trips a batch, not one a document (the driver turns the
    executemany into one multi-row statement only while the upsert binds nothing else)."""
    engine = open_database(mysql_url)
    docs = [{"dbname": "CJFQ", "filename": f"HJXB2024{n:05d}"} for n in range(50)]
    with engine.begin() as conn:
        upsert_documents(
            conn,
            "paper",
            [row_for("paper", {**d, "abstract": "详情摘要", DEPTH_KEY: "detail"}, 1, NOW) for d in docs[:25]],
        )  # fmt: skip
    again = [
        row_for("paper", {**d, "abstract": f"列表{i}", DEPTH_KEY: "list"}, 1, NOW)
        for i, d in enumerate(docs)
    ]
    with engine.begin() as conn:
        before = int(conn.exec_driver_sql("SHOW SESSION STATUS LIKE 'Questions'").one()[1])
        upsert_documents(conn, "paper", again)
        after = int(conn.exec_driver_sql("SHOW SESSION STATUS LIKE 'Questions'").one()[1])
    # the SHOW itself counts once; the upsert and its task links (issue 47) are one multi-row
    # statement each, whatever the batch's size
    assert after - before - 1 == 2
    rows = {r["filename"]: r for r in fetch_all(engine, "paper")}
    assert len(rows) == 50
    # the first 25 were stored deeper: the list pass keeps their abstracts and depth
    assert {rows[d["filename"]]["abstract"] for d in docs[:25]} == {"详情摘要"}
    assert {rows[d["filename"]]["depth"] for d in docs[:25]} == {"detail"}
    assert [rows[d["filename"]]["abstract"] for d in docs[25:]] == [
        f"列表{i}" for i in range(25, 50)
    ]
    assert {rows[d["filename"]]["depth"] for d in docs[25:]} == {"list"}


PAIRS = [
    (  # a detail pass, then a list pass of the same document
        {DEPTH_KEY: "detail", "title": "题名", "abstract": "完整摘要", "source": "焊接学报"},
        {DEPTH_KEY: "list", "title": "题名（列表）", "abstract": "", "source": ""},
    ),
    (  # a list pass, then an export pass that said nothing of the source
        {DEPTH_KEY: "list", "title": "题名", "source": "焊接学报", "cited": "5"},
        {DEPTH_KEY: "export", "title": "题名（导出）", "source": "", "doi": "10.1/x", "cited": ""},
    ),
    (  # counts: the newest read wins whatever the depth, an unread one keeps the old
        {DEPTH_KEY: "detail", "title": "题名", "cited": "5", "downloads": "40", "export_id": "a"},
        {DEPTH_KEY: "list", "title": "", "cited": "0", "downloads": "", "export_id": "b"},
    ),
]


@pytest.mark.parametrize(("first", "second"), PAIRS)
def test_two_copies_in_one_batch_merge_as_two_batches_would(db_url, first, second):
    """Issue 43, case 11: the batch kept the last copy of a document, so a list pass and a detail
    pass of one document in one batch lost the detail's abstract (an empty value keeps the stored
    one; the deeper depth wins), which the same two copies in two batches keep."""
    key = {"dbname": "CJFQ", "filename": "HJXB202403005"}

    def stored(batches) -> dict:
        engine = open_database(db_url)
        with engine.begin() as conn:
            conn.execute(schema.documents["paper"].delete())
        for batch in batches:
            with engine.begin() as conn:
                upsert_documents(
                    conn, "paper", [row_for("paper", {**key, **v}, 1, NOW) for v in batch]
                )
        row = _stored(engine)
        engine.dispose()
        return {k: v for k, v in row.items() if k != "id"}

    assert stored([[first, second]]) == stored([[first], [second]])
