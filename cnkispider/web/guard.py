"""Who may act: the token, and the same-origin check every POST passes (CSRF).

The token
    ``[web] token`` when set. Empty: one is made at the first start (``secrets``, 32 bytes),
    written to ``data_dir/web-token`` (created exclusively, mode 0600: only this user reads
    it) and printed once; later starts read it from there. Deleting the file makes a new one.

Every POST (an action, its preview, a session) passes both checks, else 403 and nothing runs:
    - the token, in the ``X-CNKI-Token`` header or the form field ``token`` (compared in
      constant time);
    - the same origin: the ``Origin`` header, or without one the ``Referer``, names the host
      and port of ``Host``. A browser sends Origin with every cross-site POST, so a page of
      another site cannot act with a token it was never given, nor replay one it saw.
GET never changes anything, so it needs neither.
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path
from urllib.parse import urlsplit

from cnkispider.words.i18n import N_, _

TOKEN_FILE = "web-token"
TOKEN_HEADER = "X-CNKI-Token"
TOKEN_FIELD = "token"


def load_or_make_token(configured: str, data_dir: Path) -> tuple[str, Path | None, bool]:
    """(token, the file it is kept in or None when configured, made now)."""
    if configured:
        return configured, None, False
    path = Path(data_dir) / TOKEN_FILE
    if path.is_file():
        token = path.read_text(encoding="utf-8").strip()
        if token:
            return token, path, False
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(token + "\n")
    return token, path, True


def token_ok(expected: str, given: str | None) -> bool:
    return bool(expected) and bool(given) and hmac.compare_digest(expected, given)


def same_origin(headers, *, said: bool = False) -> tuple[bool, str]:
    """(whether the request comes from this page's own origin, why not): in English for the log,
    or in the reader's language (``said``) for the answer."""
    say = _ if said else (lambda text: text)
    host = (headers.get("host") or "").lower()
    if not host:
        return False, say(N_("no Host header"))
    source = headers.get("origin")
    what = "Origin"
    if not source or source == "null":
        source, what = headers.get("referer"), "Referer"
    if not source:
        return False, say(
            N_("neither Origin nor Referer: cannot tell where the request comes from")
        )
    parts = urlsplit(source)
    if parts.scheme not in ("http", "https") or (parts.netloc or "").lower() != host:
        return False, say(N_("%(what)s %(seen)r is not this page's host %(host)r")) % {
            "what": what,
            "seen": parts.netloc or source,
            "host": host,
        }
    return True, ""
