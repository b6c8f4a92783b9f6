"""`cnkispider status` and the ProgressLog extension (issue: watching a crawl).

The crawl tests run two real workers on one task against the stand-in (MariaDB and the real
Redis), ask `cnkispider status --json` in a subprocess (as an operator on another PC would)
while they run, after one is killed with SIGKILL and after the other has finished, and check
every figure against the database read directly here. The other tests build the tables by
hand, with the clock injected, so rates, ETAs and liveness are exact.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa
from scrapy.exceptions import NotConfigured
from scrapy.http import Request, Response
from scrapy.utils.test import get_crawler

from cnkispider.cli import main
from cnkispider.runtime.addon import ADDONS
from cnkispider.status import collect, render, run_summary, watch
from cnkispider.status.progress import ProgressLog
from cnkispider.store.db import open_database
from cnkispider.store.schema import documents, error_code, error_link, round_, task, worker
from standin.client import start_site
from tests.fixtures import launcher, status_rows
from tests.fixtures.crawl_harness import CrawlSetup
from tests.fixtures.services import MYSQL_HOST, MYSQL_PORT, REDIS_URL, _mysql_admin
from tests.fixtures.status_rows import NOW, add_round, add_task, add_worker
from tests.fixtures.waiting import wait_until

engine = status_rows.engine  # the fixture: a SQLite database of the project's schema
ROOT = Path(__file__).resolve().parents[1]

# -- a crawl with two workers, watched --------------------------------------------------------------

# cap_rows 60 at page_size 20: 3 pages a search, so rounds split, and G06F (130 documents on
# the first day, a leaf) is beyond both sort orders: an errorCode "overflow" row. One document
# always fails: an errorLink row. Latency keeps the crawl going long enough to be watched.
SITE = {
    "seed": 5,
    "cap_rows": 60,
    "latency": "0.02-0.04",
    "overflow": ["patent:2024-01-01:G06F:130"],
}
DAYS = ("2024-01-01", "2024-01-02")
CATEGORIES = "G06,H04"


def status_json(setup: CrawlSetup) -> dict:
    """`cnkispider status --json` in its own process, as an operator on another machine runs it."""
    done = subprocess.run(
        setup.command("status", "--json"), cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["tasks"][0]


def database_view(engine, task_name: str) -> dict:
    """The figures status reports, read straight from the tables."""
    with engine.connect() as conn:
        task_id = conn.execute(sa.select(task.c.id).where(task.c.name == task_name)).scalar()
        states = dict(
            conn.execute(
                sa.select(round_.c.state, sa.func.count())
                .where(round_.c.task_id == task_id)
                .group_by(round_.c.state)
            ).all()
        )
        docs = documents["patent"]
        stored = conn.execute(
            sa.select(sa.func.count()).select_from(docs).where(docs.c.task_id == task_id)
        ).scalar()
        errors = {}
        for name, table in (("errorCode", error_code), ("errorLink", error_link)):
            rows = conn.execute(
                sa.select(table.c.state, table.c.reason).where(table.c.task_id == task_id)
            ).all()
            errors[name] = {
                "total": len(rows),
                "by_state": _count(r.state for r in rows),
                "by_reason": _count(r.reason for r in rows),
            }
        workers = {
            w.pid: w for w in conn.execute(sa.select(worker).where(worker.c.task_id == task_id))
        }
    return {"rounds": states, "documents": stored, "errors": errors, "workers": workers}


def _count(values) -> dict:
    out: dict = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


@pytest.fixture(scope="module")
def watched_crawl(tmp_path_factory):
    """Two workers crawl; status is sampled while both run, after one is killed, and at the end.

    Module-scoped: the three tests below read one crawl (about 20 s) instead of running three.
    """
    name = f"cnkit_{uuid.uuid4().hex[:10]}"
    admin = _mysql_admin()
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    admin.close()
    url = f"mysql+pymysql://root@{MYSQL_HOST}:{MYSQL_PORT}/{name}?charset=utf8mb4"
    # Slow pages while the workers are watched and one is killed: at the site's own pace a busy
    # machine's status subprocesses took so long that the crawl had ended (both workers
    # "stopped") before the kill, and the killed worker never showed as gone. Fast again after.
    site = start_site(**{**SITE, "latency": "0.3-0.4"})
    tmp = tmp_path_factory.mktemp("watched")
    setup = CrawlSetup(
        tmp,
        site,
        url,
        "patent",
        DAYS[0],
        DAYS[-1],
        CATEGORIES,
        cnki={"page_size": 20, "cap_rows": 60},
        # leases at their minimum: the survivor takes the killed worker's work over quickly
        crawl={
            "concurrent_requests": 2,
            "log_file": "",
            "lease_seconds": 5,
            "round_lease_seconds": 5,
            "heartbeat_seconds": 1,
        },
    )
    truth = setup.truth()
    site.control(doomed=[truth[3]["filename"]])
    engine = open_database(url)
    workers = [setup.spawn(), setup.spawn()]
    # Their consoles are read all along: a full pipe would stall a worker (and its heartbeats).
    consoles = [_drain(w) for w in workers]
    observed: dict = {"pids": [w.pid for w in workers]}
    try:

        def both_alive():  # both registered and heart-beating, documents coming in
            if not _has_task(engine, setup.task):
                return None
            before = database_view(engine, setup.task)
            report = status_json(setup)
            after = database_view(engine, setup.task)
            alive = report["worker_counts"]["alive"] == 2 and before["documents"] > 0
            return alive and (before, report, after)

        observed["running"] = wait_until(
            both_alive, 120, what="both workers alive in status", workers=workers
        )

        victim = workers[0]
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        killed_at = time.monotonic()

        seen: list = []

        def victim_gone():
            # each `status --json` is a fresh interpreter: on a busy machine it takes seconds
            report = status_json(setup)
            states = {w["pid"]: (w["state"], w["last_seen_age_seconds"]) for w in report["workers"]}
            seen.append((round(time.monotonic() - killed_at, 1), states))
            return states.get(victim.pid, ("",))[0] == "gone" and report

        report = wait_until(
            victim_gone,
            120,
            what=f"the killed worker (pid {victim.pid}) shown as gone",
            log=lambda: "\n".join(map(str, seen)),
        )
        observed["killed"] = (report, time.monotonic() - killed_at)
        site.control(latency=SITE["latency"])

        workers[1].wait(timeout=300)
        out = consoles[1]()
        assert workers[1].returncode == 0, out[-3000:]
        observed["final"] = (status_json(setup), database_view(engine, setup.task))
        client = redis.Redis.from_url(REDIS_URL)
        ns = f"cnki:{setup.task}"
        observed["redis"] = {
            "queued": client.zcard(f"{ns}:queue"),
            "leased": client.zcard(f"{ns}:leases"),
        }
        client.close()
        observed["summary"] = out
        yield observed
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
        engine.dispose()
        setup.cleanup_redis()
        site.stop()
        admin = _mysql_admin()
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        admin.close()


def _drain(process: subprocess.Popen):
    """Read ``process``'s stdout in a thread; returns a function that gives all of it once the
    process has ended."""
    chunks: list[str] = []
    reader = threading.Thread(target=lambda: chunks.extend(process.stdout), daemon=True)
    reader.start()

    def output() -> str:
        reader.join(30)
        return "".join(chunks)

    return output


def _has_task(engine, name: str) -> bool:
    with engine.connect() as conn:
        return conn.execute(sa.select(task.c.id).where(task.c.name == name)).first() is not None


@pytest.mark.xdist_group("status-watched-crawl")  # one crawl, read by all three
def test_status_while_two_workers_run_lies_between_two_reads_of_the_database(watched_crawl):
    """Counts only grow while a crawl runs: what status says lies between a read before it and one after."""
    before, report, after = watched_crawl["running"]
    pids = watched_crawl["pids"]
    assert sorted(w["pid"] for w in report["workers"] if w["state"] == "alive") == sorted(pids)
    assert report["rounds"]["total"] == len(DAYS) * 2
    finished = lambda view: view["rounds"].get("done", 0) + view["rounds"].get("failed", 0)  # noqa: E731
    assert finished(before) <= report["rounds"]["finished"] <= finished(after)
    assert before["documents"] <= report["documents"] <= after["documents"]
    assert report["queue"] is not None and report["activity"] == "running"
    for w in report["workers"]:  # heartbeats carry the workers' counters
        row = after["workers"][w["pid"]]
        assert w["host"] == row.host and 0 <= w["pages"] <= row.pages


@pytest.mark.xdist_group("status-watched-crawl")  # one crawl, read by all three
def test_a_worker_killed_with_sigkill_shows_as_gone_once_its_heartbeat_expires(watched_crawl):
    report, waited = watched_crawl["killed"]
    killed, survivor = watched_crawl["pids"]
    states = {w["pid"]: w["state"] for w in report["workers"]}
    # the survivor may already have finished the small task (a quiet console no longer stalls
    # it on a full stdout pipe): it is never "gone"
    assert states[killed] == "gone" and states[survivor] in ("alive", "stopped")
    gone = next(w for w in report["workers"] if w["pid"] == killed)
    # not before three heartbeats of 1 s were missed (how late a busy machine shows it is the
    # status subprocess's start-up: test_a_worker_is_alive_within_three_heartbeats_then_gone
    # checks the liveness rule itself on an injected clock)
    assert gone["last_seen_age_seconds"] > 3 * 1, waited


@pytest.mark.xdist_group("status-watched-crawl")  # one crawl, read by all three
def test_status_after_the_run_equals_the_database(watched_crawl):
    report, view = watched_crawl["final"]
    killed, survivor = watched_crawl["pids"]
    assert report["rounds"]["by_state"] == view["rounds"] == {"done": 4}
    assert (
        report["rounds"]["total"] == report["rounds"]["finished"] == 4 and report["progress"] == 1.0
    )
    assert report["documents"] == view["documents"] > 0
    assert report["errors"] == view["errors"]
    assert report["errors"]["errorCode"]["by_reason"].get("overflow", 0) >= 1
    assert report["errors"]["errorLink"]["total"] == 1
    assert report["worker_counts"] == {"alive": 0, "gone": 1, "stopped": 1}
    assert {w["pid"]: w["state"] for w in report["workers"]} == {
        killed: "gone",
        survivor: "stopped",
    }
    final = view["workers"][survivor]
    listed = next(w for w in report["workers"] if w["pid"] == survivor)
    assert (listed["pages"], listed["items"], listed["errors"]) == (
        final.pages,
        final.items,
        final.errors,
    )
    assert report["queue"] == watched_crawl["redis"] == {"queued": 0, "leased": 0}
    assert report["phase"] == "done" and report["activity"] == "finished"


@pytest.mark.xdist_group("status-watched-crawl")  # the one watched crawl
def test_a_worker_row_names_the_round_it_seeded_last(watched_crawl):
    """The heartbeat carries the round the worker seeded last (worker.current_round)."""
    _, view = watched_crawl["final"]
    named = {row.current_round for row in view["workers"].values()} - {None}
    assert named, "no worker row names a round"
    for current in named:
        day, category = current.split(" ")
        assert day in DAYS and category, current


# -- status from tables built by hand -----------------------------------------------------------------


def test_eta_comes_from_the_rounds_finished_lately(engine):
    """Four 10-minute rounds, one after the other, finished 30, 20, 10 min ago and now: 4 rounds
    in 40 min (first start to last finish) = 6 rounds/h."""
    with engine.begin() as conn:
        tid = add_task(conn)  # 5 days x 2 categories = 10 rounds
        for i, minutes in enumerate((30, 20, 10, 0)):
            add_round(
                conn,
                tid,
                f"2024-01-0{i // 2 + 1}",
                ("G06", "H04")[i % 2],
                "done",
                NOW - dt.timedelta(minutes=minutes),
            )
        add_round(
            conn, tid, "2024-01-01", "X99", "done", NOW - dt.timedelta(days=3)
        )  # too old to count
        add_worker(conn, tid, 1, NOW)  # with no live worker there is no ETA
    t = collect(engine, None, NOW)["tasks"][0]
    # X99 is no longer among the task's categories: counted in the total, so progress stays <= 100 %
    assert t["rounds"]["total"] == 11 and t["rounds"]["finished"] == 5
    assert t["rate"] == {"rounds_per_hour": 6.0, "rounds_counted": 4}
    assert t["eta_seconds"] == 3600 and t["eta_at"] == "2024-03-01T13:00:00Z"  # 6 rounds left


def test_a_worker_is_alive_within_three_heartbeats_then_gone(engine):
    with engine.begin() as conn:
        tid = add_task(conn)
        add_worker(conn, tid, 1, NOW - dt.timedelta(seconds=44))
        add_worker(conn, tid, 2, NOW - dt.timedelta(seconds=46))
        add_worker(conn, tid, 3, NOW - dt.timedelta(seconds=5), state="stopped")
        add_worker(conn, tid, 4, NOW - dt.timedelta(days=3))  # long gone: counted, not listed
    t = collect(engine, None, NOW, heartbeat_seconds=15)["tasks"][0]
    assert {w["pid"]: w["state"] for w in t["workers"]} == {1: "alive", 2: "gone", 3: "stopped"}
    assert t["worker_counts"] == {"alive": 1, "gone": 2, "stopped": 1}
    assert t["workers"][0]["pages_per_minute"] == 60.0  # 600 pages in 10 minutes


def test_a_heartbeat_carries_challenges_and_the_last_error_to_the_report(db_url):
    """Each worker's heartbeat writes the challenges it met and its last failure to its row;
    the report lists both per worker and sums the challenges per task, gone workers too."""
    from errors.middleware import last_error
    from tasks.flow import TaskStore

    engine = open_database(db_url)
    try:
        with engine.begin() as conn:
            tid = add_task(conn)
        store = TaskStore(engine)
        store.register_worker("pc:1:a", tid)
        store.register_worker("pc:2:b", tid)
        failure = last_error(
            "http-503",
            "Traceback (most recent call last):\n  ...\n"
            "GaveUp: http-503 via http://user:hunter22@10.0.0.1:8080/ after 4 attempts "
            + "x"
            * 400,
            "http://user:hunter22@10.0.0.1:8080/",
        )
        assert failure.startswith("http-503: GaveUp: http-503 via ") and "hunter22" not in failure
        store.heartbeat("pc:1:a", tid, pages=10, challenges=3, last_error=failure)
        store.heartbeat("pc:2:b", tid, pages=5, challenges=4, state="stopped")
        with engine.begin() as conn:  # a worker long gone still counts toward the task's sum
            conn.execute(
                worker.insert().values(
                    id="pc:3:c", task_id=tid, host="pc", pid=3, challenges=5, last_seen=NOW
                )
            )
        t = collect(engine, None)["tasks"][0]
        assert t["challenges"] == 12
        shown = {w["pid"]: (w["challenges"], w["last_error"]) for w in t["workers"]}
        assert shown == {1: (3, failure[:300]), 2: (4, None)}
        assert len(failure) > 300  # cut to the column by the heartbeat
    finally:
        engine.dispose()


def test_a_database_without_the_worker_columns_still_reports(sqlite_url):
    """Status read before any worker of this version upgraded the database: no challenges."""
    engine = open_database(sqlite_url)
    try:
        with engine.begin() as conn:
            tid = add_task(conn)
            add_worker(conn, tid, 1, NOW)
            for column in ("challenges", "last_error"):
                conn.exec_driver_sql(f"ALTER TABLE worker DROP COLUMN {column}")
        t = collect(engine, None, NOW)["tasks"][0]
        assert t["challenges"] == 0
        assert [(w["challenges"], w["last_error"]) for w in t["workers"]] == [(0, None)]
    finally:
        engine.dispose()


def test_a_bad_task_row_is_shown_with_its_reason(engine):
    with engine.begin() as conn:
        add_task(conn, "good")
        add_task(conn, "typo", end_date="2024-13-45")
    report = collect(engine, None, NOW)
    bad = report["tasks"][1]
    assert (bad["ok"], bad["problem"]) == (
        False,
        "end_date '2024-13-45' is not a date (YYYY-MM-DD)",
    )
    assert "task 2 'typo': BAD ROW, skipped by workers: end_date '2024-13-45'" in render(report)


def test_status_says_redis_is_unreachable_and_still_reports_the_database(
    tmp_path, sqlite_url, capsys
):
    engine = open_database(sqlite_url)
    with engine.begin() as conn:
        add_task(conn)
    engine.dispose()
    config = tmp_path / "config.ini"
    config.write_text(
        f"[database]\nurl = {sqlite_url}\n[redis]\nurl = redis://127.0.0.1:1/0\n", encoding="utf-8"
    )
    assert main(["--config", str(config), "status", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["redis"]["reachable"] is False and "not reachable" in report["redis"]["error"]
    assert report["tasks"][0]["queue"] is None and report["tasks"][0]["rounds"]["total"] == 10


def test_render_shows_progress_eta_errors_and_workers(engine):
    with engine.begin() as conn:
        tid = add_task(conn)
        for i, minutes in enumerate((30, 20, 10, 0)):
            add_round(
                conn,
                tid,
                f"2024-01-0{i // 2 + 1}",
                ("G06", "H04")[i % 2],
                "done",
                NOW - dt.timedelta(minutes=minutes),
            )
        add_round(conn, tid, "2024-01-03", "G06", "seeded", NOW, worker_id="pc:1:x")
        add_worker(conn, tid, 1, NOW)
        conn.execute(
            error_link.insert().values(
                task_id=tid,
                doc_type="patent",
                url="u",
                dbname="SCPD",
                filename="CN1",
                reason="verify",
                state="open",
            )
        )
    text = render(collect(engine, None, NOW))
    assert "[############..................]  40.0%  4 of 10 done, 1 in flight" in text
    # 10-minute rounds, one at a time, the one in flight due now: 5 more of 10 min, and the one
    # in flight at least a tenth of a round (issue 28: never "done" while a round runs)
    assert "6.0 rounds/h; ETA 51 min (Mar 1, 2024, 12:51:00 PM UTC)" in text
    assert "errorLink  1 (open 1); by reason: verify 1" in text
    assert "alive" in text and "2024-01-03 G06" in text


def test_watch_redraws_in_place_and_adds_the_rate_between_heartbeats(engine):
    stamps = iter([NOW, NOW + dt.timedelta(seconds=15)])
    pages = iter([600, 900])

    def sample():
        with engine.begin() as conn:
            conn.execute(worker.delete())
            add_worker(conn, tid, 1, next(stamps), pages=next(pages))
        return collect(engine, None, NOW + dt.timedelta(seconds=15))

    with engine.begin() as conn:
        tid = add_task(conn)
    out = _Stream()
    assert watch(sample, 1, as_json=True, stream=out, sleep=lambda s: None, count=2) == 0
    reports = [json.loads(line) for line in out.text.splitlines()]
    assert (
        reports[1]["tasks"][0]["workers"][0]["recent_pages_per_minute"] == 1200.0
    )  # 300 pages in 15 s


@pytest.mark.slow  # a command in a subprocess
def test_watch_exits_0_on_ctrl_c(tmp_path, sqlite_url):
    engine = open_database(sqlite_url)
    engine.dispose()
    config = tmp_path / "config.ini"
    config.write_text(
        f"[database]\nurl = {sqlite_url}\n[redis]\nurl = {REDIS_URL}\n", encoding="utf-8"
    )
    proc = launcher.Popen(
        [
            sys.executable,
            "-m",
            "cnkispider.cli",
            "--config",
            str(config),
            "status",
            "--watch",
            "0.2",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # a hang shows where: SIGABRT below dumps every thread's stack to stderr
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        # Ctrl-C as in a terminal: a suite started in the background (`make test &`) passes
        # SIGINT on ignored, and Python then never raises KeyboardInterrupt (seen: the watch
        # still sleeping 120 s after the SIGINT)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # What the terminal shows, and its errors, read as they come: a pipe nobody reads fills
    # up and stops the program at its next write, Ctrl-C or not.
    shown: list[bytes] = []
    errors: list[bytes] = []
    readers = [
        threading.Thread(target=lambda: shown.extend(iter(proc.stdout.read1, b""))),
        threading.Thread(target=lambda: errors.extend(iter(proc.stderr.read1, b""))),
    ]
    for reader in readers:
        reader.start()

    def refreshed() -> bool:  # a report, then the screen cleared again: --watch goes on
        out = b"".join(shown)
        return b"no tasks yet" in out and out.count(b"\x1b[H\x1b[2J") >= 2

    wait_until(refreshed, 120, what="two reports", workers=[proc])
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        proc.wait(30)
    for reader in readers:
        reader.join(10)
    out, err = b"".join(shown), b"".join(errors)
    assert (out[:7], proc.returncode) == (b"\x1b[H\x1b[2J", 0), err.decode()[-2000:]
    assert b"no tasks yet" in out


class _Stream:
    def __init__(self):
        self.text = ""

    def write(self, text):
        self.text += text

    def flush(self):
        pass


# -- ProgressLog --------------------------------------------------------------------------------------


def test_progress_log_line_has_worker_rounds_rates_and_new_errors(caplog):
    crawler = get_crawler(settings_dict={"ADDONS": ADDONS, "PROGRESS_INTERVAL": 30})
    progress = ProgressLog.from_crawler(crawler)
    progress.worker_id = "srv:42:abc"
    stats = crawler.stats
    stats.set_value("response_received_count", 120)
    stats.set_value("item_scraped_count", 50)
    stats.set_value("rounds/done", 3)
    stats.set_value("errors/detail/verify", 2)
    stats.set_value("errors/list/captcha", 1)
    for round_id, category in ((7, "G06"), (7, "G06F"), (8, "H04")):
        request = Request(
            "https://example.com",
            meta={
                "round_id": round_id,
                "search": {"day_start": "2024-01-03", "category": category},
            },
        )
        progress.response_received(Response("https://example.com", request=request), request)
    with caplog.at_level("INFO", logger="cnkispider.progress"):
        progress.log()
        stats.set_value("errors/detail/verify", 3)
        progress.log()
    first, second = (r.getMessage() for r in caplog.records)
    assert first == (
        "Progress of worker srv:42:abc: rounds 2024-01-03 G06, 2024-01-03 H04; 240 pages/min, "
        "100 items/min (120 pages, 50 items, 3 rounds done); 3 errors (+3: detail/verify 2, list/captcha 1)"
    )
    assert second.endswith(
        "rounds none; 0 pages/min, 0 items/min (120 pages, 50 items, 3 rounds done); "
        "4 errors (+1: detail/verify 1)"
    )


def test_progress_log_switched_off():
    for settings in ({"PROGRESS_ENABLED": False}, {"PROGRESS_INTERVAL": 0}):
        with pytest.raises(NotConfigured):
            ProgressLog.from_crawler(get_crawler(settings_dict={"ADDONS": ADDONS, **settings}))


@pytest.mark.slow  # a command in a subprocess
def test_status_runs_without_a_database_file_and_says_so(tmp_path):
    config = tmp_path / "config.ini"
    config.write_text(f"[database]\nurl = sqlite:///{tmp_path / 'none.db'}\n", encoding="utf-8")
    done = launcher.run(
        [sys.executable, "-m", "cnkispider.cli", "--config", str(config), "status"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "no database at" in done.stderr
    assert not (tmp_path / "none.db").exists()


def test_run_summary_gives_rounds_documents_errors_by_reason_time_and_rate(engine):
    with engine.begin() as conn:
        tid = add_task(conn, "sum")
        for i in range(4):
            add_round(conn, tid, f"2024-01-0{i // 2 + 1}", ("G06", "H04")[i % 2], "done", NOW)
        for reason in ("overflow", "overflow", "captcha"):
            conn.execute(
                error_code.insert().values(
                    task_id=tid,
                    day="2024-01-01",
                    category="G06",
                    reason=reason,
                    state="permanent" if reason == "overflow" else "open",
                )
            )
    stats = {
        "elapsed_seconds": 120.0,
        "response_received_count": 600,
        "item_scraped_count": 500,
        "rounds/done": 4,
        "finish_reason": "finished",
        "errors/list/captcha": 1,
    }
    text = run_summary(engine, "sum", stats)
    assert "rounds          4 of 10 done, 0 in flight; 4 completed by this worker" in text
    assert "documents       0 stored for this task (500 this run)" in text
    assert "time            2 min (120.0 s)" in text
    assert (
        "rate            5.0 pages/s, 250 items/min (this worker); - rounds/h (the task's, as "
        "status shows it)" in text
    )
    assert (
        "errorCode       3 rows (open 1, permanent 2)\n  overflow                     2\n  captcha"
        in text
    )
    assert "  list/captcha                 1" in text


def test_a_halted_task_shows_its_reason_no_eta_and_the_way_on(engine):
    with engine.begin() as conn:
        tid = add_task(conn, "halt")
        add_worker(conn, tid, 1, NOW)  # a worker still alive, about to stop
        for i in range(2):
            add_round(
                conn, tid, "2024-01-01", ("G06", "H04")[i], "done", NOW - dt.timedelta(minutes=i)
            )
        conn.execute(
            task.update()
            .where(task.c.id == tid)
            .values(halt_reason="rejected: 查询对象结构错误, 没有指定检索分类！", halted_at=NOW)
        )
        other = add_task(conn, "fine")
    report = collect(engine, None, NOW)
    halted, fine = report["tasks"]
    assert halted["halted"] == "rejected: 查询对象结构错误, 没有指定检索分类！"
    assert halted["halted_at"] == NOW.isoformat() + "Z" and halted["activity"] == "halted"
    assert halted["eta_seconds"] is None
    assert fine["id"] == other and fine["halted"] is None and fine["activity"] != "halted"
    text = render(report)
    assert "[halted]" in text
    assert "  halted: rejected: 查询对象结构错误, 没有指定检索分类！  (since " in text
    assert "`cnkispider task resume halt` goes on" in text
    summary = run_summary(engine, "halt", {"finish_reason": "halted", "elapsed_seconds": 1.0})
    assert "halted          rejected: 查询对象结构错误, 没有指定检索分类！" in summary


def test_a_stopped_task_shows_stopped_not_finished(engine):
    with engine.begin() as conn:
        done = add_task(
            conn,
            "ran-to-the-end",
            end_date="2024-01-02",
            cur_date="2024-01-02",
            cur_code="H04",
            phase="done",
        )
        stopped = add_task(
            conn,
            "stopped",
            end_date="2024-01-01",
            cur_date="2024-01-02",
            cur_code="G06",
            phase="done",
        )
    report = {t["id"]: t for t in collect(engine, None, NOW)["tasks"]}
    assert report[done]["activity"] == "finished"
    assert report[stopped]["activity"] == "stopped"
    assert "phase done  [stopped]" in render(collect(engine, None, NOW, task_name="stopped"))


# -- issue 14: an ETA that holds, status on an idle embedded Redis, a real finish reason ----------


def _steady_crawl(total: int, lanes: int, duration: float, stagger: float):
    """Rounds of ``duration`` s on ``lanes`` lanes, lane i starting at i * stagger: each lane
    takes its next round the moment one finishes. Returns (start, end) per round, in order."""
    rounds = []
    free = [i * stagger for i in range(lanes)]
    for _ in range(total):
        lane = min(range(lanes), key=lambda i: free[i])
        start = free[lane]
        free[lane] = start + duration
        rounds.append((start, start + duration))
    return rounds


@pytest.mark.parametrize(("lanes", "stagger"), [(4, 0.0), (4, 10.0), (1, 0.0), (8, 3.0)])
def test_the_eta_holds_within_25_percent_in_a_steady_crawl_on_a_fixed_clock(lanes, stagger):
    from cnkispider.status.rates import round_rate_eta

    rounds = _steady_crawl(total=40, lanes=lanes, duration=40.0, stagger=stagger)
    end = max(e for _, e in rounds)
    first_finish = min(e for _, e in rounds)
    checked = 0
    now = first_finish + 0.5
    while now < end - 10:  # the last seconds: any estimate is within seconds, not percent
        finished = [r for r in rounds if r[1] <= now][-50:]
        in_flight = [s for s, e in rounds if s <= now < e]
        remaining = len(rounds) - len([r for r in rounds if r[1] <= now])
        _, eta = round_rate_eta(finished, in_flight, remaining, now)
        actual = end - now
        assert abs(eta - actual) <= 0.25 * actual, (now, eta, actual)
        checked += 1
        now += 1.0
    assert checked > 100


def test_the_old_eta_said_22_s_with_81_s_left():
    """Four rounds that finished together a second ago: the rate is not 3 rounds a second."""
    from cnkispider.status.rates import round_rate_eta

    finished = [(0.0, 40.0)] * 4
    _, eta = round_rate_eta(finished, [40.0] * 4, 8, now=41.0)
    assert 70 <= eta <= 80  # 4 in flight, 39 s to go, then 4 more of 40 s


def test_status_on_an_embedded_redis_that_is_not_running_says_queue_unknown(engine, tmp_path):
    from cnkispider.store.redisconn import EMBEDDED_IDLE, connect_if_running

    client, label, error = connect_if_running("", tmp_path)
    assert client is None and error == EMBEDDED_IDLE
    with engine.begin() as conn:
        add_task(conn)
    text = render(collect(engine, None, NOW, redis_label=label, redis_error=error))
    assert "UNREACHABLE" not in text
    assert (
        f"Redis    {label}: not running (it runs while a worker of this machine does); queue unknown"
        in text
    )
    assert "  queue      unknown (the embedded Redis is not running)" in text


def test_a_forced_stop_has_a_real_finish_reason_in_the_summary(engine):
    from cnkispider.status import run_summary

    with engine.begin() as conn:
        add_task(conn)
    name = collect(engine, None, NOW)["tasks"][0]["name"]
    text = run_summary(engine, name, {"elapsed_seconds": 3.0})  # no finish_reason: a second Ctrl-C
    assert (
        "finish reason   forced stop (a second Ctrl-C;" in text and "?" not in text.split("\n")[2]
    )


def test_the_progress_line_gives_percent_rate_and_eta_per_task():
    from cnkispider.status.progress import task_line

    entry = {
        "name": "q1",
        "phase": "crawl",
        "halted": None,
        "progress": 0.25,
        "eta_seconds": 600,
        "rounds": {"total": 56, "finished": 14, "in_flight": 3},
        "rate": {"rounds_per_hour": 84.0},
    }
    msg, args = task_line(entry)
    assert (
        msg % args
        == "Task q1 (crawl): 14 of 56 rounds done (25.0%), 3 in flight; 84.0 rounds/h; ETA 10 min"
    )


def test_the_progress_log_announces_the_change_from_crawl_to_recrawl(caplog):
    progress = ProgressLog.from_crawler(
        get_crawler(settings_dict={"ADDONS": ADDONS, "PROGRESS_INTERVAL": 30})
    )
    entry = {
        "name": "q1",
        "phase": "crawl",
        "halted": None,
        "progress": 1.0,
        "eta_seconds": 0,
        "rounds": {"total": 4, "finished": 4, "in_flight": 0},
        "rate": {"rounds_per_hour": 60.0},
        "errors": {"errorCode": {"total": 2}, "errorLink": {"total": 5}},
    }
    with caplog.at_level("INFO", logger="cnkispider.progress"):
        progress._log_task(entry)
        progress._log_task({**entry, "phase": "recrawl"})
        progress._log_task({**entry, "phase": "recrawl"})
    announced = [r.getMessage() for r in caplog.records if "->" in r.getMessage()]
    assert announced == [
        "task q1: phase crawl -> recrawl (replaying 2 errorCode and 5 errorLink rows)"
    ]


def test_the_quiet_console_drops_scrapy_info_and_the_second_round_line_but_keeps_warnings():
    import logging

    from cnkispider.watch.logs import console_shows

    def record(name, level):
        return logging.LogRecord(name, level, __file__, 1, "m", None, None)

    assert not console_shows(record("scrapy.core.engine", logging.INFO))
    assert not console_shows(
        record("cnkispider.scheduling.scheduler", logging.INFO)
    )  # "Round N drained"
    assert console_shows(record("scrapy.core.engine", logging.WARNING))
    assert console_shows(record("tasks.feeder", logging.INFO))  # "round N done"
    assert console_shows(record("cnkispider.progress", logging.INFO))


def test_a_task_with_work_and_no_live_worker_says_the_command_that_crawls_it(engine):
    """Issue 41: `cnkispider run` alone crawls config.ini's task; the status names this one
    (quoted where a shell would split its name)."""
    with engine.begin() as conn:
        add_task(conn, name="q 2")
        add_task(conn, name="q3")
    text = render(collect(engine, None, NOW))
    assert 'no worker is alive (start one: `cnkispider run --task "q 2"`)' in text
    assert "no worker is alive (start one: `cnkispider run --task q3`)" in text
