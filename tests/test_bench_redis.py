"""The benchmarks' own redis-server (bench/compare_schedulers.py ``BenchRedis``) is really their
own: a port drawn free can be taken by a neighbour's server before ours binds it (a bench under
xdist once got "BUSY Redis is busy running a script" from a neighbour's Lua)."""

from __future__ import annotations

import pytest
import redis

from bench import compare_schedulers
from tests.fault_services import OwnRedis


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
        monkeypatch.setattr("tests.fault_services.free_port", lambda: server.port)
        taker = OwnRedis()
        try:
            with pytest.raises(RuntimeError, match=f"port {server.port} was taken"):
                server.restart()
        finally:
            taker.close()
    finally:
        server.stop()
        neighbour.close()
