"""Chaos: workers and Redis killed with kill -9 at random moments, and nothing lost.

    python bench/chaos.py [--runs 20] [--kills 20] [--redis-kills 3] [--workers 3] [--seed 1]
                          [--redis-mode empty|held|snapshot]

Starts the stand-in CNKI site (with a little latency, so kills land mid-round), a MariaDB
database of its own, and a Redis server of its own on a free port (without persistence, so that
killing it really loses the queue, the leases, the round counts and the dedupe filters). Runs N
worker processes of `cnkispider run` on one task; kills a random worker with SIGKILL at random
moments and starts a new one in its place (and restarts one that died by itself, as a
supervisor would); kills Redis (SIGKILL) at random moments of the run,
restarting it empty after 0.5 to 3 s (workers meanwhile finish pages and hold their writes). Then lets the workers finish and compares the database with the
stand-in's ground truth. ``--runs`` repeats that with seeds ``seed, seed + 1, ...``.

``--redis-mode`` says how Redis comes back (issue 43):

- ``empty`` (the default): restarted empty, as above;
- ``held``: restarted empty while the workers hold leases for longer than the restart, as a
  worker waiting for a person, for a proxy or after a halt does: the site turns slow (2 to 5 s
  an answer) a second before Redis dies and stays slow until after it is back, so the requests
  popped before the crash are acknowledged after it, against the new Redis;
- ``snapshot``: restarted from an older snapshot: Redis saves one (SAVE) at the start of the
  kill's interval and loads it when it comes back, so what was written in between (new requests,
  acks, drains, seeded rounds) is gone, while the namespace's epoch and ``seq`` are the old ones.

Prints a table per run: documents expected, stored, lost, duplicated; rounds expected, done,
lost; kills of workers and of Redis (with when, in seconds from the start); the longest time a
dead worker's expired leases took to be handed out again; wall time; and the totals of all runs.
Exit status 0 only when nothing was lost in any run.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
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
from cnkispider.store.schema import round_  # noqa: E402
from standin.client import start_site  # noqa: E402
from tests.fixtures.crawl_harness import CrawlSetup, compare  # noqa: E402

LEASE = 4  # seconds: request leases and round leases, short so that the run stays short
LATENCY = "0.02-0.05"  # the site's answers, seconds
SLOW = "2-5"  # ... while leases are held across a Redis restart (--redis-mode held)
REDIS_MODES = ("empty", "held", "snapshot")


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


def run(
    kills: int,
    workers: int,
    seed: int,
    redis_kills: int = 1,
    days: int = 3,
    quiet: bool = False,
    scale: float = 2.0,
    fault_rate: float = 0.0,
    redis_mode: str = "empty",
) -> dict:
    """One chaos run. Redis is killed ``redis_kills`` times, each in a random worker-kill interval
    (not the same one twice) at a random moment of it; it comes back as ``redis_mode`` says
    (``empty``, ``held``, ``snapshot``: see the module's docstring)."""
    if redis_mode not in REDIS_MODES:
        raise ValueError(f"redis_mode {redis_mode!r}: expected one of {', '.join(REDIS_MODES)}")
    rng = random.Random(seed)
    redis_at = set(rng.sample(range(1, kills + 1), min(redis_kills, kills)))
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    database = f"cnkichaos_{uuid.uuid4().hex[:8]}"
    db_url = f"mysql+pymysql://root@127.0.0.1:3306/{database}?charset=utf8mb4"
    server = BenchRedis()  # of its own, so that killing it harms nobody else
    # Transient faults make retries: continuations of a round queued while Redis may be new.
    faults = {name: fault_rate / 3 for name in ("e500", "e503", "reset")} if fault_rate else {}
    site = start_site(seed=seed, latency=LATENCY, scale=scale, faults=faults)
    tmp = Path(tempfile.mkdtemp(prefix="chaos-"))
    end = (dt.date(2024, 1, 1) + dt.timedelta(days=days - 1)).isoformat()
    setup = CrawlSetup(
        tmp,
        site,
        db_url,
        "patent",
        "2024-01-01",
        end,
        "G06,H04,A61",
        redis_url=server.url,
        crawl={
            "lease_seconds": LEASE,
            "round_lease_seconds": LEASE,
            "heartbeat_seconds": 1,
            "concurrent_requests": 4,
            "max_attempts": 50,
        },
    )
    setup.write()
    namespace = f"cnki:{setup.task}"
    procs: list[subprocess.Popen] = []
    started = time.monotonic()
    watch = LeaseWatch(server.url, namespace)
    killed = 0
    died: list[int] = []
    redis_killed: list[float] = []
    epochs: list = []  # the namespace's epoch before each Redis kill, and at the end
    try:
        subprocess.run(setup.command("init-db"), cwd=ROOT, check=True, capture_output=True)
        for _ in range(workers):
            procs.append(setup.spawn())
        watch.start()
        while killed < kills:
            pause = rng.uniform(0.3, 1.5)
            if killed + 1 in redis_at:  # Redis dies at a random moment of this interval
                split = rng.uniform(0, pause)
                if redis_mode == "snapshot":
                    server.client.save()  # what it comes back with; then the work goes on
                time.sleep(split)
                if redis_mode == "held":
                    site.control(latency=SLOW)  # requests popped now outlive the restart
                    time.sleep(1.0)
                redis_killed.append(round(time.monotonic() - started, 1))
                epochs.append(server.client.get(f"{namespace}:epoch"))
                down = rng.uniform(0.5, 3.0)  # as long as a supervisor takes to restart it
                if redis_mode == "held":
                    down = rng.uniform(0.3, 1.5)  # shorter than the requests in flight
                say(f"  killing Redis at {redis_killed[-1]} s, down {down:.1f} s ({redis_mode})")
                server.kill()
                time.sleep(down)
                server.restart()
                snapshot = Path(server.dir) / "dump.rdb"
                if snapshot.exists():
                    snapshot.unlink()  # loaded: the next restart of another mode is empty
                if redis_mode == "held":
                    time.sleep(2.0)
                    site.control(latency=LATENCY)
                time.sleep(pause - split)
            for p in [p for p in procs if p.poll() not in (None, 0)]:
                # it died by itself (one starting while Redis is down exits with 2): a supervisor
                # would start it again, and the storm must go on against live workers
                died.append(p.returncode)
                procs.remove(p)
                procs.append(setup.spawn())
            live = [p for p in procs if p.poll() is None]
            if not live:
                break
            victim = rng.choice(live)
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            killed += 1
            procs.remove(victim)
            procs.append(setup.spawn())
            if killed not in redis_at:  # (a Redis restart also moves every lease: not measured)
                watch.kills.append(time.monotonic())
            say(f"  kill {killed}/{kills}")
        for p in procs:
            try:
                p.wait(timeout=600)
            except subprocess.TimeoutExpired:
                p.kill()
        # Workers that ended by themselves (every killed one was replaced): 0 = the task finished.
        exits = collections.Counter(p.returncode for p in procs)
        done_before_final = dict(
            setup.query(sa.select(round_.c.state, sa.func.count()).group_by(round_.c.state))
        ).get("done", 0)
        # a final worker, as an operator would start after the storm: it must find nothing to do
        final = setup.run(timeout=600)
        watch.stop.set()
        epochs.append(server.client.get(f"{namespace}:epoch"))
        # the task finished: its keys left Redis but the three that keep its identity
        kept = (b":epoch", b":seq", b":writers")
        keys_left = [
            k for k in server.client.scan_iter(match=f"{namespace}:*") if not k.endswith(kept)
        ]
        recoveries = list(watch.recovered.values())
        truth = setup.truth()
        stored = setup.stored()
        diff = compare(stored, truth, "patent")
        keys = [(d["dbname"], d["filename"]) for d in stored]
        rounds = setup.query(sa.select(round_.c.state, sa.func.count()).group_by(round_.c.state))
        by_state = dict(rounds)
        not_done = setup.query(
            sa.select(
                round_.c.id, round_.c.state, round_.c.attempts, round_.c.total, round_.c.note
            ).where(round_.c.state != "done")
        )
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
            "rounds not done (id, state, attempts, total, note)": [tuple(r) for r in not_done],
            "worker kills": killed,
            "redis crashes": len(redis_killed),
            "redis comes back": redis_mode,
            "epochs (distinct, at each Redis kill and at the end)": len(set(epochs)),
            "redis crashed at (s)": redis_killed,
            "lease period (s)": LEASE,
            "longest lease recovery (s)": round(max(recoveries), 2) if recoveries else None,
            "kills measured for recovery": len(recoveries),
            "workers restarted after dying by themselves": len(died),
            "exit codes of the last workers": dict(exits),
            "rounds done before the final worker": done_before_final,
            "final worker exit": final.returncode,
            "task keys left in Redis": len(keys_left),
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
    parser.add_argument("--runs", type=int, default=1, help="runs, with seeds seed, seed + 1, ...")
    parser.add_argument("--kills", type=int, default=20, help="worker kills per run")
    parser.add_argument("--redis-kills", type=int, default=3, help="Redis kills per run (0: none)")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--days", type=int, default=5)
    parser.add_argument("--scale", type=float, default=4.0, help="documents per round, relative")
    parser.add_argument(
        "--redis-mode",
        choices=REDIS_MODES,
        default="empty",
        help="how Redis comes back: empty; empty while leases are held across the restart; "
        "from an older snapshot",
    )
    parser.add_argument(
        "--fault-rate",
        type=float,
        default=0.05,
        help="share of the site's answers that are transient faults (500, 503, reset)",
    )
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    totals = {
        "runs": 0,
        "failed runs": 0,
        "documents expected": 0,
        "documents lost": 0,
        "documents duplicated": 0,
        "documents differing": 0,
        "rounds lost": 0,
        "worker kills": 0,
        "redis crashes": 0,
        "wall time (s)": 0.0,
    }
    for seed in range(args.seed, args.seed + args.runs):
        result = run(
            args.kills,
            args.workers,
            seed,
            args.redis_kills,
            args.days,
            scale=args.scale,
            fault_rate=args.fault_rate,
            redis_mode=args.redis_mode,
        )
        width = max(len(k) for k in result)
        print(
            f"\nchaos: {args.kills} kills of {args.workers} workers, {args.redis_kills} of Redis "
            f"(back {args.redis_mode}), "
            f"{args.fault_rate:.0%} faults, {args.days} days x 3 categories at scale {args.scale}, "
            f"seed {seed}, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores"
        )
        for key, value in result.items():
            print(f"  {key:<{width}}  {value}")
        ok = (
            result["documents lost"] == 0
            and result["rounds lost"] == 0
            and result["documents duplicated"] == 0
            and result["final worker exit"] == 0
        )
        print("PASS" if ok else "FAIL", flush=True)
        totals["runs"] += 1
        totals["failed runs"] += not ok
        for key in totals:
            if key in result:
                totals[key] = round(totals[key] + result[key], 1)
    if args.runs > 1:
        print(
            f"\nchaos totals over {totals['runs']} runs (seeds {args.seed}..{args.seed + args.runs - 1}):"
        )
        for key, value in totals.items():
            print(f"  {key:<22}  {value}")
    return 0 if totals["failed runs"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
