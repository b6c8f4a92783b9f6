"""`cnkispider session login`: a person passes CNKI's check in a real browser, the crawler takes
that browser's cookies.

What it does, as azazo1/cnki-cli's ``cnki auth login`` found works on the live site
(shared/cnki/PROTOCOL.md, "2026 evidence" 11):

1. find a Chrome, Edge or Chromium on this machine (:func:`find_browser`; on Windows Edge, which
   every PC has), or take ``--browser PATH``, or attach to one already running with
   ``--remote-debugging-port`` (``--cdp PORT``);
2. start it with a profile of its own (a temporary folder: never the person's everyday profile,
   which may be open already and must not be touched) and the DevTools protocol on a local port;
3. open CNKI's search page (``Protocol.home_url``) in a new tab and wait, polling once a second,
   until the address has left ``/verify/`` and the search page is there (its ``#classid`` input,
   or the class-id menu links ``a[name=classify][classid]``: both are on the real page,
   shared/cnki/pages/kns8s_defaultresult_index.html);
4. read every cookie of CNKI's domains over the DevTools protocol (``Storage.getCookies``, or
   ``Network.getAllCookies`` on older browsers): HttpOnly ones too, which a page's script cannot
   see;
5. close what it opened: the tab, and the browser only if it started it (never the person's own
   browser of ``--cdp``), and remove the temporary profile.

The browser and the DevTools protocol are :mod:`cnkispider.sessions.devtools`'s (its one client,
:class:`~cnkispider.sessions.devtools.Cdp`, the pass desk's too); this module reads CNKI's page
and cookies through them. Cookie values never reach a log line or a message.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import time
from urllib.parse import urlsplit

from cnkispider.sessions.devtools import (
    ELSEWHERE,
    Browser,
    Cdp,
    CdpError,
    LoginError,
    find_browser,
)
from cnkispider.sessions.paste import Paste, host_matches
from cnkispider.words import i18n
from cnkispider.words.i18n import N_, _

logger = logging.getLogger(__name__)

#: The search page is there: CNKI's hidden ``#classid`` input, or its class-id menu.
READY_SELECTOR = "#classid, a[name=classify][classid]"
VERIFY_MARK = "/verify/"
DEFAULT_TIMEOUT = 300.0  # five minutes for a person to find the window and slide the puzzle


# -- the login -----------------------------------------------------------------------------------


def page_state(cdp: Cdp, session: str) -> tuple[str, bool]:
    """(the tab's address, whether the search page is there)."""
    expression = (
        "JSON.stringify({url: location.href, "
        f"ready: document.querySelector({json.dumps(READY_SELECTOR)}) !== null}})"
    )
    result = cdp.call(
        "Runtime.evaluate",
        {"expression": expression, "returnByValue": True},
        session=session,
        timeout=10,
    )
    value = json.loads(result.get("result", {}).get("value") or "{}")
    return str(value.get("url", "")), bool(value.get("ready"))


def read_cookies(cdp: Cdp, cnki_hosts: tuple[str, ...], session: str | None = None) -> list[dict]:
    """Every cookie of ``cnki_hosts`` the browser holds, HttpOnly ones too."""
    try:
        raw = cdp.call("Storage.getCookies")["cookies"]
    except CdpError:  # an older browser: the page-level call
        raw = cdp.call("Network.getAllCookies", session=session)["cookies"]
    cookies = []
    for item in raw:
        if host_matches(item.get("domain", ""), cnki_hosts):
            cookie = {
                "name": item["name"],
                "value": item["value"],
                "domain": item["domain"],
                "path": item.get("path") or "/",
            }
            if item.get("httpOnly"):
                cookie["httpOnly"] = True  # said in `session add`'s line; the pool may keep it
            cookies.append(cookie)
    return cookies


#: What --headless means for CNKI's check (translated where shown: ``_(HEADLESS)``).
HEADLESS = N_(
    "--headless: no window, so no person can pass CNKI's check (a real check needs one); "
    "this only keeps a session where CNKI asks for none"
)


def has_display(environ=None, platform: str | None = None) -> bool:
    """Whether a browser window can be shown here: always on Windows and macOS; on Linux and
    the BSDs only with an X11 or Wayland display."""
    environ = os.environ if environ is None else environ
    platform = platform or sys.platform
    if platform == "win32" or platform == "darwin":
        return True
    return bool(environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"))


def login(
    home_url: str,
    cnki_hosts: tuple[str, ...],
    *,
    browser: str | None = None,
    cdp_port: int | None = None,
    headless: bool = False,
    port: int = 0,
    timeout: float = DEFAULT_TIMEOUT,
    say=print,
    clock=time.monotonic,
) -> Paste:
    """Open CNKI's search page in a real browser, wait for the person to pass the check, and
    return the browser's CNKI cookies and User-Agent. Closes what it opened."""
    with _closing_on_termination():
        if cdp_port:
            target = Browser.attach(cdp_port)
        else:
            program = find_browser(browser)
            if not headless and not has_display():
                raise LoginError(
                    _("no display here to show a browser window: %(elsewhere)s")
                    % {"elsewhere": _(ELSEWHERE)}
                )
            target = Browser.start(program, headless=headless, port=port)
        return _login(
            target, home_url, cnki_hosts, timeout=timeout, say=say, clock=clock, headless=headless
        )


@contextlib.contextmanager
def _closing_on_termination():
    """SIGTERM (and SIGHUP: the terminal closed) end the login like Ctrl-C does, through the
    ``finally`` blocks that close the browser: a killed login must not leave a browser behind."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    names = [n for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n)]
    previous = {}

    def stop(signum, frame):
        raise KeyboardInterrupt

    for name in names:
        previous[name] = signal.signal(getattr(signal, name), stop)
    try:
        yield
    finally:
        for name in names:
            signal.signal(getattr(signal, name), previous[name])


def _login(
    target: Browser, home_url, cnki_hosts, *, timeout, say, clock, headless: bool = False
) -> Paste:
    cdp = None
    tab = None
    try:
        cdp = Cdp(target.ws_url)
        user_agent = cdp.call("Browser.getVersion").get("userAgent", "")
        tab = cdp.call("Target.createTarget", {"url": home_url})["targetId"]
        session = cdp.call("Target.attachToTarget", {"targetId": tab, "flatten": True})["sessionId"]
        if headless:
            say(
                _(
                    "%(headless)s. The headless browser opens CNKI (%(url)s); waiting at most %(time)s."
                )
                % {"headless": _(HEADLESS), "url": home_url, "time": i18n.duration(timeout)}
            )
        else:
            say(
                _(
                    "A browser window shows CNKI (%(url)s). If CNKI asks you to pass its check "
                    "(slide the puzzle), do it there; this waits until the search page is there "
                    "(at most %(time)s)."
                )
                % {"url": home_url, "time": i18n.duration(timeout)}
            )
        deadline = clock() + timeout
        told = False
        url = ""
        while True:
            try:
                url, ready = page_state(cdp, session)
            except CdpError as exc:
                if exc.closed:
                    raise LoginError(
                        _("the browser window was closed before the check was passed")
                    ) from None
                url, ready = url, False  # the page is navigating: ask again
            at_check = VERIFY_MARK in urlsplit(url).path
            if at_check and not told:
                say(_("CNKI is checking for a person: pass its check in the browser window."))
                told = True
            if ready and not at_check:
                break
            if clock() >= deadline:
                where = urlsplit(url).path or url or _("no page")
                raise LoginError(
                    _(
                        "nobody passed CNKI's check within %(seconds)s s (the browser was at "
                        "%(where)s); run %(command)s again (--timeout SECONDS for longer)"
                    )
                    % {
                        "seconds": f"{timeout:.0f}",
                        "where": where,
                        "command": "`cnkispider session login`",
                    }
                )
            time.sleep(1.0)
        cookies = read_cookies(cdp, cnki_hosts, session)
        if not cookies:
            raise LoginError(
                _("the browser holds no cookie of %(hosts)s after the check")
                % {"hosts": ", ".join(cnki_hosts)}
            )
        host = (urlsplit(home_url).hostname or "").lower()
        logger.info(
            "the check is passed: %d cookies of %s read from the browser", len(cookies), host
        )
        return Paste(cookies=cookies, user_agent=user_agent, host=host)
    finally:
        if cdp is not None:
            if tab and target.process is None:  # a browser of the person's: close only our tab
                try:
                    cdp.call("Target.closeTarget", {"targetId": tab}, timeout=5)
                except CdpError:
                    pass
            cdp.close()
        target.close()
