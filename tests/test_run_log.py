"""The log of a run (issue 41): a run of 1,585 rounds wrote 3,185 lines, two a round. At INFO a
run writes its progress once a minute and what needs a person's eyes; each round's seeded and
done lines are DEBUG; one summary at the end."""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa

from cnkispider.store.schema import round_


@pytest.mark.slow  # a crawl in a worker subprocess
def test_at_info_a_run_writes_no_line_a_round_and_one_summary(crawl_setup):
    setup = crawl_setup("patent", "G06,H04,A01", end="2024-01-03")  # 9 rounds
    result = setup.run(timeout=300)
    assert result.returncode == 0, result.stderr[-2000:] + setup.log()[-3000:]
    log = setup.log()
    info = [line for line in log.splitlines() if re.search(r"\] (INFO|WARNING): ", line)]
    per_round = [
        line for line in info if re.search(r"\b[Rr]ound \d+ (seeded|done|drained)\b", line)
    ]
    assert per_round == [], "\n".join(per_round[:5])
    # the rounds were crawled, and the run says so once at its end
    assert len(setup.query(sa.select(round_.c.id).where(round_.c.state == "done"))) == 9
    assert sum(1 for line in info if re.search(r"task \d+: \{", line)) == 1, "\n".join(info)
    # what is left at INFO does not grow with the rounds: a line a minute, the start and the end
    assert len(info) < 40, "\n".join(info)
