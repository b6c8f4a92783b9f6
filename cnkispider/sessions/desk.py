"""The pass desk: a person passes CNKI's slider from any browser, through a browser of the
server's own (``cnkispider web``'s page ``/desk``; the page is cnkispider/web/).

What it does, beside ``session login`` (cnkispider/sessions/login.py, whose page and cookie
reading it uses; the browser and its DevTools client are cnkispider/sessions/devtools.py's):

1. start a headless Chrome, Edge or Chromium (:func:`~cnkispider.sessions.devtools.find_browser`,
   or the web page's ``--browser PATH``) with a profile of its own, one tab of a phone's size;
2. keep that tab on CNKI: every request it makes passes ``Fetch.requestPaused``, and one to a
   host that is not CNKI's (:func:`~cnkispider.sessions.paste.host_matches` the configured
   site's hosts) fails there, unsent: the desk's browser never sees another site;
3. open CNKI's search page, which sends a browser without a pass to its check;
4. stream the tab's screen (``Page.startScreencast``: JPEG frames, each acknowledged) to whoever
   asks (:meth:`Desk.frame`) and play the person's input on it (:meth:`Desk.input`: mouse,
   touch and keys, in the tab's CSS pixels, ``Input.dispatch*Event``);
5. once a second, look where the tab is: when it has left ``/verify/`` and the search page is
   there, read CNKI's cookies (HttpOnly ones too), hand them to ``on_pass`` (the web page puts
   them into the pool, as ``session login`` does) and close the browser. A drag after which the
   tab is on a fresh verify page was not accepted: the state says so;
6. close the browser after ``idle`` seconds without the person's input (a page left open on a
   phone in a pocket must not keep a browser running on the server), and on :meth:`Desk.close`.

States: opening -> check (at CNKI's check) | page (elsewhere on CNKI) -> passed | closed | failed.
Only :class:`Desk`'s own threads move them; the web page reads :meth:`Desk.status`.

The DevTools client's reader thread (:class:`~cnkispider.sessions.devtools.Cdp`) hands the
events (frames, paused requests) to the desk, which answers them while the person's input waits
on its replies.
Cookie values never reach a log line or the status.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from cnkispider.sessions.devtools import Browser, Cdp, CdpError, LoginError, find_browser
from cnkispider.sessions.login import VERIFY_MARK, page_state, read_cookies
from cnkispider.sessions.paste import Paste, host_matches
from cnkispider.words import i18n
from cnkispider.words.i18n import _

logger = logging.getLogger(__name__)

#: Seconds without a look or a touch after which the desk closes its browser.
IDLE_SECONDS = 60.0
#: A line of the check page that refuses a drag (AJ-Captcha's tip, the stand-in's paragraph).
REFUSAL_WORDS_JS = r"""(() => {
  const text = document.body ? document.body.innerText : "";
  const line = text.split("\n").find((l) => /验证失败|请重试|再试一次/.test(l));
  return line ? line.trim() : "";
})()"""
#: The tab's size in CSS pixels: a phone's, so the check fills a phone's screen unscaled and a
#: desktop shows it whole.
WIDTH, HEIGHT = 420, 560
#: Keys a person may need on CNKI's check (a word to type on some), with their Windows codes.
KEY_CODES = {
    "Backspace": 8,
    "Tab": 9,
    "Enter": 13,
    "Escape": 27,
    "ArrowLeft": 37,
    "ArrowUp": 38,
    "ArrowRight": 39,
    "ArrowDown": 40,
    "Delete": 46,
}

OPENING, CHECK, PAGE, PASSED, CLOSED, FAILED = (
    "opening",
    "check",
    "page",
    "passed",
    "closed",
    "failed",
)


def browser_identity(version: dict) -> tuple[str, dict]:
    """The user agent and client hints of the desk's browser as the ordinary browser it is
    (``version``: DevTools' ``Browser.getVersion``): a browser started without a window says
    ``HeadlessChrome/156...`` in both, which a page's script tells from a person's at a glance,
    and the session the person passes records that user agent for every request it makes."""
    agent = version.get("userAgent", "").replace("HeadlessChrome/", "Chrome/")
    product = version.get("product", "")  # Chrome/156.0.8078.108 (HeadlessChrome/... too)
    full = product.partition("/")[2] or "0.0.0.0"
    major = full.split(".")[0]
    platform = "Windows" if "Windows" in agent else "macOS" if "Mac OS" in agent else "Linux"
    brands = [
        {"brand": "Chromium", "version": major},
        {"brand": "Not_A Brand", "version": "24"},
    ]
    if "Edg/" in agent:
        brands.insert(1, {"brand": "Microsoft Edge", "version": major})
    metadata = {
        "brands": brands,
        "fullVersionList": [
            {**b, "version": full if b["version"] == major else "24.0.0.0"} for b in brands
        ],
        "fullVersion": full,
        "platform": platform,
        "platformVersion": "",
        "architecture": "x86",
        "model": "",
        "mobile": False,
    }
    return agent, metadata


class Desk:
    """One browser on CNKI's check, shown to a person and driven by them (module docstring)."""

    def __init__(
        self,
        home_url: str,
        cnki_hosts: tuple[str, ...],
        on_pass: Callable[[Paste], str],
        *,
        browser: str | None = None,
        cdp: int | None = None,
        idle: float = IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.home_url = home_url
        # a browser already running with remote debugging on this port (`web --desk-cdp`): the
        # desk opens a tab of its own in it and closes only that tab (a PC whose browser the
        # program cannot start itself: the .exe under Wine, a locked-down Windows)
        self.cdp = cdp
        self._tab: str | None = None
        self.cnki_hosts = cnki_hosts
        self.on_pass = on_pass
        self.program = browser
        self.idle = idle
        self.clock = clock
        self.state = OPENING
        self.says = _("opening…")  # every state has its words: the page never shows a state's name
        # the language of the person who opened the desk (made in their request): the watcher
        # thread writes what the desk says in it, and the pass's line too
        self.language = i18n.current()
        self.url = ""
        self.user_agent = ""  # the browser's own, as the desk presents it (browser_identity)
        self.blocked = 0  # requests to other hosts the tab was refused
        self.opened_at = clock()
        self._touched = clock()
        self._frame: dict | None = None
        self._frames = threading.Condition()
        self._browser: Browser | None = None
        self._link: Cdp | None = None
        self._session: str | None = None
        self._input = threading.Lock()
        self._released_on: str | None = None  # the verify page a drag was released on
        self._refused_unsaid = False  # a refused drag said before its page showed its words
        self._stale_words = ""  # the refusal words on the page when the last drag ended
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    # -- opening and closing -------------------------------------------------------------------

    def open(self) -> Desk:
        """Start the browser and open CNKI; the watcher thread runs the rest. LoginError when
        there is no browser or it will not start."""
        if self.cdp is not None:
            self._browser = Browser.attach(self.cdp)
        else:
            self._browser = Browser.start(find_browser(self.program), headless=True)
        try:
            self._link = Cdp(self._browser.ws_url, self._event, name="desk")
            tab = self._link.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            self._tab = tab
            self._session = self._link.call(
                "Target.attachToTarget", {"targetId": tab, "flatten": True}
            )["sessionId"]
            call = self._tab_call
            # the ordinary browser it is: no "Headless" in what CNKI's pages can read, and the
            # same user agent recorded with the session it passes (CNKI sees one browser)
            self.user_agent, metadata = browser_identity(self._link.call("Browser.getVersion"))
            call(
                "Emulation.setUserAgentOverride",
                {"userAgent": self.user_agent, "userAgentMetadata": metadata},
            )
            call("Fetch.enable", {"patterns": [{"urlPattern": "*", "requestStage": "Request"}]})
            call("Page.enable")
            call(
                "Emulation.setDeviceMetricsOverride",
                {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
            )
            call("Emulation.setTouchEmulationEnabled", {"enabled": True, "maxTouchPoints": 1})
            call(
                "Page.startScreencast",
                {"format": "jpeg", "quality": 70, "maxWidth": WIDTH, "maxHeight": HEIGHT},
            )
            call("Page.navigate", {"url": self.home_url})
            self.touch()  # the idle time counts from a desk the person can use, not its start
        except BaseException:
            self._shut()
            raise
        self._watcher = threading.Thread(target=self._watch, name="desk-watch", daemon=True)
        self._watcher.start()
        logger.info("desk: a browser opened CNKI (%s) for a person", self.home_url)
        return self

    def close(self, why: str | None = None) -> None:
        if self.state not in (PASSED, FAILED):
            self.state, self.says = (
                CLOSED,
                _("the desk's browser is closed") if why is None else why,
            )
        self._stop.set()
        self._shut()

    def _shut(self) -> None:
        if self._link is not None:
            if self.cdp is not None and self._tab is not None:
                # a browser the desk did not start goes on: only the desk's tab goes
                with contextlib.suppress(Exception):
                    self._link.call("Target.closeTarget", {"targetId": self._tab}, timeout=5)
                self._tab = None
            self._link.close()
        if self._browser is not None:
            self._browser.close()
            self._browser = None
        with self._frames:
            self._frames.notify_all()

    @property
    def open_now(self) -> bool:
        return self.state in (OPENING, CHECK, PAGE)

    def _tab_call(self, method: str, params: dict | None = None, timeout: float = 30.0) -> dict:
        if self._link is None:
            raise CdpError(_("the desk is closed"), closed=True)
        return self._link.call(method, params, session=self._session, timeout=timeout)

    # -- what the browser says ---------------------------------------------------------------------

    def _event(self, method: str, params: dict, session: str | None) -> None:
        if method == "Fetch.requestPaused":
            url = params.get("request", {}).get("url", "")
            if self.allowed(url):
                self._link.send(
                    "Fetch.continueRequest", {"requestId": params["requestId"]}, session=session
                )
            else:
                self.blocked += 1
                logger.info(
                    "desk: refused the tab a request to %s", urlsplit(url).netloc or url[:40]
                )
                self._link.send(
                    "Fetch.failRequest",
                    {"requestId": params["requestId"], "errorReason": "BlockedByClient"},
                    session=session,
                )
        elif method == "Page.screencastFrame":
            self._link.send(
                "Page.screencastFrameAck", {"sessionId": params["sessionId"]}, session=session
            )
            meta = params.get("metadata", {})
            with self._frames:
                seq = (self._frame or {}).get("seq", 0) + 1
                self._frame = {
                    "seq": seq,
                    "data": params.get("data", ""),
                    "width": meta.get("deviceWidth") or WIDTH,
                    "height": meta.get("deviceHeight") or HEIGHT,
                }
                self._frames.notify_all()

    def allowed(self, url: str) -> bool:
        """Whether the tab may fetch ``url``: CNKI's own hosts only (its check included)."""
        parts = urlsplit(url)
        if parts.scheme in ("data", "blob", "about"):
            return True
        return parts.scheme in ("http", "https") and host_matches(
            parts.hostname or "", self.cnki_hosts
        )

    # -- the person ----------------------------------------------------------------------------

    def touch(self) -> None:
        self._touched = self.clock()

    def frame(self, after: int = 0, wait: float = 10.0) -> dict | None:
        """The newest frame past ``after`` (``{"seq", "data": JPEG base64, "width", "height"}``),
        waiting up to ``wait`` s for one; None if none came or the desk closed. Watching is not
        being at the desk: only the person's input (and opening) keeps it open."""
        deadline = time.monotonic() + wait
        with self._frames:
            while self.open_now and (self._frame is None or self._frame["seq"] <= after):
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._frames.wait(left)
            frame = self._frame
        return frame if frame is not None and frame["seq"] > after else None

    def input(self, events: list[dict]) -> None:
        """Play the person's events on the tab: ``{"kind": "mouse"|"touch", "type": "down"|
        "move"|"up", "x": 0..1, "y": 0..1}`` (where on the shown screen) and ``{"kind": "key",
        "key": KEY}``. Out-of-range or unknown events are dropped."""
        self.touch()
        if not self.open_now:
            return
        with self._input:
            for event in events[:500]:
                try:
                    self._play(event)
                except (CdpError, KeyError, TypeError, ValueError):
                    return

    def _play(self, event: dict) -> None:
        kind, what = event.get("kind"), event.get("type")
        if kind == "key":
            key = str(event.get("key", ""))[:20]
            if len(key) == 1:
                self._tab_call(
                    "Input.dispatchKeyEvent", {"type": "keyDown", "key": key, "text": key}
                )
                self._tab_call("Input.dispatchKeyEvent", {"type": "keyUp", "key": key})
            elif key in KEY_CODES:
                code = {"key": key, "windowsVirtualKeyCode": KEY_CODES[key]}
                self._tab_call("Input.dispatchKeyEvent", dict(code, type="rawKeyDown"))
                self._tab_call("Input.dispatchKeyEvent", dict(code, type="keyUp"))
            return
        frame = self._frame or {"width": WIDTH, "height": HEIGHT}
        x = min(max(float(event["x"]), 0.0), 1.0) * frame["width"]
        y = min(max(float(event["y"]), 0.0), 1.0) * frame["height"]
        if what == "down" and VERIFY_MARK in urlsplit(self.url).path:
            # words already on the page when a drag starts are an earlier drag's refusal
            self._stale_words = self._refusal_words()
        if what == "up":
            self._released_on = self.url if VERIFY_MARK in urlsplit(self.url).path else None
            self._refused_unsaid = False
        if kind == "touch":
            kinds = {"down": "touchStart", "move": "touchMove", "up": "touchEnd"}
            points = [] if what == "up" else [{"x": x, "y": y}]
            self._tab_call("Input.dispatchTouchEvent", {"type": kinds[what], "touchPoints": points})
        elif kind == "mouse":
            kinds = {"down": "mousePressed", "move": "mouseMoved", "up": "mouseReleased"}
            params = {"type": kinds[what], "x": x, "y": y, "button": "left", "clickCount": 1}
            if what == "move":
                params["buttons"] = 1 if event.get("pressed") else 0
                if not event.get("pressed"):
                    params["button"] = "none"
            self._tab_call("Input.dispatchMouseEvent", params)

    # -- the watcher -------------------------------------------------------------------------------

    def _watch(self) -> None:
        with i18n.using(self.language):
            self._watch_tab()

    def _watch_tab(self) -> None:
        try:
            while not self._stop.wait(0.5):
                if self.clock() - self._touched >= self.idle:
                    logger.info(
                        "desk: nobody at the desk for %.0f s: its browser closes", self.idle
                    )
                    self.close(
                        _(
                            "closed after %(s).0f s without anyone at the desk: reload to open it again"
                        )
                        % {"s": self.idle}
                    )
                    return
                if self._look():
                    return
        except Exception as exc:  # the browser died: say so, leave nothing behind
            logger.warning("desk: %s", exc)
            self.state, self.says = FAILED, _("the desk's browser stopped: %(why)s") % {"why": exc}
            self._stop.set()
            self._shut()

    def _look(self) -> bool:
        """One look at the tab; True once the pass is taken (the desk then closes)."""
        try:
            url, ready = page_state(self._link, self._session)
        except CdpError:
            if self._link is None or self._link.closed:
                raise
            return False  # navigating: look again
        self.url = url
        at_check = VERIFY_MARK in urlsplit(url).path
        if at_check:
            # AJ-Captcha refuses a drag in place (its page says 验证失败, the address stays);
            # a site may instead show a fresh puzzle at a new address: either is "not accepted"
            refused = self._released_on is not None or self._refused_unsaid
            words = self._refusal_words() if refused else ""
            if words and url == self._released_on and words == self._stale_words:
                words = ""  # still the earlier drag's refusal: this one is being checked
            if self._refused_unsaid and words:  # the new puzzle's page has loaded its words
                self._released_on = self._released_on or url
            if self._released_on and (url != self._released_on or words):
                self._refused_unsaid = not words
                self.says = (
                    _(
                        "CNKI did not accept that drag (its page says: %(words)s): slide the "
                        "piece onto the gap again"
                    )
                    % {"words": words}
                    if words
                    else _("CNKI did not accept that drag: slide the piece onto the gap again")
                )
                self._released_on = None
            elif self.state != CHECK:
                self.says = _("CNKI's check: slide the piece onto the gap")
            self.state = CHECK
            return False
        if not ready:
            if self.state == OPENING or self.state == CHECK:
                self.state, self.says = PAGE, _("CNKI's page is loading")
            return False
        cookies = read_cookies(self._link, self.cnki_hosts, self._session)
        if not cookies:
            self.state, self.says = PAGE, _("CNKI's search page, but no CNKI cookie yet")
            return False
        paste = Paste(
            cookies=cookies,
            user_agent=self.user_agent,
            host=urlsplit(self.home_url).hostname or "",
        )
        said = self.on_pass(paste)
        self.state, self.says = PASSED, said
        logger.info("desk: the check is passed: %d cookies into the pool", len(cookies))
        self._stop.set()
        self._shut()
        return True

    def _refusal_words(self) -> str:
        """The check page's own words refusing a drag (验证失败, 请重试 ...), "" if none."""
        try:
            answer = self._tab_call(
                "Runtime.evaluate",
                {"expression": REFUSAL_WORDS_JS, "returnByValue": True},
                timeout=5.0,
            )
        except CdpError:
            return ""
        return str(answer.get("result", {}).get("value") or "")[:80]

    def status(self) -> dict:
        return {
            "state": self.state,
            "says": self.says,
            "at": urlsplit(self.url).path,
            "blocked": self.blocked,
            "seconds": round(self.clock() - self.opened_at, 1),
        }


__all__ = ["IDLE_SECONDS", "Desk", "LoginError"]
