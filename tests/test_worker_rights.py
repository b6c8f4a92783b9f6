"""A worker with row rights only (issue 29): `cnkispider admin grant-worker` makes a real MariaDB
account and a real Redis ACL user; a crawl holding only those rights equals the truth, and a
worker whose rights fall short names the right and the account and exits 2."""

from __future__ import annotations

import dataclasses
import uuid

import pymysql
import pytest
import redis
import sqlalchemy as sa

from cnkispider.store.schema import round_
from tests.fixtures.crawl_harness import CrawlSetup, compare
from tests.fixtures.worker_accounts import grant

pytestmark = pytest.mark.slow  # every test runs the command line or a worker in a subprocess


def _admin_setup(tmp_path, site, mysql_url, **kw) -> CrawlSetup:
    admin = CrawlSetup(
        tmp_path / "admin",
        site,
        mysql_url,
        "paper",
        "2024-01-01",
        "2024-01-02",
        "TP3,F0",
        crawl={"log_file": "", "concurrent_requests": 4},
        **kw,
    )
    admin.tmp_path.mkdir(parents=True, exist_ok=True)
    done = admin.run("init-db", timeout=120)
    assert done.returncode == 0, done.stderr
    return admin


def _as_worker(admin: CrawlSetup, account, tmp_path) -> CrawlSetup:
    folder = tmp_path / f"worker-{account.name}"
    folder.mkdir(parents=True, exist_ok=True)
    return dataclasses.replace(
        admin, tmp_path=folder, db_url=account.db_url, redis_url=account.redis_url
    )


def test_grant_worker_prints_row_rights_and_acl_line(tmp_path, mysql_url, cnki_site):
    admin = _admin_setup(tmp_path, cnki_site(seed=3), mysql_url)
    done = admin.run("admin", "grant-worker", "alice", "--password", "s3cret", timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    grants = [line for line in lines if line.startswith("GRANT ")]
    database = mysql_url.rsplit("/", 1)[1].split("?")[0]
    assert f"GRANT SELECT, UPDATE ON `{database}`.`task` TO 'alice'@'%';" in grants
    assert f"GRANT SELECT ON `{database}`.`schema_version` TO 'alice'@'%';" in grants
    assert f"GRANT SELECT, INSERT, UPDATE, DELETE ON `{database}`.`round` TO 'alice'@'%';" in grants
    assert not any("CREATE," in g or "ALTER" in g or "DROP" in g or "*.*" in g for g in grants)
    acl = next(line for line in lines if line.startswith("ACL SETUSER"))
    assert acl.split() == [
        "ACL",
        "SETUSER",
        "alice",
        "reset",
        "on",
        ">s3cret",
        "resetkeys",
        "~cnki:*",
        "resetchannels",
        "&cnki:*",
        "+@all",
        "-@dangerous",
        "-@admin",
        "-scan",
        "-randomkey",
    ]
    # printed only: no such account was made
    client = redis.Redis.from_url(admin.redis_url)
    try:
        users = [u.decode() for u in client.execute_command("ACL", "USERS")]
        assert "alice" not in users, "grant-worker without --apply created the Redis user"
    finally:
        client.close()


def test_worker_with_only_granted_rights_crawls_the_truth(tmp_path, mysql_url, cnki_site):
    site = cnki_site(seed=29, latency="0.005-0.02")
    admin = _admin_setup(tmp_path, site, mysql_url)
    account, _ = grant(admin.config_path, mysql_url, admin.redis_url, "--add-tasks")
    try:
        worker = _as_worker(admin, account, tmp_path)
        # the rights really are this narrow: INFO, CONFIG, FLUSHALL, other prefixes, DDL refused
        client = redis.Redis.from_url(account.redis_url)
        try:
            for command in (("INFO",), ("CONFIG", "GET", "*"), ("FLUSHALL",), ("SCAN", "0")):
                with pytest.raises(redis.exceptions.NoPermissionError):
                    client.execute_command(*command)
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.set("other:key", "1")
        finally:
            client.close()
        url = sa.engine.make_url(account.db_url)
        conn = pymysql.connect(
            host=url.host, port=url.port, user=url.username, password=url.password
        )
        try:
            with conn.cursor() as cur, pytest.raises(pymysql.err.OperationalError) as denied:
                cur.execute(f"CREATE TABLE `{url.database}`.x (a INT)")
            assert denied.value.args[0] == 1142
        finally:
            conn.close()

        workers = [worker.spawn(), worker.spawn()]
        logs = [w.communicate(timeout=300)[0] for w in workers]
        assert [w.returncode for w in workers] == [0, 0], "\n".join(log[-3000:] for log in logs)
        assert "NOPERM" not in "".join(logs)
        assert compare(admin.stored(), admin.truth(), "paper") == {
            "missing": [],
            "extra": [],
            "differing": {},
        }
        rounds = admin.query(sa.select(round_.c.state))
        assert len(rounds) == 4 and {r.state for r in rounds} == {"done"}
    finally:
        account.drop()
        admin.cleanup_redis()


def test_worker_without_task_insert_says_so_and_exits_2(tmp_path, mysql_url, cnki_site):
    admin = _admin_setup(tmp_path, cnki_site(seed=4), mysql_url)
    account, _ = grant(admin.config_path, mysql_url, admin.redis_url)  # join only
    try:
        worker = _as_worker(admin, account, tmp_path)
        done = worker.run(timeout=120)
        assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
        line = done.stderr.strip().splitlines()[-1]
        assert f"'{account.name}'@'%'" in line and "INSERT right on table task" in line, line
        assert "grant-worker" in line
        # once the administrator added the task, the same worker joins it
        added = admin.run(
            "task",
            "add",
            admin.task,
            "--type",
            "paper",
            "--start",
            admin.start,
            "--end",
            admin.end,
            "--categories",
            admin.categories,
            timeout=120,
        )
        assert added.returncode == 0, added.stderr
        rows = admin.query(sa.text("SELECT name FROM task"))
        assert [r.name for r in rows] == [admin.task]
        joined = worker.run(timeout=250)
        output = joined.stdout + joined.stderr
        assert joined.returncode == 0, output[-3000:]
        assert f"joined task {admin.task}" in output
        assert compare(admin.stored(), admin.truth(), "paper")["missing"] == []
    finally:
        account.drop()
        admin.cleanup_redis()


def test_old_schema_tells_worker_to_ask_the_administrator(tmp_path, mysql_url, cnki_site):
    admin = _admin_setup(tmp_path, cnki_site(seed=5), mysql_url)
    account, _ = grant(admin.config_path, mysql_url, admin.redis_url, "--add-tasks")
    try:
        engine = sa.create_engine(mysql_url)
        with engine.begin() as conn:
            conn.exec_driver_sql("UPDATE schema_version SET version = version - 1")
        engine.dispose()
        worker = _as_worker(admin, account, tmp_path)
        done = worker.run(timeout=120)
        assert done.returncode == 2, done.stderr[-2000:]
        line = done.stderr.strip().splitlines()[-1]
        assert "older than this cnkispider" in line and f"'{account.name}'@'%'" in line, line
        assert "cnkispider init-db" in line
        # the administrator's init-db upgrades it; then the worker starts
        assert admin.run("init-db", timeout=120).returncode == 0
        assert worker.run("init-db", timeout=120).returncode == 0
    finally:
        account.drop()
        admin.cleanup_redis()


def test_redis_user_on_another_prefix_names_the_user_and_exits_2(tmp_path, mysql_url, cnki_site):
    admin = _admin_setup(tmp_path, cnki_site(seed=6), mysql_url)
    account, _ = grant(admin.config_path, mysql_url, admin.redis_url, "--prefix", "other:")
    try:
        done = _as_worker(admin, account, tmp_path).run(timeout=120)
        assert done.returncode == 2, done.stderr[-2000:]
        line = done.stderr.strip().splitlines()[-1]
        assert f"Redis user {account.name} " in line and "~cnki:*" in line, line
        assert "no permissions to access" in line
    finally:
        account.drop()
        admin.cleanup_redis()


def test_a_crawl_under_another_redis_prefix_keeps_every_key_under_it(
    tmp_path, mysql_url, cnki_site
):
    """[redis] prefix is the one setting of the key prefix: `admin grant-worker` takes it as
    its default, and a worker whose Redis user may touch only keys under that prefix crawls
    the truth (a key built with the hard-coded cnki: would be refused: NOPERM)."""
    prefix = f"other{uuid.uuid4().hex[:8]}:"
    site = cnki_site(seed=31, latency="0.005-0.02")
    admin = _admin_setup(tmp_path, site, mysql_url, redis={"prefix": prefix})
    account, printed = grant(admin.config_path, mysql_url, admin.redis_url, "--add-tasks")
    try:
        acl = next(line for line in printed.splitlines() if line.startswith("ACL SETUSER"))
        assert f"~{prefix}*" in acl.split() and "~cnki:*" not in acl.split(), acl
        worker = _as_worker(admin, account, tmp_path)
        done = worker.run(timeout=300)
        assert done.returncode == 0, done.stderr[-3000:] + worker.log()[-3000:]
        assert "NOPERM" not in done.stderr + worker.log()
        assert compare(admin.stored(), admin.truth(), "paper") == {
            "missing": [],
            "extra": [],
            "differing": {},
        }
        client = redis.Redis.from_url(admin.redis_url)
        try:
            assert client.exists(f"{prefix}{admin.task}:epoch")
            assert not list(client.scan_iter(match=f"cnki:{admin.task}*", count=1000))
        finally:
            client.close()
    finally:
        account.drop()
        admin.cleanup_redis()
