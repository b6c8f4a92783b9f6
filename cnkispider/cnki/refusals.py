"""CNKI's ways of saying no, told apart from usable pages.

:func:`classify` runs on every response, so it only looks at bytes with ``in`` (and, on the
rare page that has none of the markers of a usable page, a couple of regular expressions); it
never builds a DOM. The parsers call :func:`body_reason` first, so a parser and the retry
middleware give the same reason for the same body.

Reasons (the slugs of :class:`cnkispider.exceptions.RefusedPage`, each described in
docs/INTERNALS.md): ``rejected``, ``verify``, ``captcha``, ``blank``, ``javascript``,
``no-data-retry``, ``no-pager``, ``unexpected``, ``not-json`` (a reference list that is not
JSON), ``http-<status>``. The soft block's body may
also be a true zero: a round's first page carrying meta :data:`ZERO_CHECK` is decided by the
spider's canary, not retried here. GetExport answers (kind ``export``) are JSON: a 403 (or
200) ``{"message":"<verify url>"}`` is ``verify``; 暂无数据 without 请稍后重试 (one display mode
alone) is ``rejected``; a body other than ``{"code":1,...}`` is ``unexpected``.

The usable-page markers are checked before the captcha markers on purpose: real kns8s list
pages load TJCaptcha.js and carry a hidden slider, in case they need it later.

Three kinds of "no" (:func:`kind_of`), three answers (PROTOCOL.md, 2026 evidence points 2-3):

- ``rejection``: the request itself is wrong (or CNKI changed). No new session or proxy cures
  it, so it is never retried: the task halts with CNKI's words.
- ``challenge``: CNKI suspects a robot (verify, captcha, the soft block ``no-data-retry``, a
  JavaScript cookie page). The pace that caused it is the signal: slow down, retire the session
  and proxy, retry; when challenges persist across fresh sessions the task pauses.
- ``fault``: anything else (5xx, resets, timeouts, blank bodies, markup not understood): retried
  as usual; when one fault repeats across rounds the circuit breaker halts the task.

The rest of this module's story: docs/INTERNALS.md#cnkispidercnkirefusalspy.
"""

from __future__ import annotations

import html
import re
import time
from email.utils import parsedate_to_datetime
from urllib.parse import urljoin, urlsplit

from cnkispider.cnki.protocol import EXPORT, HOME, REFERENCES, SESSION_KINDS

KINDS = (HOME, *SESSION_KINDS)

# Fewer non-whitespace bytes than this is an empty answer, whatever the status says.
BLANK_MIN_BYTES = 64
# A body this short, without script, whose text is empty, is an empty skeleton: blank too.
_SKELETON_MAX_BYTES = 2048
# After removing scripts and tags, a page with less text than this is "only JavaScript".
_JS_MAX_TEXT_BYTES = 32

_LIST_MARKERS = (b"pagerTitleCell", b'id="totalCnt"', b"id='totalCnt'")
_DETAIL_MARKERS = (b"wx-tit", b"wxTitle")  # kcms2, and the old KCMS page parse_paper also reads
_NO_CONTENT = b"no-content"
_NO_DATA = "暂无数据".encode()

# 请稍后重试, raw and as a JSON \\u escape (either hex case), next to 暂无数据.
_RETRY_MARKERS = (
    ("请稍后重试".encode(), _NO_DATA),
    (b"\\u8bf7\\u7a0d\\u540e\\u91cd\\u8bd5", b"\\u6682\\u65e0\\u6570\\u636e"),
    (b"\\u8BF7\\u7A0D\\u540E\\u91CD\\u8BD5", b"\\u6682\\u65E0\\u6570\\u636E"),
)
_CAPTCHA_MARKERS = (
    b"verify-api",  # AJ-Captcha's endpoints (/verify-api/get, /verify-api/web/check), 2026
    b"captchaType=blockPuzzle",
    b"captchaType=clickWord",
    b"vericodeForm",  # the letters-and-digits form (POST /kns8s/brief/checkcode)
    b"TJCaptcha",
    b"TencentCaptcha",
    b"tencent-captcha",
    b"slider-captcha",
    b"captcha-slider",
    "拖动滑块".encode(),
)
_TIMEOUT_VERIFY = "超时验证".encode()
_SAFETY_VERIFY = "安全验证".encode()
_VERIFY_PATH_IN_BODY = b"/verify/"

# The 2026 challenge of a grid POST: {"code":-403,"message":"https://.../verify/home?..."}.
_JSON_403_RE = re.compile(rb'^\s*\{\s*"code"\s*:\s*-403\b')
# <p class="no-content" value="...">: a non-empty value is CNKI rejecting the query.
_NO_CONTENT_VALUE_RE = re.compile(
    rb'<p\b[^>]*\bclass\s*=\s*["\'][^"\']*\bno-content\b[^>]*>', re.I | re.S
)
_VALUE_ATTR_RE = re.compile(rb'\bvalue\s*=\s*(?:"([^"]*)"|\'([^\']*)\')', re.I | re.S)

#: The soft block's reason (a challenge), and the request meta that hands its body to the spider
#: instead of the retry middleware, so a canary can tell a true zero from it (see above).
SOFT_BLOCK = "no-data-retry"
ZERO_CHECK = "cnki_zero_check"

REJECTION = "rejection"
CHALLENGE = "challenge"
FAULT = "fault"
_CHALLENGES = frozenset({"verify", "captcha", "no-data-retry", "javascript"})

_TITLE_RE = re.compile(rb"<title[^>]*>(.*?)</title", re.I | re.S)
_VERIFY_PATH_RE = re.compile(r"/verify(?:/|$)", re.I)
_SCRIPT_RE = re.compile(rb"<(script|style|noscript)\b.*?</\1\s*>", re.I | re.S)
_COMMENT_RE = re.compile(rb"<!--.*?-->", re.S)
_TAG_RE = re.compile(rb"<[^>]*>")
_WS_RE = re.compile(rb"\s+")


def _as_bytes(body: bytes | str | None) -> bytes:
    if body is None:
        return b""
    if isinstance(body, str):
        return body.encode("utf-8", "surrogateescape")
    return bytes(body)


def is_verify_url(url: str | None) -> bool:
    """True for CNKI's verification pages (``/verify/home?...``)."""
    return bool(url) and bool(_VERIFY_PATH_RE.search(urlsplit(url).path))


def _non_ws_len(body: bytes) -> int:
    return len(_WS_RE.sub(b"", body))


def _text_without_markup(body: bytes) -> bytes:
    body = _SCRIPT_RE.sub(b"", body)
    body = _COMMENT_RE.sub(b"", body)
    return _WS_RE.sub(b"", _TAG_RE.sub(b"", body))


def _is_blank(body: bytes) -> bool:
    # A long body is blank only if it is padding; the full count is kept for short bodies,
    # so this costs nothing on real pages.
    if len(body) >= _SKELETON_MAX_BYTES:
        return len(body.strip()) < BLANK_MIN_BYTES
    if _non_ws_len(body) < BLANK_MIN_BYTES:
        return True
    lowered = body.lower()
    return b"<script" not in lowered and not _text_without_markup(body)


def rejection_text(body: bytes | str | None) -> str | None:
    """CNKI's words when it rejects a query (a non-empty ``p.no-content@value``), else None."""
    data = _as_bytes(body)
    if data.lstrip()[:1] == b"{" and _NO_DATA in data and not _says_retry(data):
        return "暂无数据"  # GetExport's answer to a request it will not serve (one mode alone)
    if _NO_CONTENT not in data:
        return None
    for tag in _NO_CONTENT_VALUE_RE.finditer(data):
        attr = _VALUE_ATTR_RE.search(tag.group(0))
        if attr:
            value = (attr.group(1) or attr.group(2) or b"").decode("utf-8", "replace").strip()
            if value:
                return html.unescape(value)
    return None


def kind_of(reason: str | None) -> str | None:
    """``rejection``, ``challenge`` or ``fault`` for a refusal reason (None for None)."""
    if reason is None:
        return None
    if reason == "rejected":
        return REJECTION
    if reason in _CHALLENGES:
        return CHALLENGE
    return FAULT


def _json_403(body: bytes) -> bool:
    return bool(_JSON_403_RE.match(body[:64]))


_EXPORT_OK_RE = re.compile(rb'^\s*\{.*"code"\s*:\s*"?1"?\s*[,}]', re.S)
_JSON_VERIFY_RE = re.compile(rb'^\s*\{[^{}]*"message"\s*:\s*"[^"]*/verify/', re.S)


def _export_reason(data: bytes) -> str | None:
    """The refusal a GetExport body shows, or None if it is a usable answer."""
    if _json_403(data) or _JSON_VERIFY_RE.match(data[:2048]):
        return "verify"
    if _says_retry(data):
        return "no-data-retry"
    if _NO_DATA in data or b"\\u6682\\u65e0\\u6570\\u636e" in data.lower():
        return "rejected"
    if _EXPORT_OK_RE.match(data[:512]) and b'"data"' in data:
        return None
    return _challenge(data) or "unexpected"


def _says_retry(body: bytes) -> bool:
    return any(retry in body and no_data in body for retry, no_data in _RETRY_MARKERS)


def _looks_usable(kind: str, body: bytes) -> bool:
    if kind == "list":
        if any(m in body for m in _LIST_MARKERS):
            return True
        # The no-content block of a zero result (its text says 暂无数据).
        return _NO_CONTENT in body and _NO_DATA in body
    if kind == "detail":
        return any(m in body for m in _DETAIL_MARKERS)
    if kind == REFERENCES:
        # a JSON object with a data member (the -403 JSON and the soft block are told first)
        return body.lstrip()[:1] == b"{" and b'"data"' in body
    return False  # a home page has no marker of its own: only the refusals are looked for


def _challenge(body: bytes) -> str | None:
    """verify or captcha, from the page's title and scripts."""
    match = _TITLE_RE.search(body)
    title = match.group(1) if match else b""
    if _TIMEOUT_VERIFY in title:
        return "verify"
    if any(m in body for m in _CAPTCHA_MARKERS):
        return "captcha"
    if _SAFETY_VERIFY in title:
        return "verify" if _VERIFY_PATH_IN_BODY in body else "captcha"
    return None


def _only_javascript(body: bytes) -> bool:
    if b"<script" not in body.lower():
        return False
    return len(_text_without_markup(body)) < _JS_MAX_TEXT_BYTES


def body_reason(kind: str, body: bytes | str | None) -> str | None:
    """The refusal a body shows by itself (no status, no URL), or None if it looks usable."""
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {KINDS}, got {kind!r}")
    data = _as_bytes(body)
    if kind == EXPORT:
        # a short JSON refusal is not "blank": only an empty body is
        return "blank" if not data.strip() else _export_reason(data)
    if kind in (HOME, REFERENCES):
        # A warm-up page only has to set cookies: any non-empty answer that is not a refusal
        # will do (a short page is not "blank"); an empty reference list is a short JSON.
        if not data.strip():
            return "blank"
    elif _is_blank(data):
        return "blank"
    if _json_403(data):
        return "verify"
    if rejection_text(data) is not None:
        return "rejected"
    if _says_retry(data):
        return "no-data-retry"
    if _looks_usable(kind, data):
        return None
    reason = _challenge(data)
    if reason:
        return reason
    if _only_javascript(data):
        return "javascript"
    if kind == "list":
        return "no-pager"
    if kind == "detail":
        return "unexpected"
    if kind == REFERENCES:
        return "not-json"  # HTML or text where the API answers JSON: never "no references"
    return None


def classify(
    kind: str,
    status: int | None,
    url: str | None,
    body: bytes | str | None,
    location: str | None = None,
) -> str | None:
    """Why a response is not a usable page of ``kind``, or None when it is usable.

    ``url`` is the response's (final) URL; ``location`` the Location header of a 3xx answer
    when redirects are not followed for this request. A zero-result list is usable: only
    the parsers decide that a list is empty, and only from its no-content block.
    """
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {KINDS}, got {kind!r}")
    status = int(status or 200)
    if is_verify_url(url):
        return "verify"
    if 300 <= status < 400:
        if location and is_verify_url(urljoin(url or "", location)):
            return "verify"
        # Anything else that moves us is not the page we asked for either.
        return f"http-{status}"
    data = _as_bytes(body)
    if status >= 400:
        # A 403 that carries a captcha (or the 2026 -403 JSON) says more than its status.
        if _json_403(data) or (kind == "export" and _JSON_VERIFY_RE.match(data[:2048])):
            return "verify"
        return _challenge(data) or f"http-{status}"
    return body_reason(kind, data)


def refused(kind: str, response) -> str | None:
    """:func:`classify` for a Scrapy response (or anything with status, url, body, headers)."""
    headers = getattr(response, "headers", None) or {}
    location = headers.get("Location") if hasattr(headers, "get") else None
    if isinstance(location, bytes):
        location = location.decode("latin-1")
    return classify(kind, response.status, response.url, response.body, location=location)


#: Statuses that close a window: 429 always, 503 only when it says for how long.
TOO_MANY = 429
_WINDOW_STATUSES = (TOO_MANY, 503)


def _header(headers, name: str) -> str | None:
    value = headers.get(name) if headers is not None and hasattr(headers, "get") else None
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    return value.strip() if value else None


def retry_after(
    value: str | None, date: str | None = None, *, now: float | None = None
) -> float | None:
    """The seconds ``Retry-After: value`` asks to wait (RFC 9110: seconds, or an HTTP date),
    or None when it says nothing usable.

    A date is read against the answer's own ``Date`` header when it has one (the site's clock,
    so that a worker's skewed clock does not shorten the wait), else against ``now`` (Unix
    seconds, default the local clock). Never negative."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(int(value))
    try:
        until = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    base = None
    if date:
        try:
            base = parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            base = None
    if base is None:
        base = time.time() if now is None else now
    return max(0.0, until - base)


def window_of(status: int | None, headers=None) -> tuple[bool, float | None]:
    """Whether an answer closes a window ("come back later", PROTOCOL.md 2026 point 18), and
    for how long its ``Retry-After`` says (None: it does not say; the caller backs off).

    A 429 always closes one; a 503 only with a ``Retry-After`` (without, it is a fault like
    any 5xx)."""
    if status not in _WINDOW_STATUSES:
        return False, None
    seconds = retry_after(_header(headers, "Retry-After"), _header(headers, "Date"))
    if status != TOO_MANY and seconds is None:
        return False, None
    return True, seconds
