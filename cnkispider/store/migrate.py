"""Creating, upgrading and checking the tables of a database (their SQL is :mod:`cnkispider.store.schema`).

:func:`create_schema` creates every missing table (``CREATE TABLE IF NOT EXISTS``), widens the
text columns an older cnkispider made narrower, upgrades an older schema version a step at a
time and records the version; several workers starting at once take turns under a named lock.
A change the database account may not make is a :class:`~cnkispider.store.rights.RightsError` that
sends the worker to its administrator (``cnkispider init-db``). :func:`check_schema_version`
refuses a database newer than this cnkispider. :func:`cnkispider.store.db.open_database` calls both.
"""

from __future__ import annotations

import contextlib
import logging

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from cnkispider.exceptions import StorageError
from cnkispider.store import schema
from cnkispider.words.i18n import _

# the database's log, as before this module left cnkispider/store/db.py (the log lines keep their name)
logger = logging.getLogger("cnkispider.db")


SCHEMA_LOCK_SECONDS = 120  # creating the tables takes a second or two; an upgrade longer


def create_schema(engine: Engine) -> None:
    """Create every table that is missing (idempotent) and record the schema version.

    Safe when several workers start at once: on MySQL/MariaDB they take turns under a named
    lock (``GET_LOCK``, which needs no right), because "check, then create" races and two
    processes creating the same tables collide on table after table (a worker of
    `run --processes 2` once gave up with "Table 'audit' already exists"). SQLite serialises
    writers itself; there a table created by another process between check and create is
    taken as created, and the version row has a fixed key.

    A database at the current version with every table is left alone: no DDL is sent (a
    worker's account has row rights only, and MySQL checks the CREATE right even for a table
    that exists). Anything to create or upgrade that the account may not do is a
    :class:`~cnkispider.store.rights.RightsError` telling the worker to ask the administrator.
    """
    with _schema_lock(engine):
        _create_and_upgrade(engine)


@contextlib.contextmanager
def _schema_lock(engine: Engine):
    """One process at a time creates or upgrades the tables of one MySQL database."""
    if engine.dialect.name != "mysql":
        yield
        return
    with engine.connect() as conn:
        name = f"cnkispider.schema.{conn.exec_driver_sql('SELECT DATABASE()').scalar()}"[:64]
        got = conn.exec_driver_sql("SELECT GET_LOCK(%s, %s)", (name, SCHEMA_LOCK_SECONDS)).scalar()
        if got != 1:
            raise StorageError(
                _(
                    "another process has been creating the tables for over %(seconds)s s "
                    "(lock %(lock)r held): is a %(command)s stuck?"
                )
                % {
                    "seconds": SCHEMA_LOCK_SECONDS,
                    "lock": name,
                    "command": "`cnkispider init-db`",
                }
            )
        try:
            yield
        finally:
            conn.exec_driver_sql("SELECT RELEASE_LOCK(%s)", (name,))


def _create_and_upgrade(engine: Engine) -> None:
    try:
        for attempt in range(5):
            if not _missing_tables(engine):
                break  # one query, where create_all asks for each table: seconds on a slow line
            try:
                schema.metadata.create_all(engine, checkfirst=True)
                break
            except (sa.exc.OperationalError, sa.exc.ProgrammingError) as exc:
                if "already exists" not in str(exc) or attempt == 4:
                    raise
    except sa.exc.DBAPIError as exc:
        _refused(engine, exc, _("the database lacks tables of this cnkispider"))
    with engine.begin() as conn:
        current = conn.execute(sa.select(schema.schema_version.c.version)).scalar()
    try:
        widen_columns(engine)
        with engine.begin() as conn:
            if current is None:
                try:
                    with conn.begin_nested():
                        conn.execute(
                            schema.schema_version.insert().values(
                                id=1, version=schema.SCHEMA_VERSION
                            )
                        )
                except sa.exc.IntegrityError:
                    pass  # another worker recorded it a moment ago
            elif current < schema.SCHEMA_VERSION:
                upgrade(conn, current)
    except sa.exc.DBAPIError as exc:
        _refused(
            engine,
            exc,
            _("the database has schema version %(version)s, older than this cnkispider's %(ours)s")
            % {"version": current, "ours": schema.SCHEMA_VERSION}
            if current
            else _("the database has no schema version yet"),
        )


def _missing_tables(engine: Engine) -> bool:
    present = set(sa.inspect(engine).get_table_names())
    return any(table.name not in present for table in schema.metadata.sorted_tables)


def _refused(engine: Engine, exc: BaseException, state: str) -> None:
    """Raise a RightsError for a schema change the account may not make; re-raise the rest.
    ``state``: what is to change, a clause in the operator's language (``_()``)."""
    from cnkispider.store.rights import RightsError, database_account, database_denial

    words = database_denial(exc)
    if words is None:
        raise exc
    raise RightsError(
        _(
            "%(state)s, and the database account %(account)s may not change tables "
            "(the server said: %(words)s); ask the administrator to run %(command)s with "
            "their config.ini, which creates and upgrades the tables (docs/WORKERS.md)"
        )
        % {
            "state": state,
            "account": database_account(engine),
            "words": words,
            "command": "`cnkispider init-db`",
        }
    ) from None


def upgrade(conn, from_version: int) -> None:
    """Bring an older database to SCHEMA_VERSION, one step per version (schema.UPGRADES)."""
    for version in range(from_version + 1, schema.SCHEMA_VERSION + 1):
        for table, name in schema.UPGRADES.get(version, []):
            present = {c["name"] for c in sa.inspect(conn).get_columns(table.name)}
            if name in present:
                continue  # another worker added it a moment ago
            column = table.c[name]
            kind = column.type.compile(dialect=conn.dialect)
            quote = conn.dialect.identifier_preparer.quote
            conn.exec_driver_sql(f"ALTER TABLE {quote(table.name)} ADD COLUMN {quote(name)} {kind}")
        if version in schema.UPGRADE_FILLS:
            schema.UPGRADE_FILLS[version](conn)
        logger.info("database schema upgraded to version %s", version)
    conn.execute(schema.schema_version.update().values(version=schema.SCHEMA_VERSION))


# Capacity in bytes of the MySQL column types we use, to tell a narrower column from a wider one.
_TEXT_BYTES = {"tinytext": 255, "text": 65_535, "mediumtext": 16_777_215, "longtext": 4_294_967_295}


def _capacity(data_type: str, length: int | None) -> int:
    data_type = data_type.lower()
    if data_type in _TEXT_BYTES:
        return _TEXT_BYTES[data_type]
    return (length or 0) * 4  # (var)char(n) of utf8mb4: n characters of up to 4 bytes


def widen_columns(engine: Engine) -> list[str]:
    """Widen the text columns of a database created by an older cnkispider to what the schema
    now declares (document titles VARCHAR(500) -> TEXT, people lists TEXT -> MEDIUMTEXT,
    errorLink's keys); return the columns changed. Idempotent and version-independent: it
    compares the live columns with schema.py, so it runs at every start (one query when nothing
    is to do) and never narrows anything. SQLite does not enforce lengths: nothing to do there.
    """
    if engine.dialect.name != "mysql":
        return []
    wanted = {}
    for table in (*schema.documents.values(), schema.error_link):
        for column in table.columns:
            if (
                isinstance(column.type, (sa.String, sa.Text))
                or column.type.__class__.__name__ == "MEDIUMTEXT"
            ):
                wanted[(table.name, column.name)] = column
    changed = []
    with engine.begin() as conn:
        live = conn.execute(
            sa.text(
                "SELECT TABLE_NAME, COLUMN_NAME, DATA_TYPE, CHARACTER_MAXIMUM_LENGTH "
                "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()"
            )
        ).all()
        quote = conn.dialect.identifier_preparer.quote_identifier
        for table_name, column_name, data_type, length in live:
            column = wanted.get((table_name, column_name))
            if column is None:
                continue
            target = column.type.compile(dialect=conn.dialect)
            wanted_bytes = _capacity(target.split("(")[0], getattr(column.type, "length", None))
            if wanted_bytes <= _capacity(data_type, length):
                continue
            null = "NULL" if column.nullable else "NOT NULL"
            conn.exec_driver_sql(
                f"ALTER TABLE {quote(table_name)} MODIFY {quote(column_name)} {target} {null}"
            )
            changed.append(f"{table_name}.{column_name} {data_type} -> {target}")
    if changed:
        logger.info("widened columns: %s", "; ".join(changed))
    return changed


def check_schema_version(engine: Engine) -> None:
    with engine.connect() as conn:
        version = conn.execute(sa.select(schema.schema_version.c.version)).scalar()
    if version is None:
        raise StorageError(
            _("the database has no schema yet; run %(command)s")
            % {"command": "`cnkispider init-db`"}
        )
    if version > schema.SCHEMA_VERSION:
        raise StorageError(
            _(
                "the database has schema version %(version)s, newer than this cnkispider "
                "(%(ours)s); update cnkispider"
            )
            % {"version": version, "ours": schema.SCHEMA_VERSION}
        )
