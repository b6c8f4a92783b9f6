"""When CNKI says no: rejections halt at once, persisting challenges pause every worker, repeating
faults trip the circuit breaker, an unreachable CNKI halts within a minute; `task resume` goes on
and the crawl then equals the truth (real workers, real MariaDB/SQLite and Redis)."""

from __future__ import annotations

import datetime as dt
import json
import re
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import redis
import sqlalchemy as sa

from cnkispider.store import schema
from cnkispider.store.db import open_database
from cnkispider.store.schema import error_code, round_, task
from cnkispider.watch.halting import Breaker, ChallengeWatch, Cooldown, halt_line
from errors.recorder import ErrorRecorder
from tasks.flow import TaskStore
from tests.fixtures.crawl_harness import ROOT, CrawlSetup, compare
from tests.fixtures.gate import REJECTION_WORDS, Gate
from tests.fixtures.waiting import wait_until

HALTED = 3  # cnkispider.watch.halting.EXIT_HALTED, spelled out: the documented contract
LOCAL_FAULT = 4  # cnkispider.watch.halting.EXIT_LOCAL_FAULT: a worker that stopped itself
#: A round's first page answered with the soft block, and the canary asked on the same session
#: (RoundSpider._zero_or_soft_block): two soft blocks before the retries begin.
CANARY_EPISODE = 2

# -- the pure cores ------------------------------------------------------------------------------


def test_breaker_halts_on_a_rejection_at_once_with_cnki_words():
    breaker = Breaker(consecutive=10)
    breaker.ok("a")
    assert breaker.failed("rejected", REJECTION_WORDS) == f"rejected: {REJECTION_WORDS}"
    assert breaker.failed("rejected", REJECTION_WORDS) is None  # trips once


def test_breaker_halts_after_k_failures_of_one_reason_in_a_row():
    breaker = Breaker(consecutive=3, window=50)
    breaker.ok()
    assert breaker.failed("http-500") is None
    assert breaker.failed("http-502") is None  # another reason breaks the run
    assert breaker.failed("http-500") is None
    breaker.ok()
    assert breaker.failed("http-500") is None
    assert breaker.failed("http-500") is None
    verdict = breaker.failed("http-500")
    assert verdict is not None and verdict.startswith("http-500: the last 3 list pages")


def test_breaker_halts_when_half_the_window_fails_for_one_reason():
    breaker = Breaker(consecutive=10, window=10)
    verdicts = []
    for i in range(10):
        if i % 2 == 0:
            breaker.ok(i)
        else:
            verdicts.append(breaker.failed("no-pager", key=i))
    assert verdicts[:-1] == [None] * 4
    assert verdicts[-1] == "no-pager: 5 of the last 10 list pages failed with no-pager"


def test_a_page_counted_ok_then_not_understood_counts_once_as_its_failure():
    breaker = Breaker(consecutive=2, window=50)
    for key in ("p1", "p2"):
        breaker.ok(key)  # the page came back...
        verdict = breaker.failed("unexpected", key=key)  # ...and its parser did not understand it
    assert verdict is not None and verdict.startswith("unexpected: the last 2")
    assert len(breaker.outcomes) == 2


def test_breaker_calls_an_unreachable_site_by_its_name():
    breaker = Breaker(consecutive=10, unreachable_after=3)
    assert breaker.failed("DNSLookupError") is None
    assert breaker.failed("DNSLookupError") is None
    verdict = breaker.failed("DNSLookupError")
    assert verdict.startswith(
        "DNSLookupError: CNKI is not reachable from here (DNS): try `cnkispider demo`"
    )
    # a site that answered once is not "unreachable": that is a fault repeating
    answered = Breaker(consecutive=10, unreachable_after=3)
    answered.ok()
    assert [answered.failed("DNSLookupError") for _ in range(3)] == [None] * 3
    assert halt_line("t", verdict).startswith(
        "CNKI is not reachable from here (DNS): try `cnkispider demo`"
    )
    assert "\n" not in halt_line("t", verdict)


def test_challenge_watch_wants_distinct_sessions_without_a_clean_page():
    watch = ChallengeWatch(sessions=3)
    assert not watch.seen("verify", "s1")
    assert not watch.seen("captcha", "s1")  # the same session again is that session's luck
    assert not watch.seen("no-data-retry", "s2")
    watch.clean()  # one clean page: start over
    assert not watch.seen("verify", "s3")
    assert not watch.seen("http-500", "s4")  # a fault is not a challenge
    assert not watch.seen("javascript", "s4")
    assert watch.seen("no-data-retry", "s5")


def test_the_cooldown_is_one_shared_key_with_a_ttl(redis_url, redis_namespace):
    client = redis.Redis.from_url(redis_url)
    try:
        first, second = Cooldown(client, redis_namespace), Cooldown(client, redis_namespace)
        assert first.remaining() == 0
        started = time.monotonic()
        assert first.start(10.0) is True
        assert second.start(10.0) is False  # one pause at a time, whoever asks
        # the key's TTL, run down by the time since the start (over a second on a busy machine)
        left, took = second.remaining(), time.monotonic() - started
        assert 10.0 - took - 0.05 <= left <= 10.0 and left > 0
        assert client.exists(f"{redis_namespace}:cooldown")
    finally:
        client.close()


# -- flow control: the halt, in the table ----------------------------------------------------------


def _store(db_url) -> TaskStore:
    store = TaskStore(open_database(db_url), round_lease=60)
    store.register("t", "patent", "2024-01-01", "2024-01-03", "G06,H04")
    return store


def test_a_halted_task_hands_out_nothing_marks_nothing_done_and_resume_reopens(db_url):
    store = _store(db_url)
    first = store.claim(1, "w1")
    store.mark_seeded(first.id, "w1", "e1")
    errors = ErrorRecorder(store.engine)
    errors.record_code(1, first.id, first.day, first.category, None, 1, "rejected", "words")
    assert store.halt(1, f"rejected: {REJECTION_WORDS}") is True
    assert store.halt(1, "http-500: later") is False  # the first reason stays
    current = store.get("t")
    assert current.halt_reason == f"rejected: {REJECTION_WORDS}" and current.halted_at is not None
    assert store.claim(1, "w2") is None
    assert store.mark_done(first.id) is False
    assert store.mark_halted(first.id) is True
    assert store.finish_crawl_phase(1) is False and store.set_phase(1, "done") is False
    assert store.get("t").phase == "crawl"
    resumed, counts = store.resume_halted("t")
    assert (
        resumed.halt_reason is None
        and counts["rounds"] == 1
        and resumed.end_date.isoformat() == "2024-01-03"
    )
    again = store.claim(1, "w2")  # the re-opened round first, from its first page
    assert (again.id, again.day, again.category) == (first.id, first.day, first.category)
    with store.engine.connect() as conn:  # re-opened: its stale errorCode row is gone
        assert conn.execute(sa.select(sa.func.count()).select_from(error_code)).scalar() == 0


def test_a_round_crawled_again_after_a_failure_leaves_no_error_code_row(db_url):
    store = _store(db_url)
    errors = ErrorRecorder(store.engine, max_attempts=1)
    failed = store.claim(1, "w1")
    errors.record_code(1, failed.id, failed.day, failed.category, None, 1, "http-500")
    errors.record_code(
        1, failed.id, failed.day, failed.category, None, 1, "overflow", permanent=True
    )
    store.mark_seeded(failed.id, "w1", "e1")
    store.mark_done(failed.id, total=0)
    store.move_cursor("t", failed.day, None)  # the operator sends the cursor back over it
    again = store.claim(1, "w1")
    assert again is not None and again.id == failed.id
    store.mark_seeded(again.id, "w1", "e1")
    assert store.mark_done(again.id, total=0)
    with store.engine.connect() as conn:
        assert (
            conn.execute(
                sa.select(error_code.c.reason).where(error_code.c.round_id == failed.id)
            ).all()
            == []
        )


def test_network_failures_are_never_permanent(db_url):
    engine = open_database(db_url)
    errors = ErrorRecorder(engine, max_attempts=2)
    for reason in ("DNSLookupError", "http-500"):
        errors.record_code(1, 1, "2024-01-01", "G06", None, 1, reason)
    with engine.connect() as conn:
        ids = dict(conn.execute(sa.select(error_code.c.reason, error_code.c.id)).all())
    for _ in range(3):
        for reason, row_id in ids.items():
            errors.record_code(1, 1, "2024-01-01", "G06", None, 1, reason, replay_of=row_id)
    with engine.connect() as conn:
        states = dict(conn.execute(sa.select(error_code.c.reason, error_code.c.state)).all())
    assert states == {"DNSLookupError": "open", "http-500": "permanent"}


def test_a_version_1_database_is_upgraded_with_the_halt_columns(db_url):
    engine = open_database(db_url)
    with engine.begin() as conn:  # make it what a version-1 cnkispider left behind
        for column in ("halt_reason", "halted_at"):
            conn.exec_driver_sql(f"ALTER TABLE task DROP COLUMN {column}")
        conn.execute(schema.schema_version.update().values(version=1))
        conn.execute(
            task.insert().values(
                name="old", type="patent", start_date="2024-01-01", categories="G06", phase="crawl"
            )
        )
    engine.dispose()
    upgraded = open_database(db_url)
    with upgraded.connect() as conn:
        assert (
            conn.execute(sa.select(schema.schema_version.c.version)).scalar()
            == schema.SCHEMA_VERSION
        )
        columns = {c["name"] for c in sa.inspect(conn).get_columns("task")}
    assert {"halt_reason", "halted_at"} <= columns
    store = TaskStore(upgraded)
    assert store.get("old").halt_reason is None
    assert (
        store.halt(store.get("old").id, "rejected: x")
        and store.get("old").halt_reason == "rejected: x"
    )
    open_database(db_url).dispose()  # opening it again is a no-op


# -- real crawls through a gate that says no -------------------------------------------------------


@pytest.fixture
def gate(cnki_site):
    gates = []

    def make(**options):
        gates.append(Gate(cnki_site(seed=5, **options)))
        return gates[-1]

    yield make
    for g in gates:
        g.close()


def _setup(crawl_setup, site, db, categories="G06,H04", end="2024-01-02", **crawl) -> CrawlSetup:
    """A patent crawl through ``site`` (a gate, or an address) on the test's ``db`` ("sqlite",
    "mysql", or "db": the test's own db_url), by tests/fixtures/crawls.py's crawl_setup."""
    return crawl_setup(
        "patent",
        categories,
        db,
        end=end,
        site=site,
        # A halted worker leaves its popped requests leased; the resumed run waits for those
        # leases to run out (about two minutes with the harness's 20 s, seconds with 5).
        crawl={"retry_times": 2, "lease_seconds": 5, **crawl},
        # the gate stands in front of the stand-in, whose pages link to the stand-in's own host
        cnki={"allowed_hosts": site.site.base_url} if hasattr(site, "upstream") else {},
    )


def _status(setup: CrawlSetup) -> dict:
    done = subprocess.run(
        setup.command("status", "--json", "--task", setup.task),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["tasks"][0]


def _task_row(setup: CrawlSetup):
    return setup.query(
        sa.select(task.c.phase, task.c.halt_reason, task.c.halted_at).where(
            task.c.name == setup.task
        )
    )[0]


def _rounds(setup: CrawlSetup) -> dict[str, int]:
    return dict(setup.query(sa.select(round_.c.state, sa.func.count()).group_by(round_.c.state)))


def _log_span(log: str) -> float:
    """Seconds between the crawl log's first and last lines: the crawl's own time, without the
    interpreter's start-up, which a busy machine stretches by tens of seconds."""
    stamps = re.findall(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", log, re.MULTILINE)
    assert stamps, log[-3000:]
    first, last = (dt.datetime.fromisoformat(s) for s in (stamps[0], stamps[-1]))
    return (last - first).total_seconds()


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


@pytest.mark.slow  # two crawls (the halt, then the resume) in a worker subprocess
def test_a_rejection_halts_the_task_within_one_round_and_resume_ends_equal_to_the_truth(
    crawl_setup, gate, db_url
):
    g = gate()
    g.reject = True
    setup = _setup(crawl_setup, g, "db", retry_times=5)
    result = setup.run(timeout=300)
    assert result.returncode == HALTED, (
        result.stdout[-2000:] + result.stderr[-2000:] + setup.log()[-3000:]
    )
    lines = _error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert REJECTION_WORDS in lines[0] and f"cnkispider task resume {setup.task}" in lines[0]
    # at the first list requests (generous: a busy machine stretches the crawl's time too)
    assert _log_span(setup.log()) < 120, setup.log()[-3000:]
    # within one round: the first list requests, never N rounds x retries
    assert 1 <= len(g.grids) <= 4, g.grids  # at most the rounds seeded at once, one try each
    phase, reason, halted_at = _task_row(setup)
    assert (phase, reason) == (
        "crawl",
        f"rejected: {REJECTION_WORDS}",
    ) and halted_at is not None
    assert "done" not in _rounds(setup)
    report = _status(setup)
    assert report["halted"] == f"rejected: {REJECTION_WORDS}" and report["activity"] == "halted"
    text = subprocess.run(
        setup.command("status", "--task", setup.task),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert f"halted: rejected: {REJECTION_WORDS}" in text

    # the .exe's entry (no arguments: `run` with the config.ini of its folder) says the same
    frozen = subprocess.run(
        [sys.executable, "-m", "cnkispider.frozen"],
        cwd=setup.tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert frozen.returncode == HALTED, frozen.stderr[-2000:]
    assert [line for line in _error_lines(frozen.stderr) if REJECTION_WORDS in line]

    g.reject = False  # the cause is fixed (here: CNKI accepts the query again)
    resumed = subprocess.run(
        setup.command("task", "resume", setup.task),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed:" in resumed.stdout and "halt cleared" in resumed.stdout
    again = setup.run(timeout=300)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:] + setup.log()[-3000:]
    truth = setup.truth()
    assert len(truth) > 20
    assert compare(setup.stored(), truth, "patent") == {
        "missing": [],
        "extra": [],
        "differing": {},
    }
    assert setup.query(sa.select(sa.func.count()).select_from(error_code))[0][0] == 0
    phase, reason, _ = _task_row(setup)
    assert (phase, reason) == ("done", None)
    assert _status(setup)["halted"] is None


@pytest.mark.slow  # a crawl in a worker subprocess
def test_challenges_across_fresh_sessions_pause_every_worker_and_the_crawl_finishes(
    crawl_setup, gate
):
    g = gate()
    # The round's first page and the canary asked on its session (that body on a first page may
    # be a true zero: issue 20), then three fresh sessions challenged in a row (the pause), then
    # one more. One round, so that the order is the same every time.
    g.soft_blocks = CANARY_EPISODE + 4
    pause = 4.0
    setup = _setup(
        crawl_setup,
        g,
        "sqlite",
        categories="G06",
        end="2024-01-01",
        retry_times=8,
        challenge_sessions=3,
        challenge_cooldown=pause,
    )
    result = setup.run(timeout=300)
    log = setup.log()
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:] + log[-3000:]
    warnings = [line for line in log.splitlines() if "pauses for 4 s" in line]
    assert len(warnings) == 1, log[-3000:]
    # the pause really happened: after the third challenged session, no grid request for ~4 s
    times = [t for t, _ in g.grids]
    challenged = [t for t, what in g.grids if what == "soft-block"]
    assert len(challenged) == CANARY_EPISODE + 4
    third = challenged[CANARY_EPISODE + 2]
    after = [t for t in times if t > third]
    # The other round's retry may have been released just before the third challenge came
    # back (the pause cannot recall it): it arrives within its hop to the site, and is the
    # only one; then nothing for the pause.
    early = [t for t in after if t - third < 0.6]
    later = [t for t in after if t - third >= 0.6]
    shown = [round(t - third, 2) for t in after[:5]]
    assert len(early) <= 1 and later and later[0] - third >= pause - 1.0, shown
    truth = setup.truth()
    assert compare(setup.stored(), truth, "patent") == {
        "missing": [],
        "extra": [],
        "differing": {},
    }
    assert setup.query(sa.select(sa.func.count()).select_from(error_code))[0][0] == 0


@pytest.mark.slow  # a crawl in a worker subprocess
def test_a_worker_told_to_stop_during_a_pause_stops_in_seconds_and_loses_nothing(crawl_setup, gate):
    """SIGTERM (a service manager, Ctrl-C) while the task waits out a 5-minute challenge pause:
    the retries waiting for it are handed back (queued in Redis) and the worker stops within
    seconds, not when the pause ends. The next run, once the pause is over, crawls everything."""
    g = gate()
    g.soft_blocks = CANARY_EPISODE + 3  # the first page and its canary, then three sessions
    setup = _setup(
        crawl_setup,
        g,
        "sqlite",
        categories="G06",
        end="2024-01-01",
        retry_times=8,
        challenge_sessions=3,
        challenge_cooldown=300,
    )
    worker = setup.spawn()
    wait_until(lambda: "pauses for 300 s" in setup.log(), 120, workers=[worker], log=setup.log)
    # time for the retries to reach the pause (had they not yet, the stop must work too)
    time.sleep(1.0)
    asked = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    worker.communicate(timeout=120)
    stopped_in = time.monotonic() - asked
    assert stopped_in < 60, stopped_in  # in seconds, not at the pause's end (300 s): generous
    # the pause is over (here: its key removed), and the next run finishes the task
    client = redis.Redis.from_url(setup.redis_url)
    client.delete(f"cnki:{setup.task}:cooldown")
    client.close()
    again = setup.run(timeout=300)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:] + setup.log()[-3000:]
    assert compare(setup.stored(), setup.truth(), "patent") == {
        "missing": [],
        "extra": [],
        "differing": {},
    }
    assert setup.query(sa.select(sa.func.count()).select_from(error_code))[0][0] == 0


@pytest.mark.slow  # a crawl in a worker subprocess
def test_k_rounds_failing_for_one_fault_halt_the_task_and_resume_clears_their_rows(
    crawl_setup, gate
):
    g = gate()
    g.grid_status = 500
    setup = _setup(
        crawl_setup,
        g,
        "mysql",
        categories="G06,H04,H01",
        end="2024-01-02",
        retry_times=1,
        halt_after=3,
    )
    result = setup.run(timeout=180)
    assert result.returncode == HALTED, (
        result.stdout[-2000:] + result.stderr[-2000:] + setup.log()[-3000:]
    )
    lines = _error_lines(result.stderr)
    assert len(lines) == 1 and "http-500" in lines[0] and "task resume" in lines[0], result.stderr
    phase, reason, _ = _task_row(setup)
    assert phase == "crawl" and reason.startswith("http-500: the last 3 list pages")
    # what failed is written down: an errorCode row per failed page, until its round is
    # crawled again (a round failed on its ledger is, once every round was handed out, and
    # that deletes its old rows), and no round passes for done (issue 20)
    assert setup.query(sa.select(sa.func.count()).select_from(error_code))[0][0] >= 1
    states = {s for (s,) in setup.query(sa.select(round_.c.state))}
    assert "done" not in states, states

    g.grid_status = None
    resumed = subprocess.run(
        setup.command("task", "resume", setup.task),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert resumed.returncode == 0, resumed.stderr
    again = setup.run(timeout=300)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:] + setup.log()[-3000:]
    assert compare(setup.stored(), setup.truth(), "patent") == {
        "missing": [],
        "extra": [],
        "differing": {},
    }
    # every round that failed before now succeeded: no errorCode row is left behind
    assert setup.query(sa.select(sa.func.count()).select_from(error_code))[0][0] == 0


@pytest.mark.timing  # within a minute of its start: `make test` runs it apart
def test_an_unreachable_cnki_stops_the_worker_within_a_minute_with_one_line(crawl_setup):
    """Issue 47.3: CNKI never answered this worker (DNS): that is this worker's own fault as far
    as it can tell, so it stops itself with one line; the task is not halted for the others."""
    nowhere = SimpleNamespace(base_url="http://nonexistent.invalid")
    setup = _setup(crawl_setup, nowhere, "sqlite", retry_times=5, end="2024-03-01")
    result = setup.run(timeout=300)
    assert result.returncode == LOCAL_FAULT, (
        result.stdout[-2000:] + result.stderr[-2000:] + setup.log()[-3000:]
    )
    assert _log_span(setup.log()) < 60, setup.log()[-3000:]
    lines = _error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("CNKI is not reachable from here (DNS): try `cnkispider demo`")
    assert "(this worker stopped; task" in lines[0] and "is not halted" in lines[0]
    phase, reason, _ = _task_row(setup)
    assert phase == "crawl" and reason is None
    states = {s for (s,) in setup.query(sa.select(error_code.c.state))}
    assert states <= {"open"}  # network errors are never permanent
    second = setup.run(timeout=60)  # the same fault: the same one line
    assert second.returncode == LOCAL_FAULT and len(_error_lines(second.stderr)) == 1


@pytest.mark.slow  # a crawl in a worker subprocess
def test_status_json_of_a_task_never_halted_says_null(crawl_setup, sqlite_url):
    setup = _setup(crawl_setup, SimpleNamespace(base_url="http://127.0.0.1:9"), "sqlite")
    setup.write()
    store = TaskStore(open_database(sqlite_url))
    store.register(setup.task, "patent", "2024-01-01", "2024-01-02", "G06")
    report = _status(setup)
    assert report["halted"] is None and report["halted_at"] is None
    store.halt(
        store.get(setup.task).id, "no-pager: 25 of the last 50 list pages failed with no-pager"
    )
    report = _status(setup)
    assert report["halted"].startswith("no-pager") and dt.datetime.fromisoformat(
        report["halted_at"].rstrip("Z")
    )


@pytest.mark.slow  # a crawl in a worker subprocess
def test_requests_refused_by_the_trust_boundary_halt_the_task(crawl_setup, gate):
    """Detail links to a host the configuration does not allow are set aside unfetched: the task
    halts with the reason instead of ending "done" without those documents."""
    g = gate()
    setup = _setup(crawl_setup, g, "sqlite", categories="G06", end="2024-01-01")
    setup.cnki = {}  # the stand-in's own host (where its pages link) is not allowed
    result = setup.run(timeout=300)
    assert result.returncode == HALTED, result.stdout[-2000:] + result.stderr[-2000:]
    lines = _error_lines(result.stderr)
    assert (
        len(lines) == 1
        and "unreadable" in lines[0]
        and "not one of the configured CNKI hosts" in lines[0]
    )
    assert "done" not in _rounds(setup) or len(setup.stored()) == len(setup.truth())


def _every_halt_reason_written() -> list[str]:
    """The reasons the crawler writes into task.halt_reason, made by the code that writes them."""
    from tasks.roundstate import LEDGER_NOTE

    rejected = Breaker().failed("rejected", "查询对象结构错误")
    bare = Breaker().failed("rejected")
    unreachable = Breaker(consecutive=10, unreachable_after=2)
    unreachable.failed("DNSLookupError")
    in_a_row = Breaker(consecutive=2, window=50)
    in_a_row.ok()
    in_a_row.failed("http-500")
    half = Breaker(consecutive=3, window=4)
    half.ok()
    half.failed("http-500")
    half.failed("timeout")
    return [
        rejected,
        bare,
        unreachable.failed("DNSLookupError"),
        in_a_row.failed("http-500"),
        half.failed("http-500"),
        # tasks.feeder (an answer no parser understood) and tasks.rounds.all_failed_reason
        "unreadable: unexpected page",
        f"{LEDGER_NOTE}: every round failed (6 of 6); last: listed 5 = stored 0",
    ]


def test_every_halt_reason_is_stored_in_english_and_shown_in_the_reader_s_language():
    """Issue 41: a halted task's reason read "DNSLookupError: CNKI is not reachable from here"
    on the Chinese page. The stored reason stays the English the logs and SQL read; each is
    shown in Chinese through the catalogue (its values, CNKI's words and codes, kept)."""
    from cnkispider.words import i18n
    from cnkispider.words.vocabulary import halt_reason

    reasons = _every_halt_reason_written()
    assert all(reasons), reasons
    for reason in reasons:
        assert halt_reason(reason) == reason  # English: the stored text itself
        with i18n.using("zh_CN"):
            shown = halt_reason(reason)
        assert shown != reason, f"not translated: {reason!r}"
        for value in re.findall(r"查询对象结构错误|DNSLookupError|http-500|timeout|\b6\b", reason):
            assert value in shown, (reason, shown)
