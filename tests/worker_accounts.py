"""Workers with least rights in tests: a real MariaDB account and a real Redis ACL user, made by
`cnkispider admin grant-worker --apply` (run as the administrator: the test's root config.ini),
with unique names on the shared servers, dropped afterwards.

``worker_config(setup, account)`` writes a config.ini for a worker holding only those rights
(same task, same stand-in), beside the administrator's one.
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pymysql
import redis
from sqlalchemy.engine import make_url

from tests import launcher

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class WorkerAccount:
    name: str
    password: str
    admin_db_url: str
    admin_redis_url: str
    admin_connect: dict | None = None  # pymysql.connect kwargs of the administrator

    @property
    def db_url(self) -> str:
        url = make_url(self.admin_db_url)
        return url.set(username=self.name, password=self.password).render_as_string(
            hide_password=False
        )

    @property
    def redis_url(self) -> str:
        parts = urlsplit(self.admin_redis_url)
        host = f"{parts.hostname}:{parts.port}" if parts.port else parts.hostname
        return urlunsplit(parts._replace(netloc=f"{self.name}:{self.password}@{host}"))

    def drop(self) -> None:
        url = make_url(self.admin_db_url)
        connect = self.admin_connect or {
            "host": url.host,
            "port": url.port or 3306,
            "user": url.username or "root",
            "password": url.password or "",
        }
        with contextlib.closing(pymysql.connect(**connect)) as conn, conn.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{self.name}'@'%'")
        client = redis.Redis.from_url(self.admin_redis_url)
        try:
            client.execute_command("ACL", "DELUSER", self.name)
        finally:
            client.close()


def grant(
    config_path: Path, admin_db_url: str, admin_redis_url: str, *extra: str
) -> tuple[WorkerAccount, str]:
    """Run `cnkispider admin grant-worker NAME --apply` with the administrator's config.ini;
    the account and what the command printed."""
    name = f"w{uuid.uuid4().hex[:10]}"
    password = uuid.uuid4().hex
    done = launcher.run(
        [
            sys.executable,
            "-m",
            "cnkispider.cli",
            "--config",
            str(config_path),
            "admin",
            "grant-worker",
            name,
            "--password",
            password,
            "--apply",
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    account = WorkerAccount(name, password, admin_db_url, admin_redis_url)
    assert done.returncode == 0, done.stderr[-3000:]
    return account, done.stdout
