"""Requests as plain JSON data, never pickled, so that a shared Redis cannot run code on a worker.

The stored form is :meth:`scrapy.Request.to_dict` (the same keys, read back the same way as
:func:`scrapy.utils.request.request_from_dict`), made JSON-safe and compact:

- ``callback`` and ``errback`` are spider method names;
- ``body`` is base64; header names and values are latin-1 strings (lossless for bytes);
- ``meta`` and ``cb_kwargs`` must already be plain JSON data (dicts with string keys, lists,
  strings, ints, finite floats, booleans, None). Anything else (a tuple, a date, an object) is
  refused at enqueue with :class:`UnserializableRequest` naming the key, instead of being
  silently changed on the way through Redis;
- attributes at their default value are left out;
- the scheduler's hand-out keys (``lease_id``, ``lease_attempts``) are never stored: they belong
  to one hand-out, and a request derived from a leased one (a redirect, a retry) gets its own.

Reading is stricter than Scrapy's ``request_from_dict``: ``_class`` must name a Request subclass
in a module that is already imported (nothing is imported because Redis said so), and callbacks
must be public methods of the spider.

Settings: none.
"""

from __future__ import annotations

import base64
import inspect
import json
import math
import sys
from typing import Any

from scrapy import Request, Spider

from cnkispider.exceptions import CnkiSpiderError

#: Meta keys the scheduler sets on each hand-out; stripped when a request is stored.
LEASE_META_KEYS = ("lease_id", "lease_attempts")

_DEFAULTS: dict[str, Any] = {
    "method": "GET",
    "encoding": "utf-8",
    "priority": 0,
    "dont_filter": False,
}
_EMPTY_OK = ("cookies", "flags", "cb_kwargs", "meta", "headers", "body")


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
        if attr in ("url", "callback", "errback"):
            continue
        value = getattr(request, attr)
        if attr == "headers":
            value = {
                k.decode("latin-1"): [v.decode("latin-1") for v in vs] for k, vs in value.items()
            }
        elif attr == "body":
            value = base64.b64encode(value).decode("ascii") if value else ""
        elif attr == "meta":
            value = {k: v for k, v in value.items() if k not in LEASE_META_KEYS}
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


def request_from_json(raw: bytes | str, spider: Spider | None) -> Request:
    """Rebuild a request stored by :func:`request_to_json`.

    Raises ``ValueError`` for data that is not a stored request (bad JSON, a class or callback
    that is not allowed).
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
    return cls(**kwargs)


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
