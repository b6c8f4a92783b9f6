"""Crawls through CNKI's hostility (issue: middlewares, proxies, error tables and recrawl).

The stand-in answers about one request in ten with a fault (verify redirects, captchas, blank
and JavaScript pages, 5xx, resets), bans an address that goes faster than its rate limit, and
hands out ten proxies through its provider API, three of them dead. Crawl plus recrawl must end
with the database equal to the ground truth and both error tables empty, except for documents
the site will never serve.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from cnkispider.store.schema import error_code, error_link
from tests.fixtures.crawl_harness import compare

pytestmark = pytest.mark.slow  # every test crawls the stand-in in a worker subprocess

FAULTS = {
    "verify": 0.02,
    "captcha": 0.02,
    "blank": 0.015,
    "javascript": 0.01,
    "e500": 0.01,
    "e503": 0.01,
    "reset": 0.015,
}


def hostile_site(cnki_site, **extra):
    return cnki_site(
        seed=11,
        faults=FAULTS,
        proxies=10,
        dead_proxies=3,
        provider_interval=0.3,
        provider_batch=5,
        rate_limit=40,
        burst=40,
        ban_seconds=2,
        **extra,
    )


def proxied(site) -> dict:
    return {
        "enabled": "true",
        "api_url": site.provider_url,
        "format": "lines",
        "reuse": 10,
        "fetch_interval": 0.3,
        # the stand-in's provider only ever has these ten addresses: a ban ends with the site's
        "ban_seconds": 2,
    }


def test_crawl_and_recrawl_through_faults_bans_and_dead_proxies_equal_the_truth(
    crawl_setup, cnki_site
):
    site = hostile_site(cnki_site)
    setup = crawl_setup(
        "patent",
        "G06,H04",
        "mysql",
        site=site,
        proxy=proxied(site),
        # faults drawn at random put four challenged sessions in a row now and
        # then: a short pause keeps the pause in play without 300 s of waiting
        crawl={"retry_times": 6, "challenge_cooldown": 3},
    )
    result = setup.run(timeout=400)
    assert result.returncode == 0, result.stdout[-3000:] + setup.log()[-4000:]
    truth = setup.truth()
    assert len(truth) > 100
    assert compare(setup.stored(), truth, "patent") == {
        "missing": [],
        "extra": [],
        "differing": {},
    }
    assert setup.query(sa.select(sa.func.count()).select_from(error_code))[0][0] == 0
    assert setup.query(sa.select(sa.func.count()).select_from(error_link))[0][0] == 0
    stats = site.stats()
    injected = sum(stats["faults"].values())
    assert injected > 20, stats["faults"]  # the faults really happened
    # the dead proxies were handed out and met (their connections dropped), and the crawl
    # bought more batches from the provider instead of stopping on them
    assert stats["dead_proxy_drops"] > 0, stats
    assert stats["provider"]["ok"] > 1, stats["provider"]


def test_a_document_that_always_fails_is_the_only_one_left_in_error_link(crawl_setup):
    setup = crawl_setup("paper", "TP3,F0", "sqlite", end="2024-01-01", site={"seed": 11})
    site = setup.site
    doomed = {setup.truth()[7]["filename"]}
    site.control(doomed=sorted(doomed))
    result = setup.run(timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + setup.log()[-4000:]
    diff = compare(setup.stored(), setup.truth(), "paper")
    assert {filename for _, filename in diff["missing"]} == doomed
    assert diff["extra"] == [] and diff["differing"] == {}
    rows = setup.query(sa.select(error_link.c.filename, error_link.c.reason, error_link.c.state))
    assert {r.filename for r in rows} == doomed
    assert all(r.state == "permanent" and r.reason for r in rows)
    assert setup.query(sa.select(sa.func.count()).select_from(error_code))[0][0] == 0


def test_a_document_whose_storing_fails_is_recorded_in_error_link_not_lost(crawl_setup):
    """A pipeline exception (the seed's global exception handler) lands in errorLink with its
    traceback; the recrawl phase retries it until it is permanent; every other document is stored."""
    import json

    setup = crawl_setup("paper", "TP3,F0", "sqlite", end="2024-01-01", site={"seed": 11})
    truth = setup.truth()
    failing = truth[3]["filename"]
    pipelines = {
        "tests.fixtures.failing_pipeline.FailOnSomeDocuments": 100,
        "cnkispider.pipelines.DocumentPipeline": 800,
    }
    result = setup.scrapy_crawl(
        f"ITEM_PIPELINES={json.dumps(pipelines)}", env={"CNKI_TEST_FAIL_FILENAMES": failing}
    )
    assert result.returncode == 0, result.stderr[-3000:] + setup.log()[-3000:]
    diff = compare(setup.stored(), truth, "paper")
    assert [filename for _, filename in diff["missing"]] == [failing] and not diff["extra"]
    rows = setup.query(
        sa.select(
            error_link.c.filename, error_link.c.reason, error_link.c.state, error_link.c.detail
        )
    )
    assert [(r.filename, r.reason, r.state) for r in rows] == [
        (failing, "pipeline:RuntimeError", "permanent")
    ]
    assert f"storage refused {failing} (test)" in rows[0].detail
