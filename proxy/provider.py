"""The proxy provider: parse its answers into proxy URLs, and fetch a batch without blocking.

A paid provider hands out proxies through an HTTP API. Two answer formats are common:

``lines``
    one proxy per line, ``host:port`` or ``user:pass@host:port`` (a scheme is allowed); a line
    such as ``ERROR 请2秒后再试`` or a JSON error object means the call was refused (too fast, no
    balance, IP not whitelisted): :class:`ProviderError`.
``json``
    ``{"code": 0, "data": [{"ip": "1.2.3.4", "port": 8080}, ...]}``; the dotted path to the list
    (``data``, ``data.proxy_list``, ...) and the names of the ip and port fields are configurable.
    An item may also be a plain ``"host:port"`` string.

Every proxy comes back as a URL, ``http://[user:pass@]host:port``. Such a URL holds credentials:
only :func:`mask` of it may be logged. The API URL often holds an account key in its query
string, so it is masked too.

:class:`ProviderClient` is what the proxy middleware calls. It never blocks the reactor: the
HTTP call runs in a thread (:func:`scrapy.utils.asyncio.run_in_thread`, which works with and
without a Twisted reactor). It reads no settings itself; the middleware passes the values of
``PROXY_API_URL``, ``PROXY_API_FORMAT``, ``PROXY_API_JSON_PATH``, ``PROXY_API_JSON_IP``,
``PROXY_API_JSON_PORT``, ``PROXY_API_TIMEOUT``, ``PROXY_CREDENTIALS`` and ``PROXY_STATIC``.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterable, Sequence
from urllib.parse import quote, unquote, urlsplit

FORMATS = ("lines", "json")

_HOSTPORT = re.compile(r"^(?P<host>[A-Za-z0-9.\-]+|\[[0-9A-Fa-f:.]+\]):(?P<port>\d{1,5})$")


class ProviderError(Exception):
    """The provider refused the call or answered something that holds no proxy.

    The message never holds credentials or the API key.
    """


def mask(url: str | None) -> str:
    """``url`` with its credentials and query string hidden, fit for a log line.

    ``http://user:secret@1.2.3.4:8080`` -> ``http://***@1.2.3.4:8080``;
    ``https://api.example.com/get?key=abc&num=5`` -> ``https://api.example.com/get?***``.
    """
    if not url:
        return ""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    host = parts.netloc.rpartition("@")[2]
    netloc = f"***@{host}" if "@" in parts.netloc else host
    shown = f"{parts.scheme}://{netloc}{parts.path}"
    return f"{shown}?***" if parts.query else shown


def proxy_key(url: str | None) -> str:
    """The identity of a proxy: ``host:port``, whatever its scheme and credentials."""
    if not url:
        return ""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    return parts.netloc.rpartition("@")[2].lower()


def proxy_url(host: str, port: int | str, credentials: str = "", scheme: str = "http") -> str:
    """Build ``scheme://[user:pass@]host:port``; ``credentials`` is ``user:pass`` or ``""``."""
    port = int(port)
    if not 0 < port < 65536:
        raise ValueError(f"port out of range: {port}")
    userinfo = ""
    if credentials:
        user, _, password = credentials.partition(":")
        userinfo = f"{quote(user, safe='')}:{quote(password, safe='')}@"
    return f"{scheme}://{userinfo}{host}:{port}"


def _from_token(token: str, credentials: str) -> str | None:
    """One ``[scheme://][user:pass@]host:port`` token as a proxy URL, or None if it is none."""
    scheme, sep, rest = token.partition("://")
    if not sep:
        scheme, rest = "http", token
    userinfo, at, hostport = rest.rpartition("@")
    match = _HOSTPORT.match(hostport.rstrip("/"))
    if scheme.lower() not in ("http", "https") or not match:
        return None
    try:
        return proxy_url(
            match["host"],
            match["port"],
            unquote(userinfo) if at else credentials,
            scheme.lower(),
        )
    except ValueError:
        return None


def _refusal_text(text: str) -> str:
    """A short, safe description of a provider answer that held no proxy."""
    text = text.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            for key in ("msg", "message", "info", "error", "code"):
                if key in data:
                    return f"{key}={str(data[key])[:200]}"
    return text.splitlines()[0][:200] if text else "empty answer"


def parse_lines(text: str, credentials: str = "") -> list[str]:
    """Proxy URLs from a one-proxy-per-line answer.

    Raises :class:`ProviderError` when the answer holds lines but no proxy (a refusal such as
    ``ERROR ...`` or a JSON error object). An empty answer is an empty batch.
    """
    proxies: list[str] = []
    refused = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        url = _from_token(line, credentials)
        if url is None:
            refused = True
        else:
            proxies.append(url)
    if not proxies and refused:
        raise ProviderError(_refusal_text(text))
    return proxies


def _walk(data: object, path: str) -> object:
    for part in filter(None, path.split(".")):
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            return None
    return data


def parse_json(
    text: str,
    path: str = "data",
    ip_field: str = "ip",
    port_field: str = "port",
    credentials: str = "",
) -> list[str]:
    """Proxy URLs from a JSON answer whose list sits at the dotted ``path``.

    Raises :class:`ProviderError` when the answer is not JSON or holds no list at ``path``
    (providers report errors as ``{"code": 111, "msg": "..."}``).
    """
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ProviderError(f"not JSON: {_refusal_text(text)}") from exc
    items = _walk(data, path)
    if not isinstance(items, list):
        raise ProviderError(f"no list at {path!r}: {_refusal_text(text)}")
    proxies = []
    for item in items:
        if isinstance(item, str):
            url = _from_token(item.strip(), credentials)
        elif isinstance(item, dict) and item.get(ip_field):
            host = str(item[ip_field]).strip()
            port = item.get(port_field)
            url = _from_token(f"{host}:{port}" if port else host, credentials)
        else:
            url = None
        if url is not None:
            proxies.append(url)
    return proxies


def parse(text: str, fmt: str = "lines", **options) -> list[str]:
    """Proxy URLs from a provider answer in ``fmt`` (``lines`` or ``json``)."""
    if fmt == "lines":
        return parse_lines(text, credentials=options.get("credentials", ""))
    if fmt == "json":
        return parse_json(text, **options)
    raise ValueError(f"unknown proxy API format {fmt!r}; expected one of {FORMATS}")


class ProviderClient:
    """Fetches one batch of proxy URLs: from the provider API, or from a fixed list.

    ``fetch_batch`` is a coroutine function; the HTTP call runs in a thread, never on the
    reactor. It raises :class:`ProviderError` (masked message) when the provider says no.
    """

    def __init__(
        self,
        api_url: str = "",
        fmt: str = "lines",
        *,
        json_path: str = "data",
        ip_field: str = "ip",
        port_field: str = "port",
        credentials: str = "",
        timeout: float = 10.0,
        static: Sequence[str] = (),
    ):
        if fmt not in FORMATS:
            raise ValueError(f"unknown proxy API format {fmt!r}; expected one of {FORMATS}")
        self.api_url = api_url
        self.fmt = fmt
        self.json_path = json_path
        self.ip_field = ip_field
        self.port_field = port_field
        self.credentials = credentials
        self.timeout = timeout
        self.static = _static_urls(static, credentials)

    def __repr__(self) -> str:
        source = f"{len(self.static)} static" if self.static else mask(self.api_url)
        return f"<ProviderClient {source}>"

    async def fetch_batch(self) -> list[str]:
        if self.static:
            return list(self.static)
        # Imported here so that the pure parts of this module need no Scrapy.
        from scrapy.utils.asyncio import run_in_thread

        text = await run_in_thread(self._get)
        return self.parse(text)

    def parse(self, text: str) -> list[str]:
        if self.fmt == "json":
            return parse_json(
                text, self.json_path, self.ip_field, self.port_field, self.credentials
            )
        return parse_lines(text, self.credentials)

    def _get(self) -> str:
        """The blocking HTTP call (runs in a thread)."""
        request = urllib.request.Request(self.api_url, headers={"User-Agent": "cnkispider"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                charset = answer.headers.get_content_charset() or "utf-8"
                return answer.read().decode(charset, "replace")
        except OSError as exc:  # URLError, HTTPError, timeouts
            detail = str(exc).replace(self.api_url, mask(self.api_url))
            raise ProviderError(f"{type(exc).__name__}: {detail}") from None


def _static_urls(static: Iterable[str] | str, credentials: str) -> list[str]:
    if isinstance(static, str):
        static = static.replace(",", "\n").splitlines()
    urls = []
    for token in static:
        token = token.strip()
        if not token:
            continue
        url = _from_token(token, credentials)
        if url is None:
            raise ValueError(f"not a proxy (expected [user:pass@]host:port): {mask(token)}")
        urls.append(url)
    return urls
