"""Issue 14's new user, as a script: a fresh config.ini, a typo'd category, the fix, a crawl of
the stand-in, status, stop, extend (and a second crawl with `-o`), export.

Every message the user meets is one line, no traceback anywhere, and a small crawl's console
stays under 40 lines by default (Scrapy's banner and stats dump only at --verbose)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.fixtures.crawl_harness import ROOT, CrawlSetup

pytestmark = pytest.mark.slow  # every test crawls the stand-in in a worker subprocess

SITE = {"seed": 5, "scale": 0.05}


@pytest.fixture
def user(crawl_setup):
    return crawl_setup(
        "patent",
        "H04;G06",
        "sqlite",
        end="2024-01-01",
        site=SITE,
        crawl={"log_file": ""},  # the console as a new user sees it
    )


def run(setup: CrawlSetup, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    result = subprocess.run(
        setup.command(*args), cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output[-3000:]
    for line in result.stderr.splitlines():  # every message (error or warning) is one line
        assert not line.startswith((" ", "\t")), result.stderr[-3000:]
    return result


def test_the_first_hour_of_a_new_user(user, tmp_path):
    user.write()

    # a typo'd category: refused before anything is saved, in one line that says the fix
    typo = run(user, "run")
    assert typo.returncode == 2
    assert typo.stderr.splitlines() == [
        f"error: {user.config_path}: [task] categories: "
        "categories 'H04;G06': separate codes with commas, e.g. 'H04,G06'"
    ]
    none = run(user, "task", "list")
    assert none.stdout == "no tasks\n"

    # the fix, and a quiet crawl of the stand-in
    user.categories = "H04,G06"
    user.write()
    crawl = run(user, "run")
    console = (crawl.stdout + crawl.stderr).splitlines()
    assert crawl.returncode == 0, "\n".join(console[-40:])
    assert len(console) < 40, "\n".join(console)
    assert not any("[scrapy." in line for line in console)  # no banner, no stats dump
    assert "Warning" not in crawl.stderr  # no DeprecationWarning (or any other) at the end
    # a round's own lines are DEBUG (issue 41: a line a minute, not a line a round); the
    # summary says the rounds done
    assert not any("round 1 done" in line or "Round 1 drained" in line for line in console)
    assert any(line.startswith("rounds ") and " done, " in line for line in console), console
    assert "finish reason   finished" in crawl.stdout
    documents = int(crawl.stdout.split("documents", 1)[1].split()[0])
    assert documents > 0

    status = run(user, "status")
    assert (
        status.returncode == 0
        and f"task 1 '{user.task}'" in status.stdout
        and "[finished]" in status.stdout
    )

    stop = run(user, "task", "stop", user.task)
    assert (
        stop.returncode == 0
        and len(stop.stdout.splitlines()) == 1
        and stop.stdout.startswith("stopped: ")
    )
    bad = run(user, "task", "extend", user.task, "2024-02-30")
    assert (
        bad.returncode == 2
        and len(bad.stderr.splitlines()) == 1
        and "is not a real day" in bad.stderr
    )
    extend = run(user, "task", "extend", user.task, "2024-01-02")
    assert extend.returncode == 0 and "2024-01-01..2024-01-02" in extend.stdout
    # config.ini still says 2024-01-01: the crawl says so, with the command, and goes on
    feed = tmp_path / "feed.jsonl"
    more = run(user, "run", "-o", str(feed))
    assert more.returncode == 0, more.stderr[-3000:]
    assert (
        f"warning: config.ini [task] end_date = 2024-01-01 but task '{user.task}' has 2024-01-02 "
        f"(the task row wins; to apply: cnkispider task extend {user.task} 2024-01-01)"
    ) in more.stderr.splitlines()
    raw = feed.read_text(encoding="utf-8")
    assert raw and "\\u" not in raw  # UTF-8 feed: 中文 as it is
    assert any("\u4e00" <= ch <= "\u9fff" for ch in raw)

    out = tmp_path / "docs.jsonl"
    export = run(user, "export", "--format", "jsonl", "--out", str(out))
    assert export.returncode == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(records) > documents
    assert all(r["pages"] is None or isinstance(r["pages"], int) for r in records)
    assert any(isinstance(r["pages"], int) for r in records)
    csv_out = tmp_path / "docs.csv"
    assert run(user, "export", "--out", str(csv_out)).returncode == 0
    assert csv_out.read_bytes().startswith(b"\xef\xbb\xbf")  # the BOM Excel needs (utf-8-sig)


def test_the_readme_quick_start_covers_the_offline_case_the_demo_data_and_retrying_a_range():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    for needed in (
        "CNKI is not reachable from here (DNS): try `cnkispider demo`",  # the offline case
        "data/demo/cnki-demo.db",  # where the demo's data is, as a path
        "export --out demo.csv",  # how to look at and export it
        'encoding="utf-8-sig"',  # the CSV's BOM in Python
        "cnkispider task resume NAME",  # retrying a failed range
        "cnkispider recrawl",
        "cnkispider task move NAME 2024-01-05",
        "clears its errorCode rows",
        "cnkispider task set NAME",
    ):
        assert needed in quick, needed
