"""Crawls against a stand-in that checks for a person (issue 19): sessions a person passed, shared
by every worker through the pool in Redis; waiting for a person as a state, not a failure."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from cnkispider.sessions import NEEDS_PERSON
from cnkispider.store.schema import error_code, error_link, round_
from tests.fixtures.crawl_harness import CrawlSetup, count_rows
from tests.fixtures.receiver import Receiver
from tests.fixtures.verified import CHROME_UA, add_passed, assert_equal_to_truth, status_json

pytestmark = pytest.mark.slow  # every test crawls the stand-in in a worker subprocess


def rounds_done(setup: CrawlSetup) -> int:
    return setup.query(
        sa.select(sa.func.count()).select_from(round_).where(round_.c.state == "done")
    )[0][0]


def test_a_run_without_a_session_waits_then_goes_on_when_a_person_passes(verified_crawl):
    """No session: the worker waits (status says so; no round done, no error row), says so once;
    a session added later ends the wait by itself and the crawl equals the truth."""
    setup, pool = verified_crawl()
    site = setup.site
    hook = Receiver()  # a webhook ([notify] webhook): nobody watches a server at night
    worker = setup.spawn(
        "run", "-s", "SESSIONS_POLL=1", "-s", f"NOTIFY_WEBHOOKS={hook.url}/hook?access_token=t"
    )
    started = time.monotonic()
    try:
        deadline = started + 60
        waiting = None
        while waiting is None:
            assert worker.poll() is None and time.monotonic() < deadline, setup.log()[-3000:]
            time.sleep(0.5)
            task = status_json(setup, started=False)["tasks"]
            waiting = task[0].get("waiting") if task else None
        assert waiting == "CNKI wants a person to pass its check (cnkispider session login)"
        # A minute after the start, with SESSIONS_POLL=1 (a poll of the pool a second): nothing
        # moves, nothing is recorded, nothing is sent.
        time.sleep(max(0.0, started + 60 - time.monotonic()))
        assert worker.poll() is None
        assert rounds_done(setup) == 0
        assert count_rows(setup, error_code) == 0 and count_rows(setup, error_link) == 0
        log = setup.log()
        assert log.count("waiting: CNKI wants a person") == 1, log[-3000:]
        assert "cnkispider session login" in log
        assert site.stats()["pages"]["list"] == 0  # nothing was sent on a plain session's behalf

        add_passed(site, pool)
        out, _ = worker.communicate(timeout=240)
        assert worker.returncode == 0, out[-3000:] + setup.log()[-3000:]
        assert "the crawl goes on" in setup.log()
        assert_equal_to_truth(setup)
        assert status_json(setup)["tasks"][0]["waiting"] is None
        events = [b["json"]["event"] for b in hook.bodies]
        assert events == ["waiting", "finished"], hook.bodies
        assert "CNKI wants a person" in hook.bodies[0]["json"]["text"]
    finally:
        hook.close()
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_with_a_passed_session_the_crawl_equals_the_truth_without_a_pause(verified_crawl, tmp_path):
    """A session a person passed, added as a server's operator would (`session add --from-curl`
    of a browser's "Copy as cURL"): the crawl equals the truth, never checked, never paused."""
    # one day: fewer documents than one pass's hidden request limit (300)
    setup, pool = verified_crawl()
    site = setup.site
    # the person passes the check in a browser and copies a request as cURL (Chrome, bash);
    # `cnkispider session add --from-curl FILE` puts that session in the pool
    cookies = site.pass_check()
    paste = tmp_path / "request.txt"
    paste.write_text(
        f"curl '{site.base_url}/kns8s/defaultresult/index' \\\n"
        "  -H 'accept: text/html,application/xhtml+xml' \\\n"
        f"  -b '{'; '.join(f'{k}={v}' for k, v in cookies.items())}' \\\n"
        f"  -H 'user-agent: {CHROME_UA}'\n"
    )
    added = setup.run("session", "add", "--from-curl", str(paste), timeout=60)
    assert added.returncode == 0, added.stdout + added.stderr
    line = added.stdout.strip().splitlines()[-1]
    assert line.startswith("added session s-") and "(a request copied as cURL): " in line, line
    session = pool.get(line.split()[2])
    assert {c["name"]: c["value"] for c in session.cookies} == cookies
    before = site.stats()["human_check_refusals"]  # the person's own first page
    result = setup.run(timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + setup.log()[-3000:]
    assert_equal_to_truth(setup)
    log = setup.log()
    assert "pauses for" not in log and "waiting:" not in log
    stats = site.stats()
    assert stats["human_check_refusals"] == before, stats  # CNKI never checked the crawler
    served = pool.get(session.id)
    # every request CNKI answered was one of the session's: list pages and detail pages
    crawled = ("/kns8s/brief/grid", "/kcms2/article/abstract")
    assert served.requests == sum(sum(stats["by_path"][p].values()) for p in crawled)
    assert served.state == "ready"  # its rounds are over
    assert "documents per verified session" in result.stdout


def test_auto_mode_moves_to_verified_sessions_when_cnki_checks(verified_crawl):
    """[cnki] sessions = auto: plain sessions first; CNKI sends their warm-up to its check; the
    crawl moves to the pool's session, with no error row and no pause."""
    setup, pool = verified_crawl(cnki={"sessions": "auto"})
    site = setup.site
    add_passed(site, pool)
    result = setup.run(timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + setup.log()[-3000:]
    assert "CNKI checks for a person" in setup.log()
    assert_equal_to_truth(setup)


def test_two_workers_share_two_sessions(verified_crawl):
    # no hidden request limit here: this is about sharing (the limit is the next test's)
    setup, pool = verified_crawl(db="mysql", end="2024-01-02", site={"session_requests": 0})
    site = setup.site
    sessions = [add_passed(site, pool)[0] for _ in range(2)]
    before = site.stats()["human_check_refusals"]
    workers = [setup.spawn("run") for _ in range(2)]
    outs = [w.communicate(timeout=300)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], "\n".join(o[-2000:] for o in outs)
    assert_equal_to_truth(setup)
    served = {s.id: pool.get(s.id).requests for s in sessions}
    assert all(n > 10 for n in served.values()), served
    assert site.stats()["human_check_refusals"] == before


def test_a_session_checked_again_mid_round_goes_to_needs_person_and_the_crawl_still_equals_the_truth(
    verified_crawl,
):
    setup, pool = verified_crawl()
    site = setup.site
    first, cookies = add_passed(site, pool)
    # CNKI checks the first session again after 30 of its requests: in the middle of a
    # round, with detail links of its list pages still to open
    site.check_after(cookies, 30)
    second, _ = add_passed(site, pool)
    before = site.stats()["human_check_refusals"]["plain"]
    result = setup.run(timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + setup.log()[-3000:]
    assert_equal_to_truth(setup)
    lost = pool.get(first.id)
    assert lost.state == NEEDS_PERSON, lost
    assert lost.note.startswith("checked by CNKI at request"), lost.note
    assert pool.get(second.id).requests > 0
    assert site.stats()["human_check_refusals"]["plain"] == before  # no plain session sent
    log = setup.log()
    assert "needs a person again" in log
    assert "secret" not in log and cookies["SID_kns_new"] not in log  # no cookie value


def test_on_check_fail_exits_3_with_one_line(verified_crawl):
    setup, pool = verified_crawl(categories="G06", cnki={"on_check": "fail"})
    result = setup.run(timeout=120)
    assert result.returncode == 3, result.stdout[-2000:] + result.stderr[-2000:]
    assert "CNKI wants a person to pass its check" in result.stderr
    assert count_rows(setup, error_code) == 0 and rounds_done(setup) == 0
