"""Issue 26: the fields researchers cite, crawled from the stand-in and compared with its truth.

The list-row fields (cited, downloads, counted_at, export_id, online_first) ride on the list page
that is fetched anyway: a crawl asks exactly one detail page per document and no other page.
"""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from cnkispider import schema
from cnkispider.db import open_database
from cnkispider.items import FIELDS
from cnkispider.storage import fetch_all, row_for, upsert_documents
from tests.crawl_harness import CrawlSetup, compare

SITE = {"seed": 11}


@pytest.fixture
def crawl(tmp_path, cnki_site, request):
    made = []

    def make(doc_type, categories, db, start="2024-01-01", end="2024-01-01", site=None, **kw):
        setup = CrawlSetup(
            tmp_path / f"{doc_type}-{len(made)}",
            cnki_site(**(site or SITE)),
            request.getfixturevalue(f"{db}_url"),
            doc_type,
            start,
            end,
            categories,
            **kw,
        )
        setup.tmp_path.mkdir()
        made.append(setup)
        return setup

    yield make
    for setup in made:
        setup.cleanup_redis()


def _run(setup, *args):
    result = setup.run(*args)
    assert result.returncode == 0, (
        result.stdout[-3000:] + result.stderr[-3000:] + setup.log()[-3000:]
    )
    return result


@pytest.mark.parametrize(
    ("doc_type", "categories", "db"),
    [("paper", "TP3,F0", "sqlite"), ("achievement", "TP3", "mysql"), ("patent", "G06", "mysql")],
)
def test_list_row_fields_equal_the_truth_and_cost_no_request(crawl, doc_type, categories, db):
    setup = crawl(doc_type, categories, db)
    before = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    _run(setup)
    after = dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(seconds=1)
    truth, stored = setup.truth(), setup.stored()
    assert len(truth) > 20
    assert compare(stored, truth, doc_type) == {"missing": [], "extra": [], "differing": {}}
    # every field of the issue is compared: the truth holds them, and they vary
    row_fields = (
        {"export_id"}
        | ({"cited", "downloads"} if doc_type != "patent" else set())
        | ({"online_first"} if doc_type == "paper" else set())
    )
    assert row_fields <= set(FIELDS[doc_type])
    for name in row_fields:
        assert len({str(d[name]) for d in stored}) > 1, name
    if doc_type != "patent":
        assert all(isinstance(d["cited"], int) and isinstance(d["downloads"], int) for d in stored)
        assert any(d["cited"] == 0 for d in stored) and any(d["cited"] > 0 for d in stored)
        assert all(before <= d["counted_at"] <= after for d in stored), (before, after)
    # opaque: never the key
    assert all(d["export_id"] and d["filename"] not in d["export_id"] for d in stored)
    # no request for them: one detail page per document, the list pages, the session's pages
    kinds = setup.site.stats()["kinds"]
    assert kinds["detail"] == len(truth), kinds


def test_a_version_5_database_is_upgraded_with_the_new_fields(db_url):
    engine = open_database(db_url)
    new = [(t.name, c) for t, c in schema.UPGRADES[6]]
    assert ("paper", "cited") in new and ("achievement", "export_id") in new
    with engine.begin() as conn:  # what a version-5 cnkispider left behind
        for table, column in new:
            conn.exec_driver_sql(f"ALTER TABLE {table} DROP COLUMN {column}")
        conn.execute(schema.schema_version.update().values(version=5))
        conn.exec_driver_sql(
            "INSERT INTO paper (dbname, filename, title, source, date, database) "
            "VALUES ('CJFQ', 'OLD2020001', 'old', 'j', '2020-01-01', '期刊')"
        )
    engine.dispose()
    for _ in range(2):  # a second start finds everything in place
        upgraded = open_database(db_url)
        with upgraded.connect() as conn:
            assert (
                conn.execute(sa.select(schema.schema_version.c.version)).scalar()
                == schema.SCHEMA_VERSION
                >= 6  # (merged with issue 27's schema 8)
            )
            for table, column in new:
                assert column in {c["name"] for c in sa.inspect(conn).get_columns(table)}
        upgraded.dispose()
    engine = open_database(db_url)
    (old,) = fetch_all(engine, "paper")
    assert (old["title"], old["cited"], old["counted_at"], old["export_id"]) == (
        "old",
        None,
        None,
        None,
    )
    values = {
        "dbname": "CJFQ",
        "filename": "OLD2020001",
        "title": "old",
        "cited": "12",
        "downloads": "0",
        "counted_at": "2026-11-26 10:30:00",
        "export_id": "kd9kq!",
        "online_first": "1",
    }
    with engine.begin() as conn:
        upsert_documents(conn, "paper", [row_for("paper", values, None, dt.datetime(2026, 11, 26))])
    (old,) = fetch_all(engine, "paper")
    assert (old["cited"], old["downloads"], old["online_first"]) == (12, 0, 1)
    assert old["counted_at"] == dt.datetime(2026, 11, 26, 10, 30)
    engine.dispose()
