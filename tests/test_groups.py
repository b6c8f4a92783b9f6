"""group/result: the form, the request the Protocol builds, the fragment parser, refusals.

The fragment is hand-made (tests/fixtures/groups/README): no real answer is public.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from cnkispider.cnki.groups import (
    GROUP_PATH,
    FacetCount,
    category_group,
    counts_of,
    group_form,
    parse_groups,
)
from cnkispider.cnki.protocol import Protocol
from cnkispider.cnki.search import Search
from cnkispider.exceptions import RefusedPage
from tests.fixtures.pages import load

FRAGMENT = (Path(__file__).parent / "fixtures" / "groups" / "group_result.html").read_bytes()


def test_group_form_is_what_the_result_page_sends():
    form = group_form('{"Resource":"CROSSDB"}', ["CCL", ("ZYZT", "CYZT"), "YE"])
    assert form == {
        "queryJson": '{"Resource":"CROSSDB"}',
        "groupIds": "CCL,ZYZT|||CYZT,YE",
        "manageId": "",
        "aside": "",
        "subject": "",
    }
    with pytest.raises(ValueError):
        group_form("", ["CCL"])
    with pytest.raises(ValueError):
        group_form("{}", [])
    with pytest.raises(ValueError):
        group_form("{}", ["CCL,YE"])  # the comma is the list's own


def test_protocol_builds_the_group_request_like_the_grid():
    protocol = Protocol("http://127.0.0.1:8731", category_mode="facet")
    search = Search.for_day("paper", "2024-03-01", category="I140")
    url, form, headers = protocol.group_request_args(search, ["CCL"])
    assert urlsplit(url).path == GROUP_PATH
    assert url.startswith("http://127.0.0.1:8731")
    # the same QueryJson as the grid's first page, so the counts are the grid's
    grid = protocol.grid_form(search, 1, None)
    assert form["queryJson"] == grid["QueryJson"]
    assert json.loads(form["queryJson"])["SearchFrom"] == 1
    assert form["groupIds"] == "CCL"
    assert headers["X-Requested-With"] == "XMLHttpRequest"
    assert headers["Referer"] == protocol.referer("paper")


def test_parse_groups_reads_codes_labels_and_counts():
    groups = parse_groups(FRAGMENT, ["CCL", "YE"])
    assert set(groups) == {"CCL", "YE", "ZYZT|||CYZT"}
    assert groups["CCL"][0] == FacetCount("I140", "自动化技术", 1024)
    assert counts_of(groups, "CCL") == {"I140": 1024, "I138": 251, "A002": 15}
    assert sum(counts_of(groups, "CCL").values()) == counts_of(groups, "YE")["2024"]
    # sub-groups (dd[tit]) are listed together under their dl
    assert [f.code for f in groups["ZYZT|||CYZT"]] == ["深度学习", "神经网络"]


def test_a_group_not_answered_is_not_a_group_without_rows():
    with pytest.raises(RefusedPage) as err:
        parse_groups(FRAGMENT, ["CCL", "AFC"])
    assert err.value.reason == "unexpected"


@pytest.mark.parametrize(
    "body",
    [
        "<div>" + "x" * 200 + "</div>",  # no dl[groupid]
        '<dl groupid="CCL"><dd><li><input value="I140" text="a"><a>a</a></li></dd></dl>'
        + " " * 80,  # no count
        '<dl groupid="CCL"><dd><li><a>自动化技术</a><span>(3)</span></li></dd></dl>'
        + "<!-- -->" * 10,  # no input
        '<dl groupid="CCL"><dd><li><input value="I140" text="a"><span>(1)</span></li>'
        '<li><input value="I140" text="a"><span>(2)</span></li></dd></dl>',  # twice
    ],
)
def test_a_fragment_not_understood_is_refused_never_empty(body):
    with pytest.raises(RefusedPage) as err:
        parse_groups(body)
    assert err.value.reason == "unexpected"


@pytest.mark.parametrize(
    "case, reason",
    [
        ("refusal_verify", "verify"),
        ("refusal_captcha", "captcha"),
        ("refusal_blank", "blank"),
        ("refusal_no_data_retry", "no-data-retry"),
        ("refusal_javascript", "javascript"),
    ],
)
def test_cnki_refusals_are_recognised_as_for_the_grid(case, reason):
    with pytest.raises(RefusedPage) as err:
        parse_groups(load(case).body)
    assert err.value.reason == reason


def test_an_empty_answer_is_blank():
    with pytest.raises(RefusedPage) as err:
        parse_groups(b"")
    assert err.value.reason == "blank"


def test_which_facet_counts_a_types_categories():
    assert category_group("paper") == "CCL"
    assert category_group("patent", {"patent": "IPC"}) == "IPC"
    assert category_group("achievement", "XK") == "XK"
    with pytest.raises(ValueError):
        category_group("book")
