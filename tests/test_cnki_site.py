"""The CNKI stand-in site keeps its promises: CNKI's markup and limits, its faults, its ground truth.

Talks to the site over plain http.client (``standin.client``) and parses with lxml and the
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
from urllib.parse import parse_qs, quote

import lxml.cssselect
import lxml.html
import pytest

from standin.catalogue import FIELDS
from standin.client import FULL_KUAKU, REPO, grid_form, start_site
from tests.fixtures import launcher
from tests.fixtures.site_rounds import DAY, crawl_round, parse_list, select

REAL_LIST = REPO.parent / "shared" / "cnki" / "pages" / "kns8s_list_crossdb_p1.html"
CAPTCHA_TITLE = "<title>安全验证</title>".encode()
# CNKI's 2026 answers, byte for byte
SOFT_BLOCK = (
    '<div id="briefBox"><p class="no-content" value="">抱歉，暂无数据，请稍后重试。</p></div>   '
).encode()
NO_CATEGORY = (
    '<div id="briefBox"><p class="no-content" value="查询对象结构错误, 没有指定检索分类！">'
    "抱歉，暂无数据，请稍后重试。</p></div>"
).encode()
BAD_PAGE_SIZE = (
    '<div id="briefBox"><p class="no-content" value="参数校验;字段【pageSize】校验失败">'
    "抱歉，暂无数据，请稍后重试。</p></div>"
).encode()
CURSOR_PAST_CAP = (
    '<div id="briefBox"><p class="no-content" value="起始游标越界">抱歉，暂无数据，请稍后重试。</p></div>'
).encode()
GENUINE_ZERO = (
    '<div id="briefBox"><p class="no-content">抱歉，暂无数据，请调整检索条件</p></div>'.encode()
)


# -- reference parsers (the real page's selectors; deliberately independent of cnkispider) -----


def parse_journal_style(body: bytes) -> list[dict]:
    """The pre-2026 crawler's reading of a list page: every row as a journal row (td.author,
    td.source, the first td.date, the key only from icon-collect)."""
    doc = lxml.html.fromstring(body.decode("utf-8"))
    out = []
    for tr in select(doc, "table.result-table-list tbody tr"):
        collect = select(tr, "td.operat a.icon-collect")
        out.append(
            {
                "filename": collect[0].get("data-filename") if collect else "",
                "people": [a.text_content() for a in select(tr, "td.author a")],
                "source": "".join(td.text_content() for td in select(tr, "td.source")),
                "date": select(tr, "td.date")[0].text_content().strip(),
            }
        )
    return out


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
PAPER_LABELS = {"DOI": "doi", "专辑": "album", "专题": "topic", "分类号": "clc", "ISSN": "issn"}


def _title(doc) -> str:
    h1 = select(doc, ".wx-tit h1")[0]
    for span in select(h1, "span"):
        if "display:none" in (span.get("style") or "").replace(" ", ""):
            span.drop_tree()
    return h1.text_content().strip()


# What a detail page does not carry: the list row's (counted_at is when a crawler read it, in
# no page and not in the truth).
LIST_ONLY = {
    "patent": ("source", "date", "database", "export_id"),
    "paper": ("source", "date", "database", "cited", "downloads", "export_id"),
    "achievement": ("source", "date", "database", "cited", "downloads", "export_id"),
}


def _source_line(doc, out: dict) -> None:
    """Issue 26's fields of a paper page: .top-tip "刊名. 2020,41(04):157-165" (or 页码 in
    .total-inform), each author's <sup> institutions, 网络首发 from .icon-shoufa."""
    tip = select(doc, "div.top-tip")[0].text_content().strip()
    found = re.fullmatch(r".+?\. (\d{4}),(\d+)\((\d+)\)(?::(\d+-\d+))?", tip)
    if found:
        out["year"], out["volume"] = found.group(1), found.group(2)
        out["issue"], out["page_range"] = str(int(found.group(3))), found.group(4) or ""
    for span in select(doc, "div.total-inform span"):
        label, _, value = span.text_content().partition("：")
        if label == "页码":
            out["page_range"] = value
    out["online_first"] = "1" if select(doc, ".icon-shoufa") else "0"
    insts = [
        re.sub(r"^\d+\.\s*", "", a.text_content().strip())
        for a in select(doc, "h3.author")[1].cssselect("span a")
    ]
    people = []
    for a in select(doc, "h3#authorpart span a"):
        sup = select(a, "sup")
        numbers = [int(n) for n in sup[0].text_content().split(",")] if sup else []
        people.append(
            {"author": a.text.strip(), "institutions": [insts[n - 1] for n in numbers] or insts}
        )
    out["author_affiliations"] = json.dumps(people, ensure_ascii=False, separators=(",", ":"))


def parse_detail(doc_type: str, body: bytes) -> tuple[dict, list[str]]:
    """(fields, raw labels) of a detail page, rows read as key/value pairs."""
    doc = lxml.html.fromstring(body.decode("utf-8"))
    out = dict.fromkeys(FIELDS[doc_type], "")
    out["title"] = _title(doc)
    out["dbname"] = select(doc, "#paramdbname")[0].get("value")
    out["filename"] = select(doc, "#paramfilename")[0].get("value")
    raw_labels = []
    # the full abstract is the hidden input; what the page shows may be cut at 100 characters
    full = select(doc, "input#abstract_text")[0].get("value")
    if doc_type == "paper":
        out["authors"] = ";".join(a.text.strip() for a in select(doc, "h3#authorpart span a"))
        insts = select(doc, "h3.author")[1].cssselect("span a")
        out["institutions"] = ";".join(
            re.sub(r"^\d+\.\s*", "", a.text_content().strip()) for a in insts
        )
        shown = select(doc, "#ChDivSummary")[0].text_content().strip()
        assert shown == (full if len(full) <= 100 else full[:100] + "…")
        out["abstract"] = full
        out["keywords"] = ";".join(
            a.text_content().strip().rstrip(";") for a in select(doc, "p.keywords a")
        )
        for row in select(doc, "div.row"):
            label = select(row, "span.rowtit")[0].text_content().strip().rstrip("：")
            if label == "基金":
                out["fund"] = ";".join(
                    a.text_content().strip().rstrip(";") for a in select(row, "p.funds a")
                )
            if label == "导师":
                out["supervisor"] = select(row, "p")[0].text_content().strip()
        _source_line(doc, out)
        for li in select(doc, "li.top-space"):
            label = select(li, "span.rowtit")[0].text_content().strip().rstrip("：")
            out[PAPER_LABELS[label]] = select(li, "p")[0].text_content().strip()
        return out, raw_labels
    labels = PATENT_LABELS if doc_type == "patent" else ACHIEVEMENT_LABELS
    for span in select(doc, "span.rowtit, span.rowtit2"):
        raw = span.text_content()
        raw_labels.append(raw)
        label = raw.strip().rstrip("：").replace("（", "(").replace("）", ")")
        value = span.getnext()
        if label in labels and value is not None and value.tag == "p":
            out[labels[label]] = value.text_content().strip()
    shown = select(doc, "div.abstract-text")[0].text_content().strip()
    assert shown == (full if len(full) <= 100 else full[:100] + "…")
    if doc_type == "patent":
        out["abstract"] = full
        claim = select(doc, ".claim > h5 + div") or select(doc, "div.claim-text")
        out["claim"] = claim[0].text_content().strip()
    else:
        out["summary"] = full
    return out, raw_labels


def is_verify(status, headers) -> bool:
    return status == 302 and "/verify/home" in headers.get("Location", "")


def is_json_403(status, headers, body, statuses=(403,)) -> bool:
    """The 2026 grid challenge: {"code":-403,"message":".../verify/home?captchaType=blockPuzzle..."}."""
    if status not in statuses or not headers.get("Content-Type", "").startswith("application/json"):
        return False
    data = json.loads(body)
    return (
        set(data) == {"code", "message"}
        and data["code"] == -403
        and bool(
            re.fullmatch(
                r"http://127\.0\.0\.1:\d+/verify/home\?captchaType=blockPuzzle&ident=[0-9a-f]+"
                r"&captchaId=[0-9a-f]+&returnUrl=[^&]+",
                data["message"],
            )
        )
    )


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
@pytest.mark.slow  # every list page of a day against the truth
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
        if doc_type == "patent":
            assert row["application_date"] == expected["application_date"]
            assert row["date"] == expected["publication_date"]


@pytest.mark.parametrize(
    ("doc_type", "code"), [("patent", "G06N"), ("paper", "F"), ("achievement", "TP")]
)
def test_detail_pages_match_truth_field_by_field(cnki_site, doc_type, code):
    site = cnki_site(seed=3, overflow=[f"{doc_type}:{DAY}:{code}:150"])
    truth = {t["filename"]: t for t in site.truth(doc_type, DAY, categories=[code])}
    client = site.client()
    _, rows = crawl_round(client, doc_type, DAY, code=code)
    labels: list[str] = []
    claims = set()
    for row in rows[:120]:
        status, _, body = client.get(row["href"])
        assert status == 200
        claims.add("claim" if b'<div class="claim"><h5>' in body else "claim-text")
        fields, raw = parse_detail(doc_type, body)
        labels += raw
        for name in LIST_ONLY[doc_type]:  # these come from the list row
            fields[name] = row[name]
        if doc_type == "paper":  # 网络首发 is on both the row and the page; a thesis's degree
            assert fields["online_first"] == row["online_first"]
            fields["degree"] = row["database"] if row["database"] in ("博士", "硕士") else ""
        if doc_type == "patent":  # the list's 申请日 and 公开日 are the page's
            assert row["application_date"] == fields["application_date"]
            assert row["date"] == fields["publication_date"]
        assert fields == truth[row["filename"]]
        assert fields["title"] == row["title"]
    if doc_type == "patent":  # CNKI's irregularities are all represented
        assert " 申请日：" in labels and " 地址：" in labels
        assert claims == {"claim", "claim-text"}  # the 2026 .claim > h5 + div and the older one
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


def test_zero_as_soft_block_answers_a_genuine_zero_with_the_soft_blocks_bytes(cnki_site):
    """PROTOCOL.md point 13 / issue 20 point 4: a crawler must not be able to tell them apart."""
    site = cnki_site(seed=1, zero_as_soft_block=True, turn_limit=1)
    empty = next(
        r
        for r in site.rounds("patent", DAY, categories=["D", "A01", "A23", "B01"])
        if not r["count"]
    )
    client = site.client()
    client.warmup()
    status, _, zero = client.grid("patent", empty["date"], code=empty["category"])
    # every other kind of zero too: a single database asked with the 总库 list
    _, _, by_rule = client.grid("patent", DAY, code="H04", kuaku=FULL_KUAKU)
    _, _, soft = client.grid("patent", DAY, code="H04")  # over the turn limit: the soft block
    assert status == 200 and zero == by_rule == soft == SOFT_BLOCK and len(zero) == 105
    stats = site.stats()
    assert stats["zeros_as_soft_block"] == 2 and stats["challenged"]["soft_block"] == 1
    # off (the default): CNKI's genuine zero
    plain = cnki_site(seed=1)
    client = plain.client()
    client.warmup()
    assert client.grid("patent", empty["date"], code=empty["category"])[2] == GENUINE_ZERO
    assert plain.state()["zero_as_soft_block"] is False


@pytest.mark.slow  # over a second alone: many searches of the stand-in
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


@pytest.mark.slow  # every page in both orders
def test_cap_is_rows_and_the_two_orders(cnki_site):
    """At most cap_rows rows whatever the page size; the total stays the real one; asc is the
    exact reverse of desc."""
    site = cnki_site(seed=1, cap_rows=100, overflow=["patent:2024-03-05:G06F:200"])
    leaf = [t["filename"] for t in site.truth("patent", DAY, categories=["G06F"])]
    client = site.client()
    first, desc = crawl_round(client, "patent", DAY, code="G06F", size=20)
    assert first["total"] == len(leaf) >= 200 and first["pages"] == 5 and len(desc) == 100
    _, asc = crawl_round(client, "patent", DAY, code="G06F", size=20, sort_type="asc")
    assert len({r["filename"] for r in desc} | {r["filename"] for r in asc}) == 200
    assert parse_list(client.grid("patent", DAY, code="G06F", size=50)[2])["pages"] == 2
    assert parse_list(client.grid("patent", DAY, code="G06F", size=10)[2])["pages"] == 10
    body = client.grid("patent", DAY, code="G06F", size=20, page=6)[2]
    assert body == CURSOR_PAST_CAP

    small_site = cnki_site(seed=1)
    client = small_site.client()
    _, desc = crawl_round(client, "patent", DAY, code="H04", sort_field="CF")
    _, asc = crawl_round(client, "patent", DAY, code="H04", sort_field="CF", sort_type="asc")
    assert [r["filename"] for r in asc] == [r["filename"] for r in reversed(desc)]


def test_max_pages_is_the_older_spelling_of_the_cap(cnki_site):
    site = cnki_site(seed=1, max_pages=3, overflow=["patent:2024-03-05:G06F:200"])
    assert site.state()["cap_rows"] == 150
    client = site.client()
    client.warmup()
    assert parse_list(client.grid("patent", DAY, code="G06F", size=50)[2])["pages"] == 3


def test_turn_limit_gives_the_soft_block_and_a_new_session_works(cnki_site):
    site = cnki_site(seed=1, turn_limit=3)
    client = site.client()
    client.client_id()
    status, headers, body = client.grid("patent", DAY)
    assert is_json_403(status, headers, body)  # no session yet
    client.warmup()
    for page in range(1, 5):  # the first request and three turns
        status, _, body = client.grid("patent", DAY, page=page, size=20)
        assert status == 200 and b"pagerTitleCell" in body, page
    status, _, body = client.grid("patent", DAY, page=5, size=20)
    assert status == 200 and body == SOFT_BLOCK
    client.warmup()
    assert b"pagerTitleCell" in client.grid("patent", DAY, page=5, size=20)[2]
    stats = site.stats()
    assert (
        stats["turn_refusals"] == 1
        and stats["no_session_refusals"] == 1
        and stats["sessions_created"] == 2
    )
    assert stats["challenged"]["soft_block"] == 1 and stats["challenged_by"]["turn_limit"] == 1


def test_detail_tokens_expire_and_need_no_cookie(cnki_site):
    # The lifetimes are shortened only once the fresh token was used: a short one from the start
    # made the first use race the clock on a busy machine (the ages are checked at each use).
    site = cnki_site(seed=1)
    client = site.client()
    client.warmup()
    row = parse_list(client.grid("patent", DAY, code="H04")[2])["rows"][0]
    stranger = site.client()  # another connection, no cookies
    assert stranger.get(row["href"])[0] == 200
    tampered = row["href"].replace("v=", "v=A", 1)
    assert is_verify(*stranger.get(tampered)[:2])
    site.control(token_ttl=0.3)
    time.sleep(0.5)  # time passes: the token is now older than its lifetime
    assert is_verify(*stranger.get(row["href"])[:2])
    assert site.stats()["token_refusals"] == {"bad": 1, "expired": 1, "session": 0}


def test_detail_tokens_die_with_their_session(cnki_site):
    # session_ttl=0.5 from the start made the warm-up, list and detail race the idle clock: on a
    # busy machine the detail came 0.5 s after the list and got the 302 (issue 30)
    site = cnki_site(seed=1)
    client = site.client()
    client.warmup()
    row = parse_list(client.grid("patent", DAY, code="H04")[2])["rows"][0]
    assert client.get(row["href"])[0] == 200
    site.control(session_ttl=0.3)
    time.sleep(0.5)  # time passes: the session is now idle past its lifetime
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


@pytest.mark.slow  # over a second alone: two stand-ins, many pages
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


@pytest.mark.timing  # a sub-second window that must still be open at a check: run apart
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


@pytest.mark.timing  # asserts a wall-clock bound: `make test` runs it apart, after the parallel pass
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


@pytest.mark.slow  # a whole day of details
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


@pytest.mark.slow  # every page in both orders
def test_overflow_leaf_is_reachable_through_both_orders(cnki_site):
    site = cnki_site(seed=1, max_pages=30, overflow=["paper:2024-03-05:TP31:2500"])
    truth = {t["filename"] for t in site.truth("paper", DAY, categories=["TP31"])}
    client = site.client()
    _, desc = crawl_round(client, "paper", DAY, code="TP31")
    _, asc = crawl_round(client, "paper", DAY, code="TP31", sort_type="asc")
    assert len(desc) == len(asc) == 1500
    assert {r["filename"] for r in desc} | {r["filename"] for r in asc} == truth


# -- the 2026 protocol: cookies, client id, resources, categories, page size, cap ---------------


def _total(body: bytes) -> int:
    return parse_list(body)["total"]


def test_warmup_sets_the_2026_cookies_and_the_client_id_endpoint_issues_ids(cnki_site):
    site = cnki_site(seed=1)
    client = site.client()
    status, headers, body = client.warmup(client_id=False)
    assert status == 200 and b"<title>" in body
    assert set(client.cookies) == {"KNS2COOKIE", "SID_kns_new", "dblang"}
    assert client.cookies["dblang"] == "both"
    status, headers, body = client.request("GET", "/RCDService/api/UtilityOpenApi/GenerateClientID")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    data = json.loads(body)
    assert set(data) == {"Success", "Data"} and data["Success"] is True and data["Data"]
    other = client.client_id()
    assert other and other != data["Data"]  # each call its own id
    assert site.stats()["client_ids_issued"] == 2


def test_grid_without_an_issued_client_id_gets_the_403_json(cnki_site):
    site = cnki_site(seed=1)
    client = site.client()
    client.warmup(client_id=False)
    referer = {"Referer": site.base_url + "/kns8s/defaultresult/index?korder=SU&kw=x"}
    status, headers, body = client.request(
        "POST",
        "/kns8s/brief/grid",
        grid_form("patent", DAY),
        {"Content-Type": "application/x-www-form-urlencoded; charset=UTF-8", **referer},
    )
    assert is_json_403(status, headers, body)
    message = json.loads(body)["message"]
    assert message.endswith("&returnUrl=" + quote(referer["Referer"], safe=""))
    client.cookies["Ecp_ClientId"] = "o000000000001deadbeef"  # never issued here
    assert is_json_403(*client.grid("patent", DAY))
    stranger = site.client()
    client.cookies["Ecp_ClientId"] = stranger.client_id()  # an id is not tied to a session
    assert b"pagerTitleCell" in client.grid("patent", DAY)[2]
    assert site.stats()["no_client_id_refusals"] == 2


def test_crossdb_without_kuakucode_is_rejected_with_cnkis_words(cnki_site):
    site = cnki_site(seed=1)
    client = site.client()
    client.warmup()
    status, _, body = client.grid("paper", DAY, code="TP", kuaku="")
    assert status == 200 and body == NO_CATEGORY
    assert site.stats()["rejections"]["no_category"] == 1


@pytest.mark.parametrize(
    ("doc_type", "resource"),
    [("patent", None), ("achievement", None), ("paper", ("JOURNAL", "YSTT4HG0"))],
)
def test_a_single_database_with_the_full_list_is_a_genuine_zero(cnki_site, doc_type, resource):
    site = cnki_site(seed=1)
    client = site.client()
    client.warmup()
    assert _total(client.grid(doc_type, DAY, resource=resource, kuaku="")[2]) > 0
    status, _, body = client.grid(doc_type, DAY, resource=resource, kuaku=FULL_KUAKU)
    assert status == 200 and body == GENUINE_ZERO


def test_single_database_resources_keep_their_own_databases(cnki_site):
    site = cnki_site(seed=1, dbname_years=False)  # the families' bare names
    truth = site.truth("paper", DAY, categories=["TP"])
    client = site.client()
    client.warmup()
    for resource, dbs in (
        (("JOURNAL", "YSTT4HG0"), {"CJFQ", "CAPJ"}),
        (("DISSERTATION", "LSTPFY1C"), {"CMFD", "CDFD"}),
    ):
        _, rows = crawl_round(client, "paper", DAY, code="TP", resource=resource, kuaku="")
        assert {(r["dbname"], r["filename"]) for r in rows} == {
            (t["dbname"], t["filename"]) for t in truth if t["dbname"] in dbs
        }


@pytest.mark.slow  # about 7 s of CPU: every kuakucode's cross-database search
def test_crossdb_lists_exactly_the_databases_of_its_kuakucode(cnki_site):
    site = cnki_site(seed=2, dbname_years=False)  # the families' bare names
    truth = site.truth("paper", DAY, categories=["TP3"])
    keys = {(t["dbname"], t["filename"]) for t in truth}
    assert {t["dbname"] for t in site.truth("paper", DAY)} == {"CJFQ", "CAPJ", "CMFD", "CDFD"}
    client = site.client()
    _, rows = crawl_round(client, "paper", DAY, code="TP3")  # journals + theses: the truth
    assert {(r["dbname"], r["filename"]) for r in rows} == keys
    for kuaku, dbs in (("YSTT4HG0", {"CJFQ", "CAPJ"}), ("LSTPFY1C", {"CMFD", "CDFD"})):
        _, rows = crawl_round(client, "paper", DAY, code="TP3", kuaku=kuaku)
        assert {(r["dbname"], r["filename"]) for r in rows} == {k for k in keys if k[0] in dbs}
    # the browser's full list mixes in rows of other databases, which are not papers to keep
    _, rows = crawl_round(client, "paper", DAY, code="TP3", kuaku=FULL_KUAKU)
    got = {(r["dbname"], r["filename"]) for r in rows}
    foreign = got - keys
    assert keys < got and len(foreign) > 10
    assert {db for db, _ in foreign}.isdisjoint({"CJFQ", "CAPJ", "CMFD", "CDFD"})
    assert {(db, f) for db, f in got if db in ("CJFQ", "CAPJ", "CMFD", "CDFD")} == keys
    href = next(r["href"] for r in rows if (r["dbname"], r["filename"]) in foreign)
    assert client.get(href)[0] == 200  # a foreign row is a real document of its own database


@pytest.mark.slow  # over a second alone: many searches of the stand-in
def test_toprank_matches_the_exact_code_only_suffix_and_the_facet_match_prefixes(cnki_site):
    site = cnki_site(seed=2)
    truth = site.truth("paper", DAY, categories=["TP3"])
    client = site.client()
    client.warmup()
    suffix = _total(client.grid("paper", DAY, code="TP3")[2])
    facet = _total(client.grid("paper", DAY, code="TP3", facet=True)[2])
    assert suffix == facet == len(truth) > 0
    assert client.grid("paper", DAY, code="TP3", operator="TOPRANK")[2] == GENUINE_ZERO
    code = truth[0]["clc"].split(";")[0]  # a document's full code, e.g. TP311.5
    exact = [t for t in truth if code in t["clc"].split(";")]
    prefixed = site.truth("paper", DAY, categories=[code])
    assert _total(client.grid("paper", DAY, code=code, operator="TOPRANK")[2]) == len(exact)
    assert _total(client.grid("paper", DAY, code=code)[2]) == len(prefixed) >= len(exact)
    patents = site.truth("patent", DAY, categories=["H04"])
    assert _total(client.grid("patent", DAY, code="H04")[2]) == len(patents)
    assert _total(client.grid("patent", DAY, code="H04", facet=True)[2]) == len(patents)
    assert client.grid("patent", DAY, code="H04", operator="TOPRANK")[2] == GENUINE_ZERO


@pytest.mark.parametrize("size", ["5", "30", "100", "", "abc"])
def test_page_size_must_be_10_20_or_50(cnki_site, size):
    site = cnki_site(seed=1)
    client = site.client()
    client.warmup()
    status, _, body = client.grid("patent", DAY, code="H04", size=size)
    assert status == 200 and body == BAD_PAGE_SIZE
    for good in (10, 20, 50):
        page = parse_list(client.grid("patent", DAY, code="H04", size=good)[2])
        assert len(page["rows"]) == min(good, page["total"])
    assert site.stats()["rejections"]["page_size"] == 1


def test_the_cap_is_6000_rows_whatever_the_page_size(cnki_site):
    site = cnki_site(seed=1, overflow=["patent:2024-03-06:G06F:7000"])
    client = site.client()
    client.warmup()
    day = "2024-03-06"
    for size in (10, 20, 50):
        page = parse_list(client.grid("patent", day, code="G06F", size=size)[2])
        assert page["total"] >= 7000 and page["pages"] == 6000 // size
        last = parse_list(client.grid("patent", day, code="G06F", size=size, page=6000 // size)[2])
        assert last["rows"][-1]["seq"] == 6000
        past = client.grid("patent", day, code="G06F", size=size, page=6000 // size + 1)[2]
        assert past == CURSOR_PAST_CAP
    assert site.stats()["rejections"]["cursor"] == 3
    assert site.rounds("patent", day, categories=["G06F"])  # and /_rounds still answers
    assert site.request("GET", f"/_rounds?type=patent&start={day}&end={day}")[0] == 200


# -- patent rows and detail pages ---------------------------------------------------------------


def test_patent_rows_are_patent_markup_and_journal_style_parsing_gets_them_wrong(cnki_site):
    site = cnki_site(seed=2)
    truth = {t["filename"]: t for t in site.truth("patent", DAY, categories=["H04"])}
    client = site.client()
    client.warmup()
    body = client.grid("patent", DAY, code="H04")[2]
    rows = parse_list(body)["rows"]
    assert len(rows) == 50
    for row in rows:
        t = truth[row["filename"]]
        assert row["people"] == t["inventors"].split(";") and row["source"] == t["applicant"]
        assert (row["application_date"], row["date"]) == (t["application_date"], t["date"])
        assert t["date"] == t["publication_date"] == DAY  # a round is a day of 公开日
    keyless = [r for r in rows if not r["collect"]]
    assert 5 <= len(keyless) <= 30  # about 30% without icon-collect, key in the link's query
    assert all("dbname=SCPD" in r["href"] and r["filename"] in r["href"] for r in keyless)
    assert all("filename=" not in r["href"] for r in rows if r["collect"])
    # the pre-2026 reading: no authors, no source, the 申请日 as the date, empty keys
    wrong = parse_journal_style(body)
    assert all(w["people"] == [] and w["source"] == "" for w in wrong)
    assert all(w["date"] != truth[r["filename"]]["date"] for w, r in zip(wrong, rows, strict=True))
    assert sum(w["filename"] == "" for w in wrong) == len(keyless)


def test_header_rows_in_td_cells(cnki_site):
    site = cnki_site(seed=2, header_rows=1.0)
    client = site.client()
    client.warmup()
    body = client.grid("patent", DAY, code="H04")[2]
    first = lxml.html.fromstring(body.decode()).cssselect("table.result-table-list tbody tr")[0]
    assert [td.text_content() for td in select(first, "td")][:3] == ["序号", "题名", "发明人"]
    assert not select(first, "a")  # no link, no key: a crawler must skip it, not choke
    site.control(header_rows=0.0)
    body = client.grid("patent", DAY, code="H04")[2]
    assert b'<tr class="header">' not in body and parse_list(body)["rows"]


def test_rows_without_keys_mode(cnki_site):
    site = cnki_site(seed=2, rows_without_keys=True)
    client = site.client()
    client.warmup()
    rows = parse_list(client.grid("patent", DAY, code="H04")[2])["rows"]
    assert rows and all(
        not r["collect"] and r["dbname"] is None and r["filename"] is None for r in rows
    )
    paper = parse_list(client.grid("paper", DAY, code="TP")[2])["rows"]
    assert all(r["collect"] for r in paper)  # only patent rows are affected
    site.control(rows_without_keys=False, collect_missing=0.0)
    rows = parse_list(client.grid("patent", DAY, code="H04")[2])["rows"]
    assert all(r["collect"] for r in rows)


@pytest.mark.parametrize("doc_type", ["patent", "paper", "achievement"])
@pytest.mark.slow  # over a second alone: a day's detail pages
def test_detail_pages_have_the_2026_markup(cnki_site, doc_type):
    site = cnki_site(seed=2)
    code = {"patent": "H04", "paper": "TP", "achievement": "R"}[doc_type]
    truth = {t["filename"]: t for t in site.truth(doc_type, DAY, categories=[code])}
    client = site.client()
    client.warmup()
    rows = parse_list(client.grid(doc_type, DAY, code=code)[2])["rows"]
    cut = long = 0
    for row in rows[:20]:
        page = lxml.html.fromstring(client.get(row["href"])[2].decode())
        t = truth[row["filename"]]
        full = t["summary" if doc_type == "achievement" else "abstract"]
        assert select(page, "input#abstract_text")[0].get("value") == full
        shown = select(page, "#ChDivSummary" if doc_type == "paper" else ".abstract-text")[0]
        cut += shown.text_content().endswith("…")
        long += len(full) > 100
        if doc_type == "patent":
            labels = {
                s.text_content().strip(): s.getnext().text_content()
                for s in select(page, ".row > .row-2 > .rowtit2")
            }
            assert (
                labels[next(k for k in labels if k.endswith("申请日："))] == t["application_date"]
            )
            claim = select(page, ".claim > h5 + div") or select(page, "div.claim-text")
            assert claim[0].text_content() == t["claim"]
        elif doc_type == "paper":
            assert select(page, "li.top-space p.clc-code")[0].text_content() == t["clc"]
    assert cut == long >= 3  # an abstract longer than 100 characters is shown cut


# -- pace-driven challenges ---------------------------------------------------------------------


def test_pace_guard_window_and_the_two_recoveries():
    """The pure core, time injected: over limit * 2 s blocks; a session recovers block_seconds
    after going over, an IP only after block_seconds of quiet."""
    from standin.limits import PaceGuard

    for quiet in (False, True):
        guard = PaceGuard(limit=2, block_seconds=10, quiet=quiet)
        assert [guard.hit("k", t) for t in (0.0, 0.5, 1.0, 1.5)] == [False] * 4
        assert guard.hit("k", 2.1) is False  # the hit at 0.0 has left the 2 s window
        assert guard.hit("k", 2.2) is True and guard.blocks == 1  # 5 in (0.2, 2.2]
        assert guard.hit("other", 2.2) is False
        assert guard.hit("k", 11.0) is True  # still blocked; for an IP, the quiet restarts
        assert guard.hit("k", 12.3) is quiet  # a session's block ended at 12.2
        assert guard.hit("k", 22.4) is False  # 10 s after the last hit: both recovered


def _href(site) -> str:
    client = site.client()
    client.warmup()
    return parse_list(client.grid("patent", DAY, code="H04")[2])["rows"][0]["href"]


@pytest.mark.timing  # a sub-second window that must still be open at a check: run apart
def test_a_session_over_the_pace_gets_the_soft_block_and_verify_redirects(cnki_site):
    # the session's requests go through three proxies (three IPs), so only the session is over
    site = cnki_site(seed=1, proxies=3, pace_limit=5, pace_block_seconds=1.0)
    lanes = [site.client(proxy=url) for url in site.proxy_urls]
    lanes[0].warmup()
    for lane in lanes[1:]:
        lane.cookies = lanes[0].cookies
    href = _href(site)
    answers = [lanes[k % 3].grid("patent", DAY, code="H04") for k in range(10)]
    assert all(b"pagerTitleCell" in b for _, _, b in answers)  # 10 in 2 s is the limit
    status, _, body = lanes[0].grid("patent", DAY, code="H04")
    assert status == 200 and body == SOFT_BLOCK and len(body) == 105
    status, headers, _ = lanes[1].get(href)  # the same session's page GETs
    location = headers.get("Location", "")
    assert status == 302 and re.search(
        r"/verify/home\?captchaType=(blockPuzzle|clickWord)&ident=[0-9a-f]+&.*returnUrl=http",
        location,
    )
    assert lanes[2].warmup(client_id=False)[0] == 302  # a warm-up with its cookies too
    fresh = site.client(proxy=site.proxy_urls[0])
    fresh.warmup()  # another session from the same IPs is not blocked
    assert b"pagerTitleCell" in fresh.grid("patent", DAY, code="H04")[2]
    time.sleep(1.1)
    assert b"pagerTitleCell" in lanes[0].grid("patent", DAY, code="H04")[2]  # blocked a while
    stats = site.stats()
    assert stats["challenged"]["soft_block"] == 1 and stats["challenged"]["verify_redirect"] == 2
    assert stats["challenged_by"] == {"session": 3, "ip": 0, "turn_limit": 0, "human_check": 0}
    assert stats["pace_blocks"] == {"session": 1, "ip": 0}


@pytest.mark.timing  # a sub-second window that must still be open at a check: run apart
def test_an_ip_over_the_pace_gets_the_403_json_and_vericode_until_quiet(cnki_site):
    site = cnki_site(seed=1, pace_limit=5, pace_block_seconds=0.6)
    href = _href(site)  # warm-up, client id, grid: 3 paced requests... of 10 allowed in 2 s
    site.control(unblock=True)
    grids, gets = [], []
    sessions = [site.client() for _ in range(12)]
    for client in sessions:  # fresh sessions do not help: the IP is over
        client.request("GET", "/RCDService/api/UtilityOpenApi/GenerateClientID")
    for k in range(40):
        client = sessions[k % 12]
        if not client.cookies.get("SID_kns_new"):
            client.warmup()
        grids.append(client.grid("patent", DAY, code="H04"))
        gets.append(client.get(href))
    challenged_grids = [g for g in grids if b"pagerTitleCell" not in g[2]]
    assert len(challenged_grids) >= 30
    assert all(is_json_403(*g, statuses=(200, 403)) for g in challenged_grids)
    assert {g[0] for g in challenged_grids} == {200, 403}  # mostly 403, a share as 200
    assert sum(g[0] == 403 for g in challenged_grids) > sum(g[0] == 200 for g in challenged_grids)
    vericode = [b for s, _, b in gets if s == 200 and b'<form id="vericodeForm"' in b]
    redirects = [h for s, h, _ in gets if is_verify(s, h)]
    assert vericode and redirects
    assert b'action="/kns8s/brief/checkcode"' in vericode[0]
    assert site.state()["pace_blocked"]["ips"] == ["127.0.0.1"]
    # requests while blocked restart the quiet period
    for _ in range(4):
        time.sleep(0.3)
        assert b"pagerTitleCell" not in sessions[0].grid("patent", DAY, code="H04")[2]
    time.sleep(0.7)
    assert b"pagerTitleCell" in sessions[0].grid("patent", DAY, code="H04")[2]
    assert site.state()["pace_blocked"]["ips"] == []


def test_a_crawl_under_the_pace_gets_the_truth_unchallenged(cnki_site):
    site = cnki_site(seed=2, pace_limit=20, pace_block_seconds=30)  # 40 requests in 2 s
    leaves = ["TP31", "TP18", "TN9", "F8", "R5", "O1"]
    small = next(
        r for r in site.rounds("achievement", DAY, categories=leaves) if 20 <= r["count"] <= 60
    )
    truth = {
        t["filename"]: t for t in site.truth("achievement", DAY, categories=[small["category"]])
    }
    client = site.client()
    _, rows = crawl_round(client, "achievement", DAY, code=small["category"], size=20)
    for row in rows:
        time.sleep(0.06)  # about 16 requests a second, under the hidden 20
        status, _, body = client.get(row["href"])
        assert status == 200
        fields, _ = parse_detail("achievement", body)
        for name in LIST_ONLY["achievement"]:
            fields[name] = row[name]
        assert fields == truth[row["filename"]]
    assert {r["filename"] for r in rows} == set(truth)
    stats = site.stats()
    pages = -(-len(truth) // 20)
    assert stats["challenged"]["total"] == 0 and stats["pace_blocks"] == {"session": 0, "ip": 0}
    assert stats["requests"] == 2 + pages + len(rows)  # warm-up, client id, lists, details


def test_stats_count_requests_and_challenges_per_form(cnki_site):
    site = cnki_site(seed=1, pace_limit=2, pace_block_seconds=30)
    client = site.client()
    client.warmup()  # 2 requests (warm-up page, client id), 1 of them paced
    answers = [client.grid("patent", DAY, code="H04") for _ in range(8)]
    ok = sum(b"pagerTitleCell" in b for _, _, b in answers)
    assert ok == 3  # 4 paced requests in 2 s are the limit; the 5th goes over
    stats = site.stats()
    assert stats["requests"] == 2 + 8
    forms = {k: v for k, v in stats["challenged"].items() if k != "total" and v}
    assert stats["challenged"]["total"] == 8 - ok == sum(forms.values())
    assert set(forms) <= {"json_403", "json_200"}  # IP and session over together: the IP wins
    assert stats["challenged_by"]["ip"] == 8 - ok
    assert sum(1 for s, h, b in answers if is_json_403(s, h, b, (200, 403))) == 8 - ok


def test_pace_off_by_default_and_switchable(cnki_site):
    site = cnki_site(seed=1)
    client = site.client()
    client.warmup()
    assert all(
        b"pagerTitleCell" in client.grid("patent", DAY, code="H04", size=10, page=1 + k % 5)[2]
        for k in range(15)
    )
    site.control(pace_limit=1, turn_limit=0)
    answers = [client.grid("patent", DAY, code="H04")[2] for _ in range(4)]
    assert b"pagerTitleCell" not in answers[-1] and site.stats()["challenged"]["total"] >= 1


# -- break_ modes (each makes one assumption of `cnkispider probe` false) ------------------------


def test_break_client_id(cnki_site):
    site = cnki_site(seed=1, break_="client-id")
    client = site.client()
    client.warmup(client_id=False)
    assert client.request("GET", "/RCDService/api/UtilityOpenApi/GenerateClientID")[0] == 404
    assert client.client_id() is None
    assert is_json_403(*client.grid("patent", DAY))


@pytest.mark.slow  # over a second alone: a day's list pages, twice
def test_break_date_filter(cnki_site):
    days = ("2024-01-01", "2024-01-31")
    normal, broken = cnki_site(seed=1), cnki_site(seed=1, break_="date-filter")
    totals = {}
    for name, site in (("normal", normal), ("broken", broken)):
        client = site.client()
        client.warmup()
        totals[name] = [_total(client.grid("paper", days[0], end, code="TP")[2]) for end in days]
    assert totals["normal"][0] < totals["normal"][1]
    assert totals["broken"][0] == totals["broken"][1] > 0  # the date does not narrow


def test_break_category_filter(cnki_site):
    site = cnki_site(seed=1, break_="category-filter")
    client = site.client()
    client.warmup()
    whole = _total(client.grid("patent", DAY)[2])
    assert _total(client.grid("patent", DAY, code="H04")[2]) == whole
    assert _total(client.grid("patent", DAY, code="H04", facet=True)[2]) == whole
    assert len(site.truth("patent", DAY, categories=["H04"])) < whole  # the truth is unbroken


def test_break_turn_token(cnki_site):
    site = cnki_site(seed=1, break_="turn-token")
    client = site.client()
    client.warmup()
    first = parse_list(client.grid("patent", DAY, code="H04", size=20)[2])
    assert first["pages"] > 2
    for turn in (first["turn"], "", "anything"):
        assert (
            client.grid("patent", DAY, code="H04", size=20, page=2, turnpage=turn)[2] == SOFT_BLOCK
        )


def test_break_detail_fields(cnki_site):
    site = cnki_site(seed=2, break_=["detail-fields"])
    client = site.client()
    client.warmup()
    for doc_type, code, gone in (
        ("patent", "H04", ("申请日", "申请人")),
        ("paper", "TP", ()),
        ("achievement", "R", ("成果完成人",)),
    ):
        row = parse_list(client.grid(doc_type, DAY, code=code)[2])["rows"][0]
        page = lxml.html.fromstring(client.get(row["href"])[2].decode())
        labels = {s.text_content().strip().rstrip("：") for s in select(page, "[class^=rowtit]")}
        assert not labels & set(gone), doc_type
        if doc_type == "paper":
            assert select(page, "h3#authorpart a") == []
        assert select(page, "input#abstract_text")  # the rest of the page is there


def test_break_patent_keys_and_several_breaks(cnki_site):
    site = cnki_site(seed=2, break_=["patent-keys", "turn-token"])
    assert site.state()["break"] == ["patent-keys", "turn-token"]
    client = site.client()
    client.warmup()
    rows = parse_list(client.grid("patent", DAY, code="H04")[2])["rows"]
    assert rows and all(r["filename"] is None for r in rows)
    assert client.grid("patent", DAY, code="H04", page=2)[2] == SOFT_BLOCK
    site.control(**{"break": []})
    assert all(r["filename"] for r in parse_list(client.grid("patent", DAY, code="H04")[2])["rows"])


def test_unknown_break_is_refused():
    out = launcher.run(
        [sys.executable, "-m", "standin", "--break", "nothing"],
        cwd=REPO,
        capture_output=True,
    )
    assert out.returncode == 2 and b"--break" in out.stderr


@pytest.mark.slow  # over a second alone: two days' truth of the stand-in
def test_truth_lists_only_documents_to_store(cnki_site):
    site = cnki_site(seed=2, dbname_years=False)  # the families' bare names
    truth = site.truth("paper", DAY)
    assert {t["dbname"] for t in truth} <= {"CJFQ", "CAPJ", "CMFD", "CDFD"}
    assert {t["database"] for t in site.truth("patent", DAY)} == {"中国专利"}


# -- database names with their year (PROTOCOL.md point 12, issue 20) ----------------------------

YEAR_NAMES = {
    "patent": r"SCPD2024",
    "paper": r"CJFQ|CJFDLAST2024|CJFD2024|CAPJ|CMFD20240[12]|CDFD20240[12]",
    "achievement": r"SNAD",
}


@pytest.mark.parametrize(
    ("doc_type", "code"), [("patent", "H04"), ("paper", "TP"), ("achievement", "TP")]
)
@pytest.mark.slow  # over a second alone: a day's list and detail pages
def test_dbname_years_on_rows_links_detail_pages_and_truth(cnki_site, doc_type, code):
    site = cnki_site(seed=2, dbname_years=True, overflow=[f"{doc_type}:{DAY}:{code}:400"])
    truth = {(t["dbname"], t["filename"]): t for t in site.truth(doc_type, DAY, categories=[code])}
    client = site.client()
    first, rows = crawl_round(client, doc_type, DAY, code=code)
    # the rows' keys (icon-collect or the link's query) are the truth's, names and all
    assert {(r["dbname"], r["filename"]) for r in rows} == set(truth)
    names = {r["dbname"] for r in rows}
    assert all(re.fullmatch(YEAR_NAMES[doc_type], name) for name in names)
    if doc_type == "paper":  # CNKI's real variety, every shape present
        shapes = {re.sub(r"\d", "9", name) for name in names}
        assert shapes == {"CJFQ", "CJFDLAST9999", "CJFD9999", "CAPJ", "CMFD999999", "CDFD999999"}
    if doc_type == "patent":  # the link's own key (rows without icon-collect) carries it too
        linked = [r for r in rows if not r["collect"]]
        assert linked and all("dbname=SCPD2024" in r["href"] for r in linked)
        assert all("dbcode=SCPD&" in r["href"] for r in linked)
    for row in rows[:25]:  # the detail page names the same database
        status, _, body = client.get(row["href"])
        assert status == 200
        page = lxml.html.fromstring(body.decode("utf-8"))
        assert select(page, "#paramdbname")[0].get("value") == row["dbname"]
        assert select(page, "#paramfilename")[0].get("value") == row["filename"]
    # without the option: the families' bare names, as before
    bare = cnki_site(seed=2, dbname_years=False)
    plain = {t["dbname"] for t in bare.truth(doc_type, DAY, categories=[code])}
    assert plain <= {"SCPD", "CJFQ", "CAPJ", "CMFD", "CDFD", "SNAD"}


@pytest.mark.slow  # over a second alone: the stand-in's truth command in a subprocess
def test_dbname_years_in_the_cli_truth_and_the_100_kept_by_kuakucode(cnki_site):
    options = ["--seed", "4", "--dbname-years"]
    cli = launcher.run(
        [sys.executable, "-m", "standin", "truth", "--type", "paper", "--start", DAY, "--end", DAY, "--categories", "F", *options],
        cwd=REPO, capture_output=True, check=True, text=True, encoding="utf-8",
    ).stdout  # fmt: skip
    site = cnki_site(seed=4, dbname_years=True)
    truth = site.truth("paper", DAY, categories=["F"])
    assert [json.loads(line) for line in cli.splitlines()] == truth
    # a KuaKuCode of journals only lists the journal family, whatever its year names
    client = site.client()
    _, rows = crawl_round(client, "paper", DAY, code="F", kuaku="YSTT4HG0")
    assert {r["dbname"] for r in rows} and all(
        re.fullmatch(r"CJFQ|CJFD(LAST)?2024|CAPJ", r["dbname"]) for r in rows
    )
    journals = {t["filename"] for t in truth if re.match(r"CJF|CAPJ", t["dbname"])}
    assert {r["filename"] for r in rows} == journals


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
    # warm-up, client id, grid
    assert stats["by_ip"]["10.0.0.1"] == 3 and site.state()["banned"] == ["127.0.0.1"]


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
    # the interval is shortened only after the refused calls (it is checked at each call): 0.6 s
    # from the start made those calls race the clock on a busy machine
    site = cnki_site(seed=1, proxies=3, dead_proxies=1, provider_batch=2)
    ports = [int(u.rsplit(":", 1)[1]) for u in site.proxy_urls]
    status, _, body = site.request("GET", "/proxy-api?num=5&format=text")
    assert status == 200 and body.decode().split() == [f"127.0.0.1:{p}" for p in ports[:2]]
    assert site.request("GET", "/proxy-api?num=5&format=text")[2].decode() == "ERROR 请求过于频繁"
    assert json.loads(site.request("GET", "/proxy-api?format=json")[2]) == {
        "code": 1,
        "msg": "请求过于频繁",
    }
    site.control(provider_interval=0.3)
    time.sleep(0.5)  # time passes: past the interval
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


@pytest.mark.slow  # three sites, a day each
def test_same_seed_same_site_other_seed_other_site(cnki_site):
    a, b, c = cnki_site(seed=5), cnki_site(seed=5), cnki_site(seed=6)
    assert a.truth("patent", DAY, "2024-03-06") == b.truth("patent", DAY, "2024-03-06")
    assert _first_page(a) == _first_page(b)
    assert a.truth("patent", DAY, "2024-03-06") != c.truth("patent", DAY, "2024-03-06")
    assert _first_page(a) != _first_page(c)


@pytest.mark.slow  # over a second alone: the stand-in's truth command in a subprocess
def test_cli_truth_equals_the_endpoint(cnki_site):
    options = ["--seed", "9", "--scale", "0.5", "--overflow", "paper:2024-03-05:F:700"]
    out = launcher.run(
        [sys.executable, "-m", "standin", "truth", "--type", "paper", "--start", DAY, "--end", "2024-03-06", "--categories", "F,O1", *options],
        cwd=REPO, capture_output=True, check=True,
    )  # fmt: skip
    cli = [json.loads(line) for line in out.stdout.decode("utf-8").splitlines()]
    site = cnki_site(seed=9, scale=0.5, overflow=["paper:2024-03-05:F:700"])
    assert cli == site.truth("paper", DAY, "2024-03-06", ["F", "O1"]) and len(cli) > 700


@pytest.mark.parametrize(
    ("switch", "status"), [((), 302), (("--no-human-check",), 200)], ids=["default", "plain"]
)
def test_command_prints_its_base_url_first_and_stops_on_sigterm(switch, status):
    """``python -m standin`` checks for a person by default (a plain warm-up goes to the
    verify page); ``--no-human-check`` is the plain site."""
    process = launcher.Popen(
        [sys.executable, "-m", "standin", "--port", "0", "--proxies", "1", *switch],
        cwd=REPO,
        stdout=subprocess.PIPE,
    )
    try:
        line = process.stdout.readline().decode()
        assert re.fullmatch(r"CNKI stand-in at http://127\.0\.0\.1:\d+\n", line)
        port = int(line.strip().rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/kns8s/defaultresult/index")
        response = conn.getresponse()
        assert response.status == status
        if status == 302:
            assert "/verify/home?captchaType=blockPuzzle&" in response.getheader("Location")
    finally:
        process.terminate()
        assert process.wait(timeout=5) == 0


@pytest.mark.timing  # asserts a wall-clock bound: `make test` runs it apart, after the parallel pass
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
    client.cookies["SID_kns_new"] = "0" * 24
    assert is_json_403(*client.grid("patent", DAY))


def test_grid_form_helper_round_trips():
    """The test client's form is what the contract describes (QueryJson as a JSON string)."""

    form = parse_qs(grid_form("patent", DAY, code="H04", page=2).decode(), keep_blank_values=True)
    query = json.loads(form["QueryJson"][0])
    assert (
        query["Resource"] == "PATENT"
        and query["Classid"] == "VUDIXAIY"
        and query["KuaKuCode"] == ""
        and query["SearchFrom"] == 4
    )
    assert query["QNode"]["QGroup"][0]["Items"][0] == {
        "Field": "CLC", "Value": "H04", "Operator": "SUFFIX", "Logic": 0, "Title": "分类号",
    }  # fmt: skip
    assert form["boolSearch"] == ["false"] and form["pageNum"] == ["2"]
    assert form["productStr"] == [""]
    paper = json.loads(parse_qs(grid_form("paper", DAY).decode())["QueryJson"][0])
    assert (paper["Resource"], paper["Classid"], paper["KuaKuCode"]) == (
        "CROSSDB",
        "WD0FTY92",
        "YSTT4HG0,LSTPFY1C",
    )


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


# -- a product part of its own ------------------------------------------------------------------


def _imported_packages(folder) -> dict[str, set[str]]:
    """File -> the top-level packages its import statements name (relative imports left out)."""
    import ast

    found = {}
    for path in sorted(folder.rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(REPO))] = names
    return found


def test_the_stand_in_imports_nothing_of_the_crawler():
    """It judges the crawler, so it must not share its code (and the demo needs no tests/)."""
    crawler = {"cnkispider", "tasks", "errors", "proxy", "tests"}
    assert {
        f: n & crawler for f, n in _imported_packages(REPO / "standin").items() if n & crawler
    } == {}


@pytest.mark.parametrize("package", ["cnkispider", "tasks", "errors", "proxy", "standin"])
def test_no_product_module_imports_from_tests(package):
    assert [f for f, n in _imported_packages(REPO / package).items() if "tests" in n] == []
