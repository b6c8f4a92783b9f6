"""A document belongs to every task that found it (issue 47 point 4): two tasks whose answers
overlap each export and count all their documents, whichever stored it first, and a document
already stored at a task's depth is not fetched again for the second task."""

from __future__ import annotations

import csv
import json

import pytest
import sqlalchemy as sa

from cnkispider.store import doclinks
from cnkispider.store.db import open_database
from cnkispider.store.schema import documents, task, task_document
from cnkispider.store.storage import row_for, upsert_documents
from tests.fixtures.crawls import CAP, YEAR

DAY = "2024-03-01"  # a Friday of the realistic year at scale 0.002: 72 patents


def _exported(setup, name: str) -> set[str]:
    out = setup.tmp_path / f"{name}.csv"
    setup.run_ok("export", "--task", name, "--out", str(out))
    with out.open(encoding="utf-8-sig", newline="") as f:
        return {row["filename"] for row in csv.DictReader(f)}


def _status_documents(setup) -> dict[str, int]:
    result = setup.run_ok("status", "--json")
    return {t["name"]: t["documents"] for t in json.loads(result.stdout)["tasks"]}


def _details(setup) -> int:
    return setup.site.stats()["kinds"].get("detail", 0)


def _overlapping(first, second):
    """Run ``first`` then ``second`` (one stand-in, one database); both tasks' exports and
    status show every document of their own answer, and the second fetched the detail page of
    only what the first had not stored."""
    first.run_ok(timeout=300)
    mine = {d["filename"] for d in first.truth()}
    assert mine and {d["filename"] for d in first.stored()} == mine
    before = _details(first)
    second.run_ok(timeout=300)
    theirs = {d["filename"] for d in second.truth()}
    shared = mine & theirs
    assert shared and theirs - mine, "the answers must overlap, and not wholly"
    assert _exported(second, first.task) == mine
    assert _exported(second, second.task) == theirs
    counts = _status_documents(second)
    assert counts[first.task] == len(mine) and counts[second.task] == len(theirs)
    # each document's detail page fetched once: the second task fetched only its new ones
    assert _details(second) - before == len(theirs - mine)


@pytest.mark.slow  # crawls in worker subprocesses
def test_overlapping_query_tasks_each_keep_every_document_fetched_once(crawl_setup):
    first = crawl_setup("patent", "A,B,C,D,E,F,G,H", "sqlite", DAY, DAY, site=YEAR, cnki=CAP)
    first.search_query = "TI%'一种'"
    second = crawl_setup("patent", "A,B,C,D,E,F,G,H", "sqlite", DAY, DAY, site=first.site, cnki=CAP)
    second.search_query = "AB%'装置'"
    _overlapping(first, second)


@pytest.mark.slow  # crawls in worker subprocesses
def test_overlapping_category_tasks_each_keep_every_document_fetched_once(crawl_setup):
    first = crawl_setup("patent", "F,G", "mysql", DAY, DAY, site=YEAR, cnki=CAP)
    second = crawl_setup("patent", "G,H", "mysql", DAY, DAY, site=first.site, cnki=CAP)
    _overlapping(first, second)


def test_an_upgrade_links_the_documents_stored_before(sqlite_url):
    """Version 16's fill: a document stored before it belongs to the task that stored it."""
    engine = open_database(sqlite_url)
    try:
        with engine.begin() as conn:
            conn.execute(task.insert().values(name="old", type="patent", start_date=DAY))
            values = {"dbname": "SCPD", "filename": "CN1000001A", "title": "一种装置"}
            upsert_documents(conn, "patent", [row_for("patent", values, 1, None)])
            conn.execute(task_document.delete())  # as a version-15 database holds it
            conn.execute(documents["patent"].insert().values(dbname="SCPD", filename="CN2"))
            from cnkispider.store import schema

            schema.UPGRADE_FILLS[16](conn)
            schema.UPGRADE_FILLS[16](conn)  # idempotent: two workers upgrading at once
            assert doclinks.count(conn, "patent", 1) == 1
            assert conn.execute(sa.select(sa.func.count()).select_from(task_document)).scalar() == 1
    finally:
        engine.dispose()


def test_a_row_another_task_stored_deep_enough_is_linked_and_stored_not_fetched(sqlite_url):
    """doclinks.take_known: of a page's rows, those another task stored at this task's depth or
    deeper are linked and stored in the round's ledger in one transaction; a document stored
    shallower, or one this task has already (a move back crawls it again), is fetched."""
    from cnkispider.store import ledger
    from cnkispider.store.storage import DEPTH_KEY

    engine = open_database(sqlite_url)
    try:
        with engine.begin() as conn:
            rows = [
                row_for("patent", {"dbname": "SCPD", "filename": name, DEPTH_KEY: depth}, 1, None)
                for name, depth in (("CN1A", "detail"), ("CN2A", "list"), ("CN3A", "export"))
            ]
            upsert_documents(conn, "patent", rows)
            upsert_documents(conn, "patent", [row_for("patent", {"dbname": "SCPD", "filename": "CN3A", DEPTH_KEY: "export"}, 2, None)])  # fmt: skip
        keys = [("SCPD", f"CN{n}A") for n in (1, 2, 3, 4)]
        known = doclinks.take_known(engine, 2, 7, "patent", keys, "export")
        assert known == {("SCPD", "CN1A")}  # CN2A: only listed; CN3A: task 2's own; CN4A: new
        with engine.connect() as conn:
            assert doclinks.count(conn, "patent", 2) == 2
            assert ledger.count(conn, 7).stored == 1
    finally:
        engine.dispose()
