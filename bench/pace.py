"""Pace: how close the learned pace gets to CNKI's hidden threshold, and how often it is caught.

    python bench/pace.py [--pace-limit 10] [--start 2024-03-01 --end 2024-03-01]
        [--categories A,B,C,D,E,F] [--scale 0.3] [--latency 0.02] [--runs cold,warm]

The CNKI stand-in with its hidden pace threshold (``--pace-limit`` requests/s per session and
per IP over a sliding 2 s window; an address over it is challenged until it has been quiet
``--pace-block-seconds``) is crawled by the full crawler (``cnkispider run``, one worker, 16
requests in flight, direct: one IP) with ``[crawl] pace = true`` and no fixed rate limit, so
only the pace holds it back. The crawler is not told the threshold. Two runs of the same task
scope, on one Redis (a server of this benchmark's own):

- cold: the Redis is empty; the pace starts at 0.5 requests/s and has to find the threshold
  (at least one overshoot and one cool-down);
- warm: a new task on the same Redis: the pace starts where the first run left it, as a
  restarted crawler does.

Measured per run, from the stand-in's ``/_stats`` (polled every 0.1 s): ``requests`` (every
request to CNKI's routes: warm-up, grid, detail, which is what the threshold counts) and
``challenged.total``; the crawl's seconds from the first to the last request the site saw;
requests/s that were not challenged, as a fraction of the threshold (over the whole crawl, and
over the middle 80% of its requests: the pace without the crawl's start and the task's last
pages, when few requests are left to send); the share challenged; and
the database against the stand-in's ground truth. Target (../shared/DESIGN.md): >= 90% of the
tolerated pace and < 1% challenged, for the warm run (a cold start pays for learning once).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.compare_schedulers import BenchRedis, exit_on_sigterm, machine  # noqa: E402
from standin.client import start_site  # noqa: E402
from tests.fixtures.crawl_harness import CrawlSetup, compare  # noqa: E402


class SiteCounter(threading.Thread):
    """Polls the stand-in's request and challenge counters."""

    def __init__(self, site, every: float = 0.1):
        super().__init__(daemon=True)
        self.site, self.every = site, every
        self.samples: list[tuple[float, int, int]] = []
        self.done = threading.Event()

    def sample(self) -> tuple[float, int, int]:
        stats = self.site.stats()
        return time.monotonic(), int(stats["requests"]), int(stats["challenged"]["total"])

    def run(self) -> None:
        while not self.done.is_set():
            self.samples.append(self.sample())
            time.sleep(self.every)

    def stop(self) -> dict:
        self.done.set()
        self.join()
        self.samples.append(self.sample())
        _, requests, challenged = self.samples[-1]
        first = next(t for t, n, _ in self.samples if n > 0)
        last = next(t for t, n, _ in self.samples if n == requests)

        def crossed(share: float) -> tuple[float, int, int]:
            return next(s for s in self.samples if s[1] >= share * requests)

        (t10, n10, c10), (t90, n90, c90) = crossed(0.1), crossed(0.9)
        return {
            "requests": requests,
            "challenged": challenged,
            "seconds": max(last - first, 1e-9),
            # the middle 80% of the requests: the pace itself, without the start of the crawl
            # (sessions warming up) and the end of the task (its last pages, few in flight)
            "steady": ((n90 - c90) - (n10 - c10)) / max(t90 - t10, 1e-9),
        }


def crawl(name: str, args, site, redis_url: str, tmp: Path, truth: dict) -> dict:
    folder = tmp / name
    folder.mkdir()
    setup = CrawlSetup(
        folder,
        site,
        f"sqlite:///{folder / 'cnki.db'}",
        "patent",
        args.start,
        args.end,
        args.categories,
        task=f"pace{name}{uuid.uuid4().hex[:6]}",
        redis_url=redis_url,
        crawl={
            "pace": "true",
            "concurrent_requests": 16,
            "lease_seconds": 60,
            "round_lease_seconds": 60,
            "heartbeat_seconds": 1,
        },
    )
    site.control(reset_stats=True)
    counter = SiteCounter(site)
    counter.start()
    result = setup.run("run", timeout=args.timeout)
    row = counter.stop()
    if result.returncode != 0:
        raise RuntimeError(
            f"{name}: exit {result.returncode}\n{result.stdout[-2000:]}"
            f"{result.stderr[-2000:]}{setup.log()[-3000:]}"
        )
    if "truth" not in truth:
        truth["truth"] = setup.truth()
    diff = compare(setup.stored(), truth["truth"], "patent")
    row.update(
        name=name,
        ok=not (diff["missing"] or diff["extra"] or diff["differing"]),
        problems={k: len(v) for k, v in diff.items()},
        log=setup.log(),
    )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--pace-limit",
        type=float,
        default=10.0,
        help="the stand-in's hidden threshold, requests/s per session and per IP",
    )
    parser.add_argument("--pace-block-seconds", type=float, default=30.0)
    parser.add_argument("--start", default="2024-03-01")
    parser.add_argument("--end", default="2024-03-01")
    parser.add_argument("--categories", default="A,B,C,D,E,F")
    parser.add_argument("--scale", type=float, default=0.3, help="corpus size, relative")
    parser.add_argument("--latency", default="0.02", help="stand-in latency per page, seconds")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--runs", default="cold,warm", help="cold, warm or both")
    args = parser.parse_args(argv)
    command = "python bench/pace.py " + " ".join(sys.argv[1:] if argv is None else argv)
    exit_on_sigterm()
    os.chdir(ROOT)

    site = start_site(
        seed=args.seed,
        scale=args.scale,
        latency=args.latency,
        pace_limit=args.pace_limit,
        pace_block_seconds=args.pace_block_seconds,
    )
    redis_server = BenchRedis()
    tmp = Path(tempfile.mkdtemp(prefix="bench-pace-"))
    truth: dict = {}
    rows = []
    try:
        for name in args.runs.split(","):
            row = crawl(name, args, site, redis_server.url, tmp, truth)
            rows.append(row)
            decreases = row["log"].count("CNKI challenged")
            print(
                f"{name}: {row['requests']} requests in {row['seconds']:.1f} s, "
                f"{row['challenged']} challenged, {decreases} pace decreases, documents "
                f"{'equal to the truth' if row['ok'] else row['problems']}",
                flush=True,
            )
    finally:
        redis_server.stop()
        site.stop()

    limit = args.pace_limit
    print()
    print(
        f"Pace, {time.strftime('%Y-%m-%d')}, {machine()}; stand-in threshold {limit:g} "
        f"requests/s per session and per IP (2 s window, block {args.pace_block_seconds:g} s), "
        f"latency {args.latency} s; one worker, direct"
    )
    print(f"command: {command}")
    print(
        f"task: patent {args.start}..{args.end}, categories {args.categories}, corpus scale "
        f"{args.scale}: {len(truth.get('truth', []))} documents"
    )
    head = (
        f"{'run':>6}{'requests':>10}{'challenged':>12}{'share':>8}{'seconds':>9}"
        f"{'clean req/s':>13}{'of threshold':>14}{'middle 80%':>12}  documents"
    )
    print(head)
    print("-" * len(head))
    verdicts = []
    for row in rows:
        clean = (row["requests"] - row["challenged"]) / row["seconds"]
        share = row["challenged"] / max(row["requests"], 1)
        fraction, steady = clean / limit, row["steady"] / limit
        print(
            f"{row['name']:>6}{row['requests']:>10}{row['challenged']:>12}{share:>8.2%}"
            f"{row['seconds']:>9.1f}{clean:>13.2f}{fraction:>14.1%}{steady:>12.1%}  "
            f"{'= truth' if row['ok'] else 'DIFFER'}"
        )
        if row["name"] == "warm":
            verdicts.append((fraction, steady, share < 0.01 and row["ok"]))
    print()
    ok = all(r["ok"] for r in rows)
    for fraction, steady, clean in verdicts:
        print(
            f"  target (warm run): >= 90% of the threshold with < 1% challenged, = truth: "
            f"whole run {fraction:.1%} {'PASS' if fraction >= 0.9 and clean else 'FAIL'}, "
            f"middle 80% of its requests {steady:.1%} {'PASS' if steady >= 0.9 and clean else 'FAIL'}"
        )
        ok = ok and fraction >= 0.9 and clean
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
