"""The HTTP side of `cnkispider probe` (cnkispider/probe/): one CNKI session with its own
cookie jar and paced requests, the answers it got, and the record of them (``--save DIR``: every
raw answer gzipped, with an ``index.json``, to become a test fixture; docs/PROBE.md).

Kept apart from the checks so that checks.py reads as the list of assumptions and their verdicts;
the requests themselves go through :mod:`cnkispider.cnki.plainhttp`, as the live check of a
session does (no redirect followed: CNKI's 302 to /verify is an answer to judge).
"""

from __future__ import annotations

import gzip
import http.cookiejar
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cnkispider.cnki import plainhttp, refusals


@dataclass
class Answer:
    """One answer as the probe judges it (``error``: none came)."""

    url: str
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    location: str | None = None
    error: str | None = None  # a network error: no answer at all


class CnkiSession:
    """One CNKI session: its own cookie jar, paced requests, every answer recorded."""

    def __init__(self, probe, label: str):
        self.probe, self.label = probe, label
        self.jar = http.cookiejar.CookieJar()
        self.grid_posts = 0  # CNKI soft-blocks a session after about a dozen page turns
        self.sent = 0  # requests sent in this session
        self.verified = False  # a session a person passed (from the pool)
        self.opener = plainhttp.opener(urllib.request.HTTPCookieProcessor(self.jar))

    def cookie_names(self) -> list[str]:
        return sorted({c.name for c in self.jar})

    def set_cookie(self, name: str, value: str) -> None:
        host = urllib.parse.urlsplit(self.probe.protocol.base_url).hostname or ""
        self.jar.set_cookie(
            http.cookiejar.Cookie(
                0,
                name,
                value,
                None,
                False,
                host,
                False,
                False,
                "/",
                True,
                False,
                None,
                False,
                None,
                None,
                {},
            )
        )

    def get(self, url: str, name: str, referer: str | None = None) -> Answer:
        return self._send(urllib.request.Request(url, method="GET"), name, referer)

    def post(self, url: str, form: dict[str, str], name: str, referer: str | None = None) -> Answer:
        data = urllib.parse.urlencode(form).encode()
        request = urllib.request.Request(url, data=data, method="POST")
        for key, value in self.probe.protocol.grid_headers().items():
            request.add_header(key, value)
        self.grid_posts += 1
        return self._send(request, name, referer, form=form)

    def _send(self, request, name: str, referer: str | None, form=None) -> Answer:
        request.add_header("User-Agent", self.probe.user_agent)
        request.add_header("Accept-Language", "zh-CN,zh;q=0.9,en;q=0.8")
        if referer:
            request.add_header("Referer", referer)
        self.probe.pace()
        self.sent += 1
        try:
            reply = plainhttp.send(self.opener, request, timeout=self.probe.timeout)
            headers = dict(reply.headers.items())
            # a 3xx (not followed), 4xx or 5xx is still an answer; its Location is judged
            location = headers.get("Location") if reply.status >= 300 else None
            answer = Answer(request.full_url, reply.status, reply.body, headers, location)
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            answer = Answer(request.full_url, 0, b"", error=f"{type(reason).__name__}: {reason}")
        self.probe.record(name, request, form, answer, self.label)
        return answer


def record(
    index: list[dict[str, Any]],
    save_dir: Path | None,
    name: str,
    request,
    form,
    answer: Answer,
    session: str,
) -> None:
    """One request and its answer in ``index`` (and, with ``save_dir``, the raw answer gzipped
    beside an ``index.json`` of every request so far: a fixture in the making)."""
    entry = {
        "n": len(index) + 1,
        "name": name,
        "session": session,
        "method": request.get_method(),
        "url": request.full_url,
        "form": form,
        "status": answer.status,
        "error": answer.error,
        "location": answer.location,
        "bytes": len(answer.body),
    }
    if save_dir is not None:
        file = f"{entry['n']:02d}-{_slug(name)}.html.gz"
        (save_dir / file).write_bytes(gzip.compress(answer.body))
        entry["file"] = file
        index.append(entry)
        (save_dir / "index.json").write_text(
            json.dumps(index, ensure_ascii=False, indent=1), encoding="utf-8"
        )
    else:
        index.append(entry)


# -- judging an answer ----------------------------------------------------------------------


def reason(kind: str, answer: Answer) -> str | None:
    if answer.error:
        return f"no answer ({answer.error})"
    return refusals.classify(kind, answer.status, answer.url, answer.body, location=answer.location)


def client_id(answer: Answer) -> str | None:
    if answer.error or answer.status != 200:
        return None
    try:
        payload = json.loads(answer.body.decode("utf-8", "replace"))
    except ValueError:
        return None
    data = payload.get("Data") if isinstance(payload, dict) else None
    return str(data) if data else None


def snippet(body: bytes, size: int = 80) -> str:
    text = body.decode("utf-8", "replace").strip().replace("\n", " ")
    return text[:size] + ("…" if len(text) > size else "")


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name).strip("-").lower()[:40]


def user_agent() -> str:
    try:
        from fake_useragent import UserAgent

        return UserAgent(browsers=["Chrome", "Edge"], os=["Windows"]).random
    except Exception:  # the probe must run even where fake-useragent's data is missing
        return (
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 "
            "(KHTML, like Gecko) Chrome/136.0.0.0 Safari/537.36"
        )
