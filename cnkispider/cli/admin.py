"""`cnkispider admin grant-worker`: a worker's database account and Redis user with row
rights only (cnkispider/store/admin.py; docs/WORKERS.md)."""

from __future__ import annotations

from cnkispider.cli.common import add_command
from cnkispider.config import Config
from cnkispider.words.i18n import _


def cmd_admin(config: Config, args) -> int:
    """`admin grant-worker`: print (or with --apply run) a worker's grants (docs/WORKERS.md)."""
    from cnkispider.store.admin import grant_worker

    return grant_worker(config, args)


def add_admin(sub) -> None:
    """`admin ACTION`."""
    admin = add_command(sub, "admin", help=_("the administrator's tools: grant-worker"))
    actions = admin.add_subparsers(dest="action", required=True)
    grant = actions.add_parser(
        "grant-worker",
        help=_(
            "print (or --apply) the SQL and the Redis ACL line for a worker with row rights only"
        ),
    )
    grant.add_argument("name", help=_("the worker's account name (database account, Redis user)"))
    grant.add_argument("--password", help=_("its password (default: a new random one)"))
    grant.add_argument("--host", default="%", help=_("hosts it connects from (default: %%, any)"))
    grant.add_argument(
        "--prefix",
        default=None,
        help=_("Redis key and channel prefix (default: [redis] prefix of config.ini, cnki:)"),
    )
    grant.add_argument(
        "--add-tasks",
        action="store_true",
        help=_("let it add the task of its config.ini (INSERT on table task; default: join only)"),
    )
    grant.add_argument(
        "--require-tls", action="store_true", help=_("the database account must connect over TLS")
    )
    grant.add_argument(
        "--apply",
        action="store_true",
        help=_(
            "run them with the database and Redis accounts of this config.ini (an administrator's)"
        ),
    )
    admin.set_defaults(func=cmd_admin)
