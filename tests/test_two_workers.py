"""Two workers on one task, one Redis and one MariaDB: they split the rounds, and exactly one of
them reports each round done and exactly one reports the task finished (no idle timeouts)."""

from __future__ import annotations

import re

import sqlalchemy as sa

from cnkispider.store.schema import round_
from tests.fixtures.crawl_harness import compare


def test_two_workers_split_rounds_and_one_reports_each_completion(crawl_setup):
    setup = crawl_setup(
        "paper",
        "TP3,F0,O1,R4",
        "mysql",
        "2024-01-01",
        "2024-01-03",
        site={"seed": 21, "latency": "0.005-0.02"},
        # debug: a round's "done" line is DEBUG (one a round: issue 41), and it is what says
        # which worker closed each round
        crawl={"log_file": "", "concurrent_requests": 4, "log_level": "debug"},
    )
    workers = [setup.spawn(), setup.spawn()]
    logs = [w.communicate(timeout=300)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], "\n".join(log[-2000:] for log in logs)
    assert compare(setup.stored(), setup.truth(), "paper") == {
        "missing": [],
        "extra": [],
        "differing": {},
    }

    rounds = setup.query(sa.select(round_.c.id, round_.c.state, round_.c.worker))
    assert len(rounds) == 12 and {r.state for r in rounds} == {"done"}
    assert len({r.worker for r in rounds}) == 2, "both workers claimed rounds"

    done_lines = [re.findall(r"round (\d+) done:", log) for log in logs]
    reported = sorted(int(r) for lines in done_lines for r in lines)
    assert reported == sorted(r.id for r in rounds), "each round reported done exactly once"
    finished = [log.count("every round is done; crawl phase finished") for log in logs]
    assert sorted(finished) == [0, 1]
    closed = [log.count(f"task {setup.task} finished") for log in logs]
    assert sorted(closed) == [0, 1]
