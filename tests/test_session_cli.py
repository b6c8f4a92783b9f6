"""`cnkispider session add|list|remove|check` and the parsers behind `add` (issue 19, ways in).

The parsers read the browsers' "Copy as cURL" texts of tests/fixtures/curl/: hand-made, but in the
exact formats Chrome (bash and cmd) and Firefox write (each file says how). The commands run as
the operator runs them, in a subprocess, against the real Redis and, for `check`, the stand-in
CNKI checking for a person. A bad paste is one line and exit 2, and no cookie value is ever shown.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from cnkispider.sessions import SessionStore, namespace_for
from cnkispider.sessions.paste import (
    PasteError,
    cnki_hosts_of,
    from_cookie_file,
    from_cookie_string,
    from_curl,
    split_bash,
    split_cmd,
)
from cnkispider.sessions.waysin import CHECKED, PASSED, check
from tests.fixtures import launcher
from tests.fixtures.crawl_harness import REDIS_URL, ROOT

CURL = Path(__file__).parent / "fixtures" / "curl"
MARKER = "--- paste ---\n"

# The cookies every fixture carries (invented values, CNKI's names and shapes).
COOKIES = [
    ("Ecp_ClientId", "b251014083700518207"),
    ("Ecp_IpLoginFail", "251014223.104.64.18"),
    ("SID_sug", "018104"),
    ("dblang", "both"),
    ("SID_kns_new", "kns018106"),
    ("KNS2COOKIE", "1760402221.479.14376.592031|b25e41a932fd162af3b8c5cff4059fc3"),
    ("tfstk", "g3xSB0YQvKJ1aQ5Ox-iN7oBq_kqv1Ti0sxDKE-mMAxHmWVcnJfJ-hjNhWyZmKvwDIjDLP7fM"),
]
CHROME_UA = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/141.0.0.0 Safari/537.36"
)
FIREFOX_UA = "Mozilla/5.0 (X11; Linux x86_64; rv:144.0) Gecko/20100101 Firefox/144.0"
INDEX_URL = (
    "https://kns.cnki.net/kns8s/defaultresult/index?crossids=YSTT4HG0%2CLSTPFY1C%2CJUP3MUPD"
    "%2CMPMFIG1A%2CWQ0UVIAA%2CBLZOG7CK%2CPWFIRAGL%2CEMRPGLPA%2CNLBO1Z6R%2CNN3FJMUV&korder=SU"
    "&kw=%E6%B7%B1%E5%BA%A6%E5%AD%A6%E4%B9%A0"
)


def paste(name: str) -> str:
    """The paste of a fixture: everything below its marker line (above it: what it is)."""
    text = (CURL / name).read_bytes().decode("utf-8")
    head, marker, body = text.partition(MARKER)
    assert marker and "HAND-MADE" in head, f"{name}: say that it is hand-made, then the marker"
    return body


def pairs(p) -> list[tuple[str, str]]:
    return [(c["name"], c["value"]) for c in p.cookies]


# -- the parsers on each browser's format -----------------------------------------------------


def test_chrome_bash_copy_as_curl_gives_every_cookie_of_its_b_option_and_the_user_agent():
    text = paste("chrome_bash_grid.txt")
    assert text.count(" \\\n  ") >= 15 and "\n  -b '" in text  # Chrome's layout, as written
    p = from_curl(text)
    assert pairs(p) == COOKIES
    assert p.host == "kns.cnki.net" and p.user_agent == CHROME_UA
    assert {c["domain"] for c in p.cookies} == {"kns.cnki.net"}
    # the form body is one word: --data-raw did not swallow or split anything
    [words] = split_bash(text)
    assert words[words.index("--data-raw") + 1].startswith("boolSearch=true&QueryJson=%7B")
    assert words[-2] == "--data-raw"


def test_chrome_cmd_copy_as_curl_is_unquoted_as_cmd_exe_and_the_c_runtime_would():
    text = paste("chrome_cmd_index.txt")
    assert "\r\n" in text and text.count(" ^\r\n  ") >= 14 and "^%^E6" in text
    p = from_curl(text)
    assert pairs(p) == COOKIES  # KNS2COOKIE's ^| is a plain |
    assert p.host == "kns.cnki.net" and p.user_agent == CHROME_UA
    [words] = split_cmd(text)
    assert words[:2] == ["curl", INDEX_URL]  # ^%^E6 -> %E6, ^& -> &
    assert (
        '-H sec-ch-ua: "Google Chrome";v="141", "Not?A_Brand";v="8", "Chromium";v="141"'
        in " ".join(words)
    )  # ^\^" -> \" -> "
    assert 'sec-ch-ua-platform: "Windows"' in words


def test_firefox_copy_as_curl_gives_the_cookies_of_its_cookie_header():
    text = paste("firefox_index.txt")
    assert "\n" not in text.strip() and " --compressed -H 'User-Agent: " in text  # one line
    p = from_curl(text)
    assert pairs(p) == COOKIES
    assert p.host == "kns.cnki.net" and p.user_agent == FIREFOX_UA
    [words] = split_bash(text)
    assert words[1] == INDEX_URL and words[2] == "--compressed"


@pytest.mark.parametrize(
    "text",
    [
        # curl's own long option, and a header spelled as older Chrome (HTTP/1.1) wrote it
        "curl 'https://kns.cnki.net/kns8s/brief/grid' --cookie 'a=1; b=x=y' -A 'UA 1'",
        "curl 'https://kns.cnki.net/kns8s/brief/grid' -H 'Cookie: a=1; b=x=y' -H 'User-Agent: UA 1'",
        "curl --url https://kns.cnki.net/ --header 'cookie: a=1;b=x=y' --user-agent 'UA 1'",
        # typed by hand: double quotes and bash's line continuation
        'curl "https://kns.cnki.net/kns8s/brief/grid" \\\n  -H "Cookie: a=1; b=x=y" \\\n'
        '  -H "User-Agent: UA 1"',
        # bash's ANSI-C quoting, which Chrome writes when a value holds a ' or a !
        "curl $'https://kns.cnki.net/kns8s/brief/grid' \\\n  -b $'a=1; b=x\\u003dy' \\\n"
        "  -H $'user-agent: UA 1' \\\n  --data-raw $'aside=it\\'s \\u0021'",
        # the cmd form of older Chrome and of Firefox on Windows: "..." with "%" and ""
        'curl.exe "https://kns.cnki.net/kns8s/brief/grid?x=1"%"2C" -H "Cookie: a=1; b=x=y" '
        '-H "User-Agent: UA ""1"""',
        # "Copy all as cURL": an image of another host first, then CNKI's request
        "curl 'https://www.example.com/a.png' -b 'z=9' ;\n"
        "curl 'https://kns.cnki.net/kns8s/brief/grid' -b 'a=1; b=x=y' -H 'user-agent: UA 1'",
    ],
    ids=[
        "cookie-option",
        "cookie-header",
        "long-options",
        "by-hand",
        "ansi-c",
        "old-cmd",
        "copy-all",
    ],
)
def test_every_way_a_curl_command_carries_cookies_is_read(text):
    p = from_curl(text)
    assert pairs(p) == [("a", "1"), ("b", "x=y")]
    assert p.user_agent in ("UA 1", 'UA "1"')


def test_cookie_strings_and_cookie_files_give_the_cnki_cookies(tmp_path):
    p = from_cookie_string("Cookie: a=1; b=x=y;  ; c=", host="kns.cnki.net")
    assert pairs(p) == [("a", "1"), ("b", "x=y"), ("c", "")] and p.host == "kns.cnki.net"
    now = time.time()
    txt = tmp_path / "cookies.txt"
    txt.write_text(
        "# Netscape HTTP Cookie File\n"
        "# https://curl.se/docs/http-cookies.html\n\n"
        f".cnki.net\tTRUE\t/\tFALSE\t{int(now + 86400)}\tEcp_ClientId\tb2510\n"
        f"#HttpOnly_kns.cnki.net\tFALSE\t/\tTRUE\t0\tKNS2COOKIE\t17604|b25e\n"
        f"kns.cnki.net\tFALSE\t/kns8s\tFALSE\t0\tSID_kns_new\tkns018106\n"
        f"kns.cnki.net\tFALSE\t/\tFALSE\t{int(now - 60)}\told\tgone\n"
        f".example.com\tTRUE\t/\tFALSE\t0\tforeign\tnot-ours\n"
        f"www.cnki.net\tFALSE\t/\tFALSE\t0\tportal\tnot-sent-to-kns\n",
        encoding="utf-8",
    )
    assert pairs(from_cookie_file(txt))[-1] == ("portal", "not-sent-to-kns")  # CNKI's, all of them
    p = from_cookie_file(txt, host="kns.cnki.net")  # those a request to the search carries
    assert pairs(p) == [
        ("Ecp_ClientId", "b2510"),
        ("KNS2COOKIE", "17604|b25e"),
        ("SID_kns_new", "kns018106"),
    ]
    assert [c["domain"] for c in p.cookies] == [".cnki.net", "kns.cnki.net", "kns.cnki.net"]
    assert p.cookies[2]["path"] == "/kns8s"
    assert "b2510" not in repr(p) and "KNS2COOKIE" in repr(p)  # names, never values


def test_the_configured_site_s_host_counts_as_cnki_besides_cnki_net():
    assert cnki_hosts_of("https://kns.cnki.net") == ("cnki.net",)
    assert cnki_hosts_of("http://127.0.0.1:8123") == ("cnki.net", "127.0.0.1")
    p = from_curl("curl 'http://127.0.0.1:8123/kns8s/x' -b 'a=1'", cnki_hosts=("127.0.0.1",))
    assert p.host == "127.0.0.1"
    with pytest.raises(PasteError, match="not to CNKI"):
        from_curl("curl 'http://127.0.0.1:8123/kns8s/x' -b 'a=1'")
    with pytest.raises(PasteError, match="not to CNKI"):  # a look-alike is not below cnki.net
        from_curl("curl 'https://kns.cnki.net.example.com/' -b 'a=1'")


# -- the command line, as the operator runs it ------------------------------------------------


@pytest.fixture
def base_url():
    """The site of a test's config.ini: CNKI's search host on a port of the test's own (nothing
    is asked there), so that its sessions have a pool of their own in the real Redis (the pool's
    namespace is the site's: cnki:<host:port>)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"https://kns.cnki.net:{s.getsockname()[1]}"


def write_ini(path: Path, base_url: str) -> Path:
    path.write_text(
        f"[redis]\nurl = {REDIS_URL}\n[cnki]\nbase_url = {base_url}\n", encoding="utf-8"
    )
    return path


@pytest.fixture
def ini(tmp_path, base_url):
    """A config.ini of the real Redis and the test's own site address."""
    return write_ini(tmp_path / "config.ini", base_url)


@pytest.fixture
def pool(base_url):
    """The pool the commands write to; emptied afterwards."""
    store = SessionStore(redis.Redis.from_url(REDIS_URL), namespace_for(base_url))
    yield store
    empty(store)


def empty(store: SessionStore) -> None:
    keys = list(store.client.scan_iter(match=f"{store.namespace}:*", count=1000))
    if keys:
        store.client.delete(*keys)
    store.client.close()


def session(ini: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CNKI_")}
    return launcher.run(
        [sys.executable, "-m", "cnkispider.cli", "--config", str(ini), "session", *args],
        cwd=ROOT,
        input=stdin if stdin is not None else "",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def one_line_exit_2(result, expected: str, secrets=()) -> None:
    lines = result.stderr.splitlines()
    assert result.returncode == 2 and result.stdout == "", (result.stdout, result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines
    assert "Traceback" not in result.stderr
    for value in secrets:
        assert value not in result.stderr


NOT_CNKI = (
    "curl 'https://www.example.com/s?wd=x' \\\n  -b 'BAIDUID=SECRETVALUE1' \\\n  -H 'accept: */*'\n"
)


@pytest.mark.parametrize(
    ("args", "stdin", "expected"),
    [
        (["--from-curl", "-"], NOT_CNKI, "the paste is a request to www.example.com, not to CNKI"),
        (
            ["--from-curl", "-"],
            "\n".join(
                line
                for line in paste("chrome_bash_grid.txt").splitlines()
                if not line.lstrip().startswith("-b ")
            ),
            "carries no cookie: pass CNKI's check in the browser first",
        ),
        (
            ["--from-curl", "-"],
            paste("chrome_bash_grid.txt")[:300],  # cut inside the cookies' quote
            "the paste ends inside a '...' string",
        ),
        (
            ["--from-curl", "-"],
            "$session = New-Object Microsoft.PowerShell.Commands.WebRequestSession\n"
            '$session.Cookies.Add((New-Object System.Net.Cookie("SID_kns_new", "SECRETVALUE1")))\n',
            "this is 'Copy as PowerShell'",
        ),
        (["--from-curl", "-"], "  \n", "the paste is empty"),
        (
            ["--from-curl", "-"],
            paste("firefox_index.txt").replace("https://kns.cnki.net/", "https://www.cnki.net/"),
            "the paste is a request to www.cnki.net, but the crawler searches kns.cnki.net",
        ),
        (["--from-curl", "no-such-file.txt"], None, "cannot read no-such-file.txt"),
        (["--cookie-string", "  ;  "], None, "the cookie string holds no cookie"),
        (
            ["--cookie-string", "a=SECRETVALUE1", "--host", "www.example.com"],
            None,
            "--host www.example.com is not CNKI's",
        ),
    ],
    ids=[
        "another-host",
        "no-cookie",
        "cut-short",
        "powershell",
        "empty",
        "other-cnki-host",
        "no-file",
        "empty-string",
        "foreign-host",
    ],
)
@pytest.mark.slow  # a command in a subprocess
def test_a_bad_paste_is_one_line_and_exit_2_and_adds_nothing(ini, pool, args, stdin, expected):
    before = len(pool.list())
    result = session(ini, "add", *args, stdin=stdin)
    one_line_exit_2(result, expected, secrets=["SECRETVALUE1", "b251014083700518207"])
    assert len(pool.list()) == before


@pytest.mark.slow  # a command in a subprocess
def test_a_cookie_file_of_another_site_or_long_expired_is_one_line_and_exit_2(ini, pool, tmp_path):
    foreign = tmp_path / "foreign.txt"
    foreign.write_text(".example.com\tTRUE\t/\tFALSE\t0\tsid\tSECRETVALUE1\n", encoding="utf-8")
    one_line_exit_2(
        session(ini, "add", "--cookie-file", str(foreign)),
        "holds no cookie of kns.cnki.net",
        ["SECRETVALUE1"],
    )
    expired = tmp_path / "expired.txt"
    expired.write_text(".cnki.net\tTRUE\t/\tFALSE\t1000\tsid\tSECRETVALUE1\n", encoding="utf-8")
    one_line_exit_2(
        session(ini, "add", "--cookie-file", str(expired)), "has expired", ["SECRETVALUE1"]
    )
    www = tmp_path / "www.txt"  # cookies of the portal only: never sent to the search's host
    www.write_text("www.cnki.net\tFALSE\t/\tFALSE\t0\tsid\tSECRETVALUE1\n", encoding="utf-8")
    one_line_exit_2(
        session(ini, "add", "--cookie-file", str(www)),
        "holds no cookie of kns.cnki.net",
        ["SECRETVALUE1"],
    )
    html = tmp_path / "page.html"
    html.write_text("<html><body>not cookies</body></html>\n", encoding="utf-8")
    one_line_exit_2(
        session(ini, "add", "--cookie-file", str(html)), "is not a Netscape cookies.txt"
    )


@pytest.mark.slow  # a command in a subprocess
def test_add_list_remove_through_the_command_line_never_show_a_cookie_value(ini, pool, tmp_path):
    pasted = tmp_path / "chrome.txt"
    pasted.write_text(paste("chrome_cmd_index.txt"), encoding="utf-8")
    added = [
        session(ini, "add", "--from-curl", str(pasted)),
        session(ini, "add", "--from-curl", "-", stdin=paste("firefox_index.txt")),
        session(ini, "add", "--cookie-string", "SID_kns_new=kns018106; dblang=both"),
    ]
    ids = []
    for result in added:
        assert result.returncode == 0 and result.stderr == "", result.stderr
        assert result.stdout.startswith("added session s-"), result.stdout
        ids.append(result.stdout.split()[2])
    assert "7 cookies of kns.cnki.net (Ecp_ClientId, " in added[0].stdout
    assert "user agent Chrome/141" in added[0].stdout
    assert "user agent Firefox/144" in added[1].stdout
    # what the pool holds: the cookies, as the browser had them, with its User-Agent
    stored = {i: pool.get(i) for i in ids}
    assert [(c["name"], c["value"]) for c in stored[ids[0]].cookies] == COOKIES
    assert {c["domain"] for c in stored[ids[0]].cookies} == {"kns.cnki.net"}
    assert stored[ids[0]].user_agent == CHROME_UA and stored[ids[0]].source == "curl"
    assert stored[ids[1]].user_agent == FIREFOX_UA
    assert stored[ids[2]].source == "cookie-string"
    # the cookie string's host is the configured site's
    assert {c["domain"] for c in stored[ids[2]].cookies} == {"kns.cnki.net"}

    listing = session(ini, "list")
    assert listing.returncode == 0, listing.stderr
    header, *rows = listing.stdout.splitlines()
    assert header.split() == ["id", "source", "age", "requests", "state", "note"]
    mine = {row.split()[0]: row.split() for row in rows if row.split()[0] in ids}
    assert [mine[i][1] for i in ids] == ["curl", "curl", "cookie-string"]
    for i in ids:
        age, requests, state = mine[i][2:5]
        assert age.endswith("s") and requests == "0" and state == "ready", mine[i]
    for _name, value in COOKIES:
        assert value not in listing.stdout + added[0].stdout + added[1].stdout

    # `remove` takes the shortest start of an id that no other session's shares
    others = [i for i in ids if i != ids[0]]
    prefix = next(
        ids[0][:n] for n in range(3, 9) if not any(o.startswith(ids[0][:n]) for o in others)
    )
    removed = session(ini, "remove", prefix)
    assert removed.returncode == 0 and removed.stdout.strip() == f"removed session {ids[0]}"
    assert pool.get(ids[0]) is None
    one_line_exit_2(session(ini, "remove", ids[0]), f"no session {ids[0]!r}")
    assert ids[0] not in session(ini, "list").stdout


@pytest.mark.slow  # a command in a subprocess
def test_check_says_passed_for_a_session_a_person_passed_and_checked_for_one_nobody_did(
    tmp_path, cnki_site, request
):
    site = cnki_site(human_check=True)
    ini = write_ini(tmp_path / "config.ini", site.base_url)
    pool = SessionStore(redis.Redis.from_url(REDIS_URL), namespace_for(site.base_url))
    request.addfinalizer(lambda: empty(pool))
    passed = pool.add(
        [
            {"name": k, "value": v, "domain": "127.0.0.1", "path": "/"}
            for k, v in site.pass_check().items()
        ],
        source="standin",
    )
    # a session nobody passed: the cookies a browser gets from the verify page it is sent to
    plain = site.client()
    try:
        status, headers, _ = plain.get("/kns8s/defaultresult/index")
        assert status == 302 and "/verify/home?" in headers.get("Location", "")
        plain.get(headers["Location"])
        fresh = [
            {"name": k, "value": v, "domain": "127.0.0.1", "path": "/"}
            for k, v in plain.cookies.items()
        ]
    finally:
        plain.close()
    assert fresh, "the stand-in's verify page set no cookie"
    unpassed = pool.add(fresh, source="standin")
    home = site.base_url + "/kns8s/defaultresult/index"
    assert check(pool.get(passed.id).cookies, home)[0] == PASSED
    assert check(fresh, home)[0] == CHECKED

    ok = session(ini, "check", passed.id)
    assert ok.returncode == 0 and ok.stdout.startswith(f"{passed.id}: passed (HTTP 200"), ok
    assert pool.get(passed.id).state == "ready"
    bad = session(ini, "check", unpassed.id)
    assert bad.returncode == 1, bad
    assert bad.stdout.startswith(f"{unpassed.id}: checked by CNKI (HTTP 302 to /verify/home)")
    after = pool.get(unpassed.id)
    assert after.state == "needs-person" and "session check" in after.note
    for c in fresh + passed.cookies:
        assert c["value"] not in ok.stdout + bad.stdout
