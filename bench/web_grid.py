"""The web page's coverage grid of a large task: a year x 600 categories must stay fast.

    python bench/web_grid.py [--days 365] [--categories 600] [--runs 5] [--browser]
                             [--mysql mysql+pymysql://root@127.0.0.1:3306]

Seeds the round table directly (no crawl): one task of ``--days`` days x ``--categories``
category codes (a plain list in a file, as ``[task] categories`` may name one), with a round
row for every (day x category) but the last 30 days (pending), mostly ``done`` with a stored
count, every 97th ``failed``, every 89th failed on its ledger (out of balance), and the last 8
in flight (what 2 workers with 4 rounds each hold). On a fresh SQLite database and, with ``--mysql``, a fresh database on that MariaDB
server (dropped afterwards).

Then serves ``cnkispider web``'s app (the real one: :func:`cnkispider.web.create_app` under
uvicorn, in this process) and times ``--runs`` GETs of

  page   /tasks/<name>                  the task page, its grid in it (months roll up: 12 x 600)
  month  /tasks/<name>?month=M          the page of one month's days (30 x 600 = 18,000 cells)
  grid   /tasks/<name>/grid             the grid alone
  round  /rounds/<id>                   one cell's detail

each a full HTTP answer read to its end over loopback, and prints the median and the slowest,
with the answer's size. With ``--browser`` (Playwright and Debian's chromium,
as the tests use them) it also times, in a headless Chromium, a visit of the task page until
the grid's last row is in the page and the next frame is drawn (``browser``), and the same for
a month (``browser month``): what an operator waits for. The issue's bar: the grid of 365 days x 600 categories in under 2 s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402

from cnkispider.config import load_config  # noqa: E402
from cnkispider.store.db import open_database  # noqa: E402
from cnkispider.store.schema import round_, task  # noqa: E402

FIRST = dt.date(2023, 1, 1)


def seed(engine, days: int, codes: list[str], categories_file: Path) -> tuple[str, int]:
    name = "bench-grid"
    end = FIRST + dt.timedelta(days=days - 1)
    crawled_until = end - dt.timedelta(days=30)
    with engine.begin() as conn:
        task_id = conn.execute(
            task.insert().values(
                name=name,
                type="patent",
                start_date=FIRST.isoformat(),
                cur_date=crawled_until.isoformat(),
                cur_code=codes[-1],
                end_date=end.isoformat(),
                categories=str(categories_file),
                phase="crawl",
            )
        ).inserted_primary_key[0]
    rows = []
    n = 0
    last = ((crawled_until - FIRST).days + 1) * len(codes)
    for d in range((crawled_until - FIRST).days + 1):
        day = (FIRST + dt.timedelta(days=d)).isoformat()
        for code in codes:
            n += 1
            row = {"task_id": task_id, "day": day, "category": code, "state": "done"}
            row.update(stored=n % 40, total=n % 40, note=None)
            if n > last - 8:
                row.update(state="seeded", stored=None, total=None)
            elif n % 89 == 0:
                row.update(state="failed", note="ledger: listed 40, stored 38")
            elif n % 97 == 0:
                row.update(state="failed", note="http-500")
            rows.append(row)
    with engine.begin() as conn:
        for i in range(0, len(rows), 5000):
            conn.execute(round_.insert(), rows[i : i + 5000])
    return name, len(rows)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed_gets(url: str, runs: int) -> tuple[list[float], int]:
    times, size = [], 0
    for _ in range(runs):
        started = time.perf_counter()
        body = urllib.request.urlopen(url, timeout=120).read()
        times.append(time.perf_counter() - started)
        size = len(body)
    return times, size


def browser_visits(url: str, runs: int) -> list[float]:
    """Seconds from navigating to ``url`` until the grid's cells are in the page, in Debian's
    headless Chromium (a fresh page each visit; the first visit, warming up, is not counted)."""
    import shutil

    from playwright.sync_api import sync_playwright

    times = []
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=shutil.which("chromium"), headless=True)
        for i in range(runs + 1):
            page = chromium.new_page()
            started = time.perf_counter()
            page.goto(url, wait_until="commit")
            # #round follows the grid in the page: attached, the whole grid is parsed
            page.locator("#grid + #round").wait_for(state="attached", timeout=60_000)
            page.evaluate("() => new Promise(done => requestAnimationFrame(() => done()))")
            if i:
                times.append(time.perf_counter() - started)
            page.close()
        chromium.close()
    return times


def measure(
    db_url: str, label: str, days: int, n_categories: int, runs: int, browser: bool = False
) -> list[tuple]:
    import uvicorn

    from cnkispider.web import create_app
    from cnkispider.web.serve import UVICORN_OPTIONS

    work = Path(tempfile.mkdtemp(prefix="web-grid-"))
    codes = [f"K{i:03d}" for i in range(n_categories)]
    (work / "codes.txt").write_text("\n".join(codes) + "\n", encoding="utf-8")
    (work / "config.ini").write_text(
        f"[database]\nurl = {db_url}\n[redis]\nurl = redis://127.0.0.1:1/0\n", encoding="utf-8"
    )
    config = load_config(work / "config.ini", environ={})
    engine = open_database(db_url)
    started = time.perf_counter()
    name, count = seed(engine, days, codes, work / "codes.txt")
    print(f"{label}: seeded {count:,} rounds in {time.perf_counter() - started:.1f} s", flush=True)
    with engine.connect() as conn:
        some_round = conn.execute(sa.select(sa.func.min(round_.c.id))).scalar()
    port = _free_port()
    app = create_app(config, engine=engine, token="bench", sample_seconds=3600)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **UVICORN_OPTIONS)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    month = (FIRST + dt.timedelta(days=150)).strftime("%Y-%m")
    out = []
    try:
        for what, path in (
            (f"page: year ({days} days x {n_categories})", f"/tasks/{name}"),
            (f"page: month {month} (days x {n_categories})", f"/tasks/{name}?month={month}"),
            ("grid alone: year", f"/tasks/{name}/grid"),
            ("round (a cell's detail)", f"/rounds/{some_round}"),
        ):
            urllib.request.urlopen(base + path, timeout=120).read()  # warm: imports, templates
            times, size = timed_gets(base + path, runs)
            out.append((label, what, statistics.median(times), max(times), size))
        if browser:
            for what, path in (
                ("browser: the task page until its grid is drawn", f"/tasks/{name}"),
                ("browser month: the same for a month", f"/tasks/{name}?month={month}"),
            ):
                times = browser_visits(base + path, runs)
                out.append((label, what, statistics.median(times), max(times), 0))
    finally:
        server.should_exit = True
        thread.join(10)
        engine.dispose()
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--categories", type=int, default=600)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mysql", help="a MariaDB/MySQL server URL (a database is made there)")
    parser.add_argument(
        "--browser", action="store_true", help="also time visits in a headless Chromium"
    )
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        results += measure(
            f"sqlite:///{tmp}/grid.db",
            "SQLite",
            args.days,
            args.categories,
            args.runs,
            args.browser,
        )
    if args.mysql:
        import pymysql

        name = f"cnkibench_{uuid.uuid4().hex[:8]}"
        server = args.mysql.rstrip("/")
        try:
            results += measure(
                f"{server}/{name}?charset=utf8mb4",
                "MariaDB",
                args.days,
                args.categories,
                args.runs,
                args.browser,
            )
        finally:
            url = sa.engine.make_url(server)
            admin = pymysql.connect(
                host=url.host, port=url.port or 3306, user=url.username, password=url.password or ""
            )
            with admin.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            admin.close()
    print()
    print(f"| database | page | median | slowest | size (of {args.runs} GETs) |")
    print("|---|---|---|---|---|")
    for label, what, median, slowest, size in results:
        shown = f"{size / 1e3:,.0f} KB" if size else "-"
        print(f"| {label} | {what} | {median:.2f} s | {slowest:.2f} s | {shown} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
