"""`cnkispider session login` end to end: a real headless Chromium (Debian's `chromium`, which
.ci/run installs) against the stand-in CNKI checking for a person.

The test plays the person: it drives the SAME browser the command started, over the DevTools
protocol, and drags the verify page's slider onto its gap with a real mouse
(``Input.dispatchMouseEvent``: pressed on the handle, moved in steps, released over the gap). The
command must then see the search page, read the cookies (the stand-in's KNS2COOKIE is HttpOnly: a
page's script could not), put them in the shared pool, and close the browser it started; a crawl
with that session alone then equals the stand-in's truth.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import redis

from cnkispider.sessions import SessionStore, namespace_for
from cnkispider.sessions.devtools import cdp_http
from cnkispider.store.schema import error_code, error_link
from tests.fixtures.chromium import (
    CHROMIUM,
    answers,
    find_verify_tab,
    free_port,
    pass_the_check_as_a_person,
)
from tests.fixtures.crawl_harness import REDIS_URL, ROOT, CrawlSetup, compare, count_rows
from tests.fixtures.crawls import FAST_CNKI, FAST_SITE  # the loosened pace of a verified crawl
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.slow  # a real Chromium and the session commands in subprocesses

SAME = {"missing": [], "extra": [], "differing": {}}
HOME_PATH = "/kns8s/defaultresult/index"


@pytest.fixture
def site(cnki_site):
    return cnki_site(**FAST_SITE)


@pytest.fixture
def pool(site):
    """The pool of the test's stand-in (its namespace is the site's), emptied afterwards."""
    store = SessionStore(redis.Redis.from_url(REDIS_URL), namespace_for(site.base_url))
    yield store
    keys = list(store.client.scan_iter(match=f"{store.namespace}:*", count=1000))
    if keys:
        store.client.delete(*keys)
    store.client.close()


@pytest.fixture
def ini(tmp_path, site):
    path = tmp_path / "config.ini"
    path.write_text(
        f"[redis]\nurl = {REDIS_URL}\n[cnki]\nbase_url = {site.base_url}\n"
        f"client_id_url = {site.base_url}/RCDService/api/UtilityOpenApi/GenerateClientID\n",
        encoding="utf-8",
    )
    return path


def cli(ini: Path, *args: str, **kw) -> list[str]:
    return [sys.executable, "-m", "cnkispider.cli", "--config", str(ini), *args]


def env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("CNKI_")}


def stop(process: subprocess.Popen) -> None:
    """End a login still running as a terminal would (SIGTERM: it closes its browser)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def test_session_login_in_a_real_chromium_takes_the_cookies_of_the_pass_httponly_too(
    ini, site, pool, tmp_path, sqlite_url
):
    # the stand-in, as CNKI, keeps its session cookie away from scripts
    probe = site.client()
    try:
        status, headers, _ = probe.get(HOME_PATH)
        assert status == 302
        probe.get(headers["Location"])
        set_cookies = [v for k, v in probe.last_headers if k.lower() == "set-cookie"]
    finally:
        probe.close()
    assert any(v.startswith("KNS2COOKIE=") and "HttpOnly" in v for v in set_cookies), set_cookies

    port = free_port()
    login = subprocess.Popen(
        cli(
            ini,
            "session",
            "login",
            "--headless",
            "--browser",
            CHROMIUM,
            "--port",
            str(port),
            "--timeout",
            "90",
        ),
        cwd=ROOT,
        env=env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        verify_url = pass_the_check_as_a_person(port)
        out, err = login.communicate(timeout=90)
    finally:
        stop(login)
    assert login.returncode == 0, (out, err)
    assert "returnUrl=" in verify_url  # the person was sent to the check, and passed it there
    added = out.splitlines()[-1]
    assert added.startswith("added session s-") and "(a browser): " in added, out
    session_id = added.split()[2]
    assert "KNS2COOKIE" in added and "SID_kns_new" in added
    assert not answers(port), "the browser it started is still running"

    stored = pool.get(session_id)
    assert stored.source == "browser" and stored.state == "ready"
    assert "HeadlessChrome/" in stored.user_agent  # the browser's own, read from it
    names = {c["name"] for c in stored.cookies}
    assert {"KNS2COOKIE", "SID_kns_new"} <= names  # the HttpOnly one too
    for cookie in stored.cookies:
        assert cookie["value"] not in out + err

    # the crawl, on that session alone, equals the truth
    setup = CrawlSetup(
        tmp_path, site, sqlite_url, "patent", "2024-01-01", "2024-01-01", "G06,H04", cnki=FAST_CNKI
    )
    refused = site.stats()["human_check_refusals"]  # the probe's and the browser's first visits
    try:
        result = setup.run(timeout=300)
        assert result.returncode == 0, result.stdout[-2000:] + setup.log()[-3000:]
        truth = setup.truth()
        assert truth and compare(setup.stored(), truth, "patent") == SAME
        assert count_rows(setup, error_code) == 0 and count_rows(setup, error_link) == 0
        assert "waiting:" not in setup.log()
        assert site.stats()["human_check_refusals"] == refused  # the crawl was never checked
        assert pool.get(session_id).requests > len(truth)  # its list and detail pages
    finally:
        setup.cleanup_redis()

    checked = subprocess.run(
        cli(ini, "session", "check", session_id), cwd=ROOT, env=env(), capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert checked.returncode == 0, checked
    assert checked.stdout.startswith(f"{session_id}: passed (HTTP 200, the search page)")


def test_session_login_that_nobody_passes_ends_in_one_line_and_closes_the_browser(ini, pool):
    port = free_port()
    before = len(pool.list())
    started = time.monotonic()
    result = subprocess.run(
        cli(
            ini,
            "session",
            "login",
            "--headless",
            "--browser",
            CHROMIUM,
            "--port",
            str(port),
            "--timeout",
            "3",
        ),
        cwd=ROOT,
        env=env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [
        "error: nobody passed CNKI's check within 3 s (the browser was at /verify/home); "
        "run `cnkispider session login` again (--timeout SECONDS for longer)"
    ], result.stderr
    assert "Traceback" not in result.stderr and time.monotonic() - started < 40
    assert not answers(port) and len(pool.list()) == before


def test_session_login_cdp_uses_a_running_browser_and_leaves_it_running(ini, site, pool):
    port = free_port()
    profile = tempfile.mkdtemp(prefix="cnkispider-test-browser-")
    argv = [CHROMIUM, f"--remote-debugging-port={port}", f"--user-data-dir={profile}",
            "--headless", "--no-first-run", "about:blank"]  # fmt: skip
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.insert(1, "--no-sandbox")
    browser = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        wait_until(
            lambda: answers(port),
            30,
            workers=[browser],
            what="chromium answering",
            every=0.1,
        )
        login = subprocess.Popen(
            cli(ini, "session", "login", "--cdp", str(port), "--timeout", "60"),
            cwd=ROOT,
            env=env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            pass_the_check_as_a_person(port)
            out, err = login.communicate(timeout=60)
        finally:
            stop(login)
        assert login.returncode == 0 and "added session s-" in out, (out, err)
        assert browser.poll() is None and answers(port), "login closed a browser it did not start"
        tabs = [t for t in cdp_http(port, "/json/list") if t.get("type") == "page"]
        assert [t["url"] for t in tabs] == ["about:blank"], tabs  # its own tab is closed
        assert pool.get(out.splitlines()[-1].split()[2]).source == "browser"
    finally:
        os.killpg(browser.pid, signal.SIGTERM)  # the browser and its helpers, all ours
        try:
            browser.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(browser.pid, signal.SIGKILL)
            browser.wait()
        for _ in range(50):  # its helpers' last writes may land after it ended
            shutil.rmtree(profile, ignore_errors=True)
            if not os.path.exists(profile):
                break
            time.sleep(0.1)


def test_a_login_ended_by_sigterm_while_it_waits_closes_its_browser(ini):
    port = free_port()
    login = subprocess.Popen(
        cli(ini, "session", "login", "--headless", "--browser", CHROMIUM, "--port", str(port)),
        cwd=ROOT,
        env=env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        find_verify_tab(port, time.monotonic() + 30)  # the browser shows CNKI's check
        login.terminate()
        out, err = login.communicate(timeout=30)
    finally:
        stop(login)
    assert login.returncode == 130 and err.splitlines()[-1] == "interrupted", (out, err)
    assert not answers(port), "the browser outlived the login that started it"


def test_on_windows_it_looks_for_edge_first_where_every_pc_has_it():
    from cnkispider.sessions.devtools import browser_candidates

    found = browser_candidates(
        "win32",
        {
            "ProgramFiles(x86)": r"C:\Program Files (x86)",
            "ProgramFiles": r"C:\Program Files",
            "LOCALAPPDATA": r"C:\Users\张三\AppData\Local",
        },
    )
    assert found[0] == r"C:\Program Files (x86)\Microsoft\Edge\Application\msedge.exe"
    assert r"C:\Program Files\Google\Chrome\Application\chrome.exe" in found
    assert r"C:\Users\张三\AppData\Local\Google\Chrome\Application\chrome.exe" in found
    assert browser_candidates("darwin")[0].startswith("/Applications/Google Chrome.app/")
    assert "chromium" in browser_candidates("linux")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--browser", "/no/such/browser"], "error: --browser /no/such/browser: no such program"),
        (["--cdp", "PORT"], "error: no browser with remote debugging on port PORT"),
        (
            ["--headless", "--browser", CHROMIUM, "--port", "BUSY"],
            "error: --port BUSY is in use on this machine",
        ),
    ],
    ids=["no-browser", "no-cdp", "port-in-use"],
)
def test_a_login_that_cannot_start_is_one_line_and_exit_2(ini, args, expected):
    port = str(free_port())  # nothing listens there
    with socket.socket() as busy:  # something else listens here
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = str(busy.getsockname()[1])
        args = [{"PORT": port, "BUSY": taken}.get(a, a) for a in args]
        result = subprocess.run(
            cli(ini, "session", "login", *args),
            cwd=ROOT,
            env=env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
    expected = expected.replace("PORT", port).replace("BUSY", taken)
    assert result.returncode == 2 and result.stdout == "", result
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), lines
