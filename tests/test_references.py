"""Issue 26 point 3: a paper's reference list ([crawl] references), crawled from the stand-in's
citation API and compared with its truth; the parser and refusals on their own."""

from __future__ import annotations

import json
import math

import pytest
import scrapy
import sqlalchemy as sa

from cnkispider.cnki import references
from cnkispider.cnki.refusals import classify
from cnkispider.exceptions import RefusedPage
from cnkispider.store import schema
from cnkispider.store.db import open_database
from cnkispider.store.reference_rows import ENTRY_COLUMNS, fetch_references
from cnkispider.store.schema import error_code, error_link, round_
from tests.fixtures.crawl_harness import compare

SITE = {"seed": 11}
DAY = "2024-01-01"
PATH = references.PATH


def _stored_references(setup) -> dict[tuple[str, str], list[dict]]:
    engine = open_database(setup.db_url)
    try:
        rows = fetch_references(engine)
    finally:
        engine.dispose()
    out: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        entry = {name: row[name] or ("" if name != "position" else 0) for name in ENTRY_COLUMNS}
        out.setdefault((row["dbname"], row["filename"]), []).append(entry)
    return out


def _truth_references(setup) -> dict[tuple[str, str], list[dict]]:
    lists = setup.site.references("paper", setup.start, setup.end, setup.categories.split(","))
    return {(p["dbname"], p["filename"]): p["references"] for p in lists if p["references"]}


def _balanced(setup) -> None:
    rounds = setup.query(sa.select(round_.c.state, round_.c.total, round_.c.stored))
    assert rounds and all(r.state == "done" and r.total == r.stored for r in rounds), rounds
    assert setup.query(sa.select(sa.func.count()).select_from(error_code))[0][0] == 0
    assert setup.query(sa.select(error_link.c.filename, error_link.c.reason)) == []


@pytest.mark.slow  # a crawl of the stand-in in a worker subprocess
def test_a_crawl_with_references_on_equals_the_truth_with_its_reference_table(crawl_setup):
    setup = crawl_setup("paper", "TP3,F0", "sqlite", end=DAY, site=SITE, crawl={"references": "on"})
    setup.run_ok()
    truth = setup.truth()
    assert compare(setup.stored(), truth, "paper") == {"missing": [], "extra": [], "differing": {}}
    expected = _truth_references(setup)
    # the truth tests what it must: papers with none, and lists longer than one page
    assert len(expected) < len(truth) and max(len(v) for v in expected.values()) > 10
    assert any(e["cited_dbname"] for v in expected.values() for e in v)
    assert _stored_references(setup) == expected
    _balanced(setup)
    # one request per 10 entries (at least one) of each paper of a family with a list
    kinds = setup.site.stats()["kinds"]
    typed = [d for d in truth if references.reference_type(d["dbname"])]
    pages = sum(
        max(1, math.ceil(len(expected.get((d["dbname"], d["filename"]), [])) / 10)) for d in typed
    )
    assert kinds["references"] == pages, kinds
    assert kinds["detail"] == len(truth), kinds
    print(
        f"references on: {len(truth)} documents, detail {kinds['detail']}, references "
        f"{kinds['references']}, grid {kinds['grid']}, all {sum(kinds.values())}; "
        f"{sum(len(v) for v in expected.values())} references stored"
    )


@pytest.mark.slow  # a crawl of the stand-in in a worker subprocess
def test_with_references_off_no_reference_request_is_sent(crawl_setup):
    setup = crawl_setup("paper", "TP3,F0", "mysql", end=DAY, site=SITE)
    setup.run_ok()
    truth = setup.truth()
    assert compare(setup.stored(), truth, "paper") == {"missing": [], "extra": [], "differing": {}}
    kinds = setup.site.stats()["kinds"]
    assert kinds["references"] == 0 and kinds["detail"] == len(truth), kinds
    assert _stored_references(setup) == {}
    print(f"references off: {len(truth)} documents, all requests {sum(kinds.values())}")


@pytest.mark.slow  # a crawl of the stand-in in a worker subprocess
def test_refused_reference_requests_are_retried_and_the_ledger_balances(crawl_setup):
    """The stand-in refuses some reference requests (verify, captcha, blank, 5xx): each is
    retried in a fresh session; the table still equals the truth and nothing is left over."""
    site = {**SITE, "faults": {"verify": 0.06, "captcha": 0.04, "blank": 0.04, "e503": 0.03}}
    setup = crawl_setup(
        "paper", "TP3,F0", "mysql", end=DAY, site=site, crawl={"references": "on", "retry_times": 6}
    )
    setup.run_ok()
    by_path = setup.site.stats()["by_path"][PATH]
    assert by_path.get("302", 0) + by_path.get("503", 0) > 0, by_path  # refused, really
    assert compare(setup.stored(), setup.truth(), "paper")["missing"] == []
    assert _stored_references(setup) == _truth_references(setup)
    _balanced(setup)


@pytest.mark.slow  # a crawl of the stand-in in a worker subprocess
def test_a_reference_list_that_fails_goes_to_error_link_and_is_recrawled(crawl_setup):
    """The API answers HTML (not JSON) for a whole run: every paper with a list type is in
    errorLink with its own reason, stored and accounted for; `cnkispider recrawl` fetches the
    lists once the API answers again, and the errorLink rows go."""
    site = {**SITE, "break_": "references-html"}
    setup = crawl_setup(
        "paper",
        "TP3,F0",
        "mysql",
        end=DAY,
        site=site,
        crawl={"references": "on", "recrawl": "false"},
    )
    setup.run_ok()
    truth = setup.truth()
    assert compare(setup.stored(), truth, "paper")["missing"] == []
    typed = {d["filename"] for d in truth if references.reference_type(d["dbname"])}
    links = setup.query(sa.select(error_link.c.filename, error_link.c.reason))
    assert {row.filename for row in links} == typed
    assert {row.reason for row in links} == {"references/not-json"}
    assert _stored_references(setup) == {}
    rounds = setup.query(sa.select(round_.c.state, round_.c.total, round_.c.stored))
    assert rounds and all(r.state == "done" and r.total == r.stored for r in rounds), rounds
    setup.site.control(**{"break": []})
    setup.crawl["recrawl"] = "true"
    setup.run_ok("recrawl")  # `cnkispider recrawl`: replay errorCode and errorLink now
    assert _stored_references(setup) == _truth_references(setup)
    _balanced(setup)


@pytest.mark.slow  # a crawl of the stand-in in a worker subprocess
def test_in_a_session_a_person_passed_the_references_go_in_that_session(verified_crawl):
    """On a site that checks for a person, each reference page goes in the verified session that
    listed its paper (a v= token opens nowhere else): CNKI never checks the crawler, and the
    table equals the truth."""
    from tests.fixtures.verified import add_passed

    setup, pool = verified_crawl("paper", "TP3,F0", site=SITE, crawl={"references": "on"})
    session, _ = add_passed(setup.site, pool)
    before = setup.site.stats()["human_check_refusals"]
    setup.run_ok()
    assert _stored_references(setup) == _truth_references(setup)
    _balanced(setup)
    stats = setup.site.stats()
    assert stats["human_check_refusals"] == before, stats
    assert stats["kinds"]["references"] > 0
    crawled = ("/kns8s/brief/grid", "/kcms2/article/abstract", PATH)
    assert pool.get(session.id).requests == sum(sum(stats["by_path"][p].values()) for p in crawled)


def test_the_upgrade_adds_the_reference_table(db_url):
    engine = open_database(db_url)
    with engine.begin() as conn:  # what the previous schema version left behind
        conn.exec_driver_sql("DROP TABLE reference")
        conn.execute(schema.schema_version.update().values(version=schema.SCHEMA_VERSION - 1))
    engine.dispose()
    for _ in range(2):  # a second start finds it in place
        upgraded = open_database(db_url)
        with upgraded.connect() as conn:
            assert sa.inspect(conn).has_table("reference")
            version = conn.execute(sa.select(schema.schema_version.c.version)).scalar()
            assert version == schema.SCHEMA_VERSION
        upgraded.dispose()


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("type=CJFDREF&start=1&size=10", "v"),
        ("v=abc&type=XXREF&start=1&size=10", "type"),
        ("v=abc&type=CJFDREF&start=1&size=51", "size"),
        ("v=abc&type=CJFDREF&start=0&size=10", "start"),
    ],
)
def test_the_stand_in_refuses_a_malformed_reference_request_in_cnki_words(cnki_site, query, field):
    site = cnki_site(**SITE)
    status, _, body = site.request("GET", f"{PATH}?{query}")
    assert status == 400
    assert json.loads(body)["message"] == f"参数校验;字段【{field}】校验失败"


def test_the_stand_in_refuses_a_reference_request_without_its_session(cnki_site):
    """A token no session issued gets CNKI's -403 JSON, which the crawler reads as a challenge."""
    site = cnki_site(**SITE)
    status, _, body = site.request("GET", f"{PATH}?v=forged&type=CJFDREF&start=1&size=10")
    assert status == 403 and json.loads(body)["code"] == -403
    assert classify("references", status, site.base_url + PATH, body) == "verify"


def test_a_reference_request_is_a_session_request_retried_in_a_fresh_session():
    """The downloader middlewares treat kind ``references`` as ``detail``: it goes in a warmed
    CNKI session, with its detail page as Referer; CNKI's -403 JSON is a challenge, retried in a
    fresh session, and the JSON list that follows is a usable answer."""
    from tests.fixtures.middleware_site import Site
    from tests.fixtures.middleware_site import crawl as crawl_with_middlewares

    s = Site()
    try:
        refused = (
            403,
            {},
            b'{"code":-403,"message":"http://x/verify/home?captchaType=blockPuzzle"}',
        )
        listed = (200, {}, b'{"code":200,"data":{"total":0,"data":[]}}')
        answers = iter([refused])
        s.routes[PATH] = lambda hit: next(answers, listed)
        detail = f"{s.base_url}/kcms2/article/abstract?v=tok"
        request = scrapy.Request(
            references.references_url(s.base_url, "tok", "CJFDREF"),
            meta={"cnki_kind": "references", "doc_type": "paper", "cnki_referer": detail},
            dont_filter=True,
        )
        crawler = crawl_with_middlewares(s, [request], RETRY_TIMES=2)
        hits = s.on(PATH)
        assert len(crawler.spider.responses) == 1 and not crawler.spider.failures
        assert len(hits) == 2 and all(h["sid"] for h in hits)
        assert hits[0]["sid"] != hits[1]["sid"]  # a fresh session for the retry
        assert {h["referer"] for h in hits} == {detail}
        assert crawler.stats.get_value("retry/reason_count/verify") == 1
        assert crawler.stats.get_value("session/requests/references") == 2
    finally:
        s.close()


def test_the_references_key_is_validated_and_off_by_default(tmp_path):
    from pathlib import Path

    from cnkispider.config import load_config
    from cnkispider.exceptions import ConfigError
    from cnkispider.launch.crawlsettings import crawler_settings

    shipped = load_config(Path(__file__).resolve().parents[1] / "config.ini", environ={})
    assert shipped.crawl["references"] is False
    assert crawler_settings(shipped)["CNKI_REFERENCES"] is False
    path = tmp_path / "config.ini"
    path.write_text("[crawl]\nreferences = on\n", encoding="utf-8")
    assert crawler_settings(load_config(path, environ={}))["CNKI_REFERENCES"] is True
    path.write_text("[crawl]\nreferences = some\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    assert "[crawl] references" in str(err.value) and "'some'" in str(err.value)


# -- the pure parts -----------------------------------------------------------------------------


def test_reference_types_match_database_families_by_prefix():
    assert references.reference_type("CJFDLAST2016") == "CJFDREF"
    assert references.reference_type("CAPJ") == "CJFDREF"
    assert references.reference_type("CMFD202101") == "CMFDREF"
    assert references.reference_type("CDFD") == "CDFDREF"
    assert references.reference_type("CPFD2019") == "CPFDREF"
    assert references.reference_type("SCPD2017") is None


def test_the_parser_reads_entries_links_and_paging():
    body = (
        '{"code":200,"data":{"total":12,"data":['
        '{"metadata":[{"name":"TI","value":"题名 一"},{"name":"AU","value":"张三;李四"},'
        '{"name":"LY","value":"计算机学报"},{"name":"YE","value":"2019"}],'
        '"dbname":"CJFD2019","filename":"JSJX201901001"},'
        '{"metadata":[{"name":"TI","value":"题名二"}],"fileName":"ONLYHALF"}]}}'
    )
    page = references.parse_references(body.encode(), start=11)
    assert page.total == 12
    first, second = page.references
    assert (first.position, first.title, first.authors, first.source, first.year) == (
        11,
        "题名 一",
        "张三;李四",
        "计算机学报",
        "2019",
    )
    assert (first.cited_dbname, first.cited_filename) == ("CJFD2019", "JSJX201901001")
    assert (second.cited_dbname, second.cited_filename) == ("", "")  # half a key links nothing
    assert references.next_start(page, 11, 10) is None
    assert references.next_start(references.ReferencePage(25, page.references), 11, 10) == 21


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (
            403,
            b'{"code":-403,"message":"https://kns.cnki.net/verify/home?captchaType=blockPuzzle"}',
            "verify",
        ),
        (
            200,
            '<p class="no-content" value="">抱歉，暂无数据，请稍后重试。</p>'.encode(),
            "no-data-retry",
        ),
        (200, b"<html><body><div>" + b"x" * 200 + b"</div></body></html>", "not-json"),
        (200, b"", "blank"),
        (200, b'{"code":200,"data":{"total":0,"data":[]}}', None),
    ],
)
def test_a_refusal_is_never_zero_references(status, body, reason):
    assert classify("references", status, "https://kns.cnki.net" + PATH, body) == reason


def test_an_answer_without_its_list_is_refused_not_empty():
    with pytest.raises(RefusedPage):
        references.parse_references(b'{"code":200,"data":{"total":3}}')
    with pytest.raises(RefusedPage):
        references.parse_references(b"<html></html>")
