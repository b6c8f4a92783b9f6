"""The one factory for database engines, and idempotent schema creation.

``open_database(url)`` returns a ready SQLAlchemy engine for MySQL/MariaDB (pymysql) or
SQLite: it creates the MySQL database itself when it does not exist yet (so a home PC with
only config.ini can join), creates the tables with ``CREATE TABLE IF NOT EXISTS``, and checks
the schema version. A database that cannot be reached raises :class:`StorageError` with the
URL, its password masked: one clear line, never a traceback.

SQLite: every transaction starts with ``BEGIN IMMEDIATE`` so that concurrent workers on one
machine serialize their writes instead of failing on lock upgrades; WAL lets readers go on.
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from cnkispider import schema
from cnkispider.exceptions import StorageError

logger = logging.getLogger(__name__)


def mask_url(url: str) -> str:
    """The URL as safe to print: the password replaced by ***."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # a URL too broken to parse has nothing reliable to mask
        return "<unparseable database URL>"


def _normalise(url: str) -> str:
    parsed = make_url(url)
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
            Path(path).parent.mkdir(parents=True, exist_ok=True)
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
    return sa.create_engine(
        url,
        pool_pre_ping=True,  # a home PC's connection may sit idle for hours behind a NAT
        pool_recycle=3600,
        isolation_level="READ COMMITTED",  # claims re-read the row they update (see tasks/flow.py)
    )


def _create_mysql_database(url: str) -> None:
    parsed = make_url(url)
    name = parsed.database
    if not name:
        raise StorageError(f"{mask_url(url)}: the URL names no database")
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
        raise StorageError(f"cannot use the database {mask_url(url)}: {reason}") from None
    return engine


def create_schema(engine: Engine) -> None:
    """Create every table that is missing (idempotent) and record the schema version.

    Safe when several workers start at once: "check, then create" races, so a table created by
    another process between the two is taken as created, and the version row has a fixed key.
    """
    for attempt in range(5):
        try:
            schema.metadata.create_all(engine, checkfirst=True)
            break
        except (sa.exc.OperationalError, sa.exc.ProgrammingError) as exc:
            if "already exists" not in str(exc) or attempt == 4:
                raise
    with engine.begin() as conn:
        current = conn.execute(sa.select(schema.schema_version.c.version)).scalar()
        if current is None:
            try:
                with conn.begin_nested():
                    conn.execute(schema.schema_version.insert().values(id=1, version=schema.SCHEMA_VERSION))
            except sa.exc.IntegrityError:
                pass  # another worker recorded it a moment ago
        elif current < schema.SCHEMA_VERSION:
            upgrade(conn, current)


def upgrade(conn, from_version: int) -> None:
    """Bring an older database to SCHEMA_VERSION, one step per version (none yet)."""
    conn.execute(schema.schema_version.update().values(version=schema.SCHEMA_VERSION))


def check_schema_version(engine: Engine) -> None:
    with engine.connect() as conn:
        version = conn.execute(sa.select(schema.schema_version.c.version)).scalar()
    if version is None:
        raise StorageError("the database has no schema yet; run `cnkispider init-db`")
    if version > schema.SCHEMA_VERSION:
        raise StorageError(
            f"the database has schema version {version}, newer than this cnkispider "
            f"({schema.SCHEMA_VERSION}); update cnkispider"
        )


def db_now(conn) -> dt.datetime:
    """The database server's clock (UTC, whole seconds): the one clock all workers share."""
    if conn.dialect.name == "sqlite":
        raw = conn.exec_driver_sql("SELECT CURRENT_TIMESTAMP").scalar()
        return dt.datetime.fromisoformat(raw)
    return conn.exec_driver_sql("SELECT UTC_TIMESTAMP()").scalar()
