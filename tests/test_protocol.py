"""The kns8s protocol: resources, searches, QueryJson, grid forms, the result cap, URLs."""

from __future__ import annotations

import datetime
import json
import re

import pytest

from cnkispider import default_settings
from cnkispider.cnki.listgrid import parse_list
from cnkispider.cnki.protocol import Protocol, parse_client_id, protocol_from_settings
from cnkispider.cnki.search import CROSSDB_ALL, RESOURCES, Search
from cnkispider.exceptions import RefusedPage
from cnkispider.spiders.paper import PaperSpider
from cnkispider.spiders.patent import PatentSpider
from tests.fixtures.pages import real_page_path
from tests.fixtures.protocol import (
    BASE,
    grid,
    journal_row,
    list_response,
    run_parse_list,
    spider_of,
)


@pytest.fixture
def protocol() -> Protocol:
    return Protocol(BASE)


def day_search(doc_type="paper", **kw) -> Search:
    return Search.for_day(doc_type, "2024-03-01", **kw)


def groups(query: str) -> dict[str, dict]:
    return {g["Key"]: g for g in json.loads(query)["QNode"]["QGroup"]}


# -- resources ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc_type", "resource", "classid", "kuaku_code", "rlang", "search_from"),
    [
        ("patent", "PATENT", "VUDIXAIY", "", "Both", "资源范围：专利"),
        ("paper", "CROSSDB", "WD0FTY92", "YSTT4HG0,LSTPFY1C", "CHINESE", "资源范围：总库"),
        ("achievement", "ACHIEVEMENTS", "BLZOG7CK", "", "CHINESE", "资源范围：成果"),
    ],
)
def test_resource_table(doc_type, resource, classid, kuaku_code, rlang, search_from):
    res = RESOURCES[doc_type]
    assert (res.resource, res.classid, res.kuaku_code, res.rlang, res.search_from) == (
        resource,
        classid,
        kuaku_code,
        rlang,
        search_from,
    )


@pytest.mark.parametrize(
    ("doc_type", "kuaku_code"),
    [("patent", ""), ("paper", "YSTT4HG0,LSTPFY1C"), ("achievement", "")],
)
def test_query_json_carries_the_types_kuakucode(protocol, doc_type, kuaku_code):
    """Old mistake: 总库 without KuaKuCode (CNKI: 查询对象结构错误, 没有指定检索分类！). A single
    database keeps "" (the 总库 list there turns every hit into 0)."""
    query = json.loads(protocol.query_json(day_search(doc_type), new_search=True))
    assert query["KuaKuCode"] == kuaku_code


def test_paper_kuakucode_lists_only_journals_and_theses_of_the_full_crossdb_list():
    assert RESOURCES["paper"].kuaku_code.split(",") == CROSSDB_ALL.split(",")[:2]


@pytest.mark.parametrize(
    ("doc_type", "dbname", "kept"),
    [
        ("paper", "CJFQ", True),
        ("paper", "CAPJ", True),
        ("paper", "cmfd", True),
        ("paper", "CDFD", True),
        ("paper", "CPFD", False),  # 会议, listed by a 总库 search with the full list
        ("paper", "CCND", False),  # 报纸
        ("paper", "SCPD", False),
        ("paper", "", False),
        ("paper", "CJFDLAST2015", True),  # database names carry a year (PROTOCOL.md point 12)
        ("paper", "CMFD202101", True),
        # a single-database search lists only its own rows: every one is kept, whatever its name
        ("patent", "SCPD", True),
        ("patent", "SCPD2020", True),
        ("patent", "SCOD", True),  # 境外专利, listed by the patent search: its own row
        ("achievement", "SNAD", True),
    ],
)
def test_keeps_rows_by_their_own_dbname(doc_type, dbname, kept):
    assert Protocol.keeps(doc_type, dbname) is kept


@pytest.mark.parametrize(
    ("doc_type", "dbnames"),
    [
        ("patent", ("SCPD",)),
        ("paper", ("CJFD", "CJFQ", "CAPJ", "ZHYX", "CJTL", "CDFD", "CMFD")),
        ("achievement", ("SNAD",)),
    ],
)
def test_resource_dbnames(doc_type, dbnames):
    assert RESOURCES[doc_type].dbnames == dbnames


@pytest.mark.parametrize(
    ("doc_type", "path"),
    [
        ("patent", "/kns8s/AdvSearch?classid=VUDIXAIY"),
        ("paper", "/kns8s/AdvSearch?classid=WD0FTY92"),
        ("achievement", "/kns8s/AdvSearch?classid=BLZOG7CK"),
    ],
)
def test_referer_is_the_advanced_search_page_of_the_type(protocol, doc_type, path):
    assert protocol.referer(doc_type) == BASE + path


# -- Search ---------------------------------------------------------------------------------


def test_search_round_trips_through_json():
    search = day_search(category="TG4", title="电弧", sort_field="PT", sort_type="asc")
    assert Search.from_dict(json.loads(json.dumps(search.to_dict()))) == search


def test_search_from_dict_ignores_extra_keys():
    """Request meta "search" dicts also carry the page; they must still load."""
    data = dict(day_search().to_dict(), page=7)
    assert Search.from_dict(data) == day_search()


def test_search_takes_date_objects_as_iso_strings():
    search = Search("patent", datetime.date(2024, 3, 1), datetime.date(2024, 3, 2))
    assert (search.day_start, search.day_end) == ("2024-03-01", "2024-03-02")


def test_search_normalises_empty_conditions_and_sort_case():
    assert Search("paper", "2024-03-01", "2024-03-01", category="", title="", sort_type="DESC") == (
        day_search()
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"doc_type": "standard"},
        {"day_start": "2024-13-01"},
        {"day_start": "2024-03-02", "day_end": "2024-03-01"},
        {"sort_field": "RELEVANCE"},
        {"sort_type": "up"},
    ],
)
def test_search_rejects_bad_values(kwargs):
    values = {"doc_type": "paper", "day_start": "2024-03-01", "day_end": "2024-03-01", **kwargs}
    with pytest.raises(ValueError):
        Search(**values)


def test_search_is_frozen():
    with pytest.raises(AttributeError):
        day_search().category = "TG"


# -- QueryJson ------------------------------------------------------------------------------


def test_query_json_is_a_json_string_with_the_resource(protocol):
    query = json.loads(protocol.query_json(day_search("patent"), new_search=True))
    assert (query["Resource"], query["Classid"], query["Rlang"]) == ("PATENT", "VUDIXAIY", "Both")


def test_query_json_fixed_members(protocol):
    query = json.loads(protocol.query_json(day_search(), new_search=True))
    assert {
        k: query[k]
        for k in ("Platform", "Products", "ExScope", "SearchType", "KuaKuCode", "Expands")
    } == {
        "Platform": "",
        "Products": "",
        "ExScope": 1,
        "SearchType": 2,
        "KuaKuCode": "YSTT4HG0,LSTPFY1C",
        "Expands": {},
    }


def test_query_json_date_range_item(protocol):
    search = Search("paper", "2024-03-01", "2024-03-31")
    items = groups(protocol.query_json(search, new_search=True))["ControlGroup"]["Items"]
    assert items == [
        {
            "Key": "span[value=PT]",
            "Title": "发表时间",
            "Logic": 0,
            "Field": "PT",
            "Operator": 7,
            "Value": "2024-03-01",
            "Value2": "2024-03-31",
        }
    ]


def test_query_json_category_is_a_suffix_prefix_item(protocol):
    """Old mistake: TOPRANK (relevance ranking, matches a code only exactly); the form's 分类号
    sends SUFFIX, a prefix match."""
    items = groups(protocol.query_json(day_search(category="TG4"), new_search=True))["Subject"][
        "Items"
    ]
    assert items == [
        {"Field": "CLC", "Value": "TG4", "Operator": "SUFFIX", "Logic": 0, "Title": "分类号"}
    ]


def test_category_operator_is_configurable():
    protocol = Protocol(BASE, category_operator="toprank")
    item = groups(protocol.query_json(day_search(category="TG4"), True))["Subject"]["Items"][0]
    assert item["Operator"] == "TOPRANK"


@pytest.mark.parametrize(("doc_type", "group"), [("paper", "SCDBGroup"), ("patent", "MutiGroup")])
def test_facet_mode_sends_the_ccl_group_instead_of_a_subject_item(doc_type, group):
    protocol = Protocol(BASE, category_mode="facet")
    found = groups(protocol.query_json(day_search(doc_type, category="I140"), new_search=True))
    assert found["Subject"]["Items"] == []
    assert found[group] == {
        "Key": group,
        "Title": "",
        "Logic": 0,
        "Items": [],
        "ChildItems": [
            {
                "Key": "CCL",
                "Title": "",
                "Logic": 0,
                "Items": [
                    {
                        "Key": "I140",
                        "Title": "",
                        "Logic": 1,
                        "Field": "CCL",
                        "Operator": "DEFAULT",
                        "Value": "I140",
                        "Value2": "",
                        "Name": "CCL",
                    }
                ],
                "ChildItems": [],
            }
        ],
    }


def test_facet_mode_without_category_has_no_facet_group():
    protocol = Protocol(BASE, category_mode="facet")
    assert set(groups(protocol.query_json(day_search(), True))) == {"Subject", "ControlGroup"}


def test_query_json_without_category_has_no_condition(protocol):
    assert groups(protocol.query_json(day_search(), new_search=True))["Subject"]["Items"] == []


def test_query_json_title_item_follows_the_category(protocol):
    search = day_search(category="TG4", title="电弧增材")
    items = groups(protocol.query_json(search, new_search=True))["Subject"]["Items"]
    assert items[1] == {
        "Field": "TI",
        "Value": "电弧增材",
        "Operator": "DEFAULT",
        "Logic": 0,
        "Title": "题名",
    }


def test_query_json_category_field_is_configurable():
    protocol = Protocol(BASE, category_field="SU")
    items = groups(protocol.query_json(day_search(category="x"), new_search=True))["Subject"][
        "Items"
    ]
    assert (items[0]["Field"], items[0]["Title"]) == ("SU", "主题")


@pytest.mark.parametrize(("new_search", "search_from"), [(True, 1), (False, 4)])
def test_query_json_search_from(protocol, new_search, search_from):
    assert json.loads(protocol.query_json(day_search(), new_search))["SearchFrom"] == search_from


# -- the grid form --------------------------------------------------------------------------


def test_first_page_form(protocol):
    form = protocol.grid_form(day_search(sort_field="PT"), page=1, turn_token=None)
    assert {k: v for k, v in form.items() if k != "QueryJson"} == {
        "boolSearch": "true",
        "pageNum": "1",
        "pageSize": "50",
        "sortField": "PT",
        "sortType": "desc",
        "dstyle": "listmode",
        "boolSortSearch": "false",
        "sentenceSearch": "false",
        "productStr": "",
        "searchFrom": "资源范围：总库",
        "CurPage": "1",
        "turnpage": "",
        "aside": "",
    }


@pytest.mark.parametrize("doc_type", ["patent", "paper", "achievement"])
def test_product_str_is_sent_empty(protocol, doc_type):
    """Old mistake: productStr used as a database filter; a browser sends it empty."""
    assert protocol.grid_form(day_search(doc_type), page=1, turn_token=None)["productStr"] == ""


def test_first_page_query_is_a_new_search(protocol):
    form = protocol.grid_form(day_search(), page=1, turn_token=None)
    assert json.loads(form["QueryJson"])["SearchFrom"] == 1


def test_later_page_form(protocol):
    form = protocol.grid_form(day_search("patent"), page=2, turn_token="tok!!")
    assert (form["boolSearch"], form["pageNum"], form["CurPage"], form["turnpage"]) == (
        "false",
        "2",
        "2",
        "tok!!",
    )


def test_later_page_is_a_page_turn_without_aside(protocol):
    form = protocol.grid_form(day_search(), page=2, turn_token="tok")
    assert ("aside" in form, json.loads(form["QueryJson"])["SearchFrom"]) == (False, 4)


def test_a_later_page_can_restart_the_search(protocol):
    """A renewed session has never seen the query: it can restart it at any page."""
    form = protocol.grid_form(day_search(), page=16, turn_token=None, new_search=True)
    assert (form["boolSearch"], form["pageNum"], json.loads(form["QueryJson"])["SearchFrom"]) == (
        "true",
        "16",
        1,
    )


def test_grid_form_values_are_all_strings(protocol):
    form = protocol.grid_form(day_search(category="TG"), page=3, turn_token="t")
    assert all(isinstance(v, str) for v in form.values())


def test_grid_form_page_size_comes_from_the_protocol():
    form = Protocol(BASE, page_size=20).grid_form(day_search(), page=1, turn_token=None)
    assert form["pageSize"] == "20"


def test_grid_form_rejects_page_zero(protocol):
    with pytest.raises(ValueError):
        protocol.grid_form(day_search(), page=0, turn_token=None)


def test_grid_headers():
    assert Protocol.grid_headers() == {
        "X-Requested-With": "XMLHttpRequest",
        "Content-Type": "application/x-www-form-urlencoded; charset=UTF-8",
    }


# -- URLs -----------------------------------------------------------------------------------


def test_urls_use_the_injected_base_without_its_trailing_slash():
    protocol = Protocol(BASE + "/")
    assert (protocol.home_url, protocol.grid_url) == (
        BASE + "/kns8s/defaultresult/index",
        BASE + "/kns8s/brief/grid",
    )


def test_default_base_is_cnki():
    assert Protocol().grid_url == "https://kns.cnki.net/kns8s/brief/grid"


@pytest.mark.parametrize(
    ("href", "absolute"),
    [
        (
            "https://kns.cnki.net/kcms2/article/abstract?v=a",
            "https://kns.cnki.net/kcms2/article/abstract?v=a",
        ),
        ("/kcms2/article/abstract?v=b", BASE + "/kcms2/article/abstract?v=b"),
        (
            "//kns.cnki.net/kcms2/article/abstract?v=c",
            "http://kns.cnki.net/kcms2/article/abstract?v=c",
        ),
        ("  /kcms2/x?v=d  ", BASE + "/kcms2/x?v=d"),
        ("", ""),
    ],
)
def test_absolute(protocol, href, absolute):
    assert protocol.absolute(href) == absolute


def test_bad_base_url_is_rejected():
    with pytest.raises(ValueError):
        Protocol("kns.cnki.net")


# -- the cap --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "reachable", "pages"),
    [
        (0, 0, 0),
        (1, 1, 1),
        (50, 50, 1),
        (51, 51, 2),
        (661, 661, 14),
        (6000, 6000, 120),
        (6001, 6000, 120),
        (1_934_679, 6000, 120),
    ],
)
def test_reachable_and_page_count(protocol, total, reachable, pages):
    assert (protocol.reachable(total), protocol.page_count(total)) == (reachable, pages)


def test_page_count_with_twenty_rows_a_page():
    """The real saved list page: 661 hits at 20 a page are 34 pages."""
    assert Protocol(page_size=20).page_count(661) == 34


# -- settings -------------------------------------------------------------------------------


def test_protocol_from_settings():
    protocol = protocol_from_settings(
        {
            "CNKI_BASE_URL": BASE,
            "CNKI_PAGE_SIZE": "20",
            "CNKI_MAX_PAGES": 10,
            "CNKI_CATEGORY_FIELD": "",
            "CNKI_CATEGORY_OPERATOR": "suffix",
            "CNKI_CATEGORY_MODE": "FACET",
            "CNKI_CLIENT_ID_URL": BASE + "/cid",
        }
    )
    assert (
        protocol.base_url,
        protocol.page_size,
        protocol.max_pages,
        protocol.category_field,
        protocol.category_operator,
        protocol.category_mode,
        protocol.client_id_url,
    ) == (BASE, 20, 10, "CLC", "SUFFIX", "facet", BASE + "/cid")


def test_protocol_defaults():
    protocol = protocol_from_settings({})
    assert (
        protocol.client_id_url,
        protocol.category_operator,
        protocol.category_mode,
        protocol.cap,
    ) == (
        "https://recsys.cnki.net/RCDService/api/UtilityOpenApi/GenerateClientID",
        "SUFFIX",
        "subject",
        6000,
    )
    assert default_settings.CNKI_CLIENT_ID_URL == protocol.client_id_url


# -- page size and the cap in rows -------------------------------------------------------------


@pytest.mark.parametrize("size", [5, 30, 100, 0])
def test_page_size_must_be_one_cnki_accepts(size):
    with pytest.raises(ValueError, match="page_size: expected one of 10, 20, 50"):
        Protocol(BASE, page_size=size)


@pytest.mark.parametrize(("size", "pages"), [(10, 600), (20, 300), (50, 120)])
def test_the_cap_is_6000_rows_whatever_the_page_size(size, pages):
    protocol = Protocol(BASE, page_size=size)
    assert (protocol.cap, protocol.max_pages, protocol.page_count(10**6)) == (6000, pages, pages)


def test_page_count_at_twenty_a_page_for_34967_hits_is_300():
    """PROTOCOL.md point 8: at 20 a row CNKI shows 300 pages for 34,967 hits."""
    assert Protocol(BASE, page_size=20).page_count(34_967) == 300


def test_max_pages_only_lowers_the_cap():
    assert Protocol(BASE, page_size=20, max_pages=3).cap == 60
    assert Protocol(BASE, page_size=50, max_pages=500).cap == 6000


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"category_mode": "sidebar"}, "category_mode"),
        ({"category_operator": "SUFFIX; DROP"}, "category_operator"),
        ({"category_field": ""}, "category_field"),
        ({"client_id_url": "recsys.cnki.net/x"}, "client_id_url"),
        ({"cap_rows": 5}, "cap_rows"),
    ],
)
def test_bad_protocol_values_are_named(kw, message):
    with pytest.raises(ValueError, match=message):
        Protocol(BASE, **kw)


# -- the client id answer ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "client_id"),
    [
        (b'{"Success":true,"Data":"ab12cd34ef"}', "ab12cd34ef"),
        ('{"Success": true, "Data": "X9"}', "X9"),
        (b'{"Success":true,"Data":12345,"Message":null}', "12345"),
    ],
)
def test_parse_client_id(body, client_id):
    assert parse_client_id(body) == client_id


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"<html>busy</html>",
        b'{"Success":false,"Data":"x"}',
        b'{"Success":true,"Data":""}',
        b'{"Success":true}',
        b'{"Success":"true","Data":"x"}',
        b'{"code":-403,"message":"https://kns.cnki.net/verify/home?captchaType=blockPuzzle"}',
        b'{"Success":true,"Data":"x; SID_kns_new=forged"}',
    ],
)
def test_a_client_id_answer_without_a_plain_id_is_refused(body):
    with pytest.raises(ValueError):
        parse_client_id(body)


# -- the spider speaks the protocol (parse_list without an engine) ----------------------------------


def test_the_spider_drops_rows_of_other_databases_and_counts_them():
    """A 总库 search lists whatever its KuaKuCode names: rows are kept by their own dbname."""
    spider = spider_of(PaperSpider)
    rows = "".join(
        journal_row(i, db, f"F{i}")
        for i, db in enumerate(["CJFQ", "CPFD", "CMFD", "CCND", "CPFD", "CDFD", "CAPJ"], 1)
    )
    out = run_parse_list(spider, list_response(grid(rows, 7, 1), "paper"))
    assert [r.meta["doc_key"] for r in out] == ["CJFQ/F1", "CMFD/F3", "CDFD/F6", "CAPJ/F7"]
    stats = spider.crawler.stats
    assert stats.get_value("rows/dropped/other-database/CPFD") == 2
    assert stats.get_value("rows/dropped/other-database/CCND") == 1


def test_a_page_with_a_keyless_row_yields_nothing_and_fails_as_unexpected():
    """Old mistake: the key "/" went to the dupefilter, which kept only the first such row."""
    spider = spider_of(PaperSpider)
    rows = journal_row(1, "CJFQ", "F1") + journal_row(2, "", "")
    with pytest.raises(RefusedPage) as info:
        run_parse_list(spider, list_response(grid(rows, 2, 1), "paper"))
    assert info.value.reason == "unexpected" and "row 2" in str(info.value)


def test_detail_request_refuses_an_empty_key():
    spider = spider_of(PatentSpider)
    page = parse_list_row_page()
    row = page.rows[0]
    row.dbname = ""
    with pytest.raises(RefusedPage):
        spider.detail_request(row, {"search": {}})


def parse_list_row_page():
    body = grid(journal_row(1, "SCPD", "CN1A"), 1, 1)
    return parse_list(body)


def test_a_patent_detail_request_carries_the_rows_publication_and_application_dates():
    spider = spider_of(PatentSpider)
    row = (
        '<tr><td class="seq">1</td><td class="name"><a class="fz14" href="/kcms2/article/abstract?v=p">'
        'P</a></td><td class="inventor"><a class="KnowledgeNetLink">甲</a></td><td class="applicant">'
        '某大学</td><td class="date">2023-05-06</td><td class="date">2024-03-01</td><td class="data">'
        '中国专利</td><td class="operat"><a class="icon-collect" data-dbname="SCPD" data-filename="CN1A">'
        "</a></td></tr>"
    )
    (request,) = run_parse_list(spider, list_response(grid(row, 1, 1), "patent"))
    listing = request.meta["listing"]
    assert (listing["date"], listing["application_date"], listing["source"]) == (
        "2024-03-01",
        "2023-05-06",
        "某大学",
    )


def test_an_absurd_pager_is_walked_only_as_far_as_the_total_allows():
    """A pager claiming a million pages for 120 results: 3 pages at 50, not 300."""
    spider = spider_of(PaperSpider)
    rows = "".join(journal_row(i, "CJFQ", f"F{i}") for i in range(1, 51))
    follow = []
    for page in (1, 2, 3):
        out = run_parse_list(spider, list_response(grid(rows, 120, 1_000_000), "paper", page))
        follow.append([r for r in out if r.meta.get("cnki_kind") == "list"])
    assert [len(f) for f in follow] == [1, 1, 0]
    assert spider.crawler.stats.get_value("list/pager-capped") == 3


# -- the resource table against the real defaultresult/index page (../shared/cnki/pages) ---------


@pytest.fixture(scope="module")
def real_menu() -> dict[str, dict[str, str]]:
    """classid -> {resource, chs} of the real page's database menu (first entry of each id)."""
    path = real_page_path("kns8s_defaultresult_index.html")
    text = path.read_text(encoding="utf-8")
    menu: dict[str, dict[str, str]] = {}
    for tag in re.findall(r"<a [^>]*name=\"classify\"[^>]*>", text):
        attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', tag))
        menu.setdefault(
            attrs["classid"],
            {"resource": attrs.get("resource", ""), "chs": attrs.get("data-chs", "")},
        )
    menu["_checked"] = {"chs": re.search(r'id="CheckedDB" value="([^"]*)"', text).group(1)}
    return menu


@pytest.mark.parametrize("doc_type", ["patent", "achievement"])
def test_single_database_resources_match_the_real_menu(real_menu, doc_type):
    res = RESOURCES[doc_type]
    entry = real_menu[res.classid]
    assert (entry["resource"], tuple(entry["chs"].split(","))) == (res.resource, res.dbnames)


def test_paper_kuakucode_ids_are_the_real_journal_and_thesis_classes(real_menu):
    ids = RESOURCES["paper"].kuaku_code.split(",")
    assert [real_menu[i]["resource"] for i in ids] == ["JOURNAL", "DISSERTATION"]
    listed = {db for i in ids for db in real_menu[i]["chs"].split(",")}
    assert all(Protocol.keeps("paper", db) for db in listed)  # every database it asks for
    others = set(real_menu["WD0FTY92"]["chs"].split(",")) - listed
    assert others and not any(Protocol.keeps("paper", db) for db in others)
    assert set(ids) <= set(real_menu["_checked"]["chs"].split(","))
    assert set(CROSSDB_ALL.split(",")) == set(real_menu["_checked"]["chs"].split(","))


def test_every_row_of_the_real_crossdb_list_is_kept_for_papers():
    path = real_page_path("kns8s_list_crossdb_p1.html")
    rows = parse_list(path.read_bytes(), "paper").rows
    assert len(rows) == 20
    assert all(Protocol.keeps("paper", r.dbname) for r in rows)


def test_every_row_of_the_real_old_lists_is_kept_by_its_family():
    """The saved pages' year-suffixed names: SCPD2017 (all 50 patent rows), CJFD2008 ...
    CJFDLAST2016 (journals)."""
    for name, doc_type, count in (
        ("old_patent_list_p3.html", "patent", 50),
        ("old_journal_list_p3.html", "paper", 40),
    ):
        text = real_page_path(name).read_text(encoding="utf-8", errors="replace")
        names = re.findall(r"[?&;]dbname=([A-Za-z0-9]+)", text)
        assert len(names) >= count and all(Protocol.keeps(doc_type, n) for n in names), name
