"""The live side of the ways in for a session a person passed: one cheap request with its
cookies (:func:`check`, behind `cnkispider session check`) says whether CNKI still takes it
(PASSED), sends it to its check for a person (CHECKED) or answers something else (UNCLEAR),
and the site the crawler searches (:func:`cnki_site_of`). Reading what a person pasted (curl,
a Cookie header, cookies.txt) is pure and lives in cnkispider/sessions/paste.py.
"""

from __future__ import annotations

import re
import urllib.request
from urllib.parse import urlsplit

from cnkispider.cnki import plainhttp
from cnkispider.sessions.paste import Cookie, cnki_hosts_of
from cnkispider.words.i18n import N_, _

PASSED, CHECKED, UNCLEAR = "passed", "checked", "unclear"
VERIFY_PATH = "/verify/"  # where CNKI sends a session it checks (PROTOCOL.md 2026 evidence 3)


class Detail(str):
    """What `session check` saw, in English (the text stored in a session's note in Redis),
    that also says itself in the reader's language: :meth:`shown`."""

    def __new__(cls, template: str, **values):
        detail = super().__new__(cls, template % values)
        detail.template, detail.values = template, values
        return detail

    def shown(self) -> str:
        return _(self.template) % self.values


def shown(detail: str) -> str:
    """``detail`` in the reader's language (a plain text, as it is)."""
    return detail.shown() if isinstance(detail, Detail) else detail


def check(cookies: list[Cookie], url: str, *, user_agent: str = "", timeout: float = 15.0):
    """GET ``url`` (CNKI's search page) once with ``cookies``, following no redirect. Returns
    (verdict, detail): PASSED (200 and the search page), CHECKED (302 to /verify/, or CNKI's
    other challenge forms), UNCLEAR (anything else: the session's state is left alone).
    OSError if CNKI cannot be reached. The detail never holds a cookie."""
    headers = {
        "User-Agent": user_agent
        or "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/141.0.0.0 Safari/537.36",
        "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
        "Accept-Language": "zh-CN,zh;q=0.9",
    }
    header = plainhttp.cookie_header(cookies, url)
    if header:
        headers["Cookie"] = header
    request = urllib.request.Request(url, headers=headers)
    reply = plainhttp.send(
        plainhttp.opener(), request, timeout=timeout, limit=2_000_000, error_limit=200_000
    )
    status, location = reply.status, reply.location
    body = reply.body.decode("utf-8", errors="replace")
    if 300 <= status < 400:
        if VERIFY_PATH in urlsplit(location).path:
            return CHECKED, Detail(
                N_("HTTP %(status)s to %(path)s"), status=status, path=urlsplit(location).path
            )
        where = urlsplit(location).path or location[:60]
        return UNCLEAR, Detail(N_("HTTP %(status)s to %(path)s"), status=status, path=where)
    if status == 403 and VERIFY_PATH in body:
        return CHECKED, Detail(N_("HTTP 403 with CNKI's -403 challenge"))
    if status == 200 and re.search(r'id="classid"|name="classify"', body):
        return PASSED, Detail(N_("HTTP 200, the search page"))
    if status == 200 and re.search(r"<title>[^<]*(超时验证|安全验证)", body):
        return CHECKED, Detail(N_("HTTP 200 with CNKI's verify page"))
    return UNCLEAR, Detail(N_("HTTP %(status)s without the search page"), status=status)


def cnki_site_of(base_url: str) -> tuple[str, tuple[str, ...]]:
    """(CNKI's search page, the hosts whose cookies are CNKI's) for the configured site."""
    from cnkispider.cnki.protocol import HOME_PATH

    base_url = base_url.rstrip("/")
    return base_url + HOME_PATH, cnki_hosts_of(base_url)


def added_line(session, paste, source: str) -> str:
    """The line of a new session: its cookies' names (never a value) and the browser's name."""
    from cnkispider.words.vocabulary import word

    browser = re.findall(r"(Edg|Firefox|HeadlessChrome|Chrome)/(\d+)", paste.user_agent)
    line = _("added session %(id)s (%(source)s): %(n)s cookies of %(host)s (%(names)s)") % {
        "id": session.id,
        "source": word(source),
        "n": len(paste.cookies),
        "host": paste.host or "?",
        "names": ", ".join(paste.names),
    }
    if browser:  # whole sentences: the reader's language punctuates them (，；)
        line = _("%(line)s, user agent %(browser)s") % {
            "line": line,
            "browser": "/".join(browser[-1]),
        }
    return _("%(line)s; try it: %(command)s") % {
        "line": line,
        "command": f"`cnkispider session check {session.id}`",
    }
