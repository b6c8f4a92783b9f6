"""MariaDB and Redis servers of a test's (or a benchmark's) own, to stop and start at will.

The fault suite (tests/test_faults.py) and the soak benchmark (bench/soak.py) break services on
purpose; they must never touch the shared 127.0.0.1:3306 and :6379 that other tests and
helpers use. These classes start private instances on free ports, in a temporary folder:

- :class:`OwnMariaDB`: ``mariadb-install-db`` into a fresh datadir, then ``mariadbd
  --no-defaults`` with its own socket and port; :meth:`stop` (SIGTERM, or SIGKILL for a crash)
  and :meth:`start` again on the same port and data, which is what an outage looks like to the
  crawler.
- :class:`OwnRedis`: ``redis-server`` on a free port, no persistence.

A test that needs the binaries and cannot find them fails with the reason (CI installs them).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pymysql
import redis

from tests.fixtures.waiting import wait_until

MARIADBD = "/usr/sbin/mariadbd"
INSTALL_DB = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def missing_binaries() -> list[str]:
    missing = []
    if not os.access(MARIADBD, os.X_OK):
        missing.append(MARIADBD)
    if INSTALL_DB is None:
        missing.append("mariadb-install-db")
    if shutil.which("redis-server") is None:
        missing.append("redis-server")
    return missing


class PortTaken(RuntimeError):
    """The port drawn for a private server answered for another one."""


class OwnMariaDB:
    """A private mariadbd: root without a password, on 127.0.0.1 and a free port."""

    #: more mariadbd options (tests/tls_services.py: its TLS certificate and key)
    extra_args: tuple[str, ...] = ()

    def __init__(self, root: Path | None = None):
        self.root = Path(root or tempfile.mkdtemp(prefix="own-mariadb-"))
        self.datadir = self.root / "data"
        self.socket = self.root / "mariadb.sock"
        self.log = self.root / "error.log"
        self.tmpdir = self.root / "tmp"
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        user = ["--user=root"] if os.geteuid() == 0 else []
        subprocess.run(
            [
                INSTALL_DB,
                "--no-defaults",
                f"--datadir={self.datadir}",
                *user,
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                # its bootstrap server too deletes every #sql* file of its tmpdir at start: in
                # /tmp, those of another suite worker's bootstrap at that moment ("Unknown table
                # 'mysql.tmp_user_sys'", 5 errors in one busy run)
                f"--tmpdir={self.tmpdir}",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        self.start_on_a_free_port()

    def start(self, timeout: float = 60.0) -> None:
        user = ["--user=root"] if os.geteuid() == 0 else []
        self.process = subprocess.Popen(
            [
                MARIADBD,
                "--no-defaults",
                f"--datadir={self.datadir}",
                f"--socket={self.socket}",
                f"--port={self.port}",
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=32M",
                "--innodb-log-file-size=16M",
                "--performance-schema=OFF",
                "--skip-log-bin",
                f"--pid-file={self.root / 'mariadb.pid'}",
                f"--log-error={self.log}",
                # Its own: at each start mariadbd deletes every #sql* file in its tmpdir (the
                # temporary tables of a crashed run), and in /tmp those were the shared server's
                # live ones (a shared-server test failed with "Error on delete of
                # '/tmp/#sql-temptable-...'" while the fault suite restarted its server).
                f"--tmpdir={self.tmpdir}",
                *user,
                *self.extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="")
            except pymysql.err.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
                    raise RuntimeError(f"mariadbd did not start:\n{tail}") from None
                time.sleep(0.1)
                continue
            with conn.cursor() as cur:
                cur.execute("SELECT @@datadir")
                datadir = Path(cur.fetchone()[0])
            conn.close()
            if datadir.resolve() != self.datadir.resolve():
                # Another test's private server answers on this port (free_port() lets a port go
                # before mariadbd binds it, and another xdist worker took it): ours could not
                # bind. Answering for it would make that test's outages ours (seen once in CI).
                self.process.wait(timeout=60)
                raise PortTaken(f"port {self.port} is another mariadbd's ({datadir})")
            return

    def start_on_a_free_port(self, attempts: int = 5) -> None:
        """The first start: on another free port while the one drawn is someone else's."""
        for _ in range(attempts - 1):
            try:
                return self.start()
            except PortTaken:
                self.port = free_port()
        self.start()

    def stop(self, crash: bool = False) -> None:
        """Shut down (SIGTERM: what a restart looks like) or crash (SIGKILL)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGKILL if crash else signal.SIGTERM)
        self.process.wait(timeout=60)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def create_database(self) -> str:
        name = f"fault_{uuid.uuid4().hex[:10]}"
        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="")
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        conn.close()
        return name

    def url(self, database: str) -> str:
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/{database}?charset=utf8mb4"

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def start_redis_server(argv: list[str], client: redis.Redis, what: str) -> subprocess.Popen:
    """Start ``redis-server`` with ``argv`` and return it once ``client`` gets an answer: fail
    when it exits first or 30 s pass (a private server of a test: a plain, TLS or lab one)."""
    process = subprocess.Popen(["redis-server", *argv], stdout=subprocess.DEVNULL)

    def answers() -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    try:
        wait_until(answers, 30, what=f"{what} answering", workers=[process])
    except BaseException:
        process.kill()
        raise
    finally:
        client.close()
    return process


class OwnRedis:
    """A private redis-server on a free port, without persistence (``password``: requirepass)."""

    def __init__(self, password: str | None = None):
        self.password = password
        self.dir = tempfile.mkdtemp(prefix="own-redis-")
        for _ in range(4):
            try:
                return self._start()
            except PortTaken:
                pass  # another test's server took the port drawn (see OwnMariaDB.start)
        self._start()

    def _start(self) -> None:
        self.port = free_port()
        password = self.password
        auth = ["--requirepass", password] if password else []
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
                *auth,
            ],
            stdout=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, password=password)
        try:
            for _ in range(200):
                try:
                    ours = client.info("server")["process_id"] == self.process.pid
                    break
                except (redis.AuthenticationError, redis.ResponseError):
                    ours = False  # another server, with another password (or none)
                    break
                except redis.ConnectionError:
                    time.sleep(0.05)
            else:
                raise RuntimeError("redis-server did not start")
        finally:
            client.close()
        if not ours:
            self.process.wait(timeout=30)
            raise PortTaken(f"port {self.port} is another redis-server's")

    @property
    def url(self) -> str:
        """The URL, with the password (if any) as ``?password=``, the form that leaked."""
        query = f"?password={self.password}" if self.password else ""
        return f"redis://127.0.0.1:{self.port}/0{query}"

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)
