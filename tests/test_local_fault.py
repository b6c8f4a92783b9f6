"""Issue 47, point 3 (the halting rule): a worker whose every request fails for a cause of its
own (here: its DOWNLOAD_TIMEOUT, far below the stand-in's answer time) stops ITSELF with its
reason, one line, non-zero exit; the task row is not halted, and a healthy worker then finishes
the task, equal to the truth. On main the first worker halted the task for every worker
("CNKI is not reachable from here")."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from cnkispider.store.schema import task
from tests.fixtures.crawl_harness import compare

LOCAL_FAULT = 4  # cnkispider.watch.halting.EXIT_LOCAL_FAULT, spelled out: the documented contract


@pytest.mark.slow  # two crawls in worker subprocesses
def test_a_worker_with_a_local_fault_stops_itself_and_a_healthy_one_finishes(
    crawl_setup, cnki_site
):
    site = cnki_site(seed=5, latency="0.4")
    setup = crawl_setup(
        "patent",
        "G06",
        "sqlite",
        end="2024-01-01",
        site=site,
        # the held requests' leases run out in seconds for the healthy worker
        crawl={"retry_times": 1, "lease_seconds": 5},
    )
    faulty = setup.run("run", "-s", "DOWNLOAD_TIMEOUT=0.05", timeout=300)
    assert faulty.returncode == LOCAL_FAULT, (
        faulty.stdout[-2000:] + faulty.stderr[-2000:] + setup.log()[-3000:]
    )
    lines = [line for line in faulty.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, faulty.stderr
    assert lines[0].startswith("CNKI is not reachable from here (timeout)"), faulty.stderr
    assert f"(this worker stopped; task {setup.task} is not halted" in lines[0], faulty.stderr
    ((halt_reason,),) = setup.query(sa.select(task.c.halt_reason).where(task.c.name == setup.task))
    assert halt_reason is None

    setup.run_ok(timeout=300)  # a healthy worker: the task's default timeout
    assert compare(setup.stored(), setup.truth(), "patent") == {
        "missing": [],
        "extra": [],
        "differing": {},
    }
