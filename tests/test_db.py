"""Storage: idempotent schema on MariaDB and SQLite, database creation, clear connection errors."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from cnkispider import schema
from cnkispider.db import mask_url, open_database
from cnkispider.exceptions import StorageError


def test_schema_is_created_once_and_reopening_is_harmless(db_url):
    open_database(db_url).dispose()
    engine = open_database(db_url)
    with engine.connect() as conn:
        versions = conn.execute(sa.select(schema.schema_version.c.version)).scalars().all()
        tables = set(sa.inspect(conn).get_table_names())
    assert versions == [schema.SCHEMA_VERSION]
    assert {"task", "round", "errorCode", "errorLink", "worker", "patent", "paper", "achievement"} <= tables


def test_missing_mysql_database_is_created(mysql_missing_db_url):
    engine = open_database(mysql_missing_db_url)
    with engine.connect() as conn:
        assert "task" in sa.inspect(conn).get_table_names()


def test_unreachable_database_gives_one_line_with_masked_password():
    with pytest.raises(StorageError) as err:
        open_database("mysql+pymysql://crawler:s3cret@127.0.0.1:1/cnki")
    message = str(err.value)
    assert "s3cret" not in message and "crawler:***@127.0.0.1:1/cnki" in message


def test_mask_url_hides_the_password():
    assert mask_url("mysql+pymysql://u:pw@h:3306/d") == "mysql+pymysql://u:***@h:3306/d"


def test_newer_schema_is_refused(sqlite_url):
    engine = open_database(sqlite_url)
    with engine.begin() as conn:
        conn.execute(schema.schema_version.update().values(version=schema.SCHEMA_VERSION + 1))
    with pytest.raises(StorageError, match="newer than this cnkispider"):
        open_database(sqlite_url)


def _open(url):
    open_database(url).dispose()


def test_many_workers_creating_the_schema_at_once_all_succeed(db_url):
    """Workers started together race to create the tables; every one of them must start."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        pool.map(_open, [db_url] * 4)
    engine = open_database(db_url)
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(schema.schema_version)).scalar() == 1
