"""The CNKI stand-in site keeps its promises: CNKI's markup and limits, its faults, its ground truth.

Talks to the site over plain http.client (``tests.cnki_site.client``) and parses with lxml and the
real page's selectors, never with the crawler's code, so that the site is an independent judge.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import sys
import threading
import time

import lxml.html
import pytest

from tests.cnki_site.client import REPO, grid_form, start_site
from tests.cnki_site.corpus import FIELDS

REAL_LIST = REPO.parent / "shared" / "cnki" / "pages" / "kns8s_list_crossdb_p1.html"
DAY = "2024-03-05"
CAPTCHA_TITLE = "<title>安全验证</title>".encode()


# -- reference parsers (the real page's selectors; deliberately independent of cnkispider) -----


def parse_list(body: bytes) -> dict:
    doc = lxml.html.fromstring(body.decode("utf-8"))  # the charset is in the Content-Type header
    if doc.cssselect("#briefBox p.no-content"):
        return {
            "total": 0,
            "pages": 0,
            "rows": [],
            "no_content": doc.cssselect("p.no-content")[0].text_content(),
        }
    nxt = doc.cssselect("a#PageNext")
    rows = []
    for tr in doc.cssselect("table.result-table-list tbody tr"):
        collect = tr.cssselect("td.operat a.icon-collect")[0]
        link = tr.cssselect("td.name a.fz14")[0]
        rows.append(
            {
                "seq": int(tr.cssselect("td.seq")[0].text_content().strip()),
                "dbname": collect.get("data-dbname"),
                "filename": collect.get("data-filename"),
                "title": link.text_content().strip(),
                "href": link.get("href"),
                "people": [a.text_content() for a in tr.cssselect("td.author a.KnowledgeNetLink")],
                "source": tr.cssselect("td.source")[0].text_content().strip(),
                "date": tr.cssselect("td.date")[0].text_content().strip(),
                "database": tr.cssselect("td.data")[0].text_content().strip(),
            }
        )
    return {
        "total": int(
            doc.cssselect("span.pagerTitleCell em")[0].text_content().strip().replace(",", "")
        ),
        "total_hidden": int(doc.cssselect("#totalCnt")[0].get("value")),
        "pages": int(doc.cssselect("span.countPageMark")[0].get("data-pagenum")),
        "mark": doc.cssselect("span.countPageMark")[0].text_content().strip(),
        "current": int(doc.cssselect("#curPageHid")[0].get("value")),
        "next": int(nxt[0].get("data-curpage")) if nxt else None,
        "turn": doc.cssselect("#hidTurnPage")[0].get("value"),
        "rows": rows,
    }


PATENT_LABELS = {
    "专利类型": "patent_type", "申请(专利)号": "application_no", "申请日": "application_date",
    "申请公布号": "publication_no", "公开公告日": "publication_date", "授权公布号": "grant_no",
    "授权公告日": "grant_date", "申请人": "applicant", "地址": "address", "共同申请人": "co_applicants",
    "发明人": "inventors", "分类号": "ipc", "主分类号": "main_ipc", "国省代码": "province_code",
    "代理机构": "agency", "代理人": "agent", "页数": "pages",
}  # fmt: skip
ACHIEVEMENT_LABELS = {
    "成果完成人": "completers", "第一完成单位": "first_unit", "关键词": "keywords", "中图分类号": "clc",
    "学科分类号": "subject_code", "成果简介": "summary", "成果类别": "achievement_type",
    "成果入库时间": "entry_date", "成果水平": "level", "研究起止时间": "period", "评价形式": "evaluation",
}  # fmt: skip
PAPER_LABELS = {"DOI": "doi", "专辑": "album", "专题": "topic", "分类号": "clc"}


def _title(doc) -> str:
    h1 = doc.cssselect(".wx-tit h1")[0]
    for span in h1.cssselect("span"):
        if "display:none" in (span.get("style") or "").replace(" ", ""):
            span.drop_tree()
    return h1.text_content().strip()


def parse_detail(doc_type: str, body: bytes) -> tuple[dict, list[str]]:
    """(fields, raw labels) of a detail page, rows read as key/value pairs."""
    doc = lxml.html.fromstring(body.decode("utf-8"))
    out = dict.fromkeys(FIELDS[doc_type], "")
    out["title"] = _title(doc)
    out["dbname"] = doc.cssselect("#paramdbname")[0].get("value")
    out["filename"] = doc.cssselect("#paramfilename")[0].get("value")
    raw_labels = []
    if doc_type == "paper":
        out["authors"] = ";".join(a.text.strip() for a in doc.cssselect("h3#authorpart span a"))
        insts = doc.cssselect("h3.author")[1].cssselect("span a")
        out["institutions"] = ";".join(
            re.sub(r"^\d+\.\s*", "", a.text_content().strip()) for a in insts
        )
        out["abstract"] = doc.cssselect("#ChDivSummary")[0].text_content().strip()
        out["keywords"] = ";".join(
            a.text_content().strip().rstrip(";") for a in doc.cssselect("p.keywords a")
        )
        for row in doc.cssselect("div.row"):
            label = row.cssselect("span.rowtit")[0].text_content().strip().rstrip("：")
            if label == "基金":
                out["fund"] = ";".join(
                    a.text_content().strip().rstrip(";") for a in row.cssselect("p.funds a")
                )
        for li in doc.cssselect("li.top-space"):
            label = li.cssselect("span.rowtit")[0].text_content().strip().rstrip("：")
            out[PAPER_LABELS[label]] = li.cssselect("p")[0].text_content().strip()
        return out, raw_labels
    labels = PATENT_LABELS if doc_type == "patent" else ACHIEVEMENT_LABELS
    for span in doc.cssselect("span.rowtit, span.rowtit2"):
        raw = span.text_content()
        raw_labels.append(raw)
        label = raw.strip().rstrip("：").replace("（", "(").replace("）", ")")
        value = span.getnext()
        if label in labels and value is not None and value.tag == "p":
            out[labels[label]] = value.text_content().strip()
    if doc_type == "patent":
        out["abstract"] = doc.cssselect("div.abstract-text")[0].text_content().strip()
        out["claim"] = doc.cssselect("div.claim-text")[0].text_content().strip()
    return out, raw_labels


def crawl_round(
    client, doc_type, day, code=None, size=50, sort_field="", sort_type="desc", turn_limit=15
):
    """Every row of a round's list pages, renewing the session before its turn limit."""
    first, rows, turn, page, pages = None, [], "", 1, 1
    while page <= pages:
        if (page - 1) % (turn_limit + 1) == 0:
            client.warmup()
        status, _, body = client.grid(
            doc_type,
            day,
            code=code,
            page=page,
            size=size,
            sort_field=sort_field,
            sort_type=sort_type,
            turnpage=turn,
        )
        assert status == 200, page
        parsed = parse_list(body)
        first = first or parsed
        pages, turn = parsed["pages"], parsed.get("turn", "")
        rows += parsed["rows"]
        page += 1
    return first, rows


def is_verify(status, headers) -> bool:
    return status == 302 and "/verify/home" in headers.get("Location", "")


# -- markup and ground truth --------------------------------------------------------------------


def test_real_page_has_the_structure_the_site_serves():
    """The reference parser reads CNKI's own saved page, so the site is judged by CNKI's markup."""
    if not REAL_LIST.exists():
        pytest.skip(f"{REAL_LIST} not available")
    page = parse_list(REAL_LIST.read_bytes())
    assert (page["total"], page["pages"], page["mark"], page["next"]) == (661, 34, "1/34", 2)
    assert len(page["rows"]) == 20
    assert (page["rows"][0]["dbname"], page["rows"][0]["filename"]) == ("CAPJ", "HJXB20260618001")
    assert page["rows"][0]["database"] == "期刊" and page["rows"][0]["date"] == "2026-06-24 09:14"


def test_field_names_are_the_items_fields():
    from cnkispider.items import FIELDS as ITEM_FIELDS

    assert FIELDS == {k: tuple(v) for k, v in ITEM_FIELDS.items()}


@pytest.mark.parametrize(
    ("doc_type", "code"), [("patent", "H04"), ("paper", "TP"), ("achievement", "R")]
)
def test_list_pages_match_truth(cnki_site, doc_type, code):
    site = cnki_site(seed=2)
    truth = site.truth(doc_type, DAY, categories=[code])
    assert truth, "pick a round with documents"
    first, rows = crawl_round(site.client(), doc_type, DAY, code=code)
    assert first["total"] == first["total_hidden"] == len(truth)
    assert first["pages"] == -(-len(truth) // 50) and first["mark"] == f"1/{first['pages']}"
    assert [r["seq"] for r in rows] == list(range(1, len(truth) + 1))
    by_key = {(t["dbname"], t["filename"]): t for t in truth}
    assert {(r["dbname"], r["filename"]) for r in rows} == set(by_key)
    for row in rows:
        expected = by_key[row["dbname"], row["filename"]]
        assert {k: row[k] for k in ("title", "source", "date", "database")} == {
            k: expected[k] for k in ("title", "source", "date", "database")
        }


@pytest.mark.parametrize(
    ("doc_type", "code"), [("patent", "G06N"), ("paper", "F"), ("achievement", "TP")]
)
def test_detail_pages_match_truth_field_by_field(cnki_site, doc_type, code):
    site = cnki_site(seed=3, overflow=[f"{doc_type}:{DAY}:{code}:150"])
    truth = {t["filename"]: t for t in site.truth(doc_type, DAY, categories=[code])}
    client = site.client()
    _, rows = crawl_round(client, doc_type, DAY, code=code)
    labels: list[str] = []
    for row in rows[:120]:
        status, _, body = client.get(row["href"])
        assert status == 200
        fields, raw = parse_detail(doc_type, body)
        labels += raw
        for name in ("source", "date", "database"):  # these come from the list row
            fields[name] = row[name]
        assert fields == truth[row["filename"]]
        assert fields["title"] == row["title"]
    if doc_type == "patent":  # CNKI's irregularities are all represented
        assert " 申请日：" in labels and " 地址：" in labels
        assert "申请（专利）号：" in labels and "申请(专利)号：" in labels
        assert any(not truth[r["filename"]]["publication_no"] for r in rows)
        assert any(not truth[r["filename"]]["agent"] for r in rows)


def test_zero_results_is_the_no_content_fragment(cnki_site):
    site = cnki_site(seed=1)
    leaves = [
        "D",
        "A01",
        "A23",
        "A47",
        "A63",
        "B01",
        "B23",
        "B29",
        "B60",
        "B65",
        "C02",
        "C04",
        "C07",
    ]
    empty = next(r for r in site.rounds("patent", DAY, categories=leaves) if r["count"] == 0)
    client = site.client()
    client.warmup()
    status, _, body = client.grid("patent", empty["date"], code=empty["category"])
    assert status == 200
    assert "抱歉，暂无数据，请调整检索条件" in parse_list(body)["no_content"]
    assert b"pagerTitleCell" not in body


def test_title_search_finds_the_document(cnki_site):
    site = cnki_site(seed=4)
    target = site.truth("paper", DAY, categories=["TP"])[7]
    client = site.client()
    client.warmup()
    _, _, body = client.grid("paper", DAY, code="TP", title=target["title"])
    page = parse_list(body)
    assert page["total"] == 1 and page["rows"][0]["filename"] == target["filename"]


def test_truth_deduplicates_categories_and_documents_appear_in_several_rounds(cnki_site):
    site = cnki_site(seed=1)
    h04 = site.truth("patent", DAY, categories=["H04"])
    assert site.truth("patent", DAY, categories=["H04", "H04L"]) == h04
    g06 = site.truth("patent", DAY, categories=["G06"])
    both = site.truth("patent", DAY, categories=["H04", "G06"])
    keys = [t["filename"] for t in both]
    assert (
        len(keys)
        == len(set(keys))
        == len({t["filename"] for t in h04} | {t["filename"] for t in g06})
    )
    children = site.rounds("patent", DAY, categories=["H04L", "H04N", "H04W"])
    assert sum(r["count"] for r in children) > len(h04)  # a document can be in two rounds


# -- CNKI's limits ------------------------------------------------------------------------------


def test_page_cap_and_the_two_orders(cnki_site):
    """At most max_pages pages; the total stays the real one; asc is the exact reverse of desc."""
    site = cnki_site(seed=1, max_pages=3, overflow=["patent:2024-03-05:G06F:200"])
    leaf = [t["filename"] for t in site.truth("patent", DAY, categories=["G06F"])]
    client = site.client()
    first, desc = crawl_round(client, "patent", DAY, code="G06F", size=20)
    assert first["total"] == len(leaf) >= 200 and first["pages"] == 3 and len(desc) == 60
    _, asc = crawl_round(client, "patent", DAY, code="G06F", size=20, sort_type="asc")
    assert len({r["filename"] for r in desc} | {r["filename"] for r in asc}) == 120
    status, headers, _ = client.grid("patent", DAY, code="G06F", size=20, page=4)
    assert is_verify(status, headers)

    small_site = cnki_site(seed=1, max_pages=120)
    client = small_site.client()
    _, desc = crawl_round(client, "patent", DAY, code="H04", sort_field="CF")
    _, asc = crawl_round(client, "patent", DAY, code="H04", sort_field="CF", sort_type="asc")
    assert [r["filename"] for r in asc] == [r["filename"] for r in reversed(desc)]


def test_turn_limit_then_verify_and_a_new_session_works(cnki_site):
    site = cnki_site(seed=1, turn_limit=3)
    client = site.client()
    status, headers, _ = client.grid("patent", DAY)
    assert is_verify(status, headers)  # no session yet
    client.warmup()
    for page in range(1, 5):  # the first request and three turns
        status, _, _ = client.grid("patent", DAY, page=page, size=20)
        assert status == 200, page
    status, headers, _ = client.grid("patent", DAY, page=5, size=20)
    assert is_verify(status, headers)
    client.warmup()
    assert client.grid("patent", DAY, page=5, size=20)[0] == 200
    stats = site.stats()
    assert (
        stats["turn_refusals"] == 1
        and stats["no_session_refusals"] == 1
        and stats["sessions_created"] == 2
    )


def test_detail_tokens_expire_and_need_no_cookie(cnki_site):
    site = cnki_site(seed=1, token_ttl=0.6)
    client = site.client()
    client.warmup()
    row = parse_list(client.grid("patent", DAY, code="H04")[2])["rows"][0]
    stranger = site.client()  # another connection, no cookies
    assert stranger.get(row["href"])[0] == 200
    tampered = row["href"].replace("v=", "v=A", 1)
    assert is_verify(*stranger.get(tampered)[:2])
    time.sleep(0.8)
    assert is_verify(*stranger.get(row["href"])[:2])
    assert site.stats()["token_refusals"] == {"bad": 1, "expired": 1, "session": 0}


def test_detail_tokens_die_with_their_session(cnki_site):
    site = cnki_site(seed=1, session_ttl=0.5)
    client = site.client()
    client.warmup()
    row = parse_list(client.grid("patent", DAY, code="H04")[2])["rows"][0]
    assert client.get(row["href"])[0] == 200
    time.sleep(0.7)
    assert is_verify(*client.get(row["href"])[:2])
    assert site.stats()["token_refusals"]["session"] == 1


def test_a_json_body_gets_the_retry_message(cnki_site):
    site = cnki_site(seed=1)
    client = site.client()
    client.warmup()
    status, _, body = client.request(
        "POST", "/kns8s/brief/grid", b'{"QueryJson": {}}', {"Content-Type": "application/json"}
    )
    assert status == 200 and "抱歉，暂无数据，请稍后重试。" in body.decode()


# -- faults -------------------------------------------------------------------------------------


def test_each_fault_at_rate_one(cnki_site):
    site = cnki_site(seed=1, slow_seconds=0.3)
    client = site.client()
    client.warmup()
    href = parse_list(client.grid("patent", DAY, code="H04")[2])["rows"][0]["href"]

    def both():
        return [client.grid("patent", DAY, code="H04"), client.get(href)]

    expectations = {
        "verify": lambda s, h, b: is_verify(s, h),
        "captcha": lambda s, h, b: (
            s == 200 and "<title>安全验证</title>" in b.decode() and b"TJCaptcha.js" in b
        ),
        "blank": lambda s, h, b: s == 200 and b == b"",
        "javascript": lambda s, h, b: (
            s == 200 and b.startswith(b"<script") and b"location" in b and b"<html" not in b
        ),
        "e500": lambda s, h, b: s == 500,
        "e502": lambda s, h, b: s == 502,
        "e503": lambda s, h, b: s == 503,
    }
    for fault, ok in expectations.items():
        site.control(**{fault: 1.0})
        for status, headers, body in both():
            assert ok(status, headers, body), fault
        assert client.warmup()[0] == 200, "warm-up is never faulted"
        site.control(**{fault: 0.0})

    site.control(reset=1.0)
    for call in (lambda: client.grid("patent", DAY, code="H04"), lambda: client.get(href)):
        with pytest.raises(ConnectionResetError):
            call()
    site.control(reset=0.0, slow=1.0)
    started = time.perf_counter()
    assert client.get(href)[0] == 200
    assert time.perf_counter() - started >= 0.3
    site.control(slow=0.0)
    assert client.get(href)[0] == 200
    faults = site.stats()["faults"]
    assert all(faults[name] == 2 for name in (*expectations, "reset")) and faults["slow"] == 1


def test_faults_are_deterministic_per_seed_and_retries_draw_afresh(cnki_site):
    def statuses(site):
        client = site.client()
        client.warmup()
        href = parse_list(client.grid("patent", DAY, code="H04")[2])["rows"][0]["href"]
        site.control(e503=0.5)
        return [client.get(href)[0] for _ in range(40)]

    a, b = statuses(cnki_site(seed=7)), statuses(cnki_site(seed=7))
    assert a == b  # same seed, same request sequence: same faults
    assert 5 < a.count(503) < 35 and 200 in a  # the same request retried gets fresh draws
    assert statuses(cnki_site(seed=8)) != a


def test_rate_limit_bans_an_address_for_a_while(cnki_site):
    site = cnki_site(seed=1, rate_limit=2, burst=4, ban_seconds=0.6)
    client = site.client()
    client.warmup()
    bodies = [client.grid("patent", DAY, code="H04")[2] for _ in range(6)]
    assert all(b"pagerTitleCell" in b for b in bodies[:4])
    assert all(CAPTCHA_TITLE in b for b in bodies[4:])
    assert client.warmup()[0] == 200 and b"<title>" in client.warmup()[2]
    assert site.state()["banned"] == ["127.0.0.1"]
    time.sleep(0.7)
    assert b"pagerTitleCell" in client.grid("patent", DAY, code="H04")[2]
    assert site.stats()["bans"] == 1


def test_latency_delays_without_blocking_other_connections(cnki_site):
    site = cnki_site(seed=1, latency="0.4")
    slow = site.client()
    slow.warmup()
    done = {}

    def fetch():
        started = time.perf_counter()
        slow.grid("patent", DAY, code="H04")
        done["slow"] = time.perf_counter() - started

    thread = threading.Thread(target=fetch)
    thread.start()
    time.sleep(0.05)
    started = time.perf_counter()
    assert site.client().warmup()[0] == 200
    fast = time.perf_counter() - started
    thread.join()
    assert done["slow"] >= 0.4 and fast < 0.2


def test_doomed_documents_always_fail_but_stay_in_truth(cnki_site):
    site = cnki_site(seed=1, doomed=2)
    doomed = site.doomed("patent", DAY)
    assert len(doomed) == 2
    truth_names = {t["filename"] for t in site.truth("patent", DAY)}
    assert set(doomed) <= truth_names
    code = next(t["main_ipc"][:3] for t in site.truth("patent", DAY) if t["filename"] == doomed[0])
    client = site.client()
    _, rows = crawl_round(client, "patent", DAY, code=code)
    href = next(r["href"] for r in rows if r["filename"] == doomed[0])
    assert [client.get(href)[0] for _ in range(3)] == [500, 500, 500]
    other = next(r for r in rows if r["filename"] not in doomed)
    site.control(doomed=[other["filename"]])
    assert client.get(other["href"])[0] == 500
    assert site.stats()["doomed_responses"] == 4


def test_overflow_on_an_inner_code_and_on_a_leaf(cnki_site):
    site = cnki_site(seed=1, overflow=["patent:2024-03-05:H04:9000", "patent:2024-03-06:G06F:7000"])
    rounds = {
        r["category"]: r["count"]
        for r in site.rounds("patent", DAY, categories=["H04", "H04L", "H04N", "H04W"])
    }
    assert rounds["H04"] > 6000 and all(3000 <= rounds[c] < 6000 for c in ("H04L", "H04N", "H04W"))
    client = site.client()
    client.warmup()
    page = parse_list(client.grid("patent", "2024-03-06", code="G06F")[2])
    assert page["total"] >= 7000 and page["pages"] == 120
    assert re.search(
        r"<em>\d{1,3}(,\d{3})+</em>", client.grid("patent", "2024-03-06", code="G06F")[2].decode()
    )


def test_overflow_leaf_is_reachable_through_both_orders(cnki_site):
    site = cnki_site(seed=1, max_pages=30, overflow=["paper:2024-03-05:TP31:2500"])
    truth = {t["filename"] for t in site.truth("paper", DAY, categories=["TP31"])}
    client = site.client()
    _, desc = crawl_round(client, "paper", DAY, code="TP31")
    _, asc = crawl_round(client, "paper", DAY, code="TP31", sort_type="asc")
    assert len(desc) == len(asc) == 1500
    assert {r["filename"] for r in desc} | {r["filename"] for r in asc} == truth


# -- proxies and the provider -------------------------------------------------------------------


def test_proxy_port_is_its_own_address(cnki_site):
    site = cnki_site(seed=1, proxies=2, rate_limit=1, burst=2, ban_seconds=30)
    direct = site.client()
    direct.warmup()
    for _ in range(3):
        direct.grid("patent", DAY, code="H04")
    assert CAPTCHA_TITLE in direct.grid("patent", DAY, code="H04")[2]
    proxied = site.client(proxy=site.proxy_urls[0])
    proxied.warmup()
    assert b"pagerTitleCell" in proxied.grid("patent", DAY, code="H04")[2]
    stats = site.stats()
    assert stats["by_ip"]["10.0.0.1"] == 2 and site.state()["banned"] == ["127.0.0.1"]


def test_dead_proxy_closes_without_answering(cnki_site):
    site = cnki_site(seed=1, proxies=3, dead_proxies=1)
    dead = [p["url"] for p in site.proxies if p["dead"]]
    alive = [p["url"] for p in site.proxies if not p["dead"]]
    assert len(dead) == 1 and len(alive) == 2
    with pytest.raises(ConnectionError):
        site.client(proxy=dead[0]).warmup()
    assert site.client(proxy=alive[0]).warmup()[0] == 200
    site.control(dead_proxies=[0, 1, 2])
    with pytest.raises(ConnectionError):
        site.client(proxy=alive[1]).warmup()
    assert site.stats()["dead_proxy_drops"] == 2


def test_proxy_auth(cnki_site):
    site = cnki_site(seed=1, proxies=1, proxy_auth="user:secret")
    assert site.client(proxy=site.proxy_urls[0]).warmup()[0] == 407
    assert site.client(proxy=site.proxy_urls[0], proxy_auth="user:wrong").warmup()[0] == 407
    assert site.client(proxy=site.proxy_urls[0], proxy_auth="user:secret").warmup()[0] == 200
    assert site.client().warmup()[0] == 200  # direct connections need no proxy credentials


def test_provider_hands_out_batches_and_limits_its_rate(cnki_site):
    site = cnki_site(seed=1, proxies=3, dead_proxies=1, provider_batch=2, provider_interval=0.6)
    ports = [int(u.rsplit(":", 1)[1]) for u in site.proxy_urls]
    status, _, body = site.request("GET", "/proxy-api?num=5&format=text")
    assert status == 200 and body.decode().split() == [f"127.0.0.1:{p}" for p in ports[:2]]
    assert site.request("GET", "/proxy-api?num=5&format=text")[2].decode() == "ERROR 请求过于频繁"
    assert json.loads(site.request("GET", "/proxy-api?format=json")[2]) == {
        "code": 1,
        "msg": "请求过于频繁",
    }
    time.sleep(0.7)
    data = json.loads(site.request("GET", "/proxy-api?num=5&format=json")[2])
    assert data == {
        "code": 0,
        "data": [{"ip": "127.0.0.1", "port": ports[2]}, {"ip": "127.0.0.1", "port": ports[0]}],
    }
    assert site.stats()["provider"] == {"ok": 2, "refused": 2}


# -- determinism and the command line -----------------------------------------------------------


def _normalised(body: bytes) -> bytes:
    body = re.sub(rb"v=[A-Za-z0-9_=-]+", b"v=TOKEN", body)
    body = re.sub(rb'id="hidTurnPage" type="hidden" value="[^"]*"', b"TURN", body)
    return re.sub(rb"http://127\.0\.0\.1:\d+", b"BASE", body)


def _first_page(site) -> bytes:
    client = site.client()
    client.warmup()
    return _normalised(client.grid("paper", DAY, code="T")[2])


def test_same_seed_same_site_other_seed_other_site(cnki_site):
    a, b, c = cnki_site(seed=5), cnki_site(seed=5), cnki_site(seed=6)
    assert a.truth("patent", DAY, "2024-03-06") == b.truth("patent", DAY, "2024-03-06")
    assert _first_page(a) == _first_page(b)
    assert a.truth("patent", DAY, "2024-03-06") != c.truth("patent", DAY, "2024-03-06")
    assert _first_page(a) != _first_page(c)


def test_cli_truth_equals_the_endpoint(cnki_site):
    options = ["--seed", "9", "--scale", "0.5", "--overflow", "paper:2024-03-05:F:700"]
    out = subprocess.run(
        [sys.executable, "-m", "tests.cnki_site", "truth", "--type", "paper", "--start", DAY, "--end", "2024-03-06", "--categories", "F,O1", *options],
        cwd=REPO, capture_output=True, check=True,
    )  # fmt: skip
    cli = [json.loads(line) for line in out.stdout.decode("utf-8").splitlines()]
    site = cnki_site(seed=9, scale=0.5, overflow=["paper:2024-03-05:F:700"])
    assert cli == site.truth("paper", DAY, "2024-03-06", ["F", "O1"]) and len(cli) > 700


def test_command_prints_its_base_url_first_and_stops_on_sigterm():
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.cnki_site", "--port", "0", "--proxies", "1"],
        cwd=REPO,
        stdout=subprocess.PIPE,
    )
    try:
        line = process.stdout.readline().decode()
        assert re.fullmatch(r"CNKI stand-in at http://127\.0\.0\.1:\d+\n", line)
        port = int(line.strip().rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/kns8s/defaultresult/index")
        assert conn.getresponse().status == 200
    finally:
        process.terminate()
        assert process.wait(timeout=5) == 0


def test_startup_is_fast():
    started = time.perf_counter()
    site = start_site(seed=1)
    try:
        assert time.perf_counter() - started < 2.0  # about 0.15 s here; generous for loaded CI
    finally:
        site.stop()


def test_keep_alive_and_pipelining(cnki_site):
    site = cnki_site(seed=1)
    port = int(site.base_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        request = b"GET /kns8s/defaultresult/index HTTP/1.1\r\nHost: x\r\n\r\n"
        sock.sendall(request * 3)
        data = b""
        while data.count(b"HTTP/1.1 200") < 3:
            chunk = sock.recv(65536)
            assert chunk
            data += chunk
    assert site.stats()["sessions_created"] == 3


def test_sessions_unknown_to_a_restarted_site_are_refused(cnki_site):
    site = cnki_site(seed=1)
    client = site.client()
    client.warmup()
    client.cookies["SID_kns8s"] = "0" * 24
    assert is_verify(*client.grid("patent", DAY)[:2])


def test_grid_form_helper_round_trips():
    """The test client's form is what the contract describes (QueryJson as a JSON string)."""
    from urllib.parse import parse_qs

    form = parse_qs(grid_form("patent", DAY, code="H04", page=2).decode())
    query = json.loads(form["QueryJson"][0])
    assert (
        query["Resource"] == "PATENT"
        and query["Classid"] == "VUDIXAIY"
        and query["SearchFrom"] == 4
    )
    assert form["boolSearch"] == ["false"] and form["pageNum"] == ["2"]


def test_a_category_file_of_ones_own(cnki_site, tmp_path):
    """Codes come from the leaves of the given tree; overflow on an inner code reaches its leaf."""
    tree = tmp_path / "tree.txt"
    tree.write_text(
        "# hand-made\nX 甲\n  X1 甲一\n  X2 甲二\n    X21 甲二一\nY 乙\n", encoding="utf-8"
    )
    site = cnki_site(seed=1, categories_file={"patent": tree}, overflow=[f"patent:{DAY}:X2:40"])
    truth = site.truth("patent", DAY)
    assert all(t["main_ipc"].startswith(("X1", "X21", "Y")) for t in truth)
    assert len(site.truth("patent", DAY, categories=["X21"])) >= 40
