"""The proxy provider: parse its answers into proxy URLs, and fetch a batch without blocking.

A paid provider hands out proxies through an HTTP API. Two answer formats are common:

``lines`` (one ``[user:pass@]host:port`` a line) or ``json`` (a configurable path to a list of
ip and port fields); a refusal (``ERROR 请2秒后再试``) is :class:`ProviderError`.

Every proxy comes back as a URL, ``http://[user:pass@]host:port``. Such a URL holds credentials:
only :func:`mask` of it may be logged. The API URL often holds an account key in its query
string, so it is masked too.

Only addresses a proxy can have are accepted (:func:`address_problem`): private and loopback
IPs yes (a LAN gateway, a local proxy client), ``localhost``, single-label names, link-local
(the cloud metadata service), multicast and reserved ranges no, each with a warning. The call
has one deadline for all of it, enforced by a watchdog, and reads at most ``max_bytes``, so a
slow or huge answer cannot hold a worker or grow its memory.

:class:`ProviderClient` is what the proxy middleware calls. It never blocks the reactor: the
HTTP call runs in a thread (:func:`scrapy.utils.asyncio.run_in_thread`, which works with and
without a Twisted reactor). It reads no settings itself; the middleware passes the values of
``PROXY_API_URL``, ``PROXY_API_FORMAT``, ``PROXY_API_JSON_PATH``, ``PROXY_API_JSON_IP``,
``PROXY_API_JSON_PORT``, ``PROXY_API_TIMEOUT``, ``PROXY_CREDENTIALS`` and ``PROXY_STATIC``.

The rest of this module's story: docs/INTERNALS.md#proxyproviderpy.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import logging
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterable, Sequence
from urllib.parse import quote, unquote, urlsplit

logger = logging.getLogger(__name__)

FORMATS = ("lines", "json")
MAX_ANSWER_BYTES = 1 << 20
REFUSED_LINES_NAMED = 5  # per answer: a page of junk names its first lines, then counts the rest
_NAME_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
_PRIVATE_SUFFIXES = (".localhost", ".local", ".internal", ".localdomain", ".home.arpa")

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


def address_problem(host: str, port: int | str) -> str | None:
    """Why ``host:port`` is not a proxy address (see the module's doc), or None when it is one."""
    try:
        number = int(port)
    except (TypeError, ValueError):
        return f"port {port!r} is not a number"
    if not 0 < number < 65536:
        return f"port {number} is out of range"
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ip = ipaddress.ip_address(bare)
    except ValueError:
        ip = None
    if ip is not None:
        if ip.version == 4 and int(ip) == 0xFFFFFFFF:
            return f"{bare} is the broadcast address"
        if ip.is_unspecified or ip.is_link_local or ip.is_multicast or ip.is_reserved:
            return f"{bare} is not an address a proxy can have"
        return None
    name = host.rstrip(".").lower()
    labels = name.split(".")
    if len(labels) < 2 or not all(_NAME_LABEL.match(label) for label in labels):
        return f"{host!r} is not an IP address or a public host name"
    if not labels[-1].isalpha():
        return f"{host!r} is not an IP address or a public host name"  # 1.2.3 or a.123
    if name == "localhost" or name.endswith(_PRIVATE_SUFFIXES):
        return f"{host!r} names a machine of the local network"
    return None


def _parse_token(token: str, credentials: str) -> tuple[str | None, str]:
    """(proxy URL, "") for a valid ``[scheme://][user:pass@]host:port`` token, else (None, why)."""
    scheme, sep, rest = token.partition("://")
    if not sep:
        scheme, rest = "http", token
    userinfo, at, hostport = rest.rpartition("@")
    match = _HOSTPORT.match(hostport.rstrip("/"))
    if scheme.lower() not in ("http", "https"):
        return None, f"scheme {scheme!r} is not http or https"
    if not match:
        return None, "not host:port"
    problem = address_problem(match["host"], match["port"])
    if problem is not None:
        return None, problem
    try:
        return proxy_url(
            match["host"],
            match["port"],
            unquote(userinfo) if at else credentials,
            scheme.lower(),
        ), ""
    except ValueError as exc:
        return None, str(exc)


class _Refusals:
    """The lines of one answer that were not proxies: a warning names each of the first few."""

    def __init__(self):
        self.count = 0

    def add(self, line: str, why: str) -> None:
        self.count += 1
        if self.count <= REFUSED_LINES_NAMED:
            shown = mask(line) if "@" in line else line
            logger.warning("Proxy provider line refused: %r (%s)", shown[:120], why)

    def close(self) -> None:
        if self.count > REFUSED_LINES_NAMED:
            logger.warning(
                "Proxy provider answer: %d more lines refused", self.count - REFUSED_LINES_NAMED
            )


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
    refused: list[tuple[str, str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line:
            url, why = _parse_token(line, credentials)
            if url is None:
                refused.append((line, why))
            else:
                proxies.append(url)
    if not proxies and refused:
        # No proxy at all: a refusal ("ERROR 请2秒后再试"), said once, not a warning per line.
        raise ProviderError(_refusal_text(text))
    refusals = _Refusals()
    for line, why in refused:
        refusals.add(line, why)
    refusals.close()
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
    refusals = _Refusals()
    for item in items:
        if isinstance(item, str):
            token = item.strip()
        elif isinstance(item, dict) and item.get(ip_field):
            host = str(item[ip_field]).strip()
            port = item.get(port_field)
            token = f"{host}:{port}" if port else host
        else:
            refusals.add(json.dumps(item, ensure_ascii=False)[:120], f"no {ip_field!r} field")
            continue
        url, why = _parse_token(token, credentials)
        if url is None:
            refusals.add(token, why)
        else:
            proxies.append(url)
    refusals.close()
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
        max_bytes: int = MAX_ANSWER_BYTES,
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
        self.max_bytes = max_bytes
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
        """The blocking HTTP call (runs in a thread): done, or ProviderError, within ``timeout``."""
        try:
            return self._get_within_deadline()
        except ProviderError:
            raise
        except (OSError, http.client.HTTPException, ValueError) as exc:
            detail = str(exc).replace(self.api_url, mask(self.api_url))
            raise ProviderError(f"{type(exc).__name__}: {detail}") from None

    def _get_within_deadline(self) -> str:
        parts = urlsplit(self.api_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ProviderError(f"not an http(s) URL: {mask(self.api_url)}")
        started = time.monotonic()
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(
                parts.hostname,
                parts.port,
                timeout=self.timeout,
                context=ssl.create_default_context(),
            )
        else:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=self.timeout)
        expired = threading.Event()

        def cut():  # the deadline passed: wake the read blocked on the socket, whatever it waits for
            expired.set()
            sock = conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        watchdog = threading.Timer(self.timeout, cut)
        watchdog.daemon = True
        watchdog.start()
        try:
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            conn.request(
                "GET", path, headers={"User-Agent": "cnkispider", "Accept-Encoding": "identity"}
            )
            answer = conn.getresponse()
            if answer.status != 200:
                raise ProviderError(f"HTTP {answer.status} {answer.reason}".strip())
            declared = answer.getheader("Content-Length")
            if declared and declared.isdigit() and int(declared) > self.max_bytes:
                raise ProviderError(self._too_big(f"announces {int(declared):,} bytes"))
            chunks, size = [], 0
            while True:
                chunk = answer.read1(65536)
                if not chunk:
                    break
                size += len(chunk)
                if size > self.max_bytes:
                    raise ProviderError(self._too_big(f"more than {self.max_bytes:,} bytes"))
                chunks.append(chunk)
            if expired.is_set():  # the socket was shut under a read: what came is a fragment
                raise OSError("deadline")
            charset = answer.headers.get_content_charset() or "utf-8"
            return b"".join(chunks).decode(charset, "replace")
        except (OSError, http.client.HTTPException) as exc:
            if expired.is_set():
                raise ProviderError(
                    f"no complete answer within {self.timeout:g} s (PROXY_API_TIMEOUT), "
                    f"after {time.monotonic() - started:.1f} s"
                ) from None
            raise exc from None
        finally:
            watchdog.cancel()
            conn.close()

    def _too_big(self, what: str) -> str:
        return (
            f"the answer {what}; a batch of proxies is a few KB, so it was not read "
            f"(limit {self.max_bytes:,} bytes)"
        )


def _static_urls(static: Iterable[str] | str, credentials: str) -> list[str]:
    if isinstance(static, str):
        static = static.replace(",", "\n").splitlines()
    urls = []
    for token in static:
        token = token.strip()
        if not token:
            continue
        url, why = _parse_token(token, credentials)
        if url is None:
            raise ValueError(f"not a proxy (expected [user:pass@]host:port): {mask(token)}: {why}")
        urls.append(url)
    return urls
