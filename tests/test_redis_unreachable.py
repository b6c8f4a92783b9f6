"""A worker whose Redis cannot be reached says so in one line naming the address and exits 2
(an error before crawling, as for an unreachable database), never with a traceback: both when
config.ini's Redis is down at start (the checks before a crawl) and when the address the
scheduler opens is (here a `-s REDIS_URL=` override past those checks; over the internet, a line
cut between the checks and the scheduler's connection)."""

from __future__ import annotations

import pytest

from tests.fixtures.crawl_harness import CrawlSetup
from tests.fixtures.fault_services import free_port

pytestmark = pytest.mark.slow  # workers in subprocesses


@pytest.mark.parametrize("where", ["config.ini", "scheduler"])
def test_a_worker_whose_redis_is_unreachable_says_where_in_one_line(
    tmp_path, sqlite_url, cnki_site, where
):
    closed = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    setup = CrawlSetup(
        tmp_path, cnki_site(seed=4), sqlite_url, "paper", "2024-01-01", "2024-01-01", "TP3"
    )
    assert setup.run("init-db", timeout=60).returncode == 0
    if where == "config.ini":
        setup.redis_url = closed
        done = setup.run("run", timeout=60)
    else:
        done = setup.run("run", "-s", f"REDIS_URL={closed}", timeout=60)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: Redis at {closed} is not reachable"), line
