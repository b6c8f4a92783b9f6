"""Workers on cut and bad lines (issue 29): each worker in a network namespace of its own, the
servers (a private MariaDB, Redis and the CNKI stand-in) on service addresses of this machine
(tests/fixtures/netlab.py), every worker holding only a worker's rights (admin grant-worker).

- one worker's line cut for 30 s mid-round, shorter than its leases (60 s): its leases stay
  with it, it goes on by itself when the line returns;
- one worker's line cut for 90 s, with leases of 10 s (nine leases: the default 60 s lease
  would keep the test past two minutes): while it is still cut, every request leased at the
  cut and every round in flight is finished by the other workers (a round it emptied but had
  not told the database of: within two leases);
- one worker on a line with 150 ms delay each way (300 ms round trip) and 5% of packets lost
  each way (user-space, packet level: this kernel has no netem, see tests/fixtures/netlab.py);
- Redis unreachable from every worker for 60 s.

Each time: the task equals the truth, every round is done and balances, each round is reported
done once and the task finished once, and every worker exits 0 by itself.
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest
import redis
import sqlalchemy as sa

from cnkispider.store.schema import documents, ledger, round_
from tests.fixtures.crawl_harness import ROOT, CrawlSetup, compare
from tests.fixtures.netlab import Lab, LabMariaDB, LabRedis, netns_available
from tests.fixtures.worker_accounts import grant

pytestmark = pytest.mark.slow

#: Requests (TCP segments with data) the worker on the slow line sends the site after the line
#: turned bad, at least: 21 to 35 in three runs here; a few are retransmissions, which 5 allows
SENT_AFTER_TURN = 5


@pytest.fixture(scope="module")
def lab():
    why = netns_available()
    if why:
        pytest.fail(why)
    lab = Lab()
    try:
        lab.mariadb = LabMariaDB(lab.db_address)
        lab.redis = LabRedis(lab.redis_address)
        yield lab
    finally:
        for server in ("redis", "mariadb"):
            if hasattr(lab, server):
                getattr(lab, server).close()
        lab.close()


class Cluster:
    """An administrator's setup on the lab's servers and workers in namespaces of their own."""

    def __init__(self, lab: Lab, tmp_path, site, *, crawl: dict, days: str = "2024-01-03"):
        self.lab = lab
        database = lab.mariadb.create_database()
        self.admin = CrawlSetup(
            tmp_path / "admin",
            site,
            lab.mariadb.url(database),
            "paper",
            "2024-01-01",
            days,
            "TP3,F0,O1,R4",
            redis_url=lab.redis.admin_url,
            # debug: a round's "done" line is DEBUG (one a round: issue 41), and the cluster's
            # check that each round was closed once reads it
            crawl={"log_file": "", "log_level": "debug", **crawl},
        )
        self.admin.tmp_path.mkdir(parents=True)
        done = self.admin.run("init-db", timeout=120)
        assert done.returncode == 0, done.stderr
        self.account, _ = grant(
            self.admin.config_path, self.admin.db_url, lab.redis.admin_url, "--add-tasks"
        )
        self.account.admin_connect = {"host": "127.0.0.1", "port": lab.mariadb.port, "user": "root"}
        worker_dir = tmp_path / "worker"
        worker_dir.mkdir()
        a = self.account
        self.worker = CrawlSetup(
            worker_dir,
            site,
            f"mysql+pymysql://{a.name}:{a.password}@{lab.db_address}:{lab.mariadb.port}/{database}",
            "paper",
            self.admin.start,
            self.admin.end,
            self.admin.categories,
            task=self.admin.task,
            redis_url=f"redis://{a.name}:{a.password}@{lab.redis_address}:{lab.redis.port}/0",
            crawl=self.admin.crawl,
        )
        self.worker.write()
        self.processes: list[subprocess.Popen] = []
        self.lines: list[int] = []  # worker index -> its line in the lab
        self.logs: list = []
        self.redis = redis.Redis.from_url(lab.redis.admin_url)

    def start(self, bad_line=None) -> None:
        """Start the next worker (index len(processes)) in a namespace of its own."""
        line, namespace = self.lab.namespace(bad_line=bad_line)
        self.lines.append(line)
        k = len(self.processes)
        log = open(self.admin.tmp_path / f"worker{k}.log", "w+", encoding="utf-8")
        self.logs.append(log)
        self.processes.append(
            subprocess.Popen(
                self.lab.command(namespace, self.worker.command("run")),
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )

    def log(self, k: int) -> str:
        return (self.admin.tmp_path / f"worker{k}.log").read_text(
            encoding="utf-8", errors="replace"
        )

    def stored(self) -> int:
        table = documents["paper"]
        return self.admin.query(sa.select(sa.func.count()).select_from(table))[0][0]

    def key(self, name: str) -> str:
        return f"cnki:{self.admin.task}:{name}"

    def leased(self) -> set[bytes]:
        return set(self.redis.zrange(self.key("leases"), 0, -1))

    def alive(self, ids: set[bytes]) -> set[bytes]:
        """Which of the request ids are still queued or leased (not acknowledged)."""
        if not ids:
            return set()
        present = self.redis.hmget(self.key("requests"), list(ids))
        return {i for i, value in zip(ids, present, strict=True) if value is not None}

    def in_flight(self) -> list[int]:
        rows = self.admin.query(
            sa.select(round_.c.id).where(round_.c.state.in_(("claimed", "seeded")))
        )
        return [r.id for r in rows]

    def done_rounds(self) -> set[int]:
        rows = self.admin.query(sa.select(round_.c.id).where(round_.c.state == "done"))
        return {r.id for r in rows}

    def diagnose(self) -> str:
        """What a stuck crawl looks like: unfinished rounds and the queue's counters."""
        rows = self.admin.query(sa.select(round_).where(round_.c.state != "done"))
        keys = {
            k.decode(): self.redis.type(k).decode()
            for k in self.redis.scan_iter(match=f"cnki:{self.admin.task}:*", count=1000)
        }
        drained = self.redis.zrange(self.key("drained"), 0, -1, withscores=True)
        return f"rounds not done: {rows}; keys: {keys}; drained: {drained}"

    def check(self, *alive: int) -> None:
        """No worker failed (one that finished the task exits 0); those in ``alive`` still run."""
        for k, p in enumerate(self.processes):
            code = p.poll()
            assert code in (None, 0), f"worker {k} failed ({code}): {self.log(k)[-3000:]}"
            assert k not in alive or code is None, f"worker {k} stopped: {self.log(k)[-3000:]}"

    # The timeouts are safety nets for a loaded machine, not the two minutes a test
    # (which the durations of a run report): on a quiet machine each test takes 45 to 105 s.
    def wait(self, what: str, condition, timeout: float = 300, alive: tuple[int, ...] = ()):
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            self.check(*alive)
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {self.diagnose()}"
            time.sleep(0.2)

    def finish(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        for k, p in enumerate(self.processes):
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"worker {k} did not finish: {self.log(k)[-3000:]}")
        codes = [p.returncode for p in self.processes]
        assert codes == [0] * len(codes), "\n".join(self.log(k)[-2500:] for k in range(len(codes)))

    def assert_sound(self) -> None:
        """The task equals the truth, nothing twice, every round balances and closed once."""
        admin = self.admin
        truth = admin.truth()
        assert compare(admin.stored(), truth, "paper") == {
            "missing": [],
            "extra": [],
            "differing": {},
        }
        assert self.stored() == len(truth)  # each document once
        rounds = admin.query(
            sa.select(
                round_.c.id,
                round_.c.state,
                round_.c.total,
                round_.c.stored,
                round_.c.in_error,
                round_.c.dropped,
                round_.c.beyond,
            )
        )
        assert rounds and {r.state for r in rounds} == {"done"}, rounds
        for r in rounds:
            assert r.total == r.stored + r.in_error + r.dropped + r.beyond, r
        pending = admin.query(
            sa.select(sa.func.count()).select_from(ledger).where(ledger.c.outcome == "pending")
        )[0][0]
        assert pending == 0
        assert sum(r.stored for r in rounds) == len(truth)  # no document stored in two rounds
        logs = [self.log(k) for k in range(len(self.processes))]
        reported = sorted(int(n) for log in logs for n in re.findall(r"round (\d+) done:", log))
        assert reported == sorted(r.id for r in rounds), "each round reported done exactly once"
        assert sum(log.count("every round is done; crawl phase finished") for log in logs) == 1
        assert sum(log.count(f"task {admin.task} finished") for log in logs) == 1

    def close(self) -> None:
        for p in self.processes:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
        for log in self.logs:
            log.close()
        self.redis.close()
        self.account.drop()


@pytest.fixture
def cluster(lab, tmp_path, cnki_site):
    made: list[Cluster] = []

    def make(**kw) -> Cluster:
        site = cnki_site(host=lab.site_address, seed=kw.pop("seed", 29), latency="0.05-0.15")
        made.append(Cluster(lab, tmp_path, site, **kw))
        return made[-1]

    yield make
    for c in made:
        c.close()


def _start_after_a_seeding_worker(c: Cluster, workers: int) -> None:
    """Start worker 0, and the others once it has seeded a round: the cut is of a worker in a
    round it seeded, and started together the others could seed every round (a worker seeds only
    while the shared queue runs low, so the first to see it low does)."""
    c.start()
    c.wait("worker 0 to seed a round", lambda: re.search(r"round \d+ seeded", c.log(0)), alive=(0,))
    for _ in range(workers - 1):
        c.start()


def _cut_mid_round(c: Cluster, k: int, seconds: float, *, leases_pass: bool) -> None:
    """Cut worker ``k``'s line once it crawls a round it seeded, then mend it: after ``seconds``,
    and with ``leases_pass`` not before the others have finished what it held.

    The requests leased at the cut are the cut worker's and the others'; the others ack theirs
    within moments, so those still unacknowledged a while later are the cut worker's."""
    c.wait(
        f"worker {k} mid-round",
        lambda: (
            re.search(r"round \d+ seeded", c.log(k))
            and c.stored() >= 40
            and c.in_flight()
            and c.leased()
        ),
        alive=(k,),
    )
    c.lab.cut(c.lines[k])
    cut_at = time.monotonic()
    leased_at_cut, rounds_at_cut = c.leased(), c.in_flight()
    if leases_pass:
        # the other workers finish what was leased at the cut, the cut worker's part included,
        # and every round then in flight, while its line is still down: it stays down until
        # they have (the timeouts are only safety nets; a loaded machine takes longer)
        c.wait(
            "the cut worker's leases to pass",
            lambda: not c.alive(leased_at_cut),
            timeout=300,
            alive=(k,),
        )
        c.wait(
            "the rounds in flight at the cut to be done",
            lambda: set(rounds_at_cut) <= c.done_rounds(),
            timeout=300,
            alive=(k,),
        )
    while time.monotonic() - cut_at < seconds:  # the cut's length is the test's own input
        c.check(k)  # the cut worker waits; the others may finish the task meanwhile
        time.sleep(0.5)
    held = c.alive(leased_at_cut)
    if not leases_pass:
        # a cut shorter than a lease: what the cut worker held waited for it
        assert held, "nothing leased at the cut was the cut worker's: cut it earlier"
    mended_at = len(c.log(k))
    c.lab.mend(c.lines[k])
    # it goes on by itself: what it held is acknowledged, and it reports work after the cut
    c.wait("the mended worker's leases to be acknowledged", lambda: not c.alive(held))
    c.finish()
    after = c.log(k)[mended_at:]
    assert re.search(r"round \d+ (done|seeded)|\d+ completed by this worker", after), after[-3000:]


def test_a_worker_cut_off_for_30_s_goes_on_by_itself(cluster):
    c = cluster(crawl={"concurrent_requests": 4, "lease_seconds": 60, "round_lease_seconds": 60})
    _start_after_a_seeding_worker(c, 3)
    _cut_mid_round(c, 0, 30, leases_pass=False)
    c.assert_sound()


@pytest.mark.waits
def test_a_worker_cut_off_longer_than_its_leases_hands_them_to_the_others(cluster):
    c = cluster(
        crawl={
            "concurrent_requests": 4,
            "lease_seconds": 10,
            "round_lease_seconds": 10,
            "heartbeat_seconds": 2,
        },
        days="2024-01-04",
    )
    _start_after_a_seeding_worker(c, 3)
    _cut_mid_round(c, 0, 90, leases_pass=True)
    c.assert_sound()


@pytest.mark.waits
def test_a_worker_on_a_slow_lossy_line_crawls_with_the_others(cluster, lab):
    """The line turns bad once the worker crawls (its start over such a line takes a worker
    minutes of round trips: more than this test's two minutes).

    What the worker on the line exchanged with the site is counted on its line, not read in its
    log: the other worker may seed and finish every round (a busy run and CI saw it), and a worker that
    crawls only in rounds it did not seed or finish says so in no line before its last."""
    c = cluster(crawl={"concurrent_requests": 4}, days="2024-01-02")
    c.start(bad_line=(0.0, 0.0))
    c.start()
    line, site = lab.lines[-1], lab.site_address
    # it turns bad once 80% of the task is stored: the worker on it finishes what it then
    # holds slowly (about a document a second; the others cannot take over leases it renews),
    # and a larger part would take this test past two minutes; at 85% a busy machine once saw
    # the task end before this wait did
    part = len(c.admin.truth()) * 80 // 100
    c.wait(
        "the worker on the line to crawl",
        lambda: line.data_received[site] >= 20 and c.stored() >= part,
        alive=(0,),
    )
    line.delay, line.loss = 0.150, 0.05  # one way: 300 ms round trip, 5% lost each way
    carried, dropped = line.carried, line.dropped
    sent, received = line.data_sent[site], line.data_received[site]
    c.finish()
    c.assert_sound()
    carried, dropped = line.carried - carried, line.dropped - dropped
    assert carried > 500 and 0.03 < dropped / (carried + dropped) < 0.07, (carried, dropped)
    # it crawled on the bad line: requests to the site and its answers after the line turned bad
    sent, received = line.data_sent[site] - sent, line.data_received[site] - received
    assert sent >= SENT_AFTER_TURN and received >= sent, (sent, received, c.log(0)[-3000:])


def test_redis_unreachable_from_every_worker_for_60_s(cluster, lab):
    c = cluster(crawl={"concurrent_requests": 4}, days="2024-01-02")
    for _ in range(2):
        c.start()
    # both have opened their schedulers (a worker still opening its scheduler when Redis goes
    # away stops: see the report of issue 29), and rounds are in flight. A worker's first call
    # on the open queue writes it into {ns}:writers; on one day the first worker may seed every
    # round, so "both seeded" is not the sign.
    c.wait(
        "the crawl to be under way",
        lambda: c.redis.zcard(c.key("writers")) >= 2 and c.in_flight(),
    )
    lab.block(lab.redis_address)
    blocked_at = time.monotonic()
    stored_at_block = c.stored()
    while time.monotonic() - blocked_at < 60:
        c.check(0, 1)
        time.sleep(0.5)
    lab.unblock(lab.redis_address)
    c.finish()
    c.assert_sound()
    assert c.stored() > stored_at_block  # the crawl went on after the outage
