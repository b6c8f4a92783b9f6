"""Private servers that speak TLS only, with certificates the test makes (openssl).

- :func:`make_certificates`: a CA, a server certificate for 127.0.0.1 (and localhost) and a
  client certificate, all signed by that CA, in PEM files of a folder.
- :class:`TlsMariaDB`: a private mariadbd (tests/fault_services.py) with ``--ssl-ca``,
  ``--ssl-cert``, ``--ssl-key``; accounts made with ``REQUIRE SSL`` cannot log in without TLS.
- :class:`TlsRedis`: a private redis-server listening on a TLS port only (``--port 0``),
  ``--tls-auth-clients yes``: a client needs the CA and a client certificate.
- the fixture ``tls_servers`` (a pytest plugin of tests/conftest.py): the certificates, a
  :class:`TlsMariaDB` and a :class:`TlsRedis`, stopped after the test.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.fault_services import OwnMariaDB, free_port, start_redis_server


@dataclass(frozen=True)
class Certificates:
    folder: Path

    ca = property(lambda self: self.folder / "ca.pem")
    server_cert = property(lambda self: self.folder / "server.pem")
    server_key = property(lambda self: self.folder / "server.key")
    client_cert = property(lambda self: self.folder / "client.pem")
    client_key = property(lambda self: self.folder / "client.key")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(folder: Path) -> Certificates:
    folder.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=cnkispider test CA", cwd=folder,
    )  # fmt: skip
    for name, subject, extensions in (
        ("server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
        ("client", "/CN=cnkispider worker", "extendedKeyUsage=clientAuth"),
    ):
        (folder / f"{name}.ext").write_text(extensions + "\n")
        _openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
            f"{name}.csr", "-subj", subject, cwd=folder,
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext",
            cwd=folder,
        )  # fmt: skip
    for key in folder.glob("*.key"):
        key.chmod(0o644)  # mariadbd may run as another user than the one that made them
    return Certificates(folder)


class TlsMariaDB(OwnMariaDB):
    def __init__(self, certs: Certificates):
        self.extra_args = (
            f"--ssl-ca={certs.ca}",
            f"--ssl-cert={certs.server_cert}",
            f"--ssl-key={certs.server_key}",
        )
        super().__init__()

    def url(self, database: str, query: str = "") -> str:
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/{database}?charset=utf8mb4{query}"


class TlsRedis:
    """redis-server on a TLS port only; clients must show a certificate the CA signed."""

    def __init__(self, certs: Certificates):
        self.certs = certs
        self.dir = tempfile.mkdtemp(prefix="tls-redis-")
        self.port = free_port()
        self.process = start_redis_server(
            [
                "--port", "0",
                "--tls-port", str(self.port),
                "--bind", "127.0.0.1",
                "--tls-cert-file", str(certs.server_cert),
                "--tls-key-file", str(certs.server_key),
                "--tls-ca-cert-file", str(certs.ca),
                "--tls-auth-clients", "yes",
                "--save", "",
                "--appendonly", "no",
                "--dir", self.dir,
            ],
            self.admin(),
            "redis-server with TLS",
        )  # fmt: skip

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0"

    def admin_url(self) -> str:
        c = self.certs
        return (
            f"{self.url}?ssl_ca_certs={c.ca}&ssl_certfile={c.client_cert}"
            f"&ssl_keyfile={c.client_key}"
        )

    def admin(self) -> redis.Redis:
        return redis.Redis.from_url(self.admin_url(), socket_connect_timeout=5)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def tls_servers(tmp_path):
    """``(certificates, TlsMariaDB, TlsRedis)`` for one test."""
    certs = make_certificates(tmp_path / "certs")
    mariadb = TlsMariaDB(certs)
    server = TlsRedis(certs)
    yield certs, mariadb, server
    server.close()
    mariadb.close()
