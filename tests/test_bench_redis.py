"""The benchmarks' own redis-server (bench/compare_schedulers.py ``BenchRedis``) is really their
own: a port drawn free can be taken by a neighbour's server before ours binds it; and its client
waits for a long script instead of sending it again (the dedupe bench got "BUSY Redis is busy
running a script" twice: its own insert, re-sent by redis-py after a 5 s timeout)."""

from __future__ import annotations

import pytest
import redis

from bench import compare_schedulers
from tests.fixtures.fault_services import OwnRedis


def test_a_port_taken_before_our_server_binds_it_is_left_for_another(monkeypatch):
    neighbour = OwnRedis()
    drawn = [neighbour.port]
    real_free_port = compare_schedulers.free_port
    monkeypatch.setattr(
        compare_schedulers, "free_port", lambda: drawn.pop() if drawn else real_free_port()
    )
    server = compare_schedulers.BenchRedis()
    try:
        assert server.port != neighbour.port
        assert server.client.info("server")["process_id"] == server.process.pid
        server.client.set("k", "ours")
        assert redis.Redis(port=neighbour.port).get("k") is None
        # a restart that finds its port taken says so, rather than use a neighbour's server
        server.process.kill()
        server.process.wait()
        monkeypatch.setattr("tests.fixtures.fault_services.free_port", lambda: server.port)
        taker = OwnRedis()
        try:
            with pytest.raises(RuntimeError, match=f"port {server.port} was taken"):
                server.restart()
        finally:
            taker.close()
    finally:
        server.stop()
        neighbour.close()


def test_the_client_waits_for_a_long_script_and_never_sends_it_again():
    """redis-py 8 defaults to a 5 s socket timeout and 10 retries: a script slower than that (a
    batch of 10,000 fingerprints on a busy machine) was sent again into the server still running
    it, which answered BUSY. The bench's client has no timeout and no retry."""
    assert redis.Redis(port=1).get_connection_kwargs()["socket_timeout"] == 5  # the default
    server = compare_schedulers.BenchRedis()
    try:
        assert server.client.get_connection_kwargs()["socket_timeout"] is None
        assert server.client.get_retry().get_retries() == 0
        assert server.client.ping()
    finally:
        server.stop()
