"""A browser over the DevTools protocol: found, started or attached to, spoken to, and closed.

What both ways for a person to pass CNKI's check use: `cnkispider session login`
(:mod:`cnkispider.sessions.login`, a browser window on this machine) and the pass desk
(:mod:`cnkispider.sessions.desk`, a headless browser of the server's, shown on the web page).

- :func:`find_browser`: Chrome, Edge or Chromium on this machine (on Windows Edge, which every PC
  has), or the program of ``--browser PATH``;
- :class:`Browser`: one started with a profile of its own (a temporary folder: never the
  person's everyday profile) and the DevTools protocol on a local port, or one already running
  with ``--remote-debugging-port`` (attached: never closed by us);
- :class:`Cdp`: the one DevTools-protocol client, JSON over one websocket (``websocket-client``:
  pure Python, so the one-file .exe stays small: no Playwright, no Node). A reader thread takes
  every message: a reply wakes the call that waits for it, an event goes to ``on_event``, so a
  caller may answer events (a paused request, a screencast frame) while others wait on replies.

Nothing here reads a page or a cookie of CNKI: that is the login's and the desk's.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cnkispider.exceptions import CnkiSpiderError
from cnkispider.words.i18n import N_, _

logger = logging.getLogger(__name__)


class LoginError(CnkiSpiderError):
    """A person's way past CNKI's check could not be opened or finished (no browser, the browser
    would not start or stopped answering, nobody passed the check in time, ...): one line for
    the person, the CLI exits 2."""


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
    """A DevTools-protocol client on one websocket (a browser's or a page's), with a reader
    thread.

    ``call(method, params, session=...)`` sends one command and waits for its result; ``send``
    does not wait (for answering events from ``on_event`` itself, on the reader thread);
    ``session`` addresses a page attached with ``Target.attachToTarget(flatten=True)`` through
    the browser's own socket. ``on_event(method, params, session)`` gets every event (none are
    kept without it); ``name`` names the reader thread and its log lines."""

    def __init__(
        self,
        ws_url: str,
        on_event: Callable[[str, dict, str | None], None] | None = None,
        *,
        timeout: float = 30.0,
        name: str = "cdp",
    ):
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
        self._ws.settimeout(None)  # the reader waits for as long as the socket is open
        self._on_event = on_event
        self.name = name
        self._lock = threading.Lock()
        self._next = 0
        self._waiting: dict[int, list] = {}  # id -> [Event, reply]
        self.closed = False
        self._reader = threading.Thread(target=self._read, name=f"{name}-cdp", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while not self.closed:
            try:
                message = json.loads(self._ws.recv())
            except Exception:  # the browser went away, or close(): wake every caller
                break
            if "id" in message:
                slot = self._waiting.pop(message["id"], None)
                if slot is not None:
                    slot[1] = message
                    slot[0].set()
                continue
            if self._on_event is None:
                continue
            try:
                self._on_event(
                    message.get("method", ""), message.get("params", {}), message.get("sessionId")
                )
            except Exception:  # one bad event must not stop the reader
                logger.warning(
                    "%s: handling %s failed", self.name, message.get("method"), exc_info=True
                )
        self.closed = True  # before the wake-up: a call registered after it sees this flag
        for slot in list(self._waiting.values()):
            slot[0].set()

    def _send(self, method: str, params: dict | None, session: str | None, slot=None) -> int:
        with self._lock:  # the id, its slot and the send in one step: replies find their caller
            self._next += 1
            message = {"id": self._next, "method": method, "params": params or {}}
            if session:
                message["sessionId"] = session
            if slot is not None:
                self._waiting[self._next] = slot
            self._ws.send(json.dumps(message))
            return self._next

    def send(self, method: str, params: dict | None = None, *, session: str | None = None) -> None:
        try:
            self._send(method, params, session)
        except Exception:  # the browser is closing: nothing to answer any more
            pass

    def call(
        self,
        method: str,
        params: dict | None = None,
        *,
        timeout: float = 30.0,
        session: str | None = None,
    ) -> dict:
        slot: list = [threading.Event(), None]
        closed = _("the browser's DevTools socket closed during %(method)s: %(error)s")
        try:
            sent = self._send(method, params, session, slot)
        except Exception as exc:
            raise CdpError(closed % {"method": method, "error": exc}, closed=True) from None
        if self.closed or not slot[0].wait(timeout):
            self._waiting.pop(sent, None)
        reply = slot[1]
        if reply is None:
            if self.closed:
                raise CdpError(
                    closed % {"method": method, "error": _("the browser went away")}, closed=True
                )
            raise CdpError(
                _("the browser did not answer %(method)s in %(seconds)s s")
                % {"method": method, "seconds": f"{timeout:.0f}"},
                closed=False,
            )
        if "error" in reply:
            raise CdpError(f"{method}: {reply['error'].get('message', reply['error'])}")
        return reply.get("result", {})

    def close(self) -> None:
        self.closed = True
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


#: What a person does where no browser window can be shown here (translated where shown:
#: ``_(ELSEWHERE)``).
ELSEWHERE = N_(
    "pass CNKI's check in a browser on another PC, copy the search request as cURL there and "
    "paste it into `cnkispider session add --from-curl -`, or start a browser yourself with "
    "--remote-debugging-port=PORT and use `cnkispider session login --cdp PORT`"
)


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
