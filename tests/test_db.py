"""Storage: idempotent schema on MariaDB and SQLite, database creation, clear connection errors."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from cnkispider.exceptions import StorageError
from cnkispider.runtime.addon import ADDONS
from cnkispider.store import schema
from cnkispider.store.db import mask_url, open_database


def test_schema_is_created_once_and_reopening_is_harmless(db_url):
    open_database(db_url).dispose()
    engine = open_database(db_url)
    with engine.connect() as conn:
        versions = conn.execute(sa.select(schema.schema_version.c.version)).scalars().all()
        tables = set(sa.inspect(conn).get_table_names())
    assert versions == [schema.SCHEMA_VERSION]
    assert {
        "task",
        "round",
        "errorCode",
        "errorLink",
        "worker",
        "patent",
        "paper",
        "achievement",
    } <= tables


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


def _open(url, barrier):
    barrier.wait(60)  # imported and ready: all start creating at the same moment
    open_database(url).dispose()


@pytest.mark.slow  # over a second alone: four worker processes
def test_many_workers_creating_the_schema_at_once_all_succeed(db_url):
    """Workers started together race to create the tables; every one of them must start (on
    MariaDB they collided table after table until the schema lock; `run --processes 2` once lost
    a worker to "Table 'audit' already exists")."""
    import multiprocessing

    workers = 6
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(workers) as pool:
        barrier = manager.Barrier(workers)
        pool.starmap(_open, [(db_url, barrier)] * workers)
    engine = open_database(db_url)
    with engine.connect() as conn:
        assert (
            conn.execute(sa.select(sa.func.count()).select_from(schema.schema_version)).scalar()
            == 1
        )


# -- query-string passwords, masking ------------------------------------------------------------


def test_a_password_in_the_query_string_is_moved_where_sqlalchemy_hides_it():
    from cnkispider.store.db import make_engine

    engine = make_engine("mysql+pymysql://u@h:3306/d?password=s3cret&charset=utf8mb4")
    assert engine.url.password == "s3cret" and "password" not in engine.url.query
    assert "s3cret" not in engine.url.render_as_string(hide_password=True)
    assert (
        mask_url("mysql+pymysql://u@h/d?password=s3cret")
        == "mysql+pymysql://u@h/d?password=%2A%2A%2A"
    )
    assert mask_url(engine.url) == "mysql+pymysql://u:***@h:3306/d?charset=utf8mb4"


# -- transient errors and the retrying helper ----------------------------------------------------


def _operational(code: int, text: str = "x"):
    import pymysql

    return sa.exc.OperationalError("SELECT 1", {}, pymysql.err.OperationalError(code, text))


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (_operational(2003, "Can't connect"), True),
        (_operational(2013, "Lost connection"), True),
        (_operational(2006, "gone away"), True),
        (_operational(1213, "Deadlock"), True),
        (_operational(1045, "Access denied"), False),
        (sa.exc.DataError("INSERT", {}, Exception(1406, "Data too long")), False),
        (sa.exc.TimeoutError("QueuePool limit"), True),
        (
            sa.exc.OperationalError(
                "BEGIN", {}, __import__("sqlite3").OperationalError("database is locked")
            ),
            True,
        ),
        (ValueError("not a database error"), False),
    ],
)
def test_transient_errors_are_told_from_errors_of_the_statement(error, transient):
    from cnkispider.store.db import is_transient

    assert is_transient(error) is transient


class FakeTime:
    def __init__(self):
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_retrying_backs_off_logs_each_attempt_and_says_when_the_database_is_back(caplog):
    from cnkispider.store.db import OutagePolicy, retrying

    fake = FakeTime()
    policy = OutagePolicy(seconds=60, sleep=fake.sleep, clock=fake.clock)
    results = [_operational(2003), _operational(2003), _operational(2013), "stored"]

    def work():
        result = results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result

    with caplog.at_level("WARNING", logger="cnkispider.db"):
        assert retrying(work, what="storing 3 documents", policy=policy) == "stored"
    assert fake.sleeps == [0.5, 1.0, 2.0]
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split("(attempt ")[1][0] for line in lines[:3]] == ["1", "2", "3"]
    assert "reachable again while storing 3 documents" in lines[3] and len(lines) == 4


def test_retrying_gives_up_after_the_outage_time_with_the_original_error(caplog):
    from cnkispider.store.db import OutagePolicy, retrying

    fake = FakeTime()
    policy = OutagePolicy(seconds=30, sleep=fake.sleep, clock=fake.clock)

    def down():
        raise _operational(2003, "Can't connect to MySQL server")

    with caplog.at_level("WARNING", logger="cnkispider.db"), pytest.raises(sa.exc.OperationalError):
        retrying(down, what="claiming a round", policy=policy)
    assert fake.now <= 30 and sum(fake.sleeps) == fake.now
    assert "gave up after" in caplog.records[-1].getMessage()


def test_retrying_does_not_retry_an_error_of_the_data():
    from cnkispider.store.db import OutagePolicy, retrying

    fake = FakeTime()
    calls = []

    def refused():
        calls.append(1)
        raise sa.exc.DataError("INSERT", {}, Exception(1406, "Data too long"))

    with pytest.raises(sa.exc.DataError):
        retrying(refused, what="x", policy=OutagePolicy(sleep=fake.sleep, clock=fake.clock))
    assert calls == [1] and fake.sleeps == []


# -- widened columns -------------------------------------------------------------------------------


def test_an_older_database_gets_its_narrow_columns_widened(mysql_url):
    from cnkispider.store.migrate import widen_columns

    engine = open_database(mysql_url)
    with engine.begin() as conn:  # as cnkispider created them before
        conn.exec_driver_sql("ALTER TABLE patent MODIFY title VARCHAR(500)")
        conn.exec_driver_sql("ALTER TABLE paper MODIFY authors TEXT")
        conn.exec_driver_sql("ALTER TABLE errorLink MODIFY filename VARCHAR(64) NOT NULL")
    changed = widen_columns(engine)
    assert sorted(c.split(" ")[0] for c in changed) == [
        "errorLink.filename",
        "paper.authors",
        "patent.title",
    ]
    assert widen_columns(engine) == []  # idempotent
    with engine.connect() as conn:
        types = dict(
            conn.exec_driver_sql(
                "SELECT CONCAT(TABLE_NAME, '.', COLUMN_NAME), COLUMN_TYPE FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = DATABASE()"
            ).all()
        )
    assert types["patent.title"] == "text" and types["paper.authors"] == "mediumtext"
    assert types["errorLink.filename"] == "varchar(255)"
    engine.dispose()


# -- the pipeline: one refused value fails only its document --------------------------------------


def _patent(i: int, **values) -> dict:
    from cnkispider.items import FIELDS

    row = {name: f"{name} {i}" for name in FIELDS["patent"]}
    row.update(dbname="SCPD", filename=f"CN{i:09d}A", **values)
    return row


def _pipeline(engine):
    """A pipeline on ``engine`` in a crawl whose context (cnkispider.runtime.context) is open on a task."""
    from scrapy.utils.test import get_crawler

    from cnkispider.pipelines import DocumentPipeline
    from cnkispider.runtime.context import CrawlContext, open_context
    from errors.recorder import ErrorRecorder
    from tasks.feeder import RoundFeeder
    from tasks.flow import TaskStore

    crawler = get_crawler(
        settings_dict={"ADDONS": ADDONS, "DATABASE_URL": "unused", "EXTENSIONS": {RoundFeeder: 500}}
    )
    tasks = TaskStore(engine)
    task, _ = tasks.register("t", "patent", "2024-01-01", "2024-01-31", "G06")
    recorder = ErrorRecorder(engine)
    open_context(crawler, CrawlContext(task=task, tasks=tasks, error_recorder=recorder))
    pipeline = DocumentPipeline("unused")
    pipeline.engine, pipeline.crawler = engine, crawler
    return pipeline


@pytest.mark.slow  # over a second alone: MariaDB's refusals, one by one
def test_a_value_too_long_for_its_column_fails_only_its_document(mysql_url, caplog):
    from cnkispider.store.storage import DocumentRejected, fetch_all

    engine = open_database(mysql_url)
    batch = [("patent", _patent(i), None) for i in range(6)]
    batch[1][1]["title"] = "长" * 600  # VARCHAR(500) refused it; TEXT holds it
    batch[3][1]["title"] = "长" * 30000  # 90,000 bytes: more than TEXT's 65,535
    batch[4][1]["filename"] = "F" * 65  # a key over its column: refused before any write
    batch[5][1]["dbname"] = ""
    with caplog.at_level("WARNING", logger="cnkispider.pipelines"):
        failures = _pipeline(engine)._write(batch)
    assert sorted(failures) == [3, 4, 5]
    assert all(isinstance(f, DocumentRejected) for f in failures.values())
    assert "Data too long for column 'title'" in str(failures[3])
    assert "filename is 65 characters long; its column holds 64" in str(failures[4])
    assert "dbname is empty" in str(failures[5])
    stored = {d["filename"]: d for d in fetch_all(engine, "patent")}
    assert sorted(stored) == [batch[i][1]["filename"] for i in (0, 1, 2)]
    assert stored[batch[1][1]["filename"]]["title"] == "长" * 600
    assert any("one at a time" in r.getMessage() for r in caplog.records)
    engine.dispose()


@pytest.mark.slow  # over a second alone: a Scrapy crawler's pipeline on MariaDB
def test_a_stored_document_clears_its_error_link_row_through_the_crawl_context(mysql_url):
    """The pipeline deletes the errorLink row of a document it stores, with the recorder of the
    crawl context (cnkispider.runtime.context), whichever task listed it."""
    from cnkispider.runtime.context import context_of

    engine = open_database(mysql_url)
    pipeline = _pipeline(engine)
    context = context_of(pipeline.crawler)
    for i in (1, 2):
        context.error_recorder.record_link(
            context.task_id + 1, None, "patent", "u", "SCPD", f"CN{i:09d}A", "http-500"
        )
    assert pipeline._write([("patent", _patent(1), None)]) == {}
    with engine.connect() as conn:
        left = conn.execute(sa.select(schema.error_link.c.filename)).scalars().all()
    assert left == ["CN000000002A"]
    engine.dispose()


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"dbname": "SCPD", "filename": "CN1A"}, None),
        ({"dbname": "SCPD", "filename": ""}, "filename is empty"),
        ({"dbname": None, "filename": "CN1A"}, "dbname is empty"),
        ({"dbname": "SCPD", "filename": "CN 1A"}, "spaces or control characters"),
        ({"dbname": "SCPD\x00", "filename": "CN1A"}, "spaces or control characters"),
        (
            {"dbname": "S" * 21, "filename": "CN1A"},
            "dbname is 21 characters long; its column holds 20",
        ),
    ],
)
def test_keys_are_checked_before_any_write(values, problem):
    from cnkispider.store.storage import key_problem

    found = key_problem("patent", values)
    assert found is None if problem is None else problem in found


def test_a_pooled_connection_lost_in_an_outage_is_one_warning_line_not_a_traceback(caplog):
    """SQLAlchemy logs a failed rollback of a connection given back to the pool at ERROR with a
    traceback; in an outage that is expected (seen in the fault suite's outage test): one line."""
    import logging

    import pymysql

    from cnkispider.store.db import make_engine

    engine = make_engine("mysql+pymysql://root@127.0.0.1:3306/test")
    pool_logger = logging.getLogger(f"sqlalchemy.pool.impl.{type(engine.pool).__name__}")
    lost = pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")
    with caplog.at_level(logging.WARNING, logger=pool_logger.name):
        try:
            raise lost
        except pymysql.err.OperationalError:
            pool_logger.exception("Exception during reset or similar")  # as SQLAlchemy does
        try:
            raise ValueError("a bug, not an outage")
        except ValueError:
            pool_logger.exception("Exception during reset or similar")  # as SQLAlchemy does
    engine.dispose()
    first, second = caplog.records
    assert (first.levelname, first.exc_info) == ("WARNING", None)
    assert "Lost connection to MySQL server" in first.getMessage()
    assert second.levelname == "ERROR" and second.exc_info is not None  # anything else: as it was


def test_a_database_connection_is_probed_so_a_dead_line_fails_instead_of_waiting_for_ever():
    """A statement whose answer a dropped line lost would wait for ever (pymysql has no read
    deadline): every TCP connection an engine makes is probed after 30 s of silence and ended
    when a minute passes unanswered (tests/test_cut_lines.py cuts real lines)."""
    import socket

    from cnkispider.store.db import make_engine

    engine = make_engine("mysql+pymysql://root@127.0.0.1:3306/test")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
            sock = conn.connection.dbapi_connection._sock
            tcp = {
                name: sock.getsockopt(socket.IPPROTO_TCP, getattr(socket, name))
                for name in ("TCP_KEEPIDLE", "TCP_KEEPINTVL", "TCP_KEEPCNT", "TCP_USER_TIMEOUT")
            }
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    finally:
        engine.dispose()
    assert tcp == {
        "TCP_KEEPIDLE": 30,
        "TCP_KEEPINTVL": 10,
        "TCP_KEEPCNT": 3,
        "TCP_USER_TIMEOUT": 60_000,
    }
