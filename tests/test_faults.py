"""The fault suite (issue 13): services broken on purpose during real crawls of the stand-in.

Every test here runs against a MariaDB and a Redis of this module's own (tests/fixtures/fault_services.py:
``mariadbd --no-defaults`` in a temporary datadir on a free port, ``redis-server`` on another),
never the shared 3306/6379, so that stopping them harms nobody. Both are reached with a password
given as ``?password=`` in the URL, the form that used to leak: every crawl here also checks that
no secret reaches a log, ``status`` or an error line.

- MariaDB down 20 s and 120 s mid-crawl (2 workers): the workers wait it out, logging one line
  per attempt each, the crawl ends by itself equal to the truth, nothing stuck ``claimed``.
- A title too long for its column: only that document fails (errorLink, with the database's
  reason); a 600-character title, which VARCHAR(500) refused, is stored whole.
- A proxy provider that drips a byte every 5 s: a warning within the call's deadline, and
  SIGTERM stops the worker within seconds.
- Passwords in URLs masked in status, --json, config errors and the crawl log; the export's
  temporary file and a missing folder.
- A worker of `run --processes 2` killed (kill -9): started again by `run`, the crawl ends equal
  to the truth.
- Recording a failure fails (MariaDB down past the worker's outage time while only documents
  whose detail always fails are in flight): each such request is held, the worker stops, and the
  next run records every one of them (errorLink == the doomed documents).
- An errorCode row no replay can be built from (an empty or invalid day): permanent with the
  reason; the other rows replay and the task finishes.
- A categories file edited mid-run (a root added before the cursor's, one after): every
  (day x category) round is crawled and the database equals the truth of all four.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest
import sqlalchemy as sa

from cnkispider.cli import main
from cnkispider.store.schema import documents, error_code, error_link, round_
from tests.fixtures.crawl_harness import ROOT, CrawlSetup, compare
from tests.fixtures.fault_services import OwnMariaDB, OwnRedis, missing_binaries
from tests.fixtures.long_titles import long_title
from tests.fixtures.providers import BadProvider
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.slow

DB_USER, DB_SECRET = "crawler", "Db-s3cret-4711"
REDIS_SECRET = "Rd-s3cret-0815"
SECRETS = (DB_SECRET, REDIS_SECRET)


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    missing = missing_binaries()
    if missing:
        pytest.fail(f"the fault suite starts its own services and needs {', '.join(missing)}")
    db = OwnMariaDB(tmp_path_factory.mktemp("mariadb"))
    import pymysql

    admin = pymysql.connect(host="127.0.0.1", port=db.port, user="root", password="")
    with admin.cursor() as cur:
        cur.execute(f"CREATE USER '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{DB_SECRET}'")
        cur.execute(f"GRANT ALL ON *.* TO '{DB_USER}'@'127.0.0.1'")
    admin.close()
    server = OwnRedis(password=REDIS_SECRET)
    yield db, server
    server.close()
    db.close()


def database_url(db: OwnMariaDB) -> str:
    """A fresh database on our MariaDB, its password in the query string."""
    name = db.create_database()
    return (
        f"mysql+pymysql://{DB_USER}@127.0.0.1:{db.port}/{name}?charset=utf8mb4&password={DB_SECRET}"
    )


def new_setup(tmp_path, site, services, categories="G06,H04", **kw) -> CrawlSetup:
    db, server = services
    return CrawlSetup(
        tmp_path,
        site,
        database_url(db),
        "patent",
        "2024-01-01",
        "2024-01-01",
        categories,
        redis_url=server.url,
        **kw,
    )


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, (
                f"a password leaked: ...{text[max(0, text.find(secret) - 200) :][:400]}"
            )


def assert_nothing_stuck(setup: CrawlSetup) -> None:
    rounds = dict(setup.query(sa.select(round_.c.state, sa.func.count()).group_by(round_.c.state)))
    assert set(rounds) == {"done"}, rounds
    for table in (error_code, error_link):
        claimed = setup.query(
            sa.select(sa.func.count()).select_from(table).where(table.c.state == "claimed")
        )
        assert claimed[0][0] == 0


def stored_count(setup: CrawlSetup) -> int:
    try:
        return setup.query(sa.select(sa.func.count()).select_from(documents[setup.doc_type]))[0][0]
    except Exception:  # the tables are being created
        return 0


# -- MariaDB down mid-crawl --------------------------------------------------------------------


@pytest.mark.waits
def test_workers_ride_out_mariadb_outages_of_20_s_and_120_s_and_the_crawl_ends_equal_to_the_truth(
    tmp_path, cnki_site, services
):
    """Before: every worker stopped (rc 2) within 4 s of MariaDB going away. Now they wait it out
    ([database] outage_seconds, 600 s by default) with one log line per attempt each. One crawl,
    two outages (20 s, then 120 s once the crawl has gone on), to keep the suite short."""
    db, _ = services
    site = cnki_site(seed=11, latency="0.05")
    setup = new_setup(tmp_path, site, services, crawl={"concurrent_requests": 4})
    setup.end = "2024-01-02"
    setup.write()
    init = subprocess.run(
        setup.command("init-db"), cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert init.returncode == 0, init.stderr
    total = len(setup.truth())
    workers = [setup.spawn() for _ in range(2)]
    logs = []

    def wait_for_documents(count: int) -> None:
        wait_until(
            lambda: stored_count(setup) >= count,
            300,
            what=f"{count} documents stored",
            workers=workers,
            log=setup.log,
            every=0.2,
        )

    try:
        wait_for_documents(150)
        for outage in (20, 120):
            before = stored_count(setup)
            assert before < total, "the crawl ended before the outage: make it longer"
            logs.append(len(setup.log()))
            db.stop()
            time.sleep(outage)
            assert [w.poll() for w in workers] == [None, None], "a worker stopped during the outage"
            db.start()
            wait_for_documents(before + 50)  # the crawl goes on
        outputs = [w.communicate(timeout=200)[0] for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
        if not db.running:
            db.start()
        setup.cleanup_redis()
    log = setup.log()
    assert [w.returncode for w in workers] == [0, 0], "".join(outputs)[-3000:] + log[-3000:]
    assert compare(setup.stored(), setup.truth(), "patent") == {
        "missing": [],
        "extra": [],
        "differing": {},
    }
    assert setup.query(sa.select(sa.func.count()).select_from(error_link))[0][0] == 0
    assert setup.query(sa.select(sa.func.count()).select_from(error_code))[0][0] == 0
    assert_nothing_stuck(setup)
    # One line per attempt per worker, numbered, backing off to 10 s: about 6 lines for 20 s and
    # 16 for 120 s, per worker. Not one per waiting thread.
    for part, least in ((log[logs[0] : logs[1]], 5), (log[logs[1] :], 14)):
        attempts = [
            int(n)
            for n in re.findall(
                r"database unreachable while connecting to \S+ \(attempt (\d+),", part
            )
        ]
        assert attempts and max(attempts) >= least, part[-3000:]
        for n in range(1, max(attempts) + 1):
            assert 1 <= attempts.count(n) <= 2, (n, attempts)
        # at least one worker is back before the crawl goes on (the other may still be in its
        # 10 s back-off when the next part's log starts, so its line can land there)
        assert part.count("database reachable again") >= 1, part[-3000:]
    # each worker's probe says so once per outage; a statement cut mid-way adds its own line
    assert 4 <= log[logs[0] :].count("database reachable again") <= 16, log[-3000:]
    assert (
        len(re.findall(r"database unreachable while (?!connecting)", log)) <= 8
    )  # statements cut mid-way
    assert "Traceback" not in log and "database_error" not in log
    assert "Remote control HTTP server" not in log and "Telnet console listening" not in log
    assert_no_secret(log, *outputs)


# -- a worker that dies ------------------------------------------------------------------------


def children_of(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def test_run_starts_a_killed_worker_again_and_the_crawl_ends_equal_to_the_truth(
    tmp_path, cnki_site, services
):
    """`run --processes 2` on a server nobody watches: the kernel kills a worker (kill -9). Before:
    the crawl went on at half speed, and with every worker gone it stayed half done until someone
    came. Now the parent says so in one line and starts it again; the task finishes by itself."""
    site = cnki_site(seed=11, latency="0.05")
    setup = new_setup(tmp_path, site, services, crawl={"concurrent_requests": 4})
    setup.end = "2024-01-02"
    parent = setup.spawn("run", "--processes", "2")
    try:
        wait_until(lambda: stored_count(setup) >= 150, 120, workers=[parent], log=setup.log)
        assert stored_count(setup) < len(setup.truth()), "the crawl ended before the kill"
        workers = children_of(parent.pid)
        assert len(workers) == 2, workers
        os.kill(workers[0], signal.SIGKILL)
        wait_until(
            lambda: len(children_of(parent.pid)) == 2 and workers[0] not in children_of(parent.pid),
            60,
            workers=[parent],
            log=setup.log,
        )
        output = parent.communicate(timeout=300)[0]
    finally:
        if parent.poll() is None:
            parent.kill()
        setup.cleanup_redis()
    assert parent.returncode == 0, output[-3000:] + setup.log()[-3000:]
    assert f"worker {workers[0]} died (killed by SIGKILL); starting it again in 2 s" in output, (
        output
    )
    assert "worker started again: pid" in output, output
    assert compare(setup.stored(), setup.truth(), "patent") == {
        "missing": [],
        "extra": [],
        "differing": {},
    }
    assert setup.query(sa.select(sa.func.count()).select_from(error_link))[0][0] == 0
    assert_nothing_stuck(setup)


# -- a value too long for its column -----------------------------------------------------------


def test_a_title_too_long_for_its_column_fails_only_its_own_document(tmp_path, cnki_site, services):
    """Before: the whole batch upsert failed and replays put the same rows in the same batch, so
    valid documents became permanent errors. Now the batch is written again row by row."""
    site = cnki_site(seed=11)
    setup = new_setup(tmp_path, site, services)
    truth = setup.truth()
    long_ok, too_long = truth[5]["filename"], truth[9]["filename"]
    pipelines = {
        "tests.fixtures.long_titles.LongTitles": 100,
        "cnkispider.pipelines.DocumentPipeline": 800,
    }
    long_titles = {"CNKI_TEST_LONG_TITLES": f"{long_ok}=600,{too_long}=70000"}
    try:
        result = setup.scrapy_crawl(
            f"ITEM_PIPELINES={json.dumps(pipelines)}", env=long_titles, timeout=200
        )
    finally:
        setup.cleanup_redis()
    log = setup.log()
    assert result.returncode == 0, result.stderr[-3000:] + log[-3000:]
    want = [{**d, "title": long_title(600)} if d["filename"] == long_ok else d for d in truth]
    diff = compare(setup.stored(), want, "patent")
    assert [filename for _, filename in diff["missing"]] == [too_long]
    assert diff["extra"] == [] and diff["differing"] == {}
    rows = setup.query(
        sa.select(
            error_link.c.filename, error_link.c.reason, error_link.c.state, error_link.c.detail
        )
    )
    assert [(r.filename, r.reason, r.state) for r in rows] == [
        (too_long, "pipeline:DocumentRejected", "permanent")
    ]
    assert "Data too long for column 'title'" in rows[0].detail
    assert "storing them one at a time" in log
    assert_nothing_stuck(setup)
    assert_no_secret(log, result.stdout, result.stderr)


# -- a dripping proxy provider -----------------------------------------------------------------


def test_a_dripping_provider_is_warned_about_and_sigterm_stops_the_worker_within_seconds(
    tmp_path, cnki_site, services
):
    """Before: 0 pages in 14 minutes with no warning, and SIGTERM hung for more than 70 s."""
    site = cnki_site(seed=11)
    provider = BadProvider("drip", every=5.0)
    setup = new_setup(
        tmp_path,
        site,
        services,
        categories="G06",
        proxy={"enabled": "true", "api_url": provider.url, "fetch_interval": 0.5},
    )
    worker = setup.spawn()
    try:
        wait_until(
            lambda: "No usable proxy from" in setup.log(), 120, workers=[worker], log=setup.log
        )
        warning = next(line for line in setup.log().splitlines() if "No usable proxy from" in line)
        assert "no complete answer within 10 s (PROXY_API_TIMEOUT)" in warning
        started = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        output = worker.communicate(timeout=60)[0]
        stopped_after = time.monotonic() - started
    finally:
        if worker.poll() is None:
            worker.kill()
        provider.close()
        setup.cleanup_redis()
    # in seconds, not after the provider's drip (generous: the machine may be busy)
    assert stopped_after < 45, f"SIGTERM took {stopped_after:.1f} s"
    assert "s3cret" not in setup.log()  # the provider URL's key=s3cret is masked
    assert_no_secret(setup.log(), output)


# -- passwords in URLs, anywhere they are shown ------------------------------------------------


def test_passwords_given_in_the_query_string_are_masked_in_status_json_and_errors(
    tmp_path, services, capsys
):
    db, server = services
    url = database_url(db)
    config = tmp_path / "config.ini"
    config.write_text(f"[database]\nurl = {url}\n[redis]\nurl = {server.url}\n", encoding="utf-8")

    def cli(*args, path=config) -> tuple[int, str, str]:
        code = main(["--config", str(path), *args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    assert cli("init-db")[0] == 0
    code, text, err = cli("status")
    assert code == 0 and f"{DB_USER}:***@" in text, err
    code, as_json, err = cli("status", "--json")
    report = json.loads(as_json)
    assert report["database"].startswith(f"mysql+pymysql://{DB_USER}:***@127.0.0.1:{db.port}/")
    assert report["redis"]["url"] == f"redis://127.0.0.1:{server.port}/0?password=%2A%2A%2A"
    # config errors and unreachable services repeat the URL: masked
    bad = tmp_path / "bad.ini"
    bad.write_text(f"[database]\nurl = postgresql://{DB_USER}:{DB_SECRET}@h/db\n", encoding="utf-8")
    code, _, refused = cli("status", path=bad)
    assert code == 2 and "postgresql://crawler:***@h/db" in refused
    away = tmp_path / "away.ini"
    away.write_text(
        f"[database]\nurl = {url.replace(f':{db.port}/', ':1/')}\n"
        f"[redis]\nurl = {server.url.replace(f':{server.port}/', ':1/')}\n",
        encoding="utf-8",
    )
    code, _, unreachable = cli("status", path=away)
    assert code == 2 and unreachable.count("\n") == 1 and "127.0.0.1:1/" in unreachable, unreachable
    assert_no_secret(text, as_json, err, refused, unreachable)


# -- the export's temporary file ----------------------------------------------------------------


def test_export_never_follows_a_planted_symlink_and_a_missing_folder_is_one_line(
    tmp_path, services, capsys
):
    db, _ = services
    config = tmp_path / "config.ini"
    config.write_text(f"[database]\nurl = {database_url(db)}\n", encoding="utf-8")
    assert main(["--config", str(config), "init-db"]) == 0
    victim = tmp_path / "victim"
    victim.write_text("keep me", encoding="utf-8")
    out = tmp_path / "out.csv"
    (tmp_path / "out.csv.part").symlink_to(victim)
    assert main(["--config", str(config), "export", "--out", str(out)]) == 0
    assert victim.read_text(encoding="utf-8") == "keep me"
    assert out.read_bytes().startswith(b"\xef\xbb\xbfdbname,")
    capsys.readouterr()
    nowhere = tmp_path / "nope" / "out.csv"
    assert main(["--config", str(config), "export", "--out", str(nowhere)]) == 2
    assert (
        capsys.readouterr().err
        == f"error: --out {nowhere}: the folder {nowhere.parent} does not exist\n"
    )


# -- recording a failure fails -----------------------------------------------------------------


@pytest.mark.waits
def test_a_failure_whose_recording_fails_is_held_and_comes_back_with_its_lease(
    tmp_path, cnki_site, services, monkeypatch
):
    """MariaDB goes down while documents whose detail always fails are failing, and stays down
    past the worker's outage time (2 s here): the errback cannot write errorLink. Before: the
    exception escaped the errback and the request was acked (152 doomed, 149 in errorLink, 3
    nowhere, task done). Now the request is held, the worker stops with one line, and the next
    run gets it back from its lease: the error table holds exactly the doomed documents."""
    db, _ = services
    site = cnki_site(seed=11, latency="0.2")
    setup = new_setup(tmp_path, site, services, categories="G06", crawl={"concurrent_requests": 4})
    truth = setup.truth()
    monkeypatch.setenv("CNKI_DATABASE_OUTAGE_SECONDS", "2")
    worker = setup.spawn()
    try:
        wait_until(lambda: stored_count(setup) >= 70, 120, workers=[worker], log=setup.log)
        stored = {d["filename"] for d in setup.stored()}
        # from now on every detail not stored yet fails for good: only failures are in flight
        doomed = sorted(d["filename"] for d in truth if d["filename"] not in stored)
        assert len(doomed) > 10
        site.control(doomed=doomed)
        wait_until(
            lambda: site.stats()["doomed_responses"] >= 3, 60, workers=[worker], log=setup.log
        )
        settled = []  # documents downloaded before the change are stored first (no item in flight)

        def no_more_stored() -> bool:
            settled.append(stored_count(setup))
            return len(settled) > 10 and settled[-1] == settled[-11]

        wait_until(no_more_stored, 60, workers=[worker], log=setup.log, every=0.2)  # 2 s still
        stored = {d["filename"] for d in setup.stored()}
        doomed = [filename for filename in doomed if filename not in stored]
        db.stop()
        output = worker.communicate(timeout=90)[0]
        db.start()
        assert worker.returncode != 0  # it stopped: the database stayed away past 2 s
        first = setup.log()
        rerun = setup.run(timeout=400)
    finally:
        if worker.poll() is None:
            worker.kill()
        if not db.running:
            db.start()
        setup.cleanup_redis()
    log = setup.log()
    assert rerun.returncode == 0, rerun.stdout[-2000:] + log[-3000:]
    # the errback's own write failed (not only a document's): that is the path under test
    assert "cannot crawl a page nor record its failure" in first, first[-3000:]
    unrecorded = [line for line in first.splitlines() if "nor record its failure" in line]
    assert all("is kept for its lease to bring back" in line for line in unrecorded)
    rows = setup.query(sa.select(error_link.c.filename, error_link.c.state))
    assert sorted(r.filename for r in rows) == doomed  # each doomed document, none lost
    assert {r.state for r in rows} == {"permanent"}
    diff = compare(setup.stored(), [d for d in truth if d["filename"] not in doomed], "patent")
    assert diff == {"missing": [], "extra": [], "differing": {}}
    assert_nothing_stuck(setup)
    assert_no_secret(log, output, rerun.stdout, rerun.stderr)


# -- an errorCode row no replay can be built from ----------------------------------------------


def test_an_unreplayable_error_row_becomes_permanent_and_the_others_replay(
    tmp_path, cnki_site, services
):
    """Before: the claimed batch of 10 stayed claimed, re-claimed every 300 s for ever, and the
    task never finished. Now that row is permanent with its reason; the others replay."""
    from cnkispider.cnki.search import Search
    from cnkispider.store.db import open_database
    from errors.recorder import ErrorRecorder
    from tasks.flow import TaskStore

    site = cnki_site(seed=11)
    setup = new_setup(tmp_path, site, services, categories="G06,H04")
    setup.write()
    engine = open_database(setup.db_url)
    store = TaskStore(engine)
    current, _ = store.register(setup.task, "patent", setup.start, setup.end, setup.categories)
    # the crawl phase is over (no round to do); the recrawl phase has three rows to replay
    store.move_cursor(current.id, setup.end, "H04")
    store.set_phase(current.id, "recrawl")
    errors = ErrorRecorder(engine)
    search = Search.for_day("patent", setup.start, "G06").to_dict()
    errors.record_code(current.id, None, setup.start, "G06", search, 1, "http-500")
    errors.record_code(current.id, None, "", "", None, 1, "http-500")  # an empty day: no search
    errors.record_code(current.id, None, "2024-13-45", "H04", None, 2, "timeout")
    engine.dispose()
    try:
        result = setup.run(timeout=200)
    finally:
        setup.cleanup_redis()
    log = setup.log()
    assert result.returncode == 0, result.stdout[-2000:] + log[-3000:]
    rows = setup.query(
        sa.select(error_code.c.day, error_code.c.state, error_code.c.reason, error_code.c.detail)
    )
    assert sorted((r.day, r.state, r.reason) for r in rows) == [
        ("", "permanent", "unreplayable"),
        ("2024-13-45", "permanent", "unreplayable"),
    ]
    assert all("expected an ISO date" in r.detail for r in rows)
    assert log.count("cannot be replayed (made permanent)") == 2
    # the replayable row brought its page's documents (and the pages after it)
    g06 = site.truth("patent", setup.start, setup.end, ["G06"])
    assert compare(setup.stored(), g06, "patent") == {"missing": [], "extra": [], "differing": {}}
    assert "finished" in log
    claimed = setup.query(
        sa.select(sa.func.count()).select_from(error_code).where(error_code.c.state == "claimed")
    )
    assert claimed[0][0] == 0


# -- a categories file edited while workers run ------------------------------------------------


def test_a_categories_file_edited_mid_run_is_crawled_whole(tmp_path, cnki_site, services):
    """Before: each worker cached the file for ever; the added categories' rounds were never
    crawled, yet the task said done (6 of 8 rounds). Now the file is read again when it
    changes, and the crawl phase does not finish while a (day x category) round is missing."""
    site = cnki_site(seed=11, latency="0.05")
    cats = tmp_path / "cats.txt"
    cats.write_text("G06\nH04\n", encoding="utf-8")
    setup = new_setup(
        tmp_path,
        site,
        services,
        categories=str(cats),
        # debug: a round's "seeded" line is a DEBUG line since issue 41 (logs: a line a minute)
        crawl={"concurrent_requests": 4, "log_level": "debug"},
    )
    setup.end = "2024-01-02"
    worker = setup.spawn()
    try:
        wait_until(lambda: "seeded" in setup.log(), 60, workers=[worker], log=setup.log)
        # one root before the cursor's (F16: its rounds are missing behind the cursor), one after
        cats.write_text("F16\nG06\nH04\nA61\n", encoding="utf-8")
        output = worker.communicate(timeout=300)[0]
    finally:
        if worker.poll() is None:
            worker.kill()
        setup.cleanup_redis()
    log = setup.log()
    assert worker.returncode == 0, output[-2000:] + log[-3000:]
    assert "changed: read again" in log
    truth = site.truth("patent", setup.start, setup.end, ["F16", "G06", "H04", "A61"])
    assert compare(setup.stored(), truth, "patent") == {"missing": [], "extra": [], "differing": {}}
    rounds = setup.query(sa.select(round_.c.day, round_.c.category, round_.c.state))
    assert sorted((r.day, r.category) for r in rounds) == sorted(
        (d, c) for d in ("2024-01-01", "2024-01-02") for c in ("F16", "G06", "H04", "A61")
    )
    assert_nothing_stuck(setup)
