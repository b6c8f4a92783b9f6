"""Soak: one worker crawls the stand-in for a long time through 20% faults; does its memory grow?

    python bench/soak.py [--minutes 8] [--fault-rate 0.2] [--interval 2] [--warmup-pages 5000]
                         [--jar-grace SECONDS] [--mysql mysql+pymysql://root@127.0.0.1:3306]
                         [--json FILE]

What it does: starts a Redis of its own (tests/fixtures/fault_services.py) and the CNKI stand-in with
``--fault-rate`` of its responses faulty (spread over verify redirects, captchas, blank and
JavaScript pages, 500/503 and connection resets: each retired CNKI session, each retry, each
refreshed detail link is exercised), and runs one ``cnkispider run`` worker on a patent task
long enough that it cannot finish (a year of days, four root categories) into SQLite (or a
fresh database on ``--mysql``). Every ``--interval`` seconds it samples the worker's RSS
(psutil) and the pages the site has served. After ``--minutes`` it stops the worker (SIGTERM).

What it prints: pages, pages/s, RSS at the end of the warm-up and at the end, and the growth
per 100,000 pages: the least-squares slope of RSS against pages over the samples after the
first ``--warmup-pages`` pages (caches, connection pools and Scrapy's own structures fill up
first), times 100,000. The goal is flat within 10 MB per 100,000 pages.

Retired CNKI sessions keep their cookie jar for ``SESSION_JAR_GRACE`` seconds (660 by default:
a request may still be waiting with it), so for the first 11 minutes the jars only pile up (at
20% faults a session retires every few pages) and level off after. ``--jar-grace 60`` (passed as
``-s SESSION_JAR_GRACE=60``) reaches that level within the warm-up, so the slope shows whether
anything else grows; the level itself is estimated as "jars held at the end" (sessions created within the last grace).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from standin.client import start_site  # noqa: E402
from tests.fixtures.crawl_harness import CrawlSetup  # noqa: E402
from tests.fixtures.fault_services import OwnRedis  # noqa: E402

# Relative weights of the fault kinds; scaled so that they add up to --fault-rate.
FAULT_MIX = {
    "verify": 4,
    "captcha": 3,
    "blank": 3,
    "javascript": 2,
    "e500": 3,
    "e503": 2,
    "reset": 3,
}


def faults(rate: float) -> dict[str, float]:
    total = sum(FAULT_MIX.values())
    return {name: rate * weight / total for name, weight in FAULT_MIX.items()}


def served(site) -> tuple[int, int]:
    """(pages the site served, CNKI sessions it created) so far."""
    stats = site.stats()
    pages = sum(
        sum(codes.values()) for path, codes in stats["by_path"].items() if not path.startswith("/_")
    )
    return pages, stats["sessions_created"]


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y against x."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    return sxy / sxx if sxx else 0.0


def run(
    minutes: float,
    fault_rate: float,
    interval: float,
    warmup_pages: int,
    mysql: str | None,
    quiet: bool = False,
    jar_grace: float | None = None,
) -> dict:
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    tmp = Path(tempfile.mkdtemp(prefix="soak-"))
    server = OwnRedis()
    site = start_site(seed=5, faults=faults(fault_rate), latency="0")
    database = None
    if mysql:
        import pymysql
        from sqlalchemy.engine import make_url

        parsed = make_url(mysql)
        database = f"cnkisoak_{uuid.uuid4().hex[:8]}"
        db_url = parsed.set(database=database).render_as_string(hide_password=False)
    else:
        db_url = f"sqlite:///{tmp / 'soak.db'}"
    setup = CrawlSetup(
        tmp,
        site,
        db_url,
        "patent",
        "2024-01-01",
        "2024-12-31",
        "G06,H04,A61,B01",
        redis_url=server.url,
        crawl={
            "concurrent_requests": 16,
            "retry_times": 10,
            "heartbeat_seconds": 5,
            "log_level": "warning",
            # at 20% faults, four challenged sessions in a row happen every few minutes and the
            # task would pause 300 s each time: a soak measures memory per page, so no pause
            "challenge_cooldown": 0,
        },
    )
    samples: list[dict] = []
    extra = ["-s", f"SESSION_JAR_GRACE={jar_grace:g}"] if jar_grace is not None else []
    worker = setup.spawn("run", *extra)
    started = time.monotonic()
    try:
        process = psutil.Process(worker.pid)
        while time.monotonic() - started < minutes * 60:
            time.sleep(interval)
            if worker.poll() is not None:
                raise RuntimeError(
                    f"the worker stopped (rc {worker.returncode}):\n{setup.log()[-3000:]}"
                )
            rss = process.memory_info().rss
            pages, sessions = served(site)
            samples.append(
                {"t": time.monotonic() - started, "pages": pages, "rss": rss, "sessions": sessions}
            )
            if len(samples) % max(1, int(60 / interval)) == 0:
                last = samples[-1]
                say(
                    f"  {last['t']:6.0f} s  {last['pages']:>9,} pages  RSS {last['rss'] / 2**20:7.1f} MB"
                )
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=120)
    finally:
        if worker.poll() is None:
            worker.kill()
        site.stop()
        server.close()
        if database:
            import pymysql
            from sqlalchemy.engine import make_url

            parsed = make_url(mysql)
            admin = pymysql.connect(
                host=parsed.host,
                port=parsed.port or 3306,
                user=parsed.username or "root",
                password=parsed.password or "",
            )
            with admin.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
            admin.close()
    steady = [s for s in samples if s["pages"] >= warmup_pages]
    if len(steady) < 5:
        raise RuntimeError(
            f"too few samples after {warmup_pages} pages: run longer ({len(samples)} in all)"
        )
    per_page = slope([(s["pages"], s["rss"]) for s in steady])
    first, last = steady[0], samples[-1]
    pages = last["pages"]
    return {
        "minutes": round(last["t"] / 60, 1),
        "fault rate": fault_rate,
        "SESSION_JAR_GRACE (s)": jar_grace if jar_grace is not None else "default (660)",
        "pages": pages,
        "pages/s": round(pages / last["t"], 1),
        "warm-up pages": warmup_pages,
        "samples after warm-up": len(steady),
        "RSS after warm-up (MB)": round(first["rss"] / 2**20, 1),
        "RSS at the end (MB)": round(last["rss"] / 2**20, 1),
        "peak RSS (MB)": round(max(s["rss"] for s in samples) / 2**20, 1),
        "growth per 100,000 pages (MB, slope)": round(per_page * 100_000 / 2**20, 1),
        "growth per 100,000 pages (MB, end points)": round(
            (last["rss"] - first["rss"]) / max(1, pages - first["pages"]) * 100_000 / 2**20, 1
        ),
        # the worker retires a CNKI session after each fault and every turn_limit pages: if what
        # grows is per-session state, this is about constant across runs
        "sessions created after warm-up": last["sessions"] - first["sessions"],
        "growth per session created (KB, end points)": round(
            (last["rss"] - first["rss"]) / max(1, last["sessions"] - first["sessions"]) / 1024, 2
        ),
        "jars held at the end (sessions of the last grace)": last["sessions"]
        - max(
            [s["sessions"] for s in samples if s["t"] <= last["t"] - (jar_grace or 660.0)] or [0]
        ),
        "samples": samples,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=8.0)
    parser.add_argument("--fault-rate", type=float, default=0.2)
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between RSS samples")
    parser.add_argument("--warmup-pages", type=int, default=5000)
    parser.add_argument(
        "--jar-grace",
        type=float,
        default=None,
        help="SESSION_JAR_GRACE for the worker (default: the crawler's own, 660 s)",
    )
    parser.add_argument("--mysql", help="server URL (no database); default SQLite in a temp folder")
    parser.add_argument("--json", help="write the result, samples included, to this file")
    args = parser.parse_args(argv)
    print(
        f"soak: {args.minutes:g} min, {args.fault_rate:.0%} faulty responses, one worker",
        flush=True,
    )
    result = run(
        args.minutes,
        args.fault_rate,
        args.interval,
        args.warmup_pages,
        args.mysql,
        jar_grace=args.jar_grace,
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1), encoding="utf-8")
    width = max(len(k) for k in result)
    for key, value in result.items():
        if key != "samples":
            print(
                f"{key:<{width}}  {value:,}"
                if isinstance(value, int)
                else f"{key:<{width}}  {value}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
