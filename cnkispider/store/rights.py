"""A worker's rights on the shared MySQL/MariaDB and Redis, checked before it crawls.

A worker on a home PC holds an account that may only read and write the project's rows and the
Redis keys under the project's prefix (docs/WORKERS.md; ``cnkispider admin grant-worker`` writes
the grants). When such an account falls short of what a crawl needs, the worker says which right
it lacks, for which account, and stops with exit status 2 (:class:`RightsError` is a
``CnkiSpiderError``), instead of failing half-way through a round.

- Database: each right is tried with a statement that touches no row (``SELECT ... LIMIT 0``,
  ``UPDATE ... WHERE 1=0`` ...): MySQL checks the right when it prepares the statement, so the
  server's own refusal (error 1142, naming the command, the account and the table) is the answer.
  Nothing is written; SQLite has no accounts and is not checked.
- Redis: the commands a worker sends (strings, hashes, sorted sets, bitfields, scripts) are tried
  on one probe key under the prefix, inside a script as the crawl's scripts run them. Redis 7
  checks every key a script touches against the user's key patterns when the script calls it,
  so the probe sees what the crawl would.
"""

from __future__ import annotations

import secrets

from cnkispider import default_settings
from cnkispider.exceptions import CnkiSpiderError
from cnkispider.words.i18n import N_, _

#: MySQL/MariaDB error codes that say "this account may not", not "this statement is wrong".
DENIED_MYSQL_ERRORS = frozenset(
    {
        1044,  # access denied for user to database
        1142,  # <command> command denied to user for table
        1143,  # <command> command denied to user for column
        1227,  # access denied; you need (at least one of) the ... privilege(s)
        1370,  # execute command denied for routine
    }
)

#: The default key prefix of every key the crawler writes in Redis (tasks' queues, the shared
#: pace, the session pool), and the channel prefix of anything it publishes: ``[redis] prefix``
#: (:attr:`cnkispider.config.Config.redis_prefix`) is the one a crawl uses.
KEY_PREFIX = default_settings.REDIS_KEY_PREFIX

#: What a worker without a right does (translated where shown: ``_(ASK_ADMIN)``).
ASK_ADMIN = N_(
    "ask the administrator of the shared servers to grant it (cnkispider admin grant-worker "
    "NAME prints the grants; docs/WORKERS.md)"
)


class RightsError(CnkiSpiderError):
    """The worker's account lacks a right the crawl needs; the message names both."""


def database_denial(exc: BaseException) -> str | None:
    """The server's words when ``exc`` is a refusal for lack of a right, else None."""
    orig = getattr(exc, "orig", None) or exc
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int) and args[0] in DENIED_MYSQL_ERRORS:
        return str(args[1]) if len(args) > 1 else str(orig)
    return None


def redis_denial(exc: BaseException) -> str | None:
    """Redis's words when ``exc`` is an ACL refusal (NOPERM, or a script's command refused a
    key: Redis 7 answers that one without the NOPERM code), else None."""
    import redis

    words = str(exc)
    if (
        isinstance(exc, redis.exceptions.NoPermissionError)
        or "NOPERM" in words
        or "can't access at least one of the keys" in words
    ):
        return str(exc)
    return None


def database_account(engine) -> str:
    """The account the engine connects as, as the server names it (``'user'@'host'``)."""
    if engine.dialect.name == "sqlite":
        return "sqlite"
    with engine.connect() as conn:
        user = conn.exec_driver_sql("SELECT CURRENT_USER()").scalar() or "?"
    name, _, host = user.partition("@")
    return f"'{name}'@'{host}'"


def check_database(engine, tables, *, adding_task: bool = False) -> None:
    """Raise :class:`RightsError` unless the engine's account may SELECT, INSERT, UPDATE and
    DELETE in every table of ``tables`` (the task table: SELECT and UPDATE, and INSERT when
    ``adding_task``: an administrator may keep workers from adding tasks; schema_version:
    SELECT)."""
    if engine.dialect.name == "sqlite":
        return
    import sqlalchemy as sa

    with engine.connect() as conn:
        shown = _shown_rights(conn)
        for table in tables:
            key = next(iter(table.primary_key.columns))
            never = sa.false()  # each probe matches no row: the right is checked, nothing written
            probes = {
                "SELECT": sa.select(key).limit(0),
                "UPDATE": table.update().where(never).values({key: key}),
                "INSERT": table.insert().from_select(
                    list(table.columns), sa.select(*table.columns).where(never)
                ),
                "DELETE": table.delete().where(never),
            }
            if table.name == "schema_version":  # the administrator's (init-db)
                probes = {"SELECT": probes["SELECT"]}
            if table.name == "task":
                probes.pop("DELETE")
                if not adding_task:
                    probes.pop("INSERT")
            for right, statement in probes.items():
                if right in shown.get(table.name, ()) or right in shown.get("*", ()):
                    continue
                transaction = conn.begin()
                try:
                    conn.execute(statement)
                except sa.exc.DBAPIError as exc:
                    words = database_denial(exc)
                    if words is None:
                        raise
                    if table.name == "task" and right == "INSERT":
                        needs = _(
                            "the database account %(account)s lacks the %(right)s right on "
                            "table %(table)s, which a worker needs to add the task of its "
                            "config.ini (the server said: %(words)s); %(ask)s"
                        )
                    else:
                        needs = _(
                            "the database account %(account)s lacks the %(right)s right on "
                            "table %(table)s, which a worker needs to crawl (the server said: "
                            "%(words)s); %(ask)s"
                        )
                    raise RightsError(
                        needs
                        % {
                            "account": database_account(engine),
                            "right": right,
                            "table": table.name,
                            "words": words,
                            "ask": _(ASK_ADMIN),
                        }
                    ) from None
                finally:
                    transaction.rollback()


def _shown_rights(conn) -> dict[str, set[str]]:
    """{table or "*": rights} the account's own grants show in information_schema (global, on
    this database, on its tables): three queries, where a probe per right would cost about 40
    round trips, seconds on a slow line. A right not shown there (granted through a role, or
    by a pattern) is probed; so is every right if the tables cannot be read."""
    import sqlalchemy as sa

    try:
        user = conn.exec_driver_sql("SELECT CURRENT_USER()").scalar() or ""
        name, _, host = user.rpartition("@")
        grantee = {"g": f"'{name}'@'{host}'"}
        shown: dict[str, set[str]] = {"*": set()}
        for query in (
            "SELECT '*', PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = :g",
            "SELECT '*', PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES "
            "WHERE GRANTEE = :g AND TABLE_SCHEMA = DATABASE()",
            "SELECT TABLE_NAME, PRIVILEGE_TYPE FROM information_schema.TABLE_PRIVILEGES "
            "WHERE GRANTEE = :g AND TABLE_SCHEMA = DATABASE()",
        ):
            for table, right in conn.execute(sa.text(query), grantee):
                shown.setdefault(table, set()).add(right)
        conn.rollback()
        return shown
    except sa.exc.DBAPIError:
        conn.rollback()
        return {}


#: Each command a worker's crawl sends, tried in a script on the probe key (as the crawl's own
#: scripts run them). Order: cheapest first; the probe key is deleted at the end.
_REDIS_PROBE_LUA = r"""
local k = KEYS[1]
redis.call('SET', k, '1', 'PX', 60000)
redis.call('GET', k)
redis.call('DEL', k)
redis.call('HSET', k, 'f', '1')
redis.call('HINCRBY', k, 'f', 1)
redis.call('DEL', k)
redis.call('ZADD', k, 1, 'm')
redis.call('ZRANGEBYSCORE', k, '-inf', '+inf', 'LIMIT', 0, 1)
redis.call('DEL', k)
redis.call('BITFIELD', k, 'SET', 'u1', 0, 1)
redis.call('DEL', k)
redis.call('TIME')
return 1
"""


def redis_account(url: str) -> str:
    """The Redis user a URL logs in as ("default" without one; the embedded server's)."""
    from urllib.parse import unquote, urlsplit

    if not (url or "").strip():
        return "default (embedded Redis)"
    user = urlsplit(url).username
    return unquote(user) if user else "default"


def check_redis(client, account: str, prefix: str = KEY_PREFIX) -> None:
    """Raise :class:`RightsError` unless the Redis user may run the crawl's commands and
    scripts on keys under ``prefix``. ``account`` names the user in the message."""
    import redis

    key = f"{prefix}rights-probe:{secrets.token_hex(6)}"
    try:
        client.set(key, "1", px=60000)
        client.delete(key)
        client.eval(_REDIS_PROBE_LUA, 1, key)
    except redis.RedisError as exc:
        words = redis_denial(exc)
        if words is None:
            raise
        raise RightsError(
            _(
                "the Redis user %(account)s may not do what a worker does on keys under "
                "%(prefix)s* (Redis said: %(words)s); it needs %(rules)s; %(ask)s"
            )
            % {
                "account": account,
                "prefix": prefix,
                "words": words,
                "rules": f"~{prefix}* &{prefix}* +@all -@dangerous -@admin",
                "ask": _(ASK_ADMIN),
            }
        ) from None
