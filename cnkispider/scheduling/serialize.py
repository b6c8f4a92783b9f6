"""Requests as plain JSON data, never pickled, so that a shared Redis cannot run code on a worker.

The stored form is :meth:`scrapy.Request.to_dict` (the same keys, read back the same way as
:func:`scrapy.utils.request.request_from_dict`), made JSON-safe and compact:

``callback`` and ``errback`` are method names, ``body`` is base64, ``meta`` and ``cb_kwargs``
must be plain JSON data (anything else is refused at enqueue with :class:`UnserializableRequest`,
never silently changed), and the scheduler's hand-out keys are never stored.

The shared Redis is a trust boundary: whoever can write to it must not be able to make a worker
fetch any URL, go through a proxy of theirs, or call any spider method. So a request read back
is checked against a :class:`ReadPolicy` (``ValueError`` naming the reason if it fails; the
scheduler then moves it to ``{ns}:unreadable`` with that reason, unfetched):

A request read back must be ``http(s)`` on a configured host, GET or POST without cookies,
with headers among :data:`HEADERS`, no Scrapy control meta (:func:`is_control_meta`) and a
callback in the spider's ``queue_callbacks``. Writing drops what reading refuses, so the
crawler's own requests always read back.

Settings: none (the scheduler builds the policy from ``SCHEDULER_ALLOWED_HOSTS``,
``CNKI_BASE_URL`` and ``CNKI_CLIENT_ID_URL``).

The rest of this module's story: docs/INTERNALS.md#cnkispiderschedulingserializepy.
"""

from __future__ import annotations

import base64
import inspect
import json
import math
import sys
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request, Spider

from cnkispider.exceptions import CnkiSpiderError

#: Meta keys the scheduler sets on each hand-out; stripped when a request is stored.
LEASE_META_KEYS = ("lease_id", "lease_attempts", "lease_token", "lease_parent")

_DEFAULTS: dict[str, Any] = {
    "method": "GET",
    "encoding": "utf-8",
    "priority": 0,
    "dont_filter": False,
}
_EMPTY_OK = ("cookies", "flags", "cb_kwargs", "meta", "headers", "body")

#: Header names a stored request may carry (lower case): those the spiders set. Anything else
#: (Cookie, Authorization, Proxy-Authorization, Host, X-Forwarded-For, ...) is dropped at write
#: (the middlewares set theirs again at each download) and refused at read.
HEADERS = frozenset(
    {
        "accept",
        "accept-language",
        "content-type",
        "origin",
        "referer",
        "user-agent",
        "x-requested-with",
    }
)
#: ``dont_*`` meta keys of the crawler's own (docs/CONTRACTS.md), kept; every other ``dont_*``
#: key is Scrapy's control of the download and is not taken from Redis.
OWN_DONT_KEYS = frozenset({"dont_proxy", "dont_cnki_session", "dont_ratelimit"})
#: Scrapy meta keys that steer the download (besides the prefixes in :func:`is_control_meta`).
CONTROL_META = frozenset(
    {
        "proxy",
        "_auth_proxy",
        "bindaddress",
        "cookiejar",
        "ftp_user",
        "ftp_password",
        "referrer_policy",
        "allow_offsite",
        "is_start_request",
        "autothrottle_dont_adjust_delay",
    }
)
METHODS = frozenset({"GET", "POST"})


def is_control_meta(key: str) -> bool:
    """A meta key that steers Scrapy's download: never stored, never read from Redis."""
    return (
        key in CONTROL_META
        or key.startswith(("download_", "handle_httpstatus"))
        or (key.startswith("dont_") and key not in OWN_DONT_KEYS)
    )


@dataclass(frozen=True)
class ReadPolicy:
    """What a request read from Redis may be: its URL's hosts (``(host, port)``, lower case)."""

    hosts: frozenset[tuple[str, int]]

    @classmethod
    def for_urls(cls, *urls: str) -> ReadPolicy:
        """The hosts of these URLs (``https://host`` also allows ``http://host`` on port 80)."""
        hosts = set()
        for url in urls:
            if not url:
                continue
            if "://" not in url:
                url = f"https://{url}"
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"{url!r} is not an http(s) URL with a host")
            hosts.add((parts.hostname, _port(parts)))
            if parts.port is None:  # a default port: the site on either scheme
                hosts.update({(parts.hostname, 80), (parts.hostname, 443)})
        return cls(frozenset(hosts))

    def check(self, request: Request, spider: Spider | None) -> None:
        """Raise ``ValueError`` with the reason if ``request`` must not be run."""
        parts = urlsplit(request.url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"URL scheme {parts.scheme!r} is not http(s)")
        try:
            where = (parts.hostname or "", _port(parts))
        except ValueError:
            raise ValueError(f"URL {request.url[:200]!r} has a bad port") from None
        if where not in self.hosts:
            raise ValueError(f"host {where[0]}:{where[1]} is not one of the configured CNKI hosts")
        if request.method not in METHODS:
            raise ValueError(f"method {request.method!r} is not GET or POST")
        if request.cookies:
            raise ValueError("it carries cookies")
        for name in request.headers:
            if name.decode("latin-1").lower() not in HEADERS:
                raise ValueError(f"header {name.decode('latin-1')!r} is not one the spiders set")
        for key in request.meta:
            if is_control_meta(key):
                raise ValueError(f"meta {key!r} steers Scrapy's download")
        allowed = getattr(spider, "queue_callbacks", ("parse",)) if spider is not None else None
        for what in ("callback", "errback"):
            func = getattr(request, what)
            if func is None or allowed is None:
                continue
            name = getattr(func, "__name__", func)
            if name not in allowed:
                raise ValueError(f"{what} {name!r} is not in the spider's queue_callbacks")


def _port(parts: Any) -> int:
    return parts.port or (443 if parts.scheme == "https" else 80)


class UnserializableRequest(CnkiSpiderError, TypeError):
    """A request cannot be stored as JSON (a meta value that is not plain data, a callback that is
    not a spider method). The message names the request and the key."""


def request_to_json(request: Request, spider: Spider | None) -> bytes:
    """The stored form of ``request`` (UTF-8 JSON)."""
    data: dict[str, Any] = {"url": request.url}
    callback = _method_name(spider, request.callback, "callback", request)
    if callback:
        data["callback"] = callback
    errback = _method_name(spider, request.errback, "errback", request)
    if errback:
        data["errback"] = errback
    for attr in request.attributes:
        if attr in ("url", "callback", "errback", "cookies"):
            # cookies belong to a CNKI session's jar: the session middleware sets its own again
            # at each download (a retry's copy carries the old session's Ecp_ClientId)
            continue
        value = getattr(request, attr)
        if attr == "headers":
            value = {
                k.decode("latin-1"): [v.decode("latin-1") for v in vs]
                for k, vs in value.items()
                if k.decode("latin-1").lower() in HEADERS
            }
        elif attr == "body":
            value = base64.b64encode(value).decode("ascii") if value else ""
        elif attr == "meta":
            value = _stored_meta(value)
            _check_json(value, "meta", request)
        elif attr not in _DEFAULTS and attr not in ("headers", "body"):
            _check_json(value, attr, request)
        if attr in _DEFAULTS and value == _DEFAULTS[attr]:
            continue
        if attr in _EMPTY_OK and not value:
            continue
        data[attr] = value
    if type(request) is not Request:
        data["_class"] = f"{type(request).__module__}.{type(request).__name__}"
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _stored_meta(meta: dict) -> dict:
    stored = {k: v for k, v in meta.items() if k not in LEASE_META_KEYS and not is_control_meta(k)}
    proxy = meta.get("proxy")
    if isinstance(proxy, str) and proxy and "_proxy_avoid" not in stored:
        netloc = urlsplit(proxy if "://" in proxy else f"http://{proxy}").netloc
        stored["_proxy_avoid"] = netloc.rpartition("@")[2].lower()  # never the credentials
    return stored


def request_from_json(
    raw: bytes | str, spider: Spider | None, policy: ReadPolicy | None = None
) -> Request:
    """Rebuild a request stored by :func:`request_to_json`.

    Raises ``ValueError`` for data that is not a stored request (bad JSON, a class or callback
    that is not allowed) or, with a ``policy``, one that policy refuses (the message says why).
    """
    data = json.loads(raw)
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        raise ValueError("not a stored request")
    cls = _request_class(data.get("_class"))
    kwargs: dict[str, Any] = {}
    for attr in cls.attributes:
        if attr not in data:
            continue
        value = data[attr]
        if attr == "headers":
            value = {
                k.encode("latin-1"): [v.encode("latin-1") for v in vs] for k, vs in value.items()
            }
        elif attr == "body":
            value = base64.b64decode(value)
        elif attr in ("callback", "errback"):
            value = _spider_method(spider, value)
        kwargs[attr] = value
    try:
        request = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"not a valid request: {exc}") from None
    if policy is not None:
        policy.check(request, spider)
    return request


def _method_name(spider: Spider | None, func: Any, what: str, request: Request) -> str | None:
    if func is None:
        return None
    if isinstance(func, str):
        return func
    owner = getattr(func, "__self__", None)
    if spider is not None and owner is spider:
        name = getattr(func, "__name__", "")
        if getattr(spider, name, None) == func:
            return name
        for name, member in inspect.getmembers(spider, predicate=inspect.ismethod):
            if member == func:  # a decorated method whose __name__ differs
                return name
    raise UnserializableRequest(
        f"{request}: its {what} {func!r} is not a method of the spider; requests are stored in "
        f"Redis as JSON, so callbacks and errbacks must be spider methods (stored by name)"
    )


def _spider_method(spider: Spider | None, name: Any) -> Any:
    if spider is None:
        return name
    if not isinstance(name, str) or not name or name.startswith("_"):
        raise ValueError(f"callback {name!r} is not a public spider method name")
    method = getattr(spider, name, None)
    if not inspect.ismethod(method) or method.__self__ is not spider:
        raise ValueError(f"callback {name!r} is not a method of spider {spider.name!r}")
    return method


def _request_class(path: Any) -> type[Request]:
    if path is None:
        return Request
    if not isinstance(path, str) or "." not in path:
        raise ValueError(f"request class {path!r} is not a dotted path")
    module_name, _, name = path.rpartition(".")
    module = sys.modules.get(module_name)  # never import what Redis names
    cls = getattr(module, name, None) if module is not None else None
    if not (isinstance(cls, type) and issubclass(cls, Request)):
        raise ValueError(f"request class {path!r} is not an imported Request subclass")
    return cls


_PLAIN = (str, int, bool, type(None))


def _check_json(value: Any, key: str, request: Request) -> None:
    """Refuse anything that JSON would not give back unchanged, naming where it sits."""
    problem = _find_problem(value, key)
    if problem:
        where, what = problem
        raise UnserializableRequest(
            f"{request}: request {key} holds {what} at {where}; requests are stored in Redis "
            f"as JSON, so {key} must be plain JSON data (dicts with str keys, lists, str, int, "
            f"finite float, bool, None)"
        )


def _find_problem(value: Any, path: str) -> tuple[str, str] | None:
    kind = type(value)
    if kind in _PLAIN:
        return None
    if kind is float:
        return None if math.isfinite(value) else (path, f"the float {value!r}")
    if kind is dict:
        for k, v in value.items():
            if type(k) is not str:
                return (f"{path}[{k!r}]", f"a {type(k).__name__} key")
            found = _find_problem(v, f"{path}[{k!r}]")
            if found:
                return found
        return None
    if kind is list:
        for i, v in enumerate(value):
            found = _find_problem(v, f"{path}[{i}]")
            if found:
                return found
        return None
    return (path, f"a {kind.__module__}.{kind.__qualname__}")
