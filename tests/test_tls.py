"""TLS to MariaDB and Redis (issue 29): real private servers that speak TLS, with certificates
the test makes; a worker holding only a worker's rights crawls over TLS and equals the truth.
config.ini's TLS keys are checked: a wrong one names the file, the section and the key."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pymysql
import pytest
import sqlalchemy as sa
from redis.connection import parse_url

from cnkispider.config import load_config
from cnkispider.exceptions import ConfigError
from cnkispider.store.db import make_engine
from cnkispider.store.schema import round_
from tests.fixtures.crawl_harness import CrawlSetup, compare
from tests.fixtures.worker_accounts import grant


@dataclasses.dataclass
class TlsSetup(CrawlSetup):
    """A CrawlSetup whose config.ini also holds [database] and [redis] TLS keys."""

    tls: dict = dataclasses.field(default_factory=dict)

    def write(self) -> Path:
        path = super().write()
        text = path.read_text(encoding="utf-8")
        for section, keys in self.tls.items():
            lines = "".join(f"{k} = {v}\n" for k, v in keys.items())
            text = text.replace(f"[{section}]\n", f"[{section}]\n{lines}", 1)
        path.write_text(text, encoding="utf-8")
        return path


def _tls_keys(certs) -> dict:
    files = {"ssl_ca": certs.ca, "ssl_cert": certs.client_cert, "ssl_key": certs.client_key}
    return {"database": files, "redis": files}


def test_worker_crawls_over_tls_with_row_rights_only(tmp_path, tls_servers, cnki_site):
    certs, mariadb, server = tls_servers
    database = mariadb.create_database()
    admin_db = mariadb.url(database)
    site = cnki_site(seed=31, latency="0.005-0.02")
    admin = TlsSetup(
        tmp_path / "admin",
        site,
        admin_db,
        "paper",
        "2024-01-01",
        "2024-01-02",
        "TP3,F0",
        redis_url=server.admin_url(),  # the TLS files in the URL's query: the other way
        crawl={"log_file": "", "concurrent_requests": 4},
    )
    admin.tmp_path.mkdir(parents=True)
    assert admin.run("init-db", timeout=120).returncode == 0
    account, printed = grant(
        admin.config_path, admin_db, server.admin_url(), "--add-tasks", "--require-tls"
    )
    assert "REQUIRE SSL" in printed
    try:
        # the account may not log in without TLS (pymysql would try TLS unasked: disable it)
        with pytest.raises(pymysql.err.OperationalError) as refused:
            pymysql.connect(
                host="127.0.0.1",
                port=mariadb.port,
                user=account.name,
                password=account.password,
                ssl_disabled=True,
            )
        assert refused.value.args[0] == 1045
        worker_folder = tmp_path / "worker"
        worker_folder.mkdir()
        worker = dataclasses.replace(
            admin,
            tmp_path=worker_folder,
            db_url=account.db_url,
            redis_url=f"rediss://{account.name}:{account.password}@127.0.0.1:{server.port}/0",
            tls=_tls_keys(certs),
        )
        worker.write()
        config = load_config(worker.config_path)
        engine = sa.create_engine(config.database_url)
        with engine.connect() as conn:
            cipher = conn.exec_driver_sql("SHOW STATUS LIKE 'Ssl_cipher'").one()[1]
        engine.dispose()
        assert cipher, "the worker's database connection is not encrypted"
        # The crawler's engines: with no TLS option (the administrator's URL) pymysql's
        # preferred mode still encrypts, through one context per process (cnkispider/store/db.py);
        # with TLS options (the worker's) each connection reads its files anew.
        for url, shared in ((admin_db, True), (config.database_url, False)):
            engine = make_engine(url)
            first, second = engine.connect(), engine.connect()
            ciphers = [
                c.exec_driver_sql("SHOW STATUS LIKE 'Ssl_cipher'").one()[1] for c in (first, second)
            ]
            contexts = [c.connection.dbapi_connection.ctx for c in (first, second)]
            assert all(ciphers), (url, ciphers)
            assert (contexts[0] is contexts[1]) is shared, url
            first.close(), second.close()
            engine.dispose()

        workers = [worker.spawn(), worker.spawn()]
        logs = [w.communicate(timeout=300)[0] for w in workers]
        assert [w.returncode for w in workers] == [0, 0], "\n".join(log[-3000:] for log in logs)
        assert compare(admin.stored(), admin.truth(), "paper") == {
            "missing": [],
            "extra": [],
            "differing": {},
        }
        rounds = admin.query(sa.select(round_.c.state))
        assert len(rounds) == 4 and {r.state for r in rounds} == {"done"}
    finally:
        account.drop()


def test_worker_without_the_ca_is_refused_with_one_line(tmp_path, tls_servers, cnki_site):
    certs, mariadb, server = tls_servers
    setup = TlsSetup(
        tmp_path,
        cnki_site(seed=32),
        mariadb.url(mariadb.create_database()),
        "paper",
        "2024-01-01",
        "2024-01-01",
        "TP3",
        redis_url=server.url,
        crawl={"log_file": ""},
        tls={"database": {"ssl_ca": certs.ca}},
    )
    done = setup.run(timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    line = done.stderr.strip().splitlines()[-1]
    assert f"rediss://127.0.0.1:{server.port}/0" in line and "not reachable" in line, line
    # with the CA and the client certificate it gets past Redis
    setup.tls["redis"] = {
        "ssl_ca": certs.ca,
        "ssl_cert": certs.client_cert,
        "ssl_key": certs.client_key,
    }
    done = setup.run("init-db", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def _ini(tmp_path, text: str) -> Path:
    path = tmp_path / "config.ini"
    path.write_text(text, encoding="utf-8")
    return path


def test_tls_keys_are_checked_and_name_file_section_key(tmp_path):
    (tmp_path / "ca.pem").write_text("x")
    (tmp_path / "client.pem").write_text("x")
    cases = [
        (
            "[database]\nurl = mysql+pymysql://w:p@db:3306/cnki\nssl_ca = missing.pem\n",
            "[database] ssl_ca: no such file: " + str(tmp_path / "missing.pem"),
        ),
        (
            "[database]\nurl = sqlite:///x.db\nssl_ca = ca.pem\n",
            "[database] ssl_ca: TLS is for a MySQL/MariaDB server",
        ),
        (
            "[redis]\nurl = redis://r:6379/0\nssl_ca = ca.pem\n",
            "[redis] ssl_ca: TLS needs a rediss:// URL",
        ),
        (
            "[redis]\nurl = rediss://r:6379/0\nssl_cert = client.pem\n",
            "[redis] ssl_key: is empty but ssl_cert is set",
        ),
        ("[redis]\nssl_cafile = ca.pem\n", "[redis] ssl_cafile: unknown key"),
    ]
    for text, expected in cases:
        path = _ini(tmp_path, text)
        with pytest.raises(ConfigError) as error:
            load_config(path, environ={})
        assert str(error.value).startswith(f"{path}: "), str(error.value)
        assert expected in str(error.value), (text, str(error.value))


def test_tls_keys_reach_the_urls_relative_to_config_ini(tmp_path):
    for name in ("ca.pem", "client.pem", "client.key"):
        (tmp_path / name).write_text("x")
    path = _ini(
        tmp_path,
        "[database]\nurl = mysql+pymysql://w:p@db:3306/cnki\nssl_ca = ca.pem\n"
        "[redis]\nurl = rediss://w:p@r:6380/0\nssl_ca = ca.pem\nssl_cert = client.pem\n"
        "ssl_key = client.key\n",
    )
    config = load_config(path, environ={})
    db = sa.engine.make_url(config.database_url)
    assert db.query["ssl_ca"] == str(tmp_path / "ca.pem")
    redis_options = parse_url(config.redis_url)
    assert redis_options["ssl_ca_certs"] == str(tmp_path / "ca.pem")
    assert redis_options["ssl_certfile"] == str(tmp_path / "client.pem")
    assert redis_options["ssl_keyfile"] == str(tmp_path / "client.key")
    assert (redis_options["username"], redis_options["host"], redis_options["port"]) == (
        "w",
        "r",
        6380,
    )
