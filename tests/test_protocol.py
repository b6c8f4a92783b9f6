"""The kns8s protocol: resources, searches, QueryJson, grid forms, the result cap, URLs."""

from __future__ import annotations

import datetime
import json

import pytest

from cnkispider.cnki.protocol import (
    RESOURCES,
    Protocol,
    Search,
    protocol_from_settings,
)

BASE = "http://127.0.0.1:8731"


@pytest.fixture
def protocol() -> Protocol:
    return Protocol(BASE)


def day_search(doc_type="paper", **kw) -> Search:
    return Search.for_day(doc_type, "2024-03-01", **kw)


def groups(query: str) -> dict[str, dict]:
    return {g["Key"]: g for g in json.loads(query)["QNode"]["QGroup"]}


# -- resources ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc_type", "resource", "classid", "product_str", "rlang", "search_from"),
    [
        ("patent", "PATENT", "VUDIXAIY", "VUDIXAIY", "Both", "资源范围：专利"),
        ("paper", "CROSSDB", "WD0FTY92", "YSTT4HG0,LSTPFY1C", "CHINESE", "资源范围：总库"),
        ("achievement", "ACHIEVEMENTS", "BLZOG7CK", "BLZOG7CK", "CHINESE", "资源范围：成果"),
    ],
)
def test_resource_table(doc_type, resource, classid, product_str, rlang, search_from):
    res = RESOURCES[doc_type]
    assert (res.resource, res.classid, res.product_str, res.rlang, res.search_from) == (
        resource,
        classid,
        product_str,
        rlang,
        search_from,
    )


@pytest.mark.parametrize(
    ("doc_type", "dbnames"),
    [
        ("patent", ("SCPD",)),
        ("paper", ("CJFQ", "CAPJ", "CMFD", "CDFD")),
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
        "KuaKuCode": "",
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


def test_query_json_category_is_a_toprank_prefix_item(protocol):
    items = groups(protocol.query_json(day_search(category="TG4"), new_search=True))["Subject"][
        "Items"
    ]
    assert items == [
        {"Field": "CLC", "Value": "TG4", "Operator": "TOPRANK", "Logic": 0, "Title": "中图分类号"}
    ]


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
        "productStr": "YSTT4HG0,LSTPFY1C",
        "searchFrom": "资源范围：总库",
        "CurPage": "1",
        "turnpage": "",
        "aside": "",
    }


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
        }
    )
    assert (protocol.base_url, protocol.page_size, protocol.max_pages, protocol.category_field) == (
        BASE,
        20,
        10,
        "CLC",
    )
