"""Scaling: one task crawled by 1 worker process, then by 4, with ``cnkispider run --processes N``.

    python bench/scaling.py [--workers 4] [--latency 0.1] [--concurrency 4] [--days 10]
        [--scale 0.2] [--repeat 1]

The full crawler, as an operator runs it: ``cnkispider run --processes N`` starts N worker
processes, each a whole worker (flow control, sessions, the leased Redis scheduler, parsing,
batched upserts) sharing one Redis (a server of this benchmark's own on a free port) and one
MariaDB database (a fresh one per run on 127.0.0.1:3306, dropped afterwards). The site is the
CNKI stand-in with ``--latency`` seconds per list and detail page, and each worker is capped at
``--concurrency`` requests in flight, so one worker can fetch at most concurrency / latency pages
a second: each worker is latency-bound, as a polite crawler of a distant site is, and the
question is whether N of them fetch N times as fast. The task is every patent round (day x IPC
section) of ``--days`` days from 2024-03-01 on a corpus of ``--scale`` times the natural size
(80 rounds and about 7,700 pages by default: many small rounds, as a real task has). The run
of one worker takes about 3.5 minutes, so that start-up and the end of the task (a few seconds)
weigh little in the wall-clock figures too.

Measured per run:

- crawl pages/s: pages the site served (its own counters, polled every 0.1 s) / seconds from the
  first to the last page it served. This is the throughput the target is about.
- wall pages/s: the same pages / the wall time of the whole command, start-up (Python, Scrapy,
  the schema, registering the worker) and the end of the task (every worker learning that the
  task is finished) included.
- CPU ms/page: user + system CPU of the command and all its workers (``RUSAGE_CHILDREN``).
- machine busy: the share of all cores that was busy during the run (``/proc/stat``, everything
  on the machine): well below 100%, the workers are waiting on the site, not on the CPU.
- documents: the database compared with the stand-in's ground truth, field by field.

Prints the table and the target (N workers >= 0.9 N times one worker; 3.6x for 4) with PASS/FAIL.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pymysql  # noqa: E402

from bench.compare_schedulers import BenchRedis, exit_on_sigterm, machine  # noqa: E402
from standin.client import start_site  # noqa: E402
from tests.fixtures.crawl_harness import CrawlSetup, compare  # noqa: E402

MYSQL = {"host": "127.0.0.1", "port": 3306, "user": "root", "password": ""}


class SiteCounter(threading.Thread):
    """Polls the stand-in's page counters: when it served its first and its last page."""

    def __init__(self, site, every: float = 0.1):
        super().__init__(daemon=True)
        self.site, self.every = site, every
        self.samples: list[tuple[float, int]] = []
        self.done = threading.Event()

    def pages(self) -> int:
        return sum(self.site.stats()["pages"].values())

    def run(self) -> None:
        while not self.done.is_set():
            self.samples.append((time.monotonic(), self.pages()))
            time.sleep(self.every)

    def stop(self) -> tuple[int, float]:
        """(pages served, seconds from the first page to the last)."""
        self.done.set()
        self.join()
        total = self.pages()
        self.samples.append((time.monotonic(), total))
        first = next(t for t, n in self.samples if n > 0)
        last = next(t for t, n in self.samples if n == total)
        return total, last - first


def busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    try:
        with open("/proc/stat") as fh:
            values = [int(v) for v in fh.readline().split()[1:9]]
    except OSError:
        return float("nan"), float("nan")
    idle = values[3] + values[4]
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(values) - idle) / hz, sum(values) / hz


def run_once(n: int, args, site, redis_server, truth_cache: dict, tmp: Path) -> dict:
    database = f"cnkiscale_{uuid.uuid4().hex[:8]}"
    admin = pymysql.connect(**MYSQL)
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4")
    admin.close()
    folder = tmp / f"{n}-workers-{database}"
    folder.mkdir()
    end = f"2024-03-{args.days:02d}"
    setup = CrawlSetup(
        folder,
        site,
        f"mysql+pymysql://root@127.0.0.1:3306/{database}?charset=utf8mb4",
        "patent",
        "2024-03-01",
        end,
        "A,B,C,D,E,F,G,H",
        task=f"scale{n}",
        redis_url=redis_server.url,
        crawl={
            "concurrent_requests": args.concurrency,
            "lease_seconds": 30,
            "round_lease_seconds": 30,
            "heartbeat_seconds": 1,
            "log_level": "info",
        },
    )
    try:
        redis_server.client.flushall()
        site.control(reset_stats=True)
        counter = SiteCounter(site)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        busy0, total0 = busy_seconds()
        counter.start()
        started = time.monotonic()
        result = setup.run("run", "--processes", str(n), timeout=3600)
        wall = time.monotonic() - started
        pages, crawl_seconds = counter.stop()
        busy1, total1 = busy_seconds()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if result.returncode != 0:
            raise RuntimeError(
                f"{n} workers: exit {result.returncode}\n{result.stdout[-2000:]}"
                f"{result.stderr[-2000:]}{setup.log()[-2000:]}"
            )
        if "truth" not in truth_cache:
            truth_cache["truth"] = setup.truth()
        diff = compare(setup.stored(), truth_cache["truth"], "patent")
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        return {
            "workers": n,
            "pages": pages,
            "wall": wall,
            "crawl": crawl_seconds,
            "cpu_ms": 1000 * cpu / pages,
            "busy": (busy1 - busy0) / (total1 - total0),
            "documents": len(truth_cache["truth"]),
            "ok": not (diff["missing"] or diff["extra"] or diff["differing"]),
            "problems": {k: len(v) for k, v in diff.items()},
        }
    finally:
        admin = pymysql.connect(**MYSQL)
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
        admin.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--latency", default="0.1", help="stand-in latency per page, seconds")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight per worker")
    parser.add_argument("--days", type=int, default=10)
    parser.add_argument("--scale", type=float, default=0.2, help="corpus size, relative")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=1, help="runs per worker count (median)")
    args = parser.parse_args(argv)
    command = "python bench/scaling.py " + " ".join(sys.argv[1:] if argv is None else argv)
    exit_on_sigterm()
    os.chdir(ROOT)

    site = start_site(seed=args.seed, scale=args.scale, latency=args.latency)
    redis_server = BenchRedis()
    tmp = Path(tempfile.mkdtemp(prefix="bench-scaling-"))
    truth: dict = {}
    runs: dict[int, list[dict]] = {1: [], args.workers: []}
    try:
        for rep in range(args.repeat):
            for n in (1, args.workers) if rep % 2 == 0 else (args.workers, 1):
                row = run_once(n, args, site, redis_server, truth, tmp)
                print(
                    f"run {rep + 1}/{args.repeat}: {n} worker(s): {row['pages']} pages, crawl "
                    f"{row['crawl']:.1f} s ({row['pages'] / row['crawl']:.1f} pages/s), wall "
                    f"{row['wall']:.1f} s, machine busy {row['busy']:.0%}, documents "
                    f"{'equal to the truth' if row['ok'] else row['problems']}",
                    flush=True,
                )
                runs[n].append(row)
    finally:
        redis_server.stop()
        site.stop()

    def med(n, f):
        return statistics.median(f(r) for r in runs[n])

    bound = args.concurrency / float(args.latency.split("-")[-1])
    one_crawl = med(1, lambda r: r["pages"] / r["crawl"])
    one_wall = med(1, lambda r: r["pages"] / r["wall"])
    print()
    print(
        f"Scaling, {time.strftime('%Y-%m-%d')}, {machine()}; stand-in latency {args.latency} s, "
        f"{args.concurrency} requests in flight per worker (at most {bound:.0f} pages/s each), "
        f"one Redis, one MariaDB; median of {args.repeat}"
    )
    print(f"command: {command}")
    print(
        f"task: patent, {args.days} days x 8 IPC sections, corpus scale {args.scale}: "
        f"{len(truth.get('truth', []))} documents"
    )
    head = (
        f"{'workers':>8}{'pages':>7}{'crawl s':>9}{'pages/s':>9}{'speed-up':>10}"
        f"{'wall s':>8}{'pages/s':>9}{'speed-up':>10}{'CPU ms/pg':>11}{'busy':>7}  documents"
    )
    print(f"{'':>8}{'':>7}{'-- first to last page --':>28}{'-- whole command --':>27}")
    print(head)
    print("-" * len(head))
    for n in runs:
        crawl = med(n, lambda r: r["pages"] / r["crawl"])
        wall = med(n, lambda r: r["pages"] / r["wall"])
        ok = all(r["ok"] for r in runs[n])
        print(
            f"{n:>8}{med(n, lambda r: r['pages']):>7.0f}{med(n, lambda r: r['crawl']):>9.1f}"
            f"{crawl:>9.1f}{crawl / one_crawl:>9.2f}x{med(n, lambda r: r['wall']):>8.1f}"
            f"{wall:>9.1f}{wall / one_wall:>9.2f}x{med(n, lambda r: r['cpu_ms']):>11.2f}"
            f"{med(n, lambda r: r['busy']):>7.0%}  {'= truth' if ok else 'DIFFER'}"
        )
    speedup = med(args.workers, lambda r: r["pages"] / r["crawl"]) / one_crawl
    target = 0.9 * args.workers
    ok = speedup >= target and all(r["ok"] for rs in runs.values() for r in rs)
    print()
    print(f"  one worker: {one_crawl / bound:.0%} of its latency bound ({bound:.0f} pages/s)")
    print(
        f"  target: {args.workers} workers >= {target:.1f}x one worker: {speedup:.2f}x "
        f"{'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
