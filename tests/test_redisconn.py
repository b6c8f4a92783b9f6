"""The Redis client factory: embedded server, URLs, passwords, TLS, and refusing evicting servers.

Servers with special configurations are started here on free ports (never reconfigure the
shared 6379 one)."""

from __future__ import annotations

import contextlib
import logging
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cnkispider.exceptions import RedisUnavailable
from cnkispider.store import redisconn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def private_redis(*options: str, port: int | None = None, tls: bool = False):
    """A redis-server of this test's own on a free port; yields the port."""
    port = port or free_port()
    listen = ["--port", "0", "--tls-port", str(port)] if tls else ["--port", str(port)]
    proc = subprocess.Popen(
        ["redis-server", *listen, "--save", "", "--appendonly", "no", *options],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            assert proc.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def test_embedded_redis_keeps_its_aof_under_the_data_dir_and_survives_a_restart(tmp_path):
    client = redisconn.connect("", tmp_path)
    try:
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
        assert Path(client.config_get("dir")["dir"]) == (tmp_path / "redis").resolve()
        client.set("cnki:survivor", "still here")
    finally:
        redisconn.stop_embedded(tmp_path)
    assert (tmp_path / "redis" / "appendonly.aof").stat().st_size > 0
    assert not Path(client.connection_pool.connection_kwargs["path"]).exists()  # server gone
    again = redisconn.connect("", tmp_path)
    try:
        assert again.get("cnki:survivor") == b"still here"
    finally:
        redisconn.stop_embedded(tmp_path)


def test_embedded_redis_is_shared_by_clients_of_the_same_data_dir(tmp_path):
    first = redisconn.connect("", tmp_path)
    second = redisconn.connect("", tmp_path)
    try:
        first.set("k", "v")
        assert second.get("k") == b"v"
    finally:
        redisconn.stop_embedded(tmp_path)


def test_windows_asks_for_a_url(tmp_path, monkeypatch):
    monkeypatch.setattr(redisconn.sys, "platform", "win32")
    with pytest.raises(RedisUnavailable, match=r"\[redis\] url"):
        redisconn.connect("", tmp_path)


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://:s3cret@host:6379/0", "redis://:***@host:6379/0"),
        ("redis://user:s3cret@host:6379/0", "redis://user:***@host:6379/0"),
        ("rediss://user:s3cret@host:6380", "rediss://user:***@host:6380"),
        ("redis://host:6379/0?password=s3cret", "redis://host:6379/0?password=%2A%2A%2A"),
        ("redis://host:6379/0", "redis://host:6379/0"),
        ("redis://user@host:6379/0", "redis://user@host:6379/0"),
    ],
)
def test_mask_url_hides_passwords(url, masked):
    assert redisconn.mask_url(url) == masked


def test_unreachable_url_fails_at_once_naming_the_url_without_its_password(tmp_path):
    url = f"redis://:s3cret@127.0.0.1:{free_port()}/0"
    with pytest.raises(RedisUnavailable) as info:
        redisconn.connect(url, tmp_path)
    message = str(info.value)
    assert "not reachable" in message
    assert "redis://:***@127.0.0.1:" in message
    assert "s3cret" not in message


def test_password_urls_work_and_a_wrong_password_is_refused_clearly(tmp_path):
    with private_redis("--requirepass", "s3cret") as port:
        good = redisconn.connect(f"redis://:s3cret@127.0.0.1:{port}/0", tmp_path)
        assert good.ping()
        good.close()
        with pytest.raises(RedisUnavailable, match="refused the credentials") as info:
            redisconn.connect(f"redis://:wrong@127.0.0.1:{port}/0", tmp_path)
        assert "wrong" not in str(info.value)


@pytest.mark.skipif(not shutil.which("openssl"), reason="openssl makes the test certificate")
def test_rediss_url_connects_over_tls(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost"],
        check=True,
        capture_output=True,
    )
    tls = ["--tls-cert-file", str(cert), "--tls-key-file", str(key)]
    tls += ["--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no"]
    with private_redis(*tls, tls=True) as port:
        client = redisconn.connect(f"rediss://127.0.0.1:{port}/0?ssl_cert_reqs=none", tmp_path)
        assert client.ping()
        client.close()


def test_a_redis_that_may_evict_keys_is_refused_with_the_reason(tmp_path):
    with private_redis("--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru") as port:
        url = f"redis://127.0.0.1:{port}/0"
        with pytest.raises(RedisUnavailable) as info:
            redisconn.connect(url, tmp_path)
        message = str(info.value)
        assert "allkeys-lru" in message and "deletes keys when memory is full" in message
        assert "noeviction" in message
        redisconn.connect(url, tmp_path, check_policy=False).close()  # tools may opt out


def test_volatile_policies_are_refused_too(tmp_path):
    with private_redis("--maxmemory", "10mb", "--maxmemory-policy", "volatile-ttl") as port:
        with pytest.raises(RedisUnavailable, match="volatile-ttl"):
            redisconn.connect(f"redis://127.0.0.1:{port}/0", tmp_path)


def test_an_evicting_policy_without_maxmemory_only_warns(tmp_path, caplog):
    with private_redis("--maxmemory-policy", "allkeys-lru") as port:
        with caplog.at_level(logging.WARNING, logger="cnkispider.redisconn"):
            redisconn.connect(f"redis://127.0.0.1:{port}/0", tmp_path).close()
    assert "no maxmemory limit" in caplog.text


def test_config_disabled_on_a_managed_redis_warns_and_continues(tmp_path, caplog):
    with private_redis("--rename-command", "CONFIG", "") as port:
        with caplog.at_level(logging.WARNING, logger="cnkispider.redisconn"):
            client = redisconn.connect(f"redis://127.0.0.1:{port}/0", tmp_path)
        assert client.ping()
        client.close()
    assert "Cannot read the eviction policy" in caplog.text


def test_the_shared_test_redis_is_accepted(redis_url, tmp_path):
    client = redisconn.connect(redis_url, tmp_path)
    assert client.ping()
    client.close()


@pytest.mark.timing  # asserts a wall-clock bound: `make test` runs it apart, after the parallel pass
def test_a_killed_process_leaves_the_embedded_redis_running_for_the_next_one(tmp_path):
    code = (
        "import os, signal; from cnkispider.store import redisconn; "
        f"c = redisconn.connect('', {str(tmp_path)!r}); c.set('k', 'v'); "
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    died = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1])
    assert died.returncode == -9
    started = time.monotonic()
    client = redisconn.connect("", tmp_path)
    try:
        assert client.get("k") == b"v"
        assert time.monotonic() - started < 3
    finally:
        redisconn.stop_embedded(tmp_path)


def test_a_unix_socket_url_connects(tmp_path):
    """config.ini accepts unix:// URLs; TCP-only client options must not break them."""
    import subprocess
    import time

    sock = tmp_path / "redis.sock"
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            "0",
            "--unixsocket",
            str(sock),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.05)
        client = redisconn.connect(f"unix://{sock}", tmp_path)
        assert client.ping()
        client.close()
    finally:
        server.terminate()
        server.wait()
