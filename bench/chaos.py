"""Chaos: workers killed with kill -9 at random moments, Redis killed once, and nothing lost.

    python bench/chaos.py [--kills 20] [--workers 3] [--seed 1] [--redis-crash/--no-redis-crash]

Starts the stand-in CNKI site (with a little latency, so kills land mid-round), a MariaDB
database of its own, and a Redis server of its own on a free port (without persistence, so that
killing it really loses the queue, the leases and the dedupe filter). Runs N worker processes of
`cnkispider run` on one task; kills a random worker with SIGKILL at random moments and starts a
new one in its place; kills Redis once and restarts it empty. Then lets the workers finish and
compares the database with the stand-in's ground truth.

Prints a table: documents expected, stored, lost, duplicated; rounds expected, done, lost;
kills; the longest time a dead worker's expired leases took to be handed out again; wall time.
Exit status 0 only when nothing was lost.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pymysql  # noqa: E402
import redis  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from bench.compare_schedulers import BenchRedis  # noqa: E402
from cnkispider.schema import round_  # noqa: E402
from tests.cnki_site.client import start_site  # noqa: E402
from tests.crawl_harness import CrawlSetup, compare  # noqa: E402

LEASE = 4  # seconds: request leases and round leases, short so that the run stays short


def expired_leases(client: redis.Redis, namespace: str) -> int:
    """Leases that ran out and were not yet handed out again (by the Redis server clock)."""
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros // 1000
    return client.zcount(f"{namespace}:leases", "-inf", now_ms)


class LeaseWatch(threading.Thread):
    """Polls Redis; for each kill, when no expired lease was left after the lease period."""

    def __init__(self, url: str, namespace: str):
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url, socket_timeout=1)
        self.namespace = namespace
        self.kills: list[float] = []
        self.recovered: dict[int, float] = {}
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            now = time.monotonic()
            try:
                clear = expired_leases(self.client, self.namespace) == 0
            except redis.RedisError:
                clear = False
            for i, killed_at in enumerate(self.kills):
                if i not in self.recovered and clear and now >= killed_at + LEASE:
                    self.recovered[i] = now - killed_at
            time.sleep(0.05)


def run(kills: int, workers: int, seed: int, redis_crash: bool, days: int = 3, quiet: bool = False,
        scale: float = 2.0) -> dict:
    rng = random.Random(seed)
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    database = f"cnkichaos_{uuid.uuid4().hex[:8]}"
    db_url = f"mysql+pymysql://root@127.0.0.1:3306/{database}?charset=utf8mb4"
    server = BenchRedis()  # of its own, so that killing it harms nobody else
    site = start_site(seed=seed, latency="0.02-0.05", scale=scale)
    tmp = Path(tempfile.mkdtemp(prefix="chaos-"))
    end = f"2024-01-{days:02d}"
    setup = CrawlSetup(
        tmp, site, db_url, "patent", "2024-01-01", end, "G06,H04,A61", redis_url=server.url,
        crawl={"lease_seconds": LEASE, "round_lease_seconds": LEASE, "heartbeat_seconds": 1,
               "concurrent_requests": 4, "max_attempts": 50},
    )
    setup.write()
    namespace = f"cnki:{setup.task}"
    procs: list[subprocess.Popen] = []
    started = time.monotonic()
    watch = LeaseWatch(server.url, namespace)
    killed = 0
    redis_killed = False
    try:
        subprocess.run(setup.command("init-db"), cwd=ROOT, check=True, capture_output=True)
        for _ in range(workers):
            procs.append(setup.spawn())
        watch.start()
        while killed < kills:
            time.sleep(rng.uniform(0.3, 1.5))
            live = [p for p in procs if p.poll() is None]
            if not live:
                break
            victim = rng.choice(live)
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            killed += 1
            procs.remove(victim)
            procs.append(setup.spawn())
            if redis_crash and not redis_killed and killed == max(1, kills // 2):
                say("  killing Redis")
                server.kill()
                server.restart()
                redis_killed = True
            else:
                watch.kills.append(time.monotonic())
            say(f"  kill {killed}/{kills}")
        for p in procs:
            try:
                p.wait(timeout=600)
            except subprocess.TimeoutExpired:
                p.kill()
        # a final worker, as an operator would start after the storm: it must find nothing to do
        final = setup.run(timeout=600)
        watch.stop.set()
        recoveries = list(watch.recovered.values())
        truth = setup.truth()
        stored = setup.stored()
        diff = compare(stored, truth, "patent")
        keys = [(d["dbname"], d["filename"]) for d in stored]
        rounds = setup.query(sa.select(round_.c.state, sa.func.count()).group_by(round_.c.state))
        by_state = dict(rounds)
        expected_rounds = days * 3
        return {
            "documents expected": len(truth),
            "documents stored": len(set(keys)),
            "documents lost": len(diff["missing"]),
            "documents duplicated": len(keys) - len(set(keys)),
            "documents differing": len(diff["differing"]),
            "rounds expected": expected_rounds,
            "rounds done": by_state.get("done", 0),
            "rounds lost": expected_rounds - by_state.get("done", 0),
            "worker kills": killed,
            "redis crashes": int(redis_killed),
            "lease period (s)": LEASE,
            "longest lease recovery (s)": round(max(recoveries), 2) if recoveries else None,
            "kills measured for recovery": len(recoveries),
            "final worker exit": final.returncode,
            "wall time (s)": round(time.monotonic() - started, 1),
        }
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        site.stop()
        server.stop()
        admin = pymysql.connect(host="127.0.0.1", user="root")
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
        admin.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--days", type=int, default=5)
    parser.add_argument("--scale", type=float, default=4.0, help="documents per round, relative")
    parser.add_argument("--no-redis-crash", dest="redis_crash", action="store_false")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    result = run(args.kills, args.workers, args.seed, args.redis_crash, args.days, scale=args.scale)
    width = max(len(k) for k in result)
    print(f"\nchaos: {args.kills} kills of {args.workers} workers, seed {args.seed}, "
          f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores")
    for key, value in result.items():
        print(f"  {key:<{width}}  {value}")
    ok = result["documents lost"] == 0 and result["rounds lost"] == 0 and result["documents duplicated"] == 0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
