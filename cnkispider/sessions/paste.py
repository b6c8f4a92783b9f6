"""The ways in for a session a person passed in a browser, read: the browser's "Copy as cURL",
a Cookie header, a cookies.txt file. Pure functions: text in, a :class:`Paste` out (or
:class:`PasteError`); no network (the live check of a session is cnkispider/sessions/waysin.py).

CNKI binds its "check for a person" to the cookie, not to the IP (shared/cnki/PROTOCOL.md,
"2026 evidence" 11), so the cookies of a browser that passed the check, sent by the crawler over
plain HTTP, are that person's pass. These parsers take the cookies from what a person can copy:

- :func:`from_curl`: DevTools -> Network -> a request to kns.cnki.net -> Copy -> Copy as cURL.
  Chrome and Edge write it for bash (``curl 'URL' \\``, ``-H 'accept: ...'``, the cookies as
  ``-b '...'``; ``$'...'`` when a value holds a quote or a ``!``) or for cmd.exe ("Copy as cURL
  (cmd)": every argument in ``^"...^"``, ``^`` before every character cmd.exe could take, ``^``
  at the end of each line). Firefox writes one line with ``-H 'Cookie: ...'`` and
  ``--compressed``. Older versions wrote ``-H 'Cookie: ...'`` too, and ``--cookie`` is curl's own
  long spelling: all are read.
- :func:`from_cookie_string`: ``a=1; b=2`` (a Cookie header's value, ``Cookie:`` may lead).
- :func:`from_cookie_file`: a Netscape ``cookies.txt`` (what browser extensions and ``curl -c``
  write), ``#HttpOnly_`` lines included.

Whatever goes wrong is a :class:`PasteError` (bad input: the command line prints its one line)
that never holds a cookie's value (nor does ``repr`` of a :class:`Paste`).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from cnkispider.exceptions import InputError
from cnkispider.words.i18n import _

Cookie = dict  # {"name": str, "value": str, "domain": str, "path": str}  (the pool's Cookie)

#: CNKI's own domain: kns.cnki.net (the search), www.cnki.net, recsys.cnki.net (Ecp_ClientId).
CNKI_DOMAIN = "cnki.net"

#: Options of curl that take a value (so that the value is never read as the URL).
_VALUE_OPTIONS = {
    "-H", "--header", "-b", "--cookie", "-A", "--user-agent", "-e", "--referer", "-X",
    "--request", "-d", "--data", "--data-raw", "--data-binary", "--data-urlencode",
    "--data-ascii", "-F", "--form", "--form-string", "-u", "--user", "-x", "--proxy", "-o",
    "--output", "-c", "--cookie-jar", "-m", "--max-time", "--connect-timeout", "--url", "-w",
    "--write-out", "-T", "--upload-file", "-r", "--range", "--resolve", "--cacert", "--cert",
    "--key", "-K", "--config", "--retry", "-U", "--proxy-user",
}  # fmt: skip


class PasteError(InputError):
    """A paste the crawler cannot use: one line, said to the user (the CLI exits 2)."""


def _no_values(cookies: list[Cookie]) -> str:
    return ", ".join(c["name"] for c in cookies)


@dataclass
class Paste:
    """The cookies of one CNKI session as a person copied them, with the browser's User-Agent
    when the paste had it (a curl command has; a cookie string or file has not)."""

    cookies: list[Cookie] = field(repr=False)  # values are a person's pass: never shown
    user_agent: str = ""
    host: str = ""  # the host the paste was for (a curl command's URL; the cookie's domain)

    def __repr__(self) -> str:
        return (
            f"Paste(host={self.host!r}, cookies=[{_no_values(self.cookies)}], "
            f"user_agent={self.user_agent[:40]!r})"
        )

    @property
    def names(self) -> list[str]:
        return [c["name"] for c in self.cookies]


def host_matches(host: str, cnki_hosts: tuple[str, ...]) -> bool:
    """True if ``host`` (or a cookie domain such as ``.cnki.net``) is one of ``cnki_hosts`` or
    below one of them (``kns.cnki.net`` is below ``cnki.net``)."""
    host = (host or "").lower().lstrip(".").rstrip(".")
    if not host:
        return False
    for known in cnki_hosts:
        known = known.lower().lstrip(".")
        if host == known or host.endswith("." + known):
            return True
    return False


def cnki_hosts_of(base_url: str) -> tuple[str, ...]:
    """The hosts whose cookies are CNKI's for a crawler of ``base_url``: cnki.net always, and the
    configured site's host when it is another (a mirror, the stand-in in tests)."""
    host = (urlsplit(base_url).hostname or "").lower()
    return (CNKI_DOMAIN,) if not host or host_matches(host, (CNKI_DOMAIN,)) else (CNKI_DOMAIN, host)


# -- a Cookie header --------------------------------------------------------------------------


def _cookie_pairs(header: str, *, domain: str) -> list[Cookie]:
    """``a=1; b=2`` as cookies of ``domain``. A name sent twice keeps its first value: a browser
    sends the cookie of the most specific path first (RFC 6265, 5.4)."""
    cookies: list[Cookie] = []
    seen: set[str] = set()
    for part in header.split(";"):
        name, sep, value = part.strip().partition("=")
        name = name.strip()
        if not sep or not name or name in seen:
            continue
        if any(ch in name for ch in ' \t",\\'):
            raise PasteError(f"{name[:30]!r} is not a cookie name (expected name=value; ...)")
        seen.add(name)
        cookies.append({"name": name, "value": value.strip(), "domain": domain, "path": "/"})
    return cookies


def from_cookie_string(text: str, *, host: str) -> Paste:
    """The value of a Cookie header (``a=1; b=2``; a leading ``Cookie:`` is allowed) as the
    cookies of ``host``."""
    header = (text or "").strip()
    if re.match(r"(?i)cookie\s*:", header):
        header = header.split(":", 1)[1]
    if header.lower().startswith("curl "):
        raise PasteError("this is a curl command, not a cookie string: use --from-curl")
    cookies = _cookie_pairs(header, domain=host)
    if not cookies:
        raise PasteError("the cookie string holds no cookie (expected name=value; name=value)")
    return Paste(cookies=cookies, host=host)


# -- cookies.txt ------------------------------------------------------------------------------


def sent_to(domain: str, host: str) -> bool:
    """True if a cookie of ``domain`` goes with a request to ``host`` (RFC 6265 domain-match:
    ``.cnki.net`` and ``kns.cnki.net`` go to kns.cnki.net, ``www.cnki.net`` does not)."""
    domain, host = (domain or "").lower().lstrip("."), (host or "").lower()
    return bool(domain) and (host == domain or host.endswith("." + domain))


def from_cookie_file(
    path, *, cnki_hosts: tuple[str, ...] = (CNKI_DOMAIN,), host: str = "", now=None
) -> Paste:
    """The CNKI cookies of a Netscape cookies.txt (tab-separated: domain, include subdomains,
    path, secure, expiry, name, value; ``#HttpOnly_`` before the domain marks an HttpOnly
    cookie, other ``#`` lines are comments). Expired cookies are left out, and with ``host``
    those a request to that host would not carry (another CNKI site's)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise PasteError(
            _("cannot read the cookie file %(path)s: %(cause)s")
            % {"path": path, "cause": exc.strerror or exc}
        ) from None
    except UnicodeDecodeError:
        raise PasteError(
            _("%(path)s is not a text file (expected a Netscape cookies.txt)") % {"path": path}
        ) from None
    now = time.time() if now is None else now
    cookies: list[Cookie] = []
    lines = rows = expired = 0
    for raw in text.splitlines():
        line = raw.strip("\r\n")
        if line.startswith("#HttpOnly_"):
            line = line[len("#HttpOnly_") :]
        elif not line.strip() or line.startswith("#"):
            continue
        lines += 1
        fields = line.split("\t")
        if len(fields) == 6:  # a cookie without a value: the line's tab is its last character
            fields.append("")
        if len(fields) != 7:
            continue
        domain, _subdomains, cookie_path, _secure, expiry, name, value = fields
        rows += 1
        if not host_matches(domain, cnki_hosts) or not name or (host and not sent_to(domain, host)):
            continue
        try:
            expires = float(expiry or 0)
        except ValueError:
            expires = 0.0
        if expires and expires < now:  # 0: a session cookie, alive while the browser was
            expired += 1
            continue
        cookies.append({"name": name, "value": value, "domain": domain, "path": cookie_path or "/"})
    if not rows:
        if lines:
            raise PasteError(
                f"{path} is not a Netscape cookies.txt (expected 7 tab-separated fields a line)"
            )
        raise PasteError(f"{path} holds no cookie")
    if not cookies:
        hosts = host or ", ".join(cnki_hosts)
        if expired:
            raise PasteError(
                f"every cookie of {hosts} in {path} has expired ({expired}): pass the check again"
            )
        raise PasteError(f"{path} holds no cookie of {hosts}")
    host = host or next((c["domain"].lstrip(".") for c in cookies), "")
    return Paste(cookies=cookies, host=host)


# -- a curl command ---------------------------------------------------------------------------


_ANSI_C = {"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b",
           "f": "\f", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}  # fmt: skip


def _ansi_c(text: str, i: int) -> tuple[str, int]:
    """Bash's ``$'...'`` from just after its opening quote: (the string, index after it)."""
    out = []
    while i < len(text):
        ch = text[i]
        if ch == "'":
            return "".join(out), i + 1
        if ch != "\\" or i + 1 >= len(text):
            out.append(ch)
            i += 1
            continue
        kind = text[i + 1]
        if kind in _ANSI_C:
            out.append(_ANSI_C[kind])
            i += 2
        elif kind in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[kind]
            digits = re.match(rf"[0-9a-fA-F]{{1,{width}}}", text[i + 2 : i + 2 + width])
            if not digits:
                out.append("\\" + kind)
                i += 2
            else:
                out.append(chr(int(digits.group(0), 16)))
                i += 2 + len(digits.group(0))
        elif kind in "01234567":
            digits = re.match(r"[0-7]{1,3}", text[i + 1 : i + 4]).group(0)
            out.append(chr(int(digits, 8)))
            i += 1 + len(digits)
        else:
            out.append("\\" + kind)
            i += 2
    raise PasteError("the paste ends inside a $'...' string (was it copied whole?)")


def split_bash(text: str) -> list[list[str]]:
    """Words of a bash command line as bash would pass them to curl: ``'...'``, ``"..."``,
    ``$'...'``, backslash escapes, ``\\`` + newline continuations, ``#`` comments. Unquoted ``;``,
    ``&`` and newlines separate commands ("Copy all as cURL" joins them with `` ;``).

    :mod:`shlex` would be the obvious tool, but it knows no ``$'...'``, which Chrome writes
    whenever a value holds a ``'`` or a ``!``, and it turns ``\\`` + newline into a word."""
    commands: list[list[str]] = [[]]
    word: list[str] | None = None  # None: between words ('' is a word: an empty '')
    i, n = 0, len(text)

    def add(part: str) -> None:
        nonlocal word
        if word is None:
            word = []
        word.append(part)

    def end_word() -> None:
        nonlocal word
        if word is not None:
            commands[-1].append("".join(word))
            word = None

    while i < n:
        ch = text[i]
        if ch == "\\":
            if i + 1 < n and text[i + 1] in "\r\n":  # a continuation: the line goes on
                i += 3 if text[i + 1 : i + 3] == "\r\n" else 2
                continue
            add(text[i + 1] if i + 1 < n else "")
            i += 2
        elif ch == "'":
            close = text.find("'", i + 1)
            if close < 0:
                raise PasteError("the paste ends inside a '...' string (was it copied whole?)")
            add(text[i + 1 : close])
            i = close + 1
        elif ch == "$" and text[i + 1 : i + 2] == "'":
            value, i = _ansi_c(text, i + 2)
            add(value)
        elif ch == '"':
            i += 1
            part = []
            while i < n and text[i] != '"':
                if text[i] == "\\" and i + 1 < n and text[i + 1] in '"\\$`\n':
                    if text[i + 1] != "\n":
                        part.append(text[i + 1])
                    i += 2
                else:
                    part.append(text[i])
                    i += 1
            if i >= n:
                raise PasteError('the paste ends inside a "..." string (was it copied whole?)')
            add("".join(part))
            i += 1
        elif ch in " \t":
            end_word()
            i += 1
        elif ch in ";&|\r\n":
            end_word()
            if commands[-1]:
                commands.append([])
            i += 1
        elif ch == "#" and word is None:  # a comment, to the end of the line
            while i < n and text[i] not in "\r\n":
                i += 1
        else:
            add(ch)
            i += 1
    end_word()
    return [c for c in commands if c]


def _cmd_layer(text: str) -> str:
    """What cmd.exe hands to the program: ``^x`` is ``x`` (``^`` + newline continues the line,
    and the next line's first character is taken as it is), outside cmd's own "..." regions.
    Unescaped newlines are left in (they separate commands)."""
    out = []
    quoted = False
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            quoted = not quoted
            out.append(ch)
            i += 1
        elif ch == "^" and not quoted and i + 1 < n:
            nxt = text[i + 1]
            if nxt in "\r\n":  # continuation: drop the line end, keep the next character as is
                i += 3 if text[i + 1 : i + 3] == "\r\n" else 2
                if i < n:
                    out.append(text[i])
                    i += 1
            else:
                out.append(nxt)
                i += 2
        elif ch in "\r\n" and quoted:  # cmd ends a quoted region at the line's end
            quoted = False
            out.append("\n")
            i += 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _crt_split(line: str) -> list[str]:
    """One command line split as a Windows C runtime splits it for ``main(argv)``: ``"`` toggles
    quoting, ``\\"`` is a quote, ``2n`` backslashes before a quote are ``n``, ``""`` inside
    quotes is a quote, other backslashes are themselves."""
    words: list[str] = []
    word: list[str] | None = None  # None: between words ("" is a word: an empty "")
    quoted = False
    i, n = 0, len(line)
    while i < n:
        ch = line[i]
        if ch in " \t" and not quoted:
            if word is not None:
                words.append("".join(word))
                word = None
            i += 1
            continue
        if word is None:
            word = []
        if ch == "\\":
            j = i
            while j < n and line[j] == "\\":
                j += 1
            count = j - i
            if j < n and line[j] == '"':
                word.append("\\" * (count // 2))
                if count % 2:  # an odd one escapes the quote
                    word.append('"')
                    j += 1
            else:
                word.append("\\" * count)
            i = j
        elif ch == '"':
            if quoted and line[i + 1 : i + 2] == '"':
                word.append('"')
                i += 2
            else:
                quoted = not quoted
                i += 1
        else:
            word.append(ch)
            i += 1
    if word is not None:
        words.append("".join(word))
    return words


def split_cmd(text: str) -> list[list[str]]:
    """Words of a cmd.exe command line ("Copy as cURL (cmd)") as curl.exe would get them.
    Unescaped newlines and ``&`` between commands ("Copy all as cURL (cmd)") separate them."""
    commands: list[list[str]] = []
    for line in re.split(r"[\r\n]+", _cmd_layer(text)):
        words = _crt_split(line)
        # "Copy all" joins commands with " &": a lone & word ends one
        current: list[str] = []
        for w in words:
            if w == "&":
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(w)
        if current:
            if commands and current[0].lower() not in ("curl", "curl.exe"):
                commands[-1].extend(current)  # a line that lost its ^: still the same command
            else:
                commands.append(current)
    return commands


def _is_cmd_form(text: str) -> bool:
    # Chrome's cmd form quotes every argument as ^"...^" and ends each line with ^ ; the old
    # (Firefox-on-Windows) form uses "..." with "%" around each percent sign.
    if re.search(r'\^"|\s\^\r?\n', text):
        return True
    if re.search(r"\s\\\r?\n", text):  # bash's line continuation
        return False
    return bool(re.match(r'\s*curl(\.exe)?\s+"', text, re.IGNORECASE))


def _not_curl(text: str) -> str | None:
    """Why a paste is not a curl command, for the pastes people make by mistake."""
    head = text.lstrip()[:200]
    low = head.lower()
    if low.startswith(("$session", "invoke-webrequest", "invoke-restmethod")):
        return _("this is 'Copy as PowerShell'; use Copy as cURL (bash) or Copy as cURL (cmd)")
    if low.startswith(("fetch(", "await fetch(")):
        return _("this is 'Copy as fetch'; use Copy as cURL (bash) or Copy as cURL (cmd)")
    if re.match(r"(?i)(get|post|head) \S+ http/", head):
        return _("these are raw request headers; use Copy as cURL on the request instead")
    if not re.match(r"curl(\.exe)?(\s|$)", low):
        return _("the paste does not start with curl: copy a request with DevTools' Copy as cURL")
    return None


@dataclass
class _Request:
    url: str = ""
    cookies: list[str] = field(default_factory=list)  # -b / --cookie / Cookie: values
    user_agent: str = ""
    cookie_file: str = ""  # -b FILE (a value without =)


def _read_curl(words: list[str]) -> _Request:
    req = _Request()
    args = words[1:]
    i = 0
    while i < len(args):
        arg = args[i]
        option, value = arg, None
        if (
            len(arg) > 2
            and arg.startswith("-")
            and not arg.startswith("--")
            and arg[:2] in _VALUE_OPTIONS
        ):
            option, value = arg[:2], arg[2:]  # -H'accept: ...' glued to its option
        if option in _VALUE_OPTIONS:
            if value is None:
                if i + 1 >= len(args):
                    raise PasteError(f"the curl command ends after {option} (was it copied whole?)")
                value = args[i + 1]
                i += 1
            if option in ("-H", "--header"):
                name, _colon, header_value = value.partition(":")
                name = name.strip().lower()
                if name == "cookie":
                    req.cookies.append(header_value.strip())
                elif name == "user-agent":
                    req.user_agent = header_value.strip()
            elif option in ("-b", "--cookie"):
                if "=" in value:
                    req.cookies.append(value)
                else:
                    req.cookie_file = value
            elif option in ("-A", "--user-agent"):
                req.user_agent = value
            elif option == "--url":
                req.url = req.url or value
        elif not arg.startswith("-") and not req.url:
            req.url = arg
        i += 1
    return req


def _url_host(url: str) -> str:
    # DevTools escapes [ ] { } in the URL with a backslash (curl's globbing): undo it
    url = re.sub(r"\\([\[\]{}])", r"\1", url.strip())
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def from_curl(text: str, *, cnki_hosts: tuple[str, ...] = (CNKI_DOMAIN,)) -> Paste:
    """The session of a browser's "Copy as cURL" (bash or cmd form; Chrome, Edge, Firefox) of a
    request to one of ``cnki_hosts``: its cookies (``-b``, ``--cookie``, ``-H 'Cookie: ...'``)
    as cookies of the request's host, and its User-Agent."""
    text = (text or "").replace("\ufeff", "")
    if not text.strip():
        raise PasteError(_("the paste is empty: copy a request with DevTools' Copy as cURL"))
    problem = _not_curl(text)
    if problem:
        raise PasteError(problem)
    commands = split_cmd(text) if _is_cmd_form(text) else split_bash(text)
    requests = [
        _read_curl(words)
        for words in commands
        if words and words[0].lower().rsplit("/", 1)[-1] in ("curl", "curl.exe")
    ]
    if not requests:
        raise PasteError(_("no curl command found in the paste (copy a request with Copy as cURL)"))
    hosts = [_url_host(r.url) for r in requests]
    ours = [(r, h) for r, h in zip(requests, hosts, strict=True) if host_matches(h, cnki_hosts)]
    if not ours:
        shown = next((h for h in hosts if h), "")
        if not shown:
            raise PasteError(_("the curl command has no URL (was it copied whole?)"))
        raise PasteError(
            _(
                "the paste is a request to %(host)s, not to CNKI (%(hosts)s): copy a request to %(site)s"
            )
            % {"host": shown, "hosts": ", ".join(cnki_hosts), "site": CNKI_DOMAIN}
        )
    with_cookies = [(r, h) for r, h in ours if r.cookies]
    if not with_cookies:
        request, host = ours[0]
        if request.cookie_file:
            raise PasteError(
                _(
                    "the curl command reads its cookies from the file %(file)r: use "
                    "--cookie-file with that file"
                )
                % {"file": request.cookie_file}
            )
        raise PasteError(
            _(
                "the request to %(host)s carries no cookie: pass CNKI's check in the browser "
                "first, then copy a request that DevTools shows with a Cookie header"
            )
            % {"host": host}
        )
    request, host = with_cookies[0]
    cookies = _cookie_pairs("; ".join(request.cookies), domain=host)
    if not cookies:
        raise PasteError(
            _("the request to %(host)s carries an empty Cookie header") % {"host": host}
        )
    return Paste(cookies=cookies, user_agent=request.user_agent, host=host)


def read_paste(source: str, stdin) -> str:
    """The text of ``--from-curl FILE`` (``-``: standard input), at most 1 MB."""
    if source == "-":
        text = stdin.read(1_000_001)
    else:
        try:
            with open(source, encoding="utf-8-sig", errors="replace") as handle:
                text = handle.read(1_000_001)
        except OSError as exc:
            raise PasteError(
                _("cannot read %(file)s: %(error)s")
                % {"file": source, "error": exc.strerror or exc}
            ) from None
    if len(text) > 1_000_000:
        raise PasteError(_("the paste is over 1 MB: copy one request, not a whole HAR"))
    return text
