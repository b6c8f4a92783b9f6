"""The stand-in checks for a person, as CNKI does in late 2026 (PROTOCOL.md "2026 evidence" 3, 11).

Every test talks to a real stand-in over HTTP (``standin.client``, no crawler code): a session no
person passed is challenged in CNKI's exact forms, the verify page is a page a browser can use,
passing binds to the session cookie (not the IP), and a passed session answers only up to its
hidden limits of requests, minutes and pace, with detail links bound to it.
"""

from __future__ import annotations

import json
import re
import time
from urllib.parse import parse_qs, quote, urlsplit

import lxml.html
import pytest

from standin.client import CLIENT_ID_PATH
from standin.limits import HumanCheck
from standin.markup import slider_gap

DAY = "2024-03-05"
CAPTCHA_MARK = b"TJCaptcha.js"  # the per-IP ban answers the older Tencent captcha page


def _verify_pattern(base: str, return_url: str) -> str:
    """CNKI's 2026 block-puzzle verify URL, exactly (ident and captchaId are random hex)."""
    return (
        re.escape(f"{base}/verify/home?captchaType=blockPuzzle&ident=")
        + r"[0-9a-f]{6}&captchaId=[0-9a-f]{16}&returnUrl="
        + re.escape(quote(return_url, safe=""))
    )


def assert_page_challenge(site, answer, return_path: str) -> str:
    status, headers, body = answer
    assert (status, body) == (302, b"")
    location = headers["Location"]
    assert re.fullmatch(_verify_pattern(site.base_url, site.base_url + return_path), location)
    return location


def assert_grid_challenge(site, answer, referer: str | None = None) -> None:
    status, headers, body = answer
    assert status == 403
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    data = json.loads(body)
    assert list(data) == ["code", "message"] and data["code"] == -403
    assert body == json.dumps(data, separators=(",", ":")).encode()  # CNKI's compact JSON
    return_url = referer or site.base_url + "/kns8s/defaultresult/index"
    assert re.fullmatch(_verify_pattern(site.base_url, return_url), data["message"])


def pass_by_hand(
    site, client, path: str = "/kns8s/defaultresult/index", *, off: int = 0, took: int = 700
) -> str:
    """What a person does in a browser: open a page, land on the verify page, drag the piece
    onto the gap (``off`` px beside it, in ``took`` ms); returns where the check sent it."""
    location = assert_page_challenge(site, client.get(path), path)
    status, _, page = client.get(location)
    assert status == 200
    doc = lxml.html.fromstring(page.decode("utf-8"))
    (form,) = doc.cssselect("form")
    fields = {i.get("name"): i.get("value") for i in form.cssselect("input[type=hidden]")}
    (gap,) = doc.cssselect("#standin-gap")
    fields.update(x=str(int(gap.get("data-x")) + off), dragMs=str(took))
    status, headers, _ = client.request(
        form.get("method").upper(),
        form.get("action"),
        "&".join(f"{k}={quote(v, safe='')}" for k, v in fields.items()).encode(),
        {"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 302
    return headers["Location"]


def passed_client(site, cookies=None, proxy=None):
    client = site.client(proxy=proxy)
    client.cookies.update(cookies or site.pass_check())
    return client


def first_link(client, code="H04") -> str:
    status, _, body = client.grid("patent", DAY, code=code)
    assert status == 200 and b"pagerTitleCell" in body
    return re.search(rb'href="([^"]*/kcms2/article/abstract\?v=[^"]+)"', body).group(1).decode()


def session_stats(site, cookies) -> list[dict]:
    passes = site.stats()["human_check"]["sessions"]
    return [p for p in passes if p["session"] == cookies["SID_kns_new"]]


# -- a session no person passed -----------------------------------------------------------------


def test_a_plain_session_is_challenged_on_every_request_in_the_2026_forms(cnki_site):
    site = cnki_site(seed=1, human_check=True)
    passed = passed_client(site)
    link = first_link(passed).replace("&amp;", "&")
    plain = site.client()
    # the warm-up and the search pages: 302 to the block puzzle, returnUrl = the page
    for path in (
        "/kns8s/defaultresult/index",
        "/kns8s/search",
        "/kns8s/AdvSearch?classid=WD0FTY92",
    ):
        assert_page_challenge(site, plain.get(path), path)
    # the client-id endpoint (another CNKI host in reality) still answers
    assert plain.client_id()
    # a grid POST, with a genuine client id but no passed session: HTTP 403, the -403 JSON
    assert_grid_challenge(site, plain.grid("patent", DAY, code="H04"))
    referer = f"{site.base_url}/kns8s/AdvSearch?classid=VUDIXAIY"
    answer = plain.request(
        "POST",
        "/kns8s/brief/grid",
        b"QueryJson=%7B%7D",
        {"Referer": referer, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert_grid_challenge(site, answer, referer)
    # a detail page, even with a genuine link of a passed session
    path = link.removeprefix(site.base_url)
    assert_page_challenge(site, plain.get(path), path)
    # a session the verify page started but no person passed is no better
    location = assert_page_challenge(
        site, plain.get("/kns8s/defaultresult/index"), "/kns8s/defaultresult/index"
    )
    assert plain.get(location)[0] == 200 and "SID_kns_new" in plain.cookies
    assert_page_challenge(
        site, plain.get("/kns8s/defaultresult/index"), "/kns8s/defaultresult/index"
    )
    assert_grid_challenge(site, plain.grid("patent", DAY, code="H04"))
    stats = site.stats()
    # (pass_check's first page GET was challenged too, as a browser's is)
    assert stats["challenged_by"]["human_check"] == stats["challenged"]["total"] == 10
    assert stats["challenged"]["json_403"] == 3 and stats["challenged"]["verify_redirect"] == 7
    assert stats["human_check_refusals"] == {"plain": 10, "checked": 0}
    assert stats["pages"]["list"] == 1  # only the passed session's


def test_the_verify_page_is_a_browser_page_with_a_slider(cnki_site):
    site = cnki_site(seed=1, human_check=True)
    client = site.client()
    location = assert_page_challenge(site, client.get("/kns8s/search"), "/kns8s/search")
    status, headers, page = client.get(location)
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    # a browser without cookies gets the session's (KNS2COOKIE HttpOnly, as CNKI's) and an id
    cookies = [v for k, v in client.last_headers if k.lower() == "set-cookie"]
    names = {c.split("=", 1)[0]: c for c in cookies}
    assert set(names) == {"KNS2COOKIE", "SID_kns_new", "dblang", "Ecp_ClientId"}
    assert "HttpOnly" in names["KNS2COOKIE"] and "HttpOnly" not in names["SID_kns_new"]
    doc = lxml.html.fromstring(page.decode("utf-8"))
    # a piece, a gap, a handle to drag; no button that passes without a drag
    assert doc.cssselect("#standin-piece") and doc.cssselect("#standin-slider")
    assert not doc.cssselect("button, input[type=submit]")
    (form,) = doc.cssselect("form#standin-pass-form")
    assert (form.get("method"), form.get("action")) == ("post", "/verify-api/web/check")
    fields = {i.get("name"): i.get("value") for i in form.cssselect("input[type=hidden]")}
    query = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
    assert fields == dict(query, x="", dragMs="")
    assert fields["returnUrl"] == site.base_url + "/kns8s/search"
    # the same browser again: it has its cookies, it gets no new ones
    client.get(location)
    assert not [k for k, _ in client.last_headers if k.lower() == "set-cookie"]
    # the control sends the browser back where it was going, which now answers
    back = pass_by_hand(site, client, "/kns8s/search")
    assert back == site.base_url + "/kns8s/search"
    status, _, page = client.get(back)
    assert status == 200 and b'id="classid"' in page  # what a login tool waits for


def test_the_slider_passes_only_a_drag_onto_the_gap_in_a_persons_time(cnki_site):
    """Beside the gap, a script's jump (0 ms), a drag left for minutes: a fresh puzzle (marked
    failed) and still checked; onto the gap in 0.7 s: passed."""
    site = cnki_site(seed=1, human_check=True)
    client = site.client()
    for off, took in ((12, 700), (-9, 700), (0, 0), (0, 90_000)):
        again = pass_by_hand(site, client, off=off, took=took)
        assert "/verify/home?" in again and again.endswith("&failed=1")
        status, _, page = client.get(again)
        assert status == 200 and "验证失败" in page.decode("utf-8")
        assert client.get("/kns8s/search")[0] == 302  # still checked
    assert site.stats()["human_check_failed"] == 4 and site.stats()["human_passes"] == 0
    back = pass_by_hand(site, client, "/kns8s/search", off=3)
    assert back == site.base_url + "/kns8s/search" and client.get(back)[0] == 200
    assert site.stats()["human_passes"] == 1


def test_passing_binds_to_the_cookie_not_the_ip(cnki_site):
    site = cnki_site(seed=1, human_check=True, proxies=1)
    browser = site.client()
    back = pass_by_hand(site, browser)
    assert back == site.base_url + "/kns8s/defaultresult/index"
    assert browser.get(back)[0] == 200
    assert b"pagerTitleCell" in browser.grid("patent", DAY, code="H04")[2]
    # another cookie jar on the same IP: still challenged, with or without its own cookies
    other = site.client()
    assert_page_challenge(
        site, other.get("/kns8s/defaultresult/index"), "/kns8s/defaultresult/index"
    )
    other.client_id()
    assert_grid_challenge(site, other.grid("patent", DAY, code="H04"))
    # the passed cookies from another IP (a proxy): answered, the pass is the cookie's
    elsewhere = passed_client(site, dict(browser.cookies), proxy=site.proxy_urls[0])
    assert b"pagerTitleCell" in elsewhere.grid("patent", DAY, code="H04")[2]
    assert site.stats()["by_ip"].get("10.0.0.1") == 1
    # a pass needs a session cookie: the control refuses a browser that sent none
    status, _, body = site.client().request(
        "POST",
        "/verify-api/web/check",
        b"returnUrl=%2F",
        {"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 403 and json.loads(body)["success"] is False
    # the control is never an open redirect
    status, headers, _ = browser.request(
        "POST",
        "/verify-api/web/check",
        f"returnUrl=http%3A%2F%2Fexample.com%2F&x={slider_gap({})}&dragMs=700".encode(),
        {"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 302 and headers["Location"] == site.base_url + "/kns8s/defaultresult/index"


def test_pass_check_returns_the_cookies_a_browser_holds(cnki_site):
    site = cnki_site(seed=1, human_check=True)
    first, second = site.pass_check(), site.pass_check()
    for cookies in (first, second):
        assert set(cookies) == {"KNS2COOKIE", "SID_kns_new", "dblang", "Ecp_ClientId"}
        assert b"pagerTitleCell" in passed_client(site, cookies).grid("patent", DAY, code="H04")[2]
    assert first["SID_kns_new"] != second["SID_kns_new"]
    stats = site.stats()
    assert stats["human_passes"] == 2 and stats["human_check"]["passes"] == 2
    # each pass: the page, the verify page, the control, the page again (its first request)
    assert [p["requests"] for p in stats["human_check"]["sessions"]] == [2, 2]
    # on the plain site it is the warm-up plus a client id, and works the same way
    plain_site = cnki_site(seed=1)
    cookies = plain_site.pass_check()
    assert {"SID_kns_new", "Ecp_ClientId"} <= set(cookies)
    assert b"pagerTitleCell" in passed_client(plain_site, cookies).grid("patent", DAY)[2]


# -- a passed session's hidden limits -------------------------------------------------------------


def test_a_passed_session_answers_its_hidden_number_of_requests(cnki_site):
    site = cnki_site(seed=1, human_check=True, session_requests=6, session_burst=0, session_pace=0)
    cookies = site.pass_check()  # its first request: the page the control sent it back to
    client = passed_client(site, cookies)
    for _ in range(5):
        assert client.grid("patent", DAY, code="H04")[0] == 200
    # the 7th request is checked, and so is every later one of this session, in both forms
    assert_grid_challenge(site, client.grid("patent", DAY, code="H04"))
    assert_page_challenge(
        site, client.get("/kns8s/defaultresult/index"), "/kns8s/defaultresult/index"
    )
    (record,) = session_stats(site, cookies)
    assert record["requests"] == 6 and record["checked_after_requests"] == 6
    assert (record["page_requests"], record["list_requests"], record["detail_requests"]) == (
        1,
        5,
        0,
    )
    assert record["checked"] and record["reason"] == "limit"
    stats = site.stats()
    assert stats["human_check"]["limits"]["session_requests"] == 6
    assert stats["human_check"]["checked_again"]["limit"] == 1
    assert stats["human_check_refusals"]["checked"] == 2
    # a person passes the same session again: it answers afresh, a new pass in the stats
    back = pass_by_hand(site, client)
    assert client.get(back)[0] == 200
    assert client.grid("patent", DAY, code="H04")[0] == 200
    assert [r["requests"] for r in session_stats(site, cookies)] == [6, 2]


@pytest.mark.timing  # requests must come within a sub-second window: run apart
def test_a_pass_lasts_its_hidden_minutes(cnki_site):
    site = cnki_site(seed=1, human_check=True, session_minutes=0.02)  # 1.2 s
    cookies = site.pass_check()
    client = passed_client(site, cookies)
    assert client.grid("patent", DAY, code="H04")[0] == 200
    time.sleep(1.3)
    assert_grid_challenge(site, client.grid("patent", DAY, code="H04"))
    (record,) = session_stats(site, cookies)
    assert record["reason"] == "minutes" and record["checked_after_seconds"] >= 1.2


@pytest.mark.timing  # requests must come within a sub-second window: run apart
def test_four_rapid_requests_draw_the_check(cnki_site):
    """PROTOCOL.md point 11: "4 rapid requests drew the captcha"."""
    site = cnki_site(seed=1, human_check=True)
    cookies = site.pass_check()
    time.sleep(2.1)  # the pass's own request leaves the burst window
    client = passed_client(site, cookies)
    for _ in range(3):
        assert client.grid("patent", DAY, code="H04")[0] == 200
    assert_grid_challenge(site, client.grid("patent", DAY, code="H04"))
    (record,) = session_stats(site, cookies)
    assert (record["reason"], record["requests"]) == ("pace", 4)


@pytest.mark.timing  # requests must come within a sub-second window: run apart
def test_a_session_over_its_hidden_pace_is_checked(cnki_site):
    site = cnki_site(
        seed=1, human_check=True, session_pace=3, session_pace_window=1, session_burst=0
    )
    cookies = site.pass_check()
    time.sleep(1.1)
    client = passed_client(site, cookies)
    for _ in range(3):  # 3 a second is the limit
        assert client.grid("patent", DAY, code="H04")[0] == 200
    assert_page_challenge(site, client.get("/kns8s/search"), "/kns8s/search")
    assert session_stats(site, cookies)[0]["reason"] == "pace"
    # another passed session at a pace under the limit is never checked
    steady = passed_client(site)
    time.sleep(1.1)
    for _ in range(8):
        assert steady.grid("patent", DAY, code="H04")[0] == 200
        time.sleep(0.4)


def test_the_default_rule_spares_a_sane_pace_and_catches_a_burst():
    """With the defaults, a session listing every 1.5 s and opening a detail every 2 s (the
    paces PROTOCOL.md point 11 reports as fine) is never checked before its request limit;
    four requests within 2 s are."""
    check = HumanCheck(True, 300, 30.0, 1.5, 10.0, 4)
    check.pass_("s", 0.0)
    times = sorted([1.5 * k for k in range(1, 170)] + [0.7 + 2.0 * k for k in range(130)])[:299]
    assert [check.admit("s", t) for t in times] == ["ok"] * 299
    assert check.admit("s", times[-1] + 1.0) == "ok"  # the 300th
    assert check.admit("s", times[-1] + 2.0) == "checked"
    assert check.current("s").reason == "limit"
    check.pass_("b", 0.0)
    assert [check.admit("b", 10.0 + 0.3 * k) for k in range(4)] == ["ok"] * 3 + ["checked"]
    assert check.current("b").reason == "pace"
    # a session passed again starts afresh
    check.pass_("b", 20.0)
    assert check.admit("b", 20.0) == "ok"
    assert check.admit("nobody", 0.0) == "plain"


# -- detail links are bound to their session ------------------------------------------------------


def test_a_detail_link_answers_only_in_the_session_that_listed_it(cnki_site):
    site = cnki_site(seed=1, human_check=True)
    mine, other = passed_client(site), passed_client(site)
    time.sleep(2.1)  # out of the passes' burst window
    link = first_link(mine).replace("&amp;", "&")
    status, _, body = mine.get(link)
    assert status == 200 and b'id="paramfilename"' in body
    time.sleep(0.7)
    status, headers, _ = other.get(link)  # a passed session, but not the one that listed it
    assert status == 302 and "/verify/home?" in headers["Location"]
    stats = site.stats()
    assert stats["foreign_session_details"] == 1 and stats["token_refusals"]["session"] == 1
    # the other session was not checked again: it lists and opens its own links
    time.sleep(0.7)
    own = first_link(other).replace("&amp;", "&")
    time.sleep(0.7)
    assert other.get(own)[0] == 200
    assert not any(p["checked"] for p in stats["human_check"]["sessions"])
    # what a benchmark divides: documents (detail pages) a pass served
    passes = {p["session"]: p for p in site.stats()["human_check"]["sessions"]}
    mine_pass, other_pass = (
        passes[mine.cookies["SID_kns_new"]],
        passes[other.cookies["SID_kns_new"]],
    )
    assert (mine_pass["documents"], mine_pass["detail_requests"]) == (1, 1)
    assert (other_pass["documents"], other_pass["detail_requests"]) == (1, 2)


# -- tests make a passed session expire on demand -------------------------------------------------


def test_control_expires_a_session_now_or_after_n_more_requests(cnki_site):
    site = cnki_site(seed=1, human_check=True, session_burst=0, session_pace=0)
    now_cookies, later_cookies = site.pass_check(), site.pass_check()
    now, later = passed_client(site, now_cookies), passed_client(site, later_cookies)
    site.expire_session(now_cookies)
    assert_grid_challenge(site, now.grid("patent", DAY, code="H04"))
    site.check_after(later_cookies, 2)
    assert later.grid("patent", DAY, code="H04")[0] == 200
    assert later.grid("patent", DAY, code="H04", page=2)[0] == 200
    assert_grid_challenge(site, later.grid("patent", DAY, code="H04", page=3))
    reasons = {p["session"]: p["reason"] for p in site.stats()["human_check"]["sessions"]}
    assert reasons == {
        now_cookies["SID_kns_new"]: "control",
        later_cookies["SID_kns_new"]: "control",
    }
    assert site.stats()["human_check"]["checked_again"]["control"] == 2
    with pytest.raises(RuntimeError, match="no person passed"):
        site.expire_session("0" * 24)


@pytest.mark.timing  # requests must come within a sub-second window: run apart
def test_an_idle_expired_session_needs_a_person_again(cnki_site):
    site = cnki_site(seed=1, human_check=True, session_ttl=0.5)
    cookies = site.pass_check()
    time.sleep(0.7)
    assert_grid_challenge(site, passed_client(site, cookies).grid("patent", DAY))
    assert session_stats(site, cookies)[0]["reason"] == "idle"


# -- the other guards work on passed sessions too -------------------------------------------------


@pytest.mark.timing  # requests must come within a sub-second window: run apart
def test_faults_pace_guard_and_turn_limit_still_apply_to_passed_sessions(cnki_site):
    site = cnki_site(
        seed=1, human_check=True, session_burst=0, session_pace=0, faults={"e503": 1.0}
    )
    client = passed_client(site)
    assert client.grid("patent", DAY, code="H04")[0] == 503
    assert_grid_challenge(site, site.client().grid("patent", DAY))  # the check comes first
    site.control(faults={"e503": 0.0}, pace_limit=2, pace_block_seconds=5)
    time.sleep(2.1)
    answers = [client.grid("patent", DAY, code="H04")[2] for _ in range(5)]
    assert all(b"pagerTitleCell" in body for body in answers[:4])  # 2/s over 2 s
    assert b"pagerTitleCell" not in answers[4]  # the pace guard's challenge (session and IP)
    stats = site.stats()
    assert stats["pace_blocks"] == {"session": 1, "ip": 1}
    assert not stats["human_check"]["sessions"][0]["checked"]  # its own limits were kept
    assert site.state()["turn_limit"] == 0  # the human check's default: its limits replace it
    limited = cnki_site(seed=1, human_check=True, turn_limit=1, session_burst=0)
    client = passed_client(limited)
    assert b"pagerTitleCell" in client.grid("patent", DAY, code="H04")[2]
    assert b"pagerTitleCell" in client.grid("patent", DAY, code="H04", page=2)[2]
    status, _, body = client.grid("patent", DAY, code="H04")
    assert status == 200 and len(body) == 105  # the turn limit's soft block
    banning = cnki_site(seed=1, human_check=True, session_burst=0, rate_limit=0.5, burst=2)
    client = passed_client(banning)
    answers = [client.grid("patent", DAY, code="H04")[2] for _ in range(3)]
    assert b"pagerTitleCell" in answers[0] and CAPTCHA_MARK in answers[2]  # the per-IP ban
    assert banning.stats()["bans"] == 1


def test_client_id_endpoint_and_plain_mode_are_unchanged(cnki_site):
    site = cnki_site(seed=1)  # the fixture's default: no human check
    client = site.client()
    assert client.warmup()[0] == 200 and "SID_kns_new" in client.cookies
    assert b"pagerTitleCell" in client.grid("patent", DAY, code="H04")[2]
    assert site.state()["human_check"] is False and site.state()["turn_limit"] == 15
    checked = cnki_site(seed=1, human_check=True)
    status, _, body = checked.client().get(CLIENT_ID_PATH)
    assert status == 200 and json.loads(body)["Success"] is True


def test_break_client_id_holds_with_the_human_check(cnki_site):
    """The verify page hands out no Ecp_ClientId when GenerateClientID is broken, so the probe's
    client-id assumption stays false for a passed session too."""
    site = cnki_site(seed=1, human_check=True, break_="client-id")
    cookies = site.pass_check()
    assert "SID_kns_new" in cookies and "Ecp_ClientId" not in cookies
    client = passed_client(site, cookies)
    assert client.client_id() is None
    status, _, body = client.grid("patent", DAY, code="H04")
    assert status == 403 and json.loads(body)["code"] == -403
    assert site.stats()["no_client_id_refusals"] == 1
