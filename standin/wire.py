"""What the stand-in's HTTP layer and its pages hand each other: a request, a response, the
reason phrases and content types.

The site (standin/site.py), the export desk (standin/export.py) and the server
(standin/server.py) all import this module and it imports none of them, so the desk answers
without reaching back up into the site that holds it.
"""

from __future__ import annotations

REASONS = {
    200: "OK",
    302: "Found",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    407: "Proxy Authentication Required",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}
HTML = "text/html; charset=utf-8"
JSON = "application/json; charset=utf-8"
TEXT = "text/plain; charset=utf-8"


class Request:
    __slots__ = ("method", "target", "path", "query", "headers", "body", "ip", "proxy")

    def __init__(self, method, target, headers, body, ip, proxy=None):
        self.method, self.target, self.headers, self.body = method, target, headers, body
        self.path, _, self.query = target.partition("?")
        self.ip, self.proxy = ip, proxy


class Response:
    __slots__ = ("status", "body", "ctype", "headers", "delay", "action")

    def __init__(self, status=200, body=b"", ctype=HTML, headers=(), delay=0.0, action=None):
        self.status, self.body, self.ctype, self.headers = status, body, ctype, list(headers)
        self.delay, self.action = delay, action  # action: None, "reset" or "close"
