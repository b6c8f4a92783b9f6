"""Telling CNKI's refusals from usable pages (cnkispider.cnki.refusals)."""

from __future__ import annotations

import pytest
from scrapy.http import HtmlResponse, Response

from cnkispider.cnki.refusals import body_reason, classify, refused
from tests.fixtures.pages import all_cases, load, real_page

GRID = "https://kns.cnki.net/kns8s/brief/grid"
DETAIL = "https://kns.cnki.net/kcms2/article/abstract?v=t&uniplatform=NZKPT&language=CHS"

CASES = all_cases()
REFUSAL_CASES = [c for c in CASES if c.expected["refusal"]]
USABLE_CASES = [c for c in CASES if not c.expected["refusal"]]


def classify_case(case):
    e = case.expected
    return classify(e["kind"], e["status"], e["url"], case.body, location=e.get("location"))


@pytest.mark.parametrize("case", REFUSAL_CASES, ids=str)
def test_refusal_fixture_gives_its_reason(case):
    assert classify_case(case) == case.expected["refusal"]


@pytest.mark.parametrize("case", USABLE_CASES, ids=str)
def test_usable_fixture_is_not_refused(case):
    """Detail pages, a list page and the zero-result page (a valid answer) all give None."""
    assert classify_case(case) is None


def test_real_list_page_is_usable_although_it_loads_the_captcha_script():
    """Real kns8s pages load TJCaptcha.js and carry a hidden slider: the pager wins."""
    body = real_page("kns8s_list_crossdb_p1.html")
    assert b"TJCaptcha" in body
    assert classify("list", 200, GRID, body) is None


def test_real_home_page_is_usable():
    assert (
        classify(
            "home",
            200,
            "https://kns.cnki.net/kns8s/defaultresult/index",
            real_page("kns8s_defaultresult_index.html"),
        )
        is None
    )


def test_real_home_page_is_not_a_list():
    assert classify("list", 200, GRID, real_page("kns8s_defaultresult_index.html")) == "no-pager"


def test_old_zero_result_page_is_usable():
    assert classify("list", 200, GRID, real_page("old_zero_results.html")) is None


def test_final_url_at_verify_wins_over_a_usable_body():
    body = load("list_two_rows").body
    assert classify("list", 200, "https://kns.cnki.net/verify/home?captchaType=x", body) == "verify"


def test_relative_location_to_verify_is_resolved():
    assert classify("detail", 302, DETAIL, b"", location="../../verify/home?x=1") == "verify"


def test_redirect_elsewhere_is_not_a_page():
    """Decision: a 3xx to anywhere but /verify is still not the page asked for."""
    assert classify("detail", 302, DETAIL, b"", location="https://login.cnki.net/") == "http-302"


def test_path_that_only_starts_with_verify_is_not_the_verify_page():
    assert (
        classify(
            "list",
            200,
            "https://kns.cnki.net/verifyseal/kns8s/brief/grid",
            load("list_two_rows").body,
        )
        is None
    )


@pytest.mark.parametrize("status", [403, 404, 429, 500, 502, 503])
def test_error_status(status):
    assert classify("list", status, GRID, load("list_two_rows").body) == f"http-{status}"


def test_error_status_with_a_captcha_body_says_captcha():
    assert classify("list", 403, GRID, load("refusal_captcha").body) == "captcha"


def test_missing_status_counts_as_200():
    assert classify("list", None, GRID, load("list_two_rows").body) is None


def test_safety_title_pointing_at_verify_is_verify():
    body = (
        "<html><head><title>安全验证</title></head><body><form action='/verify/home/check'>"
        "<p>请输入验证码继续访问知网节页面，谢谢您的配合与理解。</p><input name='code'></form></body></html>"
    )
    assert classify("detail", 200, DETAIL, body) == "verify"


def test_safety_title_alone_is_captcha():
    body = (
        "<html><head><title>安全验证</title></head><body><p>"
        + "请完成验证后继续访问。" * 5
        + "</p></body></html>"
    )
    assert classify("detail", 200, DETAIL, body) == "captcha"


def test_retry_text_as_json_escapes_is_no_data_retry():
    body = b'{"code":-1,"msg":"\\u62b1\\u6b49\\uff0c\\u6682\\u65e0\\u6570\\u636e\\uff0c\\u8bf7\\u7a0d\\u540e\\u91cd\\u8bd5"}'
    assert classify("list", 200, GRID, body) == "no-data-retry"


def test_retry_text_inside_a_no_content_block_is_still_no_data_retry():
    """Decision: "请稍后重试" means try later even inside p.no-content; only 请调整检索条件 is zero."""
    body = '<div id="briefBox"><p class="no-content">抱歉，暂无数据，请稍后重试</p></div>'
    assert classify("list", 200, GRID, body) == "no-data-retry"


@pytest.mark.parametrize(
    "body",
    [b"", b"   \n\t  ", b"x" * 63, b" " * 10_000 + b"<html></html>" + b"\n" * 10_000],
    ids=["empty", "whitespace", "63-bytes", "padded"],
)
def test_blank_bodies(body):
    assert classify("detail", 200, DETAIL, body) == "blank"


def test_short_skeleton_without_text_is_blank():
    body = '<html><head><meta charset="utf-8"></head><body><div class="main"><div class="box"></div></div></body></html>'
    assert classify("list", 200, GRID, body) == "blank"


def test_javascript_page_on_a_list_request():
    assert classify("list", 200, GRID, load("refusal_javascript").body) == "javascript"


def test_list_without_pager_on_a_detail_request_is_unexpected():
    assert classify("detail", 200, DETAIL, load("list_two_rows").body) == "unexpected"


def test_body_reason_ignores_status_and_url():
    assert body_reason("list", load("refusal_captcha").body) == "captcha"


def test_unknown_kind_is_an_error():
    with pytest.raises(ValueError):
        classify("grid", 200, GRID, b"")


def test_refused_reads_a_scrapy_redirect_response():
    response = Response(GRID, status=302, headers={"Location": "/verify/home?x=1"})
    assert refused("list", response) == "verify"


def test_refused_reads_a_scrapy_html_response():
    response = HtmlResponse(GRID, status=200, body=load("list_zero_results").body, encoding="utf-8")
    assert refused("list", response) is None
