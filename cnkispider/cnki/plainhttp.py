"""Plain HTTP (urllib) for the two places that ask CNKI something without Scrapy's engine:
`cnkispider probe` (cnkispider/probe/answers.py) and the live check of a session a person
passed (`session check`, cnkispider/sessions/waysin.py).

Both judge the first answer as CNKI gave it: a 302 to /verify/ is the verdict, not a way on, so
no redirect is followed, and a 3xx, 4xx or 5xx is an answer like a 200 (urllib raises those as
HTTPError; :func:`send` hands them back). Only "no answer at all" (OSError, urllib's URLError
among them) is left to the caller. The Cookie header is built as a browser would send it.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from email.message import Message
from urllib.parse import urlsplit


class NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are answers to judge (CNKI's 302 to /verify), never to follow."""

    def redirect_request(self, *args, **kwargs):
        return None


def opener(*handlers) -> urllib.request.OpenerDirector:
    """An opener that follows no redirect, with ``handlers`` (e.g. a cookie processor)."""
    return urllib.request.build_opener(*handlers, NoRedirect())


@dataclass
class Reply:
    """One answer: its status, its headers (case-insensitive, as urllib gives them), its body."""

    status: int
    headers: Message
    body: bytes

    @property
    def location(self) -> str:
        return self.headers.get("Location", "")


def send(
    opener: urllib.request.OpenerDirector,
    request: urllib.request.Request,
    *,
    timeout: float,
    limit: int | None = None,
    error_limit: int | None = None,
) -> Reply:
    """``request`` sent once: a :class:`Reply` for any status (``limit`` / ``error_limit``: the
    bytes of body read at most, for a 2xx / for any other status). OSError if nothing answered."""
    try:
        with opener.open(request, timeout=timeout) as answer:
            return Reply(answer.status, answer.headers, answer.read(limit))
    except urllib.error.HTTPError as exc:  # 3xx (not followed), 4xx, 5xx: still an answer
        body = (exc.read(error_limit) or b"") if exc.fp else b""
        return Reply(exc.code, exc.headers if exc.headers is not None else Message(), body)


def cookie_header(cookies: list[dict], url: str) -> str:
    """The Cookie header a browser would send to ``url`` from ``cookies`` (dicts with name,
    value, domain, path; domain and path matched as RFC 6265 says)."""
    parts = urlsplit(url)
    host, path = (parts.hostname or "").lower(), parts.path or "/"
    sent = []
    for c in cookies:
        domain = (c.get("domain") or host).lower().lstrip(".")
        cookie_path = c.get("path") or "/"
        if (host == domain or host.endswith("." + domain)) and (
            path == cookie_path
            or path.startswith(cookie_path.rstrip("/") + "/")
            or cookie_path == "/"
        ):
            sent.append(f"{c['name']}={c['value']}")
    return "; ".join(sent)
