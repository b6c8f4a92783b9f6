"""The administrator's grants for a worker: a MySQL/MariaDB account and a Redis ACL user.

``cnkispider admin grant-worker NAME`` prints them (``--apply`` runs them with the
administrator's config.ini). A worker holding only these rights crawls and joins tasks, and adds
the task of its config.ini only with ``--add-tasks`` (docs/WORKERS.md):

- MySQL/MariaDB: SELECT, INSERT, UPDATE, DELETE on each of the project's tables (schema.py), by
  name, in the project's database; on the task table SELECT and UPDATE (and INSERT with
  ``--add-tasks``): no DDL, no other database, no DELETE of a task.
- Redis: keys and channels under the prefix (``[redis] prefix``, ``cnki:``), every command but the @dangerous and
  @admin ones (FLUSHALL, CONFIG, INFO, KEYS, DEBUG, ...), and not SCAN or RANDOMKEY either,
  which would list the names of other prefixes' keys.

Grants are idempotent (CREATE USER IF NOT EXISTS, GRANT, ACL SETUSER with reset): run again
after an upgrade that adds a table.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from cnkispider.exceptions import InputError
from cnkispider.store import schema
from cnkispider.store.rights import KEY_PREFIX
from cnkispider.words.i18n import _

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}$")
_PREFIX = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


@dataclass(frozen=True)
class WorkerGrant:
    name: str
    password: str
    database: str
    host: str = "%"
    prefix: str = KEY_PREFIX
    add_tasks: bool = False
    require_tls: bool = False

    def __post_init__(self):
        if not _NAME.match(self.name):
            raise InputError(
                _(
                    "worker name %(name)r: expected 1-32 letters, digits, _ . - "
                    "(it is the database account and the Redis user)"
                )
                % {"name": self.name}
            )
        if not _PREFIX.match(self.prefix) or self.prefix.endswith("*"):
            raise InputError(
                _("key prefix %(prefix)r: expected letters, digits, _ . : -")
                % {"prefix": self.prefix}
            )
        if not self.database:
            raise InputError(_("the database URL of config.ini names no database"))
        if any(c in self.password for c in "'\\ \t\r\n>"):
            raise InputError(_("password: no quotes, backslashes, spaces or '>'"))
        if "'" in self.host or "\\" in self.host:
            raise InputError(_("host %(host)r: no quotes or backslashes") % {"host": self.host})

    @property
    def account(self) -> str:
        return f"'{self.name}'@'{self.host}'"

    def table_rights(self) -> list[tuple[str, str]]:
        """(table, rights) for every table of the project."""
        rows = []
        for table in schema.metadata.sorted_tables:
            if table.name == "task":
                rights = "SELECT, INSERT, UPDATE" if self.add_tasks else "SELECT, UPDATE"
            elif table.name == "schema_version":
                rights = "SELECT"  # the version is the administrator's (init-db)
            else:
                rights = "SELECT, INSERT, UPDATE, DELETE"
            rows.append((table.name, rights))
        return rows

    def sql(self) -> list[str]:
        """The statements, in order, for the administrator's MySQL/MariaDB account."""
        db = self.database.replace("`", "``")
        statements = [
            f"CREATE USER IF NOT EXISTS {self.account} IDENTIFIED BY '{self.password}'",
            # again for an account that existed: the password printed is the one that holds
            f"ALTER USER {self.account} IDENTIFIED BY '{self.password}'"
            + (" REQUIRE SSL" if self.require_tls else ""),
            # rights granted before (a task table with INSERT, a table since dropped) go first
            f"REVOKE ALL PRIVILEGES, GRANT OPTION FROM {self.account}",
        ]
        for table, rights in self.table_rights():
            statements.append(f"GRANT {rights} ON `{db}`.`{table}` TO {self.account}")
        return statements

    def acl_rules(self) -> list[str]:
        return [
            "on",
            f">{self.password}",
            "resetkeys",
            f"~{self.prefix}*",
            "resetchannels",
            f"&{self.prefix}*",
            "+@all",
            "-@dangerous",
            "-@admin",
            "-scan",
            "-randomkey",
        ]

    def acl_line(self) -> str:
        """The Redis command that creates (or resets) the worker's user."""
        return f"ACL SETUSER {self.name} reset " + " ".join(self.acl_rules())


def new_password() -> str:
    return secrets.token_urlsafe(18).replace("-", "x").replace("_", "y")


def apply(grant: WorkerGrant, engine, redis_client) -> None:
    """Run the grant with the administrator's accounts (the engine's and the Redis client's)."""
    if engine.dialect.name != "sqlite":
        with engine.begin() as conn:
            for statement in grant.sql():
                conn.exec_driver_sql(statement.replace("%", "%%"))
    if redis_client is not None:
        redis_client.execute_command("ACL", "SETUSER", grant.name, "reset", *grant.acl_rules())


def grant_worker(config, args) -> int:
    """The command: print the grants and a worker's config.ini lines; with ``--apply``, run them."""

    from sqlalchemy.engine import make_url

    from cnkispider.store.db import open_database
    from cnkispider.store.redisconn import connect

    url = make_url(config.database_url)
    if url.get_backend_name() == "sqlite":
        # a SQLite file has no accounts to grant and no worker on another machine reaches it:
        # refused, rather than print a URL no driver reads and statements for another database
        raise InputError(
            _(
                "admin grant-worker: the database is SQLite (%(file)s), which has no accounts "
                "and serves this machine only; workers on other machines need MySQL/MariaDB "
                "([database] url = mysql+pymysql://..., docs/WORKERS.md)"
            )
            % {"file": url.database or "-"}
        )
    grant = WorkerGrant(
        name=args.name,
        password=args.password or new_password(),
        database=url.database or "",
        host=args.host,
        prefix=args.prefix or config.redis_prefix,
        add_tasks=args.add_tasks,
        require_tls=args.require_tls,
    )
    print(_("-- MySQL/MariaDB, as the administrator (for example: mysql -u root -p)"))
    for statement in grant.sql():
        print(f"{statement};")
    print()
    print(_("# Redis, as the administrator (redis-cli; add it to the ACL file or run ACL SAVE)"))
    print(grant.acl_line())
    worker_db = url.set(username=grant.name, password=grant.password)
    print()
    print(_("# the worker's config.ini (its TLS keys as in docs/WORKERS.md)"))
    print(f"[database]\nurl = {worker_db.render_as_string(hide_password=False)}")
    print(f"[redis]\nurl = {_worker_redis_url(config.redis_url, grant)}")
    if not args.apply:
        return 0
    engine = open_database(config.database_url)
    client = connect(config.redis_url, config.data_dir, check_policy=False)
    try:
        apply(grant, engine, client)
    finally:
        engine.dispose()
        client.close()
    print()
    print(
        _("applied: database account %(account)s and Redis user %(user)s")
        % {"account": grant.account, "user": grant.name}
    )
    return 0


def _worker_redis_url(admin_url: str, grant: WorkerGrant) -> str:
    from urllib.parse import urlsplit, urlunsplit

    if not admin_url:
        return _("(the embedded Redis has no users: give the shared Redis's URL)")
    parts = urlsplit(admin_url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{grant.name}:{grant.password}@{host}{port}"))
