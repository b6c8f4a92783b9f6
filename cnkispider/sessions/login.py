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

The DevTools protocol is JSON over a websocket; :class:`Cdp` is a small synchronous client on
``websocket-client`` (pure Python, so the one-file .exe stays small: no Playwright, no Node).
Cookie values never reach a log line or a message.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from cnkispider import i18n
from cnkispider.exceptions import CnkiSpiderError
from cnkispider.i18n import N_, _
from cnkispider.sessions.paste import Paste, host_matches

logger = logging.getLogger(__name__)

#: The search page is there: CNKI's hidden ``#classid`` input, or its class-id menu.
READY_SELECTOR = "#classid, a[name=classify][classid]"
VERIFY_MARK = "/verify/"
DEFAULT_TIMEOUT = 300.0  # five minutes for a person to find the window and slide the puzzle


class LoginError(CnkiSpiderError):
    """The login could not be done (no browser, the browser would not start, nobody passed the
    check in time, ...): one line for the person, the CLI exits 2."""


# -- finding a browser ------------------------------------------------------------------------


def browser_candidates(platform: str | None = None, environ=None) -> list[str]:
    """Where Chrome, Edge and Chromium live, in the order they are tried on ``platform``."""
    platform = platform or sys.platform
    env = os.environ if environ is None else environ
    if platform == "win32":
        roots = [
            env.get("ProgramFiles(x86)") or r"C:\Program Files (x86)",
            env.get("ProgramFiles") or r"C:\Program Files",
            env.get("LOCALAPPDATA") or "",
        ]
        found = []
        # Edge first: every Windows 10 and 11 PC has it (Program Files (x86) even on 64-bit)
        for app in (
            r"Microsoft\Edge\Application\msedge.exe",
            r"Google\Chrome\Application\chrome.exe",
        ):
            found += [f"{root}\\{app}" for root in roots if root]
        return found
    if platform == "darwin":
        return [
            "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
            "/Applications/Microsoft Edge.app/Contents/MacOS/Microsoft Edge",
            "/Applications/Chromium.app/Contents/MacOS/Chromium",
        ]
    return [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
        "microsoft-edge",
        "microsoft-edge-stable",
    ]


def find_browser(explicit: str | None = None) -> str:
    """The browser to start: ``explicit`` (``--browser``), else the first of
    :func:`browser_candidates` that is there. LoginError saying what to do if none is."""
    if explicit:
        path = shutil.which(explicit) or explicit
        if not Path(path).is_file():
            raise LoginError(_("--browser %(program)s: no such program") % {"program": explicit})
        return path
    for candidate in browser_candidates():
        path = shutil.which(candidate) if os.sep not in candidate and "/" not in candidate else None
        if path or Path(candidate).is_file():
            return path or candidate
    raise LoginError(
        _(
            "no Chrome, Edge or Chromium found on this machine: install one, or give its program "
            "with --browser PATH, or start it with --remote-debugging-port=9222 and use --cdp 9222"
        )
    )


# -- the DevTools protocol ----------------------------------------------------------------------


class CdpError(LoginError):
    """A DevTools call failed. ``closed``: the browser's socket closed (its window went away);
    told apart by this flag, not by the message, which is in the operator's language."""

    def __init__(self, message: str, *, closed: bool | None = None):
        super().__init__(message)
        self.closed = "closed" in message if closed is None else closed


class Cdp:
    """A synchronous DevTools-protocol client on one websocket (a browser's or a page's).

    ``call(method, params, session=...)`` sends one command and returns its result, skipping the
    events that arrive meanwhile; ``session`` addresses a page attached with
    ``Target.attachToTarget(flatten=True)`` through the browser's own socket."""

    def __init__(self, ws_url: str, timeout: float = 30.0):
        import websocket  # websocket-client

        try:
            # No Origin header: browsers since Chrome 111 refuse DevTools sockets whose Origin
            # they were not told to allow, and allow those without one.
            self._ws = websocket.create_connection(ws_url, timeout=timeout, suppress_origin=True)
        except (OSError, websocket.WebSocketException) as exc:
            raise CdpError(
                _("cannot open the browser's DevTools socket %(url)s: %(error)s")
                % {"url": ws_url, "error": exc},
                closed=False,
            ) from None
        self._next = 0

    def call(
        self,
        method: str,
        params: dict | None = None,
        *,
        session: str | None = None,
        timeout: float = 30.0,
    ) -> dict:
        import websocket

        self._next += 1
        message = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        deadline = time.monotonic() + timeout
        try:
            self._ws.send(json.dumps(message))
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CdpError(
                        _("the browser did not answer %(method)s in %(seconds)s s")
                        % {"method": method, "seconds": f"{timeout:.0f}"},
                        closed=False,
                    )
                self._ws.settimeout(left)
                reply = json.loads(self._ws.recv())
                if reply.get("id") != self._next:
                    continue  # an event, or a late answer
                if "error" in reply:
                    raise CdpError(f"{method}: {reply['error'].get('message', reply['error'])}")
                return reply.get("result", {})
        except (OSError, websocket.WebSocketException) as exc:
            raise CdpError(
                _("the browser's DevTools socket closed during %(method)s: %(error)s")
                % {"method": method, "error": exc},
                closed=True,
            ) from None

    def close(self) -> None:
        try:
            self._ws.close()
        except Exception:  # closing a socket the browser already closed
            pass


def cdp_http(port: int, path: str, timeout: float = 5.0):
    """GET http://127.0.0.1:PORT/json/... of a browser's DevTools endpoint, as JSON."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as answer:
        return json.loads(answer.read().decode("utf-8"))


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex(("127.0.0.1", port)) == 0


# -- the browser ---------------------------------------------------------------------------------


@dataclass
class Browser:
    """A browser this process started (``process`` set) or one it attached to (``--cdp``)."""

    ws_url: str
    port: int
    process: subprocess.Popen | None = None
    profile: Path | None = None

    @classmethod
    def start(
        cls, program: str, *, headless: bool = False, port: int = 0, wait: float = 30.0
    ) -> Browser:
        if port and _listening(port):  # else the browser we attach to would be someone else's
            raise LoginError(
                _("--port %(port)s is in use on this machine: pick another, or leave it out")
                % {"port": port}
            )
        profile = Path(tempfile.mkdtemp(prefix="cnkispider-login-"))
        argv = [
            program,
            f"--remote-debugging-port={port}",  # 0: any free port, written to DevToolsActivePort
            f"--user-data-dir={profile}",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-features=Translate",
            "--disable-breakpad",
        ]
        if headless:
            # a person's browser without a window: no navigator.webdriver for a page to read
            # (the desk also presents the browser's own user agent without "Headless")
            argv += ["--headless", "--disable-blink-features=AutomationControlled"]
        if sys.platform.startswith("linux") and hasattr(os, "geteuid") and os.geteuid() == 0:
            argv.append("--no-sandbox")  # Chromium refuses to start as root with its sandbox
        argv.append("about:blank")
        logger.info("starting the browser %s (profile %s)", program, profile)
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=sys.platform != "win32",
            )
        except OSError as exc:
            shutil.rmtree(profile, ignore_errors=True)
            raise LoginError(
                _("cannot start the browser %(program)s: %(error)s")
                % {"program": program, "error": exc.strerror or exc}
            ) from None
        browser = cls(ws_url="", port=0, process=process, profile=profile)
        try:
            return browser._wait_for_devtools(program, port, wait)
        except BaseException:  # a LoginError, or Ctrl-C / SIGTERM meanwhile: no browser left
            browser.close()
            raise

    def _wait_for_devtools(self, program: str, port: int, wait: float) -> Browser:
        active = self.profile / "DevToolsActivePort"  # "PORT\n/devtools/browser/<id>" once up
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise LoginError(
                    _(
                        "the browser %(program)s stopped at start (exit %(code)s); "
                        "try another with --browser PATH, or %(elsewhere)s"
                    )
                    % {
                        "program": program,
                        "code": self.process.returncode,
                        "elsewhere": _(ELSEWHERE),
                    }
                )
            if port:  # a port of our choosing: Chromium writes DevToolsActivePort only for 0
                try:
                    self.ws_url = cdp_http(port, "/json/version", 1.0)["webSocketDebuggerUrl"]
                    self.port = port
                    return self
                except (OSError, ValueError, KeyError):
                    pass
            else:
                try:
                    lines = active.read_text(encoding="utf-8").split()
                except OSError:
                    lines = []
                if len(lines) >= 2:
                    self.port = int(lines[0])
                    self.ws_url = f"ws://127.0.0.1:{self.port}{lines[1]}"
                    return self
            time.sleep(0.1)
        raise LoginError(
            _("the browser %(program)s did not open its DevTools port in %(seconds)s s")
            % {"program": program, "seconds": f"{wait:.0f}"}
        )

    @classmethod
    def attach(cls, port: int) -> Browser:
        try:
            version = cdp_http(port, "/json/version")
        except (OSError, ValueError) as exc:
            raise LoginError(
                _(
                    "no browser with remote debugging on port %(port)s (%(error)s); start one "
                    "with --remote-debugging-port=%(port)s, or leave out --cdp"
                )
                % {"port": port, "error": exc}
            ) from None
        return cls(ws_url=version["webSocketDebuggerUrl"], port=port)

    def close(self) -> None:
        """Ends the browser if this process started it, and removes its profile."""
        if self.process is not None and self.process.poll() is None:
            if self.ws_url:
                try:
                    cdp = Cdp(self.ws_url, timeout=5)
                    try:
                        cdp.call("Browser.close", timeout=5)
                    finally:
                        cdp.close()
                except CdpError:
                    self.process.terminate()
            else:  # it never opened DevTools: ask it the way a window manager would
                self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self.process is not None and hasattr(os, "killpg"):
            # its helpers (zygotes, renderers, crash handler) are in the group it was started
            # in (start_new_session); none may outlive it
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.profile is not None:
            for _ in range(20):  # the browser's last writes may still be landing
                shutil.rmtree(self.profile, ignore_errors=True)
                if not self.profile.exists():
                    break
                time.sleep(0.1)


# -- the login -----------------------------------------------------------------------------------


def _page_state(cdp: Cdp, session: str) -> tuple[str, bool]:
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


#: What a person does where no browser window can be shown here (translated where shown:
#: ``_(ELSEWHERE)``).
ELSEWHERE = N_(
    "pass CNKI's check in a browser on another PC, copy the search request as cURL there and "
    "paste it into `cnkispider session add --from-curl -`, or start a browser yourself with "
    "--remote-debugging-port=PORT and use `cnkispider session login --cdp PORT`"
)
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
                url, ready = _page_state(cdp, session)
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
