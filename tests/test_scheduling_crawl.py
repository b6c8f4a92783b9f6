"""Whole crawls with LeasedScheduler + BloomDupeFilter against the tiny local site, each worker a
real Scrapy process (``python -m tests.fixtures.tiny_site``)."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from cnkispider.store import redisconn
from tests.fixtures.tiny_site import TinySite, read_lines
from tests.fixtures.waiting import wait_until

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


@pytest.fixture
def site():
    sites = []

    def make(**kwargs) -> TinySite:
        sites.append(TinySite(**kwargs).start())
        return sites[-1]

    yield make
    for s in sites:
        s.stop()


def worker(
    site: TinySite, namespace: str, tmp_path: Path, name: str, **options
) -> subprocess.Popen:
    args = [
        sys.executable,
        "-m",
        "tests.fixtures.tiny_site",
        "--start",
        site.url,
        "--namespace",
        namespace,
        "--items",
        str(tmp_path / "items.jsonl"),
        "--stats",
        str(tmp_path / f"stats-{name}.json"),
        "--data-dir",
        str(tmp_path / "data"),
    ]
    for key, value in options.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    log = open(tmp_path / f"log-{name}.txt", "w")
    return subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def finish(proc: subprocess.Popen, tmp_path: Path, name: str, timeout: float = 120) -> dict:
    rc = proc.wait(timeout=timeout)
    log = (tmp_path / f"log-{name}.txt").read_text()
    assert rc == 0, log[-3000:]
    return json.loads((tmp_path / f"stats-{name}.json").read_text())


def pages_of(tmp_path: Path) -> collections.Counter:
    return collections.Counter(
        r["page"] for r in read_lines(tmp_path / "items.jsonl") if "page" in r
    )


def drains_of(tmp_path: Path) -> list[dict]:
    return [r for r in read_lines(tmp_path / "items.jsonl") if "drained" in r]


def test_one_worker_gets_every_page_exactly_once(site, redis_url, redis_namespace, tmp_path):
    tiny = site(pages=300, fanout=3)
    stats = finish(worker(tiny, redis_namespace, tmp_path, "a", redis_url=redis_url), tmp_path, "a")
    assert pages_of(tmp_path) == collections.Counter(range(300))
    assert tiny.hits == dict.fromkeys(range(300), 1)
    assert [d["drained"] for d in drains_of(tmp_path)] == [1]
    assert stats["dupefilter/filtered"] == 3 * 300  # every page links to root, parent, itself
    assert stats["scheduler/acked"] == 300


@pytest.mark.timing  # measures wall-clock gaps: `make test` runs it alone, after the parallel pass
def test_two_workers_share_a_crawl_and_renewal_keeps_a_slow_page_from_being_stolen(
    site, redis_url, redis_namespace, tmp_path
):
    """Page 4 takes four lease periods; its worker renews the lease, so nobody else takes it.
    (A lease of 2 s, not 0.5 s: on a busy machine a renewal came later than 0.5 s, and pages
    taken by both workers were what failed, not the renewal of the slow page.)"""
    tiny = site(pages=300, fanout=3, delay=0.005, slow={4: 8.0})
    options = dict(redis_url=redis_url, lease=2.0, concurrency=4, batch=4)
    procs = [worker(tiny, redis_namespace, tmp_path, name, **options) for name in ("a", "b")]
    stats = [finish(proc, tmp_path, name) for proc, name in zip(procs, ("a", "b"), strict=True)]
    assert tiny.hits == dict.fromkeys(range(300), 1)
    assert pages_of(tmp_path) == collections.Counter(range(300))
    assert all(s["scheduler/acked"] > 0 for s in stats)  # both did a share
    assert len(drains_of(tmp_path)) == 1


def test_requests_scrapy_drops_are_acked_not_leaked(site, redis_url, redis_namespace, tmp_path):
    """404s (HttpError) and robots.txt refusals (IgnoreRequest in a downloader middleware), none
    with an errback, end their leases; the round drains. Offsite requests are never queued."""
    tiny = site(pages=40, fanout=3)
    proc = worker(tiny, redis_namespace, tmp_path, "a", redis_url=redis_url, broken=3)
    stats = finish(proc, tmp_path, "a")
    assert stats["scheduler/acked"] == 40 + 3 + 3
    assert stats.get("httperror/response_ignored_count") == 3
    assert stats.get("robotstxt/forbidden") == 3
    assert stats.get("offsite/filtered") == 3
    assert [d["drained"] for d in drains_of(tmp_path)] == [1]
    client = redis.Redis.from_url(redis_url)
    assert client.zcard(f"{redis_namespace}:leases") == 0


def test_kill9_mid_crawl_then_another_worker_loses_no_page(
    site, redis_url, redis_namespace, tmp_path
):
    """The killed worker's leases run out and the second worker crawls them; the round drains once.
    (A lease of 6 s, not 1.5 s: on a busy machine a worker stalled past a 1.5 s lease, its own
    leases ran out under it and it fetched those pages again, crawls a kill has nothing to do with.)"""
    tiny = site(pages=400, fanout=3, delay=0.03)
    options = dict(redis_url=redis_url, lease=6.0, concurrency=8, batch=8)
    first = worker(tiny, redis_namespace, tmp_path, "a", **options)
    wait_until(
        lambda: sum(pages_of(tmp_path).values()) >= 100,
        60,
        workers=[first],
        what="100 pages crawled by the first worker",
        every=0.02,
    )
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    client = redis.Redis.from_url(redis_url)
    in_flight = client.zcard(f"{redis_namespace}:leases")
    assert in_flight > 0  # requests were in flight when it died
    second_worker = worker(tiny, redis_namespace, tmp_path, "b", **options)
    second = finish(second_worker, tmp_path, "b")
    pages = pages_of(tmp_path)
    assert set(pages) == set(range(400))
    assert set(tiny.hits) == set(range(400))
    # only what the dead worker held is crawled again, once, by the other worker; the pids tell
    # a page taken over from one its own holder fetched twice
    who = {first.pid: "a", second_worker.pid: "b"}
    twice = {
        p: [who.get(pid, pid) for pid in pids] for p, pids in tiny.hitters.items() if len(pids) > 1
    }
    assert len(twice) <= in_flight, (in_flight, twice)
    assert all(hitters == ["a", "b"] for hitters in twice.values()), twice
    assert [d["drained"] for d in drains_of(tmp_path)] == [1]
    assert client.get(f"{redis_namespace}:round:1:outstanding") is None  # deleted at 0
    assert (
        client.zcard(f"{redis_namespace}:leases") == client.zcard(f"{redis_namespace}:queue") == 0
    )
    assert second["scheduler/acked"] >= 400 - pages_of_first_worker(tmp_path)


def pages_of_first_worker(tmp_path: Path) -> int:
    pids = collections.Counter(
        r["pid"] for r in read_lines(tmp_path / "items.jsonl") if "page" in r
    )
    return min(pids.values()) if len(pids) > 1 else 0


def test_round_trips_per_page(site, tmp_path):
    """Measured on a Redis of its own (the embedded one): every command a worker sends counts."""
    tiny = site(pages=500, fanout=4)
    data = tmp_path / "data"
    probe = redisconn.connect("", data)
    try:
        before = _commands(probe)
        stats = finish(worker(tiny, "rt", tmp_path, "a", concurrency=16), tmp_path, "a")
        after = _commands(probe)
    finally:
        redisconn.stop_embedded(data)
    sent = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    top_level = sum(sent.get(k, 0) for k in ("evalsha", "eval", "script", "ping", "info", "config"))
    top_level += 2  # the epoch SET NX + GET at open (same command names run inside the script)
    per_page = top_level / stats["response_received_count"]
    print(
        f"Redis round trips: {top_level} for {stats['response_received_count']} pages = {per_page:.3f}"
    )
    assert stats["response_received_count"] == 500
    assert per_page <= 1.5
    assert per_page <= 0.5  # batching makes it far lower than the target


def _commands(client: redis.Redis) -> dict[str, int]:
    info = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): v["calls"] for k, v in info.items()}
