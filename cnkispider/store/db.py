"""The one factory for database engines, riding out a database outage, and the database's clock.

``open_database(url)`` returns a ready SQLAlchemy engine for MySQL/MariaDB (pymysql) or
SQLite: it creates the MySQL database itself when it does not exist yet (so a home PC with
only config.ini can join), creates the tables with ``CREATE TABLE IF NOT EXISTS`` and checks
the schema version (both in :mod:`cnkispider.store.migrate`). A database that cannot be reached
raises :class:`StorageError` with the URL, its password masked: one clear line, never a
traceback. ``open_database_readonly(url)``
is the same for the tools that only read (status, export): it creates nothing.

SQLite: every transaction starts with ``BEGIN IMMEDIATE`` so that concurrent workers on one
machine serialize their writes instead of failing on lock upgrades; WAL lets readers go on.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from cnkispider import default_settings
from cnkispider.config import masking
from cnkispider.exceptions import CnkiSpiderError, StorageError
from cnkispider.store.migrate import check_schema_version, create_schema
from cnkispider.store.mysqlconn import connect as _pymysql_connect
from cnkispider.words.i18n import _

logger = logging.getLogger("cnkispider.db")  # its name before the move: log lines keep it


# -- riding out an outage ----------------------------------------------------------------------
#
# A worker that meets a database it cannot reach waits for it instead of stopping: MariaDB
# restarted for an upgrade, a failover, a home PC's network blinking. Invariants:
# - An engine that has never connected fails at once: a wrong URL or a server that is not there
#   when a worker starts is one clear line (StorageError), never minutes of waiting.
# - Once it has connected, a connection that cannot be made (every engine.connect()/begin() of
#   every caller: storage, flow control, the error recorder) is retried with backoff for up to
#   OUTAGE.seconds (``[database] outage_seconds``), one log line per attempt, one line when the
#   database is back; then the error is raised as it came.
# - One thread of the process probes the server at a time (_PROBING); the others wait behind it
#   and find it back, so an outage logs one line per attempt, not one per waiting thread.
# - A statement that fails mid-transaction (the server went away under it) is not retried by the
#   engine: only the caller knows whether its transaction can be run again. retrying() runs a
#   whole function again for callers whose work is idempotent (upserts, deletes by key).


# MySQL/MariaDB error codes that say "the server or the connection is away, or busy for a moment",
# not "this statement is wrong": try again later.
TRANSIENT_MYSQL_ERRORS = frozenset(
    {
        1040,  # too many connections
        1053,  # server shutdown in progress
        1205,  # lock wait timeout
        1213,  # deadlock found; the transaction was rolled back
        1927,  # connection was killed (MariaDB)
        2002,  # cannot connect through the socket
        2003,  # cannot connect to the server (refused, timed out)
        2006,  # server has gone away
        2013,  # lost connection during query
        2014,  # commands out of sync (a connection broken mid-result)
        2055,  # lost connection at a given state
        4031,  # disconnected by the server for inactivity (MariaDB)
    }
)


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` says the database is away or busy for a moment, so the same work can
    succeed later; False for errors of the statement or the data (too long, wrong type, ...)."""
    if isinstance(exc, sa.exc.TimeoutError):  # no pooled connection came free in time
        return True
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return True
    orig = getattr(exc, "orig", None) or exc
    if type(orig).__name__ == "InterfaceError":  # pymysql: the connection is already closed
        return True
    if type(orig).__name__ != "OperationalError":
        return False
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int):
        return args[0] in TRANSIENT_MYSQL_ERRORS
    text = str(orig).lower()
    return "database is locked" in text or "database is busy" in text  # SQLite's busy writer


def first_line(exc: BaseException) -> str:
    """The database's own words for ``exc``: the first line of the driver's error (``orig``),
    without SQLAlchemy's statement and parameters; "" when it says nothing. Not masked."""
    lines = str(getattr(exc, "orig", None) or exc).splitlines()
    return lines[0] if lines else ""


@dataclass
class OutagePolicy:
    """How long and how patiently to wait for the database (time and sleep injected for tests)."""

    seconds: float = default_settings.DATABASE_OUTAGE_SECONDS
    first_delay: float = 0.5
    max_delay: float = 10.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic


#: The process's policy: one database per worker process, so one policy. The item pipeline sets
#: ``seconds`` from DATABASE_OUTAGE_SECONDS when the crawler starts (set_outage_seconds).
OUTAGE = OutagePolicy()
_PROBING = threading.Lock()


def set_outage_seconds(seconds: float) -> None:
    OUTAGE.seconds = max(0.0, float(seconds))


def retrying(function, *args, what: str, policy: OutagePolicy | None = None, **kwargs):
    """``function(*args, **kwargs)``, run again with backoff while it fails with a transient
    database error, for up to ``policy.seconds``; a warning per failed attempt names ``what``.
    Other errors, and the last transient one, are raised unchanged. Only for idempotent work."""
    policy = policy or OUTAGE
    started = policy.clock()
    delay = policy.first_delay
    attempt = 0
    while True:
        try:
            result = function(*args, **kwargs)
        except Exception as exc:
            if not is_transient(exc):
                raise
            attempt += 1
            waited = policy.clock() - started
            reason = masking.mask_text(first_line(exc))
            if waited + delay > policy.seconds:
                logger.error(
                    "database unreachable while %s: gave up after %d attempts in %.0f s "
                    "([database] outage_seconds = %g): %s",
                    what,
                    attempt,
                    waited,
                    policy.seconds,
                    reason,
                )
                raise
            logger.warning(
                "database unreachable while %s (attempt %d, %.0f s into the outage, waiting up to "
                "%g s): %s; next attempt in %.1f s",
                what,
                attempt,
                waited,
                policy.seconds,
                reason,
                delay,
            )
            policy.sleep(delay)
            delay = min(delay * 2, policy.max_delay)
        else:
            if attempt:
                logger.warning(
                    "database reachable again while %s, after %.0f s and %d failed attempts",
                    what,
                    policy.clock() - started,
                    attempt,
                )
            return result


def retried(what: str):
    """A method decorator: the method runs under :func:`retrying` (``what`` names it in the
    warnings). Only for methods that are safe to run again: the caller says why beside each."""

    def wrap(method):
        @functools.wraps(method)
        def run(*args, **kwargs):
            return retrying(method, *args, what=what, **kwargs)

        return run

    return wrap


def _ride_out_outages(engine: Engine, shown: str) -> None:
    """Make every new connection of ``engine`` wait out an outage once the engine has connected."""
    reached = threading.Event()

    @sa.event.listens_for(engine, "do_connect")
    def _connect(dialect, _record, cargs, cparams):
        connect = _pymysql_connect if dialect.driver == "pymysql" else dialect.connect
        if not reached.is_set():  # the first connection: fail fast (see the invariants above)
            connection = connect(*cargs, **cparams)
            reached.set()
            return connection
        try:
            return connect(*cargs, **cparams)
        except Exception as exc:
            if not is_transient(exc):
                raise
        with _PROBING:
            return retrying(connect, *cargs, what=f"connecting to {shown}", **cparams)


def mask_url(url) -> str:
    """The URL as safe to print: its password, in the authority or the query, replaced by ***
    (:func:`cnkispider.config.masking.mask_url`; a SQLAlchemy URL object is rendered first)."""
    if not isinstance(url, str):
        url = url.render_as_string(hide_password=False)
    return masking.mask_url(url)


def _normalise(url: str) -> str:
    parsed = make_url(url)
    # A password given as ?password= (or pymysql's ?passwd=) works, since SQLAlchemy hands query
    # parameters to the driver, but engine.url would then show it to anyone who renders the URL
    # with hide_password=True (status, --json). Move it where SQLAlchemy knows to hide it.
    for name in ("password", "passwd"):
        if name in parsed.query:
            value = parsed.query[name]
            value = value[-1] if isinstance(value, tuple) else value
            parsed = parsed.difference_update_query([name])
            if parsed.password is None:
                parsed = parsed.set(password=value)
    if parsed.drivername in ("mysql", "mariadb", "mariadb+pymysql"):
        parsed = parsed.set(drivername="mysql+pymysql")
    if parsed.drivername.startswith("mysql") and "charset" not in parsed.query:
        parsed = parsed.update_query_dict({"charset": "utf8mb4"})
    return parsed.render_as_string(hide_password=False)


def make_engine(url: str) -> Engine:
    """Build (but do not connect) an engine with the settings this crawler needs."""
    url = _normalise(url)
    if url.startswith("sqlite"):
        path = make_url(url).database
        if path and path != ":memory:":
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # a file where a folder of the path should be, no right
                raise StorageError(
                    _("cannot use the database %(url)s: %(error)s")
                    % {"url": masking.mask_url(url), "error": exc}
                ) from None
        engine = sa.create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

        @sa.event.listens_for(engine, "connect")
        def _sqlite_connect(dbapi_conn, _record):
            dbapi_conn.isolation_level = None  # let BEGIN below, not the driver, open transactions
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        @sa.event.listens_for(engine, "begin")
        def _sqlite_begin(conn):
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    engine = sa.create_engine(
        url,
        # a home PC's connection may sit idle for hours behind a NAT; and after an outage every
        # pooled connection is dead: the ping finds it and a new one is made (and waited for)
        pool_pre_ping=True,
        pool_recycle=3600,
        isolation_level="READ COMMITTED",  # claims re-read the row they update (see tasks/rounds.py)
    )
    _ride_out_outages(engine, mask_url(url))
    _quiet_pool_resets(engine)
    _end_dead_transactions(engine)
    return engine


#: Seconds the server waits for the next statement of a transaction this worker left open before
#: it ends the connection (rolling the transaction back). A worker whose line drops mid-
#: transaction (a home PC) would otherwise hold its row locks until the server notices the dead
#: connection, hours later: every other worker then waits on the locks (error 1205, retried for
#: ever) and the whole crawl stands still (tests/test_cut_lines.py). A transaction killed by
#: mistake (a worker stalled this long between two statements) is retried like any lost
#: connection. Set per session: a worker's account needs no right for it.
IDLE_TRANSACTION_SECONDS = 20


def _end_dead_transactions(engine: Engine) -> None:
    @sa.event.listens_for(engine, "connect")
    def _set_timeout(dbapi_conn, _record):
        cursor = dbapi_conn.cursor()
        try:
            # MariaDB: only a connection idle inside a transaction is ended
            cursor.execute(f"SET SESSION idle_transaction_timeout = {IDLE_TRANSACTION_SECONDS}")
        except Exception:  # MySQL has no such variable: close any idle connection instead
            # (the pool's pre-ping replaces one closed while it sat in the pool)
            cursor.execute(f"SET SESSION wait_timeout = {IDLE_TRANSACTION_SECONDS}")
        finally:
            cursor.close()


class _LostConnectionOnReturn(logging.Filter):
    """SQLAlchemy's pool logs "Exception during reset or similar" with a traceback at ERROR when
    the rollback of a connection given back to the pool fails. During a database outage that is
    expected (the connection died with the server; the pool discards it, and the work that used
    it is retried by ``retrying``): one warning line then, no traceback. Any other failure of a
    reset keeps SQLAlchemy's own record."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and is_transient(exc):
            reason = masking.mask_text(first_line(exc))
            record.msg, record.args = (
                "a pooled connection was lost with the database: %s",
                (reason,),
            )
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info, record.exc_text = None, None
        return True


def _quiet_pool_resets(engine: Engine) -> None:
    pool_logger = logging.getLogger(f"sqlalchemy.pool.impl.{type(engine.pool).__name__}")
    if not any(isinstance(f, _LostConnectionOnReturn) for f in pool_logger.filters):
        pool_logger.addFilter(_LostConnectionOnReturn())


def _create_mysql_database(url: str) -> None:
    parsed = make_url(url)
    name = parsed.database
    if not name:
        raise StorageError(_("%(url)s: the URL names no database") % {"url": mask_url(url)})
    server = sa.create_engine(parsed.set(database=""), isolation_level="AUTOCOMMIT")
    try:
        with server.connect() as conn:
            # An identifier cannot be a bound parameter; quote it with the dialect's own quoting.
            quoted = server.dialect.identifier_preparer.quote_identifier(name)
            conn.exec_driver_sql(
                f"CREATE DATABASE IF NOT EXISTS {quoted} CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
            )
    finally:
        server.dispose()
    logger.info("created database %s", name)


def open_database(url: str, *, create: bool = True) -> Engine:
    """Connect, create the MySQL database and the tables if missing, check the schema version."""
    url = _normalise(url)
    engine = make_engine(url)
    try:
        try:
            with engine.connect():
                pass
        except sa.exc.OperationalError as exc:
            # MySQL error 1049: unknown database. Create it, then connect again.
            code = getattr(getattr(exc, "orig", None), "args", [None])[0]
            if create and url.startswith("mysql") and code == 1049:
                _create_mysql_database(url)
            else:
                raise
        if create:
            create_schema(engine)
        check_schema_version(engine)
    except sa.exc.SQLAlchemyError as exc:
        engine.dispose()
        reason = getattr(exc, "orig", None) or exc
        from cnkispider.store.rights import ASK_ADMIN, RightsError, database_denial

        if database_denial(exc) is not None:  # e.g. no right to create the database
            raise RightsError(
                _(
                    "the database account of %(url)s may not use it as a worker does "
                    "(the server said: %(words)s); %(ask)s"
                )
                % {"url": mask_url(url), "words": database_denial(exc), "ask": _(ASK_ADMIN)}
            ) from None
        raise StorageError(
            _("cannot use the database %(url)s: %(error)s")
            % {"url": mask_url(url), "error": reason}
        ) from None
    except CnkiSpiderError:
        engine.dispose()
        raise
    return engine


def open_database_readonly(url: str) -> Engine:
    """The database for reading only (status, export, the end-of-run summary): never creates a
    database, a file or a table."""
    if url.startswith("sqlite"):
        path = make_url(url).database
        if path and path != ":memory:" and not Path(path).exists():
            raise StorageError(
                _("no database at %(path)s yet: `cnkispider run` (or init-db) creates it")
                % {"path": path}
            )
    return open_database(url, create=False)


#: The test suite's fake clock: whole days added to the database's clock (tests/test_tiers.py
#: lets the days of a task that follows today pass, a run a day). Never set in use.
CLOCK_DAYS_ENV = "CNKI_TEST_CLOCK_DAYS"


def db_now(conn) -> dt.datetime:
    """The database server's clock (UTC, whole seconds): the one clock all workers share."""
    if conn.dialect.name == "sqlite":
        raw = conn.exec_driver_sql("SELECT CURRENT_TIMESTAMP").scalar()
        now = dt.datetime.fromisoformat(raw)
    else:
        now = conn.exec_driver_sql("SELECT UTC_TIMESTAMP()").scalar()
    days = os.environ.get(CLOCK_DAYS_ENV)
    return now + dt.timedelta(days=int(days)) if days else now
