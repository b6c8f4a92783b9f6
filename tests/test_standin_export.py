"""The stand-in's GetExport (standin/export.py), over HTTP with no crawler code: the records
equal the truth, the session rules are the grid's (a passed session, counted against its pass;
the 403 JSON otherwise), one display mode alone is 暂无数据, and a hidden batch limit leaves
ids out without a word."""

from __future__ import annotations

import json
import re
from urllib.parse import urlencode

import pytest

from cnkispider.cnki.export_records import parse_export

DAY = "2024-03-05"
MODES = "GBTREFER,elearning,EndNote"
HEADERS = {
    "Content-Type": "application/x-www-form-urlencoded; charset=UTF-8",
    "X-Requested-With": "XMLHttpRequest",
}


def _client(site, human: bool):
    client = site.client()
    if human:
        client.cookies.update(site.pass_check())
    else:
        client.warmup()
    return client


def _rows(client, doc_type="paper", code="T"):
    """(export id, title) of a list page's rows."""
    status, _, body = client.grid(doc_type, DAY, code=code)
    assert status == 200 and b"pagerTitleCell" in body
    text = body.decode("utf-8")
    ids = re.findall(r'class="cbItem"[^>]*value="([^"]+)"', text)
    assert ids
    return ids


def _export(client, ids, modes=MODES):
    form = urlencode({"filename": ",".join(ids), "uniplatform": "NZKPT", "displaymode": modes})
    return client.request("POST", "/dm8/API/GetExport", form.encode(), HEADERS)


@pytest.mark.slow  # over a second alone: a day's export records
def test_records_equal_the_truth_in_an_order_of_the_sites_own(cnki_site):
    site = cnki_site(seed=3, human_check=True, session_burst=0, session_pace=0)
    client = _client(site, human=True)
    ids = _rows(client)
    status, headers, body = _export(client, ids)
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    data = json.loads(body)
    assert data["code"] == 1
    assert [e["mode"] for e in data["data"]] == ["GBTREFER", "ELEARNING", "ENDNOTE"]
    records = parse_export(body)
    assert len(records) == len(ids)
    truth = {row["title"]: row for row in site.truth("paper", DAY)}
    for record in records:
        want = truth[record.title]
        assert record.fields["authors"] == want["authors"]
        assert record.fields["abstract"] == want["abstract"]  # the full text, never cut
        assert record.fields["keywords"] == want["keywords"]
        assert record.fields["doi"] == want["doi"]
        assert record.fields["year"] == want["year"]  # the source line's (none: online first)
        if want["database"] == "期刊":
            assert record.kind == "paper" and record.fields["source"] == want["source"]
            assert record.fields["institutions"] == want["institutions"]
            for name in ("volume", "issue", "page_range", "issn"):
                assert record.fields[name] == want[name], name
        else:
            assert record.kind == "thesis" and record.fields["degree"] == want["degree"]
            assert record.fields["supervisor"] == want["supervisor"]
    list_order = [site_title for site_title in _titles_in_list_order(client)]
    assert [r.title for r in records] != list_order  # matching by position would be wrong
    pass_record = site.stats()["human_check"]["sessions"][0]
    assert pass_record["export_requests"] == 1


def _titles_in_list_order(client):
    _, _, body = client.grid("paper", DAY, code="T")
    return [
        re.sub(r"<[^>]+>", "", t)
        for t in re.findall(r'class="fz14"[^>]*>(.*?)</a>', body.decode("utf-8"))
    ]


def test_patents_and_achievements_come_in_their_own_forms(cnki_site):
    site = cnki_site(seed=3)
    client = _client(site, human=False)
    for doc_type, code, kind in (("patent", "H04", "patent"), ("achievement", "T", "achievement")):
        ids = _rows(client, doc_type, code)
        records = parse_export(_export(client, ids)[2])
        truth = {row["title"]: row for row in site.truth(doc_type, DAY)}
        assert records and all(r.kind == kind for r in records)
        for record in records:
            want = truth[record.title]
            if kind == "patent":
                assert record.fields["inventors"] == want["inventors"]
                assert record.fields["address"] == want["address"]
                assert record.fields["publication_date"] == want["publication_date"]
                number = record.fields["grant_no"] or record.fields["publication_no"]
                assert number == (want["grant_no"] or want["publication_no"])
            else:
                assert record.fields["completers"] == want["completers"]
                assert record.fields["summary"] == want["summary"]
                assert record.fields["first_unit"] == want["first_unit"]


def test_one_mode_alone_is_answered_no_data(cnki_site):
    site = cnki_site(seed=3)
    client = _client(site, human=False)
    ids = _rows(client)
    for modes in ("EndNote", "GBTREFER,EndNote", ""):
        status, _, body = _export(client, ids[:1], modes)
        assert status == 200 and "暂无数据" in body.decode("utf-8")
        assert json.loads(body)["code"] != 1


def test_a_session_no_person_passed_gets_the_403_json(cnki_site):
    site = cnki_site(seed=3, human_check=True, session_burst=0, session_pace=0)
    passed = _client(site, human=True)
    ids = _rows(passed)
    plain = site.client()
    plain.cookies["Ecp_ClientId"] = passed.cookies["Ecp_ClientId"]
    status, headers, body = _export(plain, ids)
    assert status == 403 and headers["Content-Type"] == "application/json; charset=utf-8"
    data = json.loads(body)
    assert list(data) == ["message"] and "/verify/home?captchaType=blockPuzzle" in data["message"]


def test_export_requests_count_against_the_pass(cnki_site):
    site = cnki_site(seed=3, human_check=True, session_requests=4, session_burst=0, session_pace=0)
    client = _client(site, human=True)  # request 1: the page after the pass
    ids = _rows(client)  # request 2
    assert _export(client, ids[:2])[0] == 200  # 3
    assert _export(client, ids[:2])[0] == 200  # 4
    assert _export(client, ids[:2])[0] == 403  # the 5th is checked again


def test_without_the_human_check_a_session_and_a_client_id_are_needed(cnki_site):
    site = cnki_site(seed=3)
    client = _client(site, human=False)
    ids = _rows(client)
    stranger = site.client()
    assert _export(stranger, ids)[0] == 403
    assert _export(client, ["not-an-id-the-site-listed"])[0] == 403


@pytest.mark.slow  # over a second alone: a day's export records
def test_ids_past_the_hidden_limit_are_left_out_without_a_word(cnki_site):
    site = cnki_site(seed=3, export_batch=3)
    client = _client(site, human=False)
    ids = _rows(client)
    assert len(ids) > 3
    records = parse_export(_export(client, ids)[2])
    truth = {row["title"]: row for row in site.truth("paper", DAY)}
    assert len(records) == 3
    first_three = set(_titles_in_list_order(client)[:3])
    assert {r.title for r in records} == first_three
    assert all(r.title in truth for r in records)
    site.control(export_batch=0, export_missing=[truth[records[0].title]["filename"]])
    again = parse_export(_export(client, ids)[2])
    assert len(again) == len(ids) - 1 and records[0].title not in {r.title for r in again}
    stats = site.stats()
    assert stats["kinds"]["export"] == 2 and stats["export"]["left_out"] == len(ids) - 3 + 1
