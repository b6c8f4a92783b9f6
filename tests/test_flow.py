"""Flow control against the real MariaDB and SQLite: order, exclusivity, leases, steering, bad rows."""

from __future__ import annotations

import datetime as dt
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import sqlalchemy as sa

from cnkispider.clock import BEIJING
from cnkispider.store.db import open_database
from cnkispider.store.schema import round_, task, worker
from tasks.flow import TaskStore
from tests.fixtures.waiting import wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def store_for(url, **kw) -> TaskStore:
    return TaskStore(open_database(url), **kw)


def drain(store, task_id, worker="w:1:x", limit=10_000):
    got = []
    for _ in range(limit):
        claimed = store.claim(task_id, worker)
        if claimed is None:
            break
        got.append((claimed.day, claimed.category))
    return got


def test_rounds_walk_categories_then_days(db_url):
    store = store_for(db_url)
    t, _ = store.register("order", "paper", "2024-01-30", "2024-02-01", "A,B,C")
    assert drain(store, t.id) == [
        (day, code) for day in ("2024-01-30", "2024-01-31", "2024-02-01") for code in "ABC"
    ]


def test_builtin_tree_hands_out_its_roots_in_file_order(sqlite_url):
    store = store_for(sqlite_url)
    t, _ = store.register("ipc", "patent", "2024-01-01", "2024-01-01")
    assert [code for _, code in drain(store, t.id)] == list("ABCDEFGH")


def _claim_all(url, task_id, worker, out, ready, go):
    store = store_for(url)
    store.get(task_id)  # connected and warm before the race starts
    ready.release()
    go.wait(60)
    got = []
    while True:
        claimed = store.claim(task_id, worker)
        if claimed is None:
            break
        got.append(claimed.id)
        # A real worker crawls between claims. Without any pause, SQLite's busy handler (which
        # backs off) lets a tight loop re-take the write lock every time and starve the other.
        time.sleep(0.001)
    out.put(got)


@pytest.mark.slow  # two processes claim 1000 rounds: 4 to 6 s of CPU
def test_two_processes_claim_1000_rounds_each_exactly_once(db_url):
    store = store_for(db_url)
    codes = ",".join(f"C{i}" for i in range(10))
    t, _ = store.register("race", "paper", "2024-01-01", "2024-04-09", codes)  # 100 days x 10
    ctx = multiprocessing.get_context("spawn")
    out, ready, go = ctx.Queue(), ctx.Semaphore(0), ctx.Event()
    procs = [
        ctx.Process(target=_claim_all, args=(db_url, t.id, f"w:{i}:x", out, ready, go))
        for i in (1, 2)
    ]
    for proc in procs:
        proc.start()
    for _ in procs:
        assert ready.acquire(timeout=120)
    go.set()  # both claim at once: the race is real
    results = [out.get(timeout=240) for _ in procs]
    for proc in procs:
        proc.join(30)
    first, second = map(set, results)
    assert not first & second, "a round was handed out twice"
    assert len(first) + len(second) == 1000 and first and second
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(round_.c.day, round_.c.category)).all()
    assert len(set(rows)) == 1000


HOLDER = textwrap.dedent(
    """
    import sys, time
    from cnkispider.store.db import open_database
    from tasks.flow import TaskStore
    store = TaskStore(open_database(sys.argv[1]), round_lease=5)
    claimed = store.claim(int(sys.argv[2]), "holder:1:x")
    print(claimed.id, flush=True)
    time.sleep(600)
    """
)


@pytest.mark.slow  # a command in a subprocess
def test_killed_worker_loses_its_round_to_another_after_the_lease(db_url):
    """(A lease of 5 s, not 2: the claim right after the kill must fall inside it, and on a busy
    machine starting, killing and reaping the holder can take seconds.)"""
    store = store_for(db_url, round_lease=5)
    t, _ = store.register("lease", "paper", "2024-01-01", "2024-01-01", "A,B,C")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, db_url, str(t.id)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    held = int(holder.stdout.readline())
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    before = store.claim(t.id, "other:2:x")
    assert before is not None and before.id != held, "the lease was not respected"
    time.sleep(6.1)  # time passing is the point: the lease (5 s, in whole seconds) runs out
    after = store.claim(t.id, "other:2:x")
    assert after.id == held and after.attempts == 2


@pytest.mark.timing  # a beat each second must reach the database within the 2 s lease
def test_heartbeat_keeps_a_slow_round(sqlite_url):
    store = store_for(sqlite_url, round_lease=2)
    t, _ = store.register("beat", "paper", "2024-01-01", "2024-01-01", "A,B")
    store.register_worker("slow:1:x", t.id)
    mine = store.claim(t.id, "slow:1:x")
    for _ in range(4):
        time.sleep(1)
        store.heartbeat("slow:1:x", t.id)
    taken = store.claim(t.id, "fast:2:x")
    assert taken is not None and taken.id != mine.id


def test_lost_redis_epoch_hands_a_seeded_round_out_again(sqlite_url):
    store = store_for(sqlite_url)
    t, _ = store.register("epoch", "paper", "2024-01-01", "2024-01-01", "A")
    seeded = store.claim(t.id, "w:1:x", epoch="e1")
    assert store.mark_seeded(seeded.id, "w:1:x", "e1")
    assert store.claim(t.id, "w:2:x", epoch="e1") is None
    replay = store.claim(t.id, "w:2:x", epoch="e2")
    assert replay.id == seeded.id and replay.attempts == 2


def test_a_taken_over_round_counts_its_listed_total_once(db_url):
    """Issue 15's second defect: a round taken over (a lost worker, a lost Redis) kept the total
    of its first attempt, and its re-seeded search added it again: 2 x the listed rows."""
    store = store_for(db_url)
    t, _ = store.register("retotal", "paper", "2024-01-01", "2024-01-01", "A")
    first = store.claim(t.id, "w:1:x", epoch="e1")
    assert store.mark_seeded(first.id, "w:1:x", "e1")
    store.set_total(first.id, 120)  # the first attempt's search listed 120 rows
    again = store.claim(t.id, "w:2:x", epoch="e2")  # Redis lost its data: replayed in full
    assert again.id == first.id
    store.set_total(again.id, 120)  # the replay's search lists the same 120
    with store.engine.connect() as conn:
        row = conn.execute(
            sa.select(round_.c.total, round_.c.stored).where(round_.c.id == first.id)
        ).one()
    assert row.total == 120


def test_a_claimed_round_its_worker_could_not_seed_is_handed_back_not_held(db_url):
    """A worker that claimed a round and then failed to seed it (its task row edited into
    nonsense since the claim) held it claimed for good: its heartbeat renewed the lease of every
    round it held. A released claim survives that worker's heartbeats and is taken over."""
    store = store_for(db_url)
    t, _ = store.register("release", "paper", "2024-01-01", "2024-01-01", "A")
    claimed = store.claim(t.id, "w:1:x", epoch="e1")
    assert store.release_claim(claimed.id, "w:1:x")
    store.heartbeat("w:1:x", t.id)  # the live worker's next beat must not take it back
    again = store.claim(t.id, "w:1:x", epoch="e1")
    assert again is not None and again.id == claimed.id
    assert not store.release_claim(claimed.id, "w:2:x")  # only its holder hands a claim back


def test_a_beat_late_from_its_thread_does_not_undo_the_goodbye(db_url):
    """A worker's heartbeats run in threads; one on its way when the worker said goodbye
    ("stopped", at spider_closed) used to land after it: the row read "running" again and,
    the beats over, status counted the worker "gone" (a clean run's watched crawl saw it)."""
    store = store_for(db_url)
    t, _ = store.register("goodbye", "paper", "2024-01-01", "2024-01-01", "A")
    store.register_worker("bye:1:x", t.id)
    claimed = store.claim(t.id, "bye:1:x")
    store.heartbeat("bye:1:x", t.id, state="stopped")
    with store.engine.connect() as conn:
        lease = conn.execute(sa.select(round_.c.lease_until).where(round_.c.id == claimed.id))
        lease_before = lease.scalar()
    store.heartbeat("bye:1:x", t.id, pages=9)  # the late beat
    with store.engine.connect() as conn:
        row = conn.execute(sa.select(worker.c.state, worker.c.pages)).one()
        lease = conn.execute(sa.select(round_.c.lease_until).where(round_.c.id == claimed.id))
        assert lease.scalar() == lease_before  # nor are its leases renewed
    assert tuple(row) == ("stopped", 0)


class ClaimLoop:
    """A worker claiming (and finishing) rounds in the background while the operator edits."""

    def __init__(self, store, task_id):
        self.store, self.task_id, self.got = store, task_id, []
        self.idle = 0  # claims that found nothing due
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            claimed = self.store.claim(self.task_id, "loop:1:x")
            if claimed is None:
                self.idle += 1
                time.sleep(0.02)
                continue
            self.got.append((claimed.day, claimed.category))
            self.store.mark_done(claimed.id, total=0)

    def settle(self):
        """Wait until the loop has drained what is due: a claim that started after this call
        (after the operator's edit was committed) found nothing. Two more idle claims: the first
        may have begun before the call."""
        idle = self.idle
        wait_until(lambda: self.idle >= idle + 2, 60, what="the claim loop to find nothing due")

    def close(self):
        self.stop.set()
        self.thread.join(10)


def operator_sets(url, task_id, **values):
    """An UPDATE as an operator would type it in a MySQL client (a separate connection)."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(task.update().where(task.c.id == task_id).values(**values))
    engine.dispose()


def test_steering_while_a_claim_loop_runs(db_url):
    store = store_for(db_url)
    t, _ = store.register("steer", "paper", "2024-01-01", "2024-01-02", "A,B")
    loop = ClaimLoop(store, t.id)
    try:
        loop.settle()
        assert loop.got == [
            ("2024-01-01", "A"),
            ("2024-01-01", "B"),
            ("2024-01-02", "A"),
            ("2024-01-02", "B"),
        ]

        # extend: a later end_date goes on from the cursor
        operator_sets(db_url, t.id, end_date="2024-01-03")
        loop.settle()
        assert loop.got[4:] == [("2024-01-03", "A"), ("2024-01-03", "B")]

        # move the cursor back: the next round follows it
        operator_sets(db_url, t.id, cur_date="2024-01-01", cur_code="A")
        loop.settle()
        assert loop.got[6] == ("2024-01-01", "B")

        # stop: end_date earlier than cur_date hands out nothing more
        operator_sets(db_url, t.id, cur_date="2024-01-03", cur_code=None, end_date="2024-01-02")
        count = len(loop.got)
        loop.settle()
        assert len(loop.got) == count

        # empty end_date: up to today, moving with the calendar
        today = (dt.datetime.now(dt.UTC).replace(tzinfo=None) + BEIJING).date()
        operator_sets(
            db_url,
            t.id,
            cur_date=(today - dt.timedelta(days=1)).isoformat(),
            cur_code="B",
            end_date=None,
        )
        loop.settle()
        assert loop.got[count:] == [(today.isoformat(), "A"), (today.isoformat(), "B")]
    finally:
        loop.close()


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"end_date": "2024-13-01"}, "end_date '2024-13-01' is not a date"),
        ({"cur_date": "yesterday"}, "cur_date 'yesterday' is not a date"),
        ({"type": "thesis"}, "type 'thesis' is unknown"),
        ({"cur_code": "ZZ"}, "cur_code 'ZZ' is not one of the task's categories"),
        ({"end_date": "2023-06-01"}, "end_date 2023-06-01 is before start_date 2024-01-01"),
        # issue 41: a cursor before the start crawled days that are not the task's
        ({"cur_date": "2019-01-01"}, "cur_date 2019-01-01 is before start_date 2024-01-01"),
        ({"categories": "/no/such/file.txt"}, "categories: cannot read category file"),
    ],
)
def test_bad_task_row_is_reported_once_and_skipped(db_url, values, problem, caplog):
    store = store_for(db_url)
    bad, _ = store.register("bad", "paper", "2024-01-01", "2024-01-05", "A,B")
    good, _ = store.register("good", "paper", "2024-01-01", "2024-01-05", "A,B")
    operator_sets(db_url, bad.id, **values)
    with caplog.at_level(logging.ERROR, logger="tasks.flow"):
        claims = [store.claim([bad.id, good.id], "w:1:x") for _ in range(3)]
    assert all(c is not None and c.task_id == good.id for c in claims)
    reports = [r.getMessage() for r in caplog.records if f"task {bad.id}:" in r.getMessage()]
    assert len(reports) == 1 and problem in reports[0]


def test_names_from_input_never_become_sql(db_url):
    store = store_for(db_url)
    name = "x'); DROP TABLE task; --"
    t, created = store.register(name, "paper", "2024-01-01", "2024-01-01", "A")
    assert created and store.get(name).id == t.id and len(store.rows()) == 1


def test_exactly_one_caller_finishes_the_crawl_phase(db_url):
    store = store_for(db_url)
    t, _ = store.register("finish", "paper", "2024-01-01", "2024-01-01", "A,B")
    rounds = [store.claim(t.id, "w:1:x") for _ in range(2)]
    store.mark_done(rounds[0].id, total=0)
    assert store.finish_crawl_phase(t.id) is False  # one round still in flight
    store.mark_done(rounds[1].id, total=0)
    assert [store.finish_crawl_phase(t.id) for _ in range(3)] == [True, False, False]
    assert store.get(t.id).phase == "recrawl"


def test_stop_on_the_first_day_is_a_valid_row(sqlite_url):
    store = store_for(sqlite_url)
    t, _ = store.register("early", "paper", "2024-01-01", "2024-01-03", "A,B")
    stopped = store.stop(t.id)
    assert stopped.end_date == dt.date(2023, 12, 31) and store.claim(t.id, "w:1:x") is None
    store.set_end_date(t.id, "2024-01-01")
    assert store.claim(t.id, "w:1:x").day == "2024-01-01"


def _edit(path, text):
    """Rewrite a categories file so that its size and mtime both change (as an editor would)."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(before + 2_000_000_000, before + 2_000_000_000))


def test_a_categories_file_edited_while_workers_run_is_read_again_and_no_round_is_missed(
    db_url, tmp_path
):
    """issue 13: each worker cached the file for ever: rounds of added categories were never
    crawled, yet the task finished (6 of 8 rounds). Now the file is read again when it changes;
    roots added after the cursor are walked, roots added before it get their missing rounds,
    and the crawl phase does not finish while any (day x category) round is missing."""
    cats = tmp_path / "cats.txt"
    _edit(cats, "A\nC\n")
    store = store_for(db_url, base_dir=tmp_path)
    t, _ = store.register("edit", "paper", "2024-01-01", "2024-01-02", "cats.txt")
    got = [store.claim(t.id, "w:1:x") for _ in range(2)]
    assert [(r.day, r.category) for r in got] == [("2024-01-01", "A"), ("2024-01-01", "C")]
    # edited while the cursor is on day 1's last root: B before it, D after it
    _edit(cats, "A\nB\nC\nD\n")
    rest = drain(store, t.id)
    assert rest[0] == ("2024-01-01", "D")  # the cursor walks on in the new file
    expected = {(d, c) for d in ("2024-01-01", "2024-01-02") for c in "ABCD"}
    assert {(r.day, r.category) for r in got} | set(rest) == expected
    assert len(rest) + len(got) == len(expected)  # each exactly once
    assert store.missing_rounds(t.id) == []


def test_the_crawl_phase_does_not_finish_while_a_round_is_missing(db_url, tmp_path):
    cats = tmp_path / "cats.txt"
    _edit(cats, "A\nC\n")
    store = store_for(db_url, base_dir=tmp_path)
    t, _ = store.register("gap", "paper", "2024-01-01", "2024-01-01", "cats.txt")
    drain(store, t.id)
    rounds = store_rounds(db_url, t.id)
    for round_id in rounds:
        assert store.mark_done(round_id, total=0)
    _edit(cats, "A\nB\nC\n")  # B added behind the cursor after every round was done
    assert store.missing_rounds(t.id) == [(dt.date(2024, 1, 1), "B")]
    assert not store.finish_crawl_phase(t.id)
    late = store.claim(t.id, "w:1:x")
    assert (late.day, late.category) == ("2024-01-01", "B")
    assert store.claim(t.id, "w:1:x") is None
    assert not store.finish_crawl_phase(t.id)  # B is in flight
    assert store.mark_done(late.id, total=0)
    assert store.finish_crawl_phase(t.id)


def store_rounds(url, task_id):
    engine = open_database(url)
    with engine.connect() as conn:
        ids = list(
            conn.execute(sa.select(round_.c.id).where(round_.c.task_id == task_id)).scalars()
        )
    engine.dispose()
    return ids


def test_days_skipped_by_moving_the_cursor_stay_skipped(sqlite_url):
    store = store_for(sqlite_url)
    t, _ = store.register("skip", "paper", "2024-01-01", "2024-01-05", "A,B")
    assert drain(store, t.id, limit=2) == [("2024-01-01", "A"), ("2024-01-01", "B")]
    operator_sets(sqlite_url, t.id, cur_date="2024-01-04", cur_code="B")
    assert drain(store, t.id) == [("2024-01-05", "A"), ("2024-01-05", "B")]
    assert store.missing_rounds(t.id) == []


# -- a worker's start and its feeding, in real crawls of the stand-in ---------------------------


@pytest.mark.slow  # a crawl in a worker subprocess
def test_a_database_error_at_start_stops_the_worker_at_once_with_its_cause(crawl_setup):
    """issue 13: a category list longer than its column (a DataError in spider_opened) left the
    worker idle, to say "no task" later. Now it stops at once, the cause in one line."""
    # finer codes under a known one (each passes the category check at start): 683 characters >
    # task.categories' 500
    codes = ",".join(f"G06F{i}" for i in range(1, 100))
    setup = crawl_setup("patent", codes, "mysql", end="2024-01-01", site={"seed": 11})
    try:  # at once: before, it stayed idle for good (a generous bound: the machine may be busy)
        result = setup.run(timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail("the worker did not stop: " + setup.log()[-2000:])
    assert result.returncode != 0
    log = setup.log()
    lines = [line for line in log.splitlines() if "cannot start:" in line]
    assert len(lines) == 1, log[-3000:]
    assert "DataError" in lines[0] and "Data too long for column 'categories'" in lines[0]
    assert "Traceback" not in log


@pytest.mark.slow  # a crawl in a worker subprocess
def test_a_task_row_broken_mid_run_is_reported_once_then_quiet_and_taken_up_again_when_fixed(
    crawl_setup, cnki_site, mysql_url
):
    """issue 13: a bad task row was reported once, then a 20-line traceback every second."""
    site = cnki_site(seed=11, latency="0.05")
    # debug: a round's "seeded" line is a DEBUG line since issue 41 (logs: a line a minute)
    crawl = {"concurrent_requests": 2, "log_level": "debug"}
    setup = crawl_setup("patent", "G06,H04", "mysql", site=site, crawl=crawl)
    worker = setup.spawn()
    try:
        wait_until(lambda: "seeded" in setup.log(), 60, workers=[worker], log=setup.log)
        row = setup.query(sa.select(task.c.id, task.c.cur_date, task.c.cur_code))[0]
        operator_sets(mysql_url, row.id, cur_code="ZZ")
        wait_until(  # seen at the next claim (once the queue runs short)
            lambda: "cur_code 'ZZ' is not one of" in setup.log(),
            90,
            workers=[worker],
            log=setup.log,
        )
        time.sleep(6)  # six feeds at least
        assert worker.poll() is None, setup.log()[-3000:]
        broken = setup.log()
        operator_sets(mysql_url, row.id, cur_code=row.cur_code)  # fixed: the worker goes on
        output = worker.communicate(timeout=200)[0]
    finally:
        if worker.poll() is None:
            worker.kill()
    reports = [line for line in broken.splitlines() if "cur_code 'ZZ' is not one of" in line]
    assert len(reports) == 1, broken[-3000:]
    assert "Traceback" not in broken and "flow control:" not in broken
    assert worker.returncode == 0, output[-2000:] + setup.log()[-3000:]
    assert len(setup.stored()) == len(
        site.truth("patent", "2024-01-01", "2024-01-02", ["G06", "H04"])
    )


# The phase rules (tasks.flow.next_action), one row per case: the facts, then the action.
PHASE_RULES = [
    # crawl: every round done (a fixed end) -> recrawl, whatever the queue says
    (dict(phase="crawl", exhausted=True), "start-recrawl"),
    (dict(phase="crawl", exhausted=True, queue_idle=True), "start-recrawl"),
    # ... but not while a round is in flight or a round behind the cursor was never opened
    (dict(phase="crawl", exhausted=True, in_flight=1), "wait"),
    (dict(phase="crawl", exhausted=True, missing=True), "wait"),
    (dict(phase="crawl", exhausted=False, queue_idle=True), "wait"),
    # every round failed (its ledger never balanced): halt, never "crawl phase finished",
    # however few rounds (a 2-round task is below the breaker's halt_after)
    (dict(phase="crawl", exhausted=True, rounds_failed=2), "halt"),
    (
        dict(phase="crawl", exhausted=True, open_ended=True, queue_idle=True, rounds_failed=1),
        "halt",
    ),
    (dict(phase="crawl", exhausted=True, rounds_failed=1, in_flight=1), "wait"),
    # ... nor while a failed round has attempts left: it is claimed again
    (dict(phase="crawl", exhausted=True, retryable=1), "wait"),
    (dict(phase="crawl", exhausted=True, open_ended=True, queue_idle=True, retryable=1), "wait"),
    # some rounds done, some failed for good: the recrawl phase replays what their pages left
    (dict(phase="crawl", exhausted=True, rounds_done=1, rounds_failed=1), "start-recrawl"),
    # open-ended: never recrawled; up to date once the queue is idle (if runs end when idle)
    (dict(phase="crawl", open_ended=True, exhausted=True), "wait"),
    (dict(phase="crawl", open_ended=True, exhausted=True, queue_idle=True), "up-to-date"),
    (
        dict(phase="crawl", open_ended=True, exhausted=True, queue_idle=True, exit_when_idle=False),
        "wait",
    ),
    (dict(phase="crawl", open_ended=True, exhausted=False, queue_idle=True), "wait"),
    # recrawl: replay while rows are pending or requests queued; done once neither
    (dict(phase="recrawl", errors_pending=True), "replay"),
    (dict(phase="recrawl", queue_idle=True, errors_pending=True), "replay"),
    (dict(phase="recrawl", queue_idle=False), "replay"),
    (dict(phase="recrawl", queue_idle=True), "finish"),
    (dict(phase="recrawl", recrawl=False, errors_pending=True), "skip-recrawl"),
    # done: this worker stops once nothing is queued
    (dict(phase="done", queue_idle=True), "close"),
    (dict(phase="done"), "wait"),
    # halted: nothing moves, in any phase
    (dict(phase="crawl", halted=True, exhausted=True, queue_idle=True), "wait"),
    (dict(phase="recrawl", halted=True, queue_idle=True), "wait"),
    (dict(phase="done", halted=True, queue_idle=True), "wait"),
]


@pytest.mark.parametrize(
    "facts, action", PHASE_RULES, ids=[f"{a}-{i}" for i, (_, a) in enumerate(PHASE_RULES)]
)
def test_the_phase_rules(facts, action):
    from tasks.phase import PhaseFacts, next_action

    assert next_action(PhaseFacts(**facts)) == action


def test_phase_facts_read_the_task_and_its_rounds(sqlite_url):
    from tasks.phase import Action, next_action

    store = store_for(sqlite_url)
    t, _ = store.register("facts", "paper", "2024-01-01", "2024-01-01", "A")
    facts = store.phase_facts(t.id)
    assert (facts.phase, facts.exhausted, facts.open_ended) == ("crawl", False, False)
    first = store.claim(t.id, "w:1:x")
    facts = store.phase_facts(t.id)
    assert (facts.exhausted, facts.in_flight) == (True, 1)
    assert next_action(facts) is Action.WAIT
    store.mark_seeded(first.id, "w:1:x", "e1")
    store.mark_done(first.id, total=0, epoch="e1")
    assert next_action(store.phase_facts(t.id)) is Action.START_RECRAWL
    assert store.finish_crawl_phase(t.id) and store.phase_facts(t.id).phase == "recrawl"
