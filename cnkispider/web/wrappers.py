"""The ASGI wrappers around every answer of the web page: the reader's language made the one every
word of the answer is looked up in (:class:`Language`), and the security headers
(:data:`HEADERS`: Content-Security-Policy ``script-src 'self'``, no framing, no caching).
"""

from __future__ import annotations

from starlette.requests import Request

from cnkispider.web import words
from cnkispider.words import i18n

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class Language:
    """The request's language (cnkispider.web.words) made the one every word of its answer is
    looked up in, from the page's labels to the sentences of the actions and the errors."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        with i18n.using(words.page_language(Request(scope))):
            await self.app(scope, receive, send)


class SecurityHeaders:
    """Security headers on every answer (a pure ASGI middleware: no buffering)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def sending(message):
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _value in headers}
                for key, value in HEADERS.items():
                    if key.lower().encode() not in present:
                        headers.append((key.lower().encode(), value.encode()))
                message = dict(message, headers=headers)
            await send(message)

        await self.app(scope, receive, sending)
