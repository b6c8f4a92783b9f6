"""`cnkispider session login|add|list|remove|check`: the sessions a person passed CNKI's check
with (issue 19, point 3). Cookie values never reach the output: a session is shown by its id,
its source and its cookies' names."""

from __future__ import annotations

import sys

from cnkispider.cli.common import add_command
from cnkispider.config import Config
from cnkispider.config.durations import duration
from cnkispider.exceptions import InputError, UnknownName
from cnkispider.sessions.waysin import added_line, cnki_site_of
from cnkispider.words import i18n
from cnkispider.words.i18n import _
from cnkispider.words.vocabulary import word


def _sessions(config: Config):
    from cnkispider.sessions import SessionStore

    return SessionStore.from_config(config)


def cmd_session(config: Config, args) -> int:
    """login | add | list | remove | check: cookie values never reach the output."""
    import time

    from cnkispider.sessions.paste import PasteError

    action = args.action
    home_url, hosts = cnki_site_of(config.cnki["base_url"])
    if action in ("add", "login"):
        if action == "login":
            from cnkispider.sessions.login import login

            paste = login(
                home_url,
                hosts,
                browser=args.browser,
                cdp_port=args.cdp,
                headless=args.headless,
                port=args.port,
                timeout=args.timeout,
            )
            source = "browser"
        else:
            paste, source = _paste(args, home_url, hosts)
        egress = _egress(args.egress) if getattr(args, "egress", None) else ""
        session = _sessions(config).add(
            paste.cookies, source=source, user_agent=paste.user_agent, egress=egress
        )
        print(added_line(session, paste, source))
        return 0
    store = _sessions(config)
    if action == "list":
        sessions = store.list()
        if not sessions:
            print(
                _("no sessions (add one: cnkispider session login, or session add --from-curl -)")
            )
            return 0
        now = time.time()
        rows = [(_("id"), _("source"), _("age"), _("requests"), _("state"), _("note"))]
        for s in sessions:
            state = word(s.state) + (f" ({s.worker})" if s.state == "leased" and s.worker else "")
            rows.append(
                (
                    s.id,
                    s.source,
                    duration(now - s.created_at, "compact"),
                    i18n.number(s.requests),
                    state,
                    s.note or "",
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        for r in rows:
            print("  ".join(r[i].ljust(widths[i]) for i in range(5)) + "  " + r[5])
        return 0
    if action == "remove":
        found = store.get(args.id)
        if found is None or not store.remove(found.id):
            raise UnknownName(
                _("no session %(id)r (see: cnkispider session list)") % {"id": args.id}
            )
        print(_("removed session %(id)s") % {"id": found.id})
        return 0
    if action == "check":
        return _check_sessions(store, args.id, home_url)
    raise PasteError(f"unknown session action {action!r}")


def _paste(args, home_url: str, hosts: tuple[str, ...]):
    """(the paste, its source) of `session add`: cookies for the host the crawler searches."""
    from urllib.parse import urlsplit

    from cnkispider.sessions import paste as pastes

    site = (urlsplit(home_url).hostname or "").lower()

    if args.from_curl:
        if args.from_curl == "-" and sys.stdin is not None and sys.stdin.isatty():
            keys = "Ctrl-Z, Enter" if sys.platform == "win32" else "Ctrl-D"
            print(
                _(
                    "Paste the request copied with DevTools' Copy as cURL, then press Enter "
                    "and %(keys)s:"
                )
                % {"keys": keys},
                file=sys.stderr,
            )
        text = pastes.read_paste(args.from_curl, sys.stdin)
        paste = pastes.from_curl(text, cnki_hosts=hosts)
        if paste.host != site:  # e.g. www.cnki.net: its cookies never go to the search's host
            raise pastes.PasteError(
                _(
                    "the paste is a request to %(host)s, but the crawler searches %(site)s: "
                    "copy a request to %(site)s (its search page, or brief/grid after a search)"
                )
                % {"host": paste.host, "site": site}
            )
        return paste, "curl"
    if args.cookie_string is not None:
        host = args.host or site
        if not pastes.host_matches(host, hosts):
            raise pastes.PasteError(
                _("--host %(host)s is not CNKI's (%(hosts)s)")
                % {"host": host, "hosts": ", ".join(hosts)}
            )
        return pastes.from_cookie_string(args.cookie_string, host=host), "cookie-string"
    paste = pastes.from_cookie_file(args.cookie_file, cnki_hosts=hosts, host=site)
    return paste, "cookie-file"


def _egress(value: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(value if "://" in value else f"http://{value}")
    if parts.username or parts.password:
        raise InputError(_("--egress: give the proxy's address without its user and password"))
    if not parts.hostname:
        raise InputError(
            _("--egress %(value)r: expected host:port of the proxy") % {"value": value}
        )
    return f"{parts.scheme}://{parts.netloc}"


def _check_sessions(store, session_id: str | None, home_url: str) -> int:
    """One GET of CNKI's search page per session: passed -> ready (if a person had to pass it
    again), checked -> needs-person (unless a worker holds it). Exit 0 if every one passed."""
    from cnkispider.sessions import EXPIRED, LEASED, NEEDS_PERSON, READY
    from cnkispider.sessions.waysin import CHECKED, PASSED, check, shown

    if session_id:
        found = store.get(session_id)
        if found is None:
            raise UnknownName(
                _("no session %(id)r (see: cnkispider session list)") % {"id": session_id}
            )
        sessions = [found]
    else:
        sessions = store.list()
        if not sessions:
            print(_("no sessions to check (add one: cnkispider session login)"))
            return 1
    all_passed = True
    for s in sessions:
        try:
            verdict, detail = check(s.cookies, home_url, user_agent=s.user_agent)
        except OSError as exc:
            print(
                _("%(id)s: not checked: cannot reach %(url)s (%(error)s)")
                % {"id": s.id, "url": home_url, "error": exc}
            )
            all_passed = False
            continue
        if verdict == PASSED:
            if s.state == NEEDS_PERSON:
                store.mark(s.id, READY, "passed `session check` again")
            state = READY if s.state == NEEDS_PERSON else s.state
            print(
                _("%(id)s: passed (%(detail)s); state %(state)s")
                % {"id": s.id, "detail": shown(detail), "state": word(state)}
            )
            continue
        all_passed = False
        if verdict == CHECKED:
            if s.state in (LEASED, EXPIRED):
                print(
                    _("%(id)s: checked by CNKI (%(detail)s); state %(state)s left as it is")
                    % {"id": s.id, "detail": shown(detail), "state": word(s.state)}
                )
            else:
                store.mark(s.id, NEEDS_PERSON, f"checked by CNKI at `session check` ({detail})")
                print(
                    _(
                        "%(id)s: checked by CNKI (%(detail)s); now %(state)s: pass the check "
                        "again (%(command)s) or remove it"
                    )
                    % {
                        "id": s.id,
                        "detail": shown(detail),
                        "state": word(NEEDS_PERSON),
                        "command": "cnkispider session login",
                    }
                )
        else:
            print(
                _("%(id)s: unclear (%(detail)s); state %(state)s left as it is")
                % {"id": s.id, "detail": shown(detail), "state": word(s.state)}
            )
    return 0 if all_passed else 1


def add_session(sub) -> None:
    """`session ACTION`."""
    session = add_command(
        sub,
        "session",
        help=_("sessions a person passed CNKI's check with: login, add, list, remove, check"),
    )
    actions = session.add_subparsers(dest="action", required=True)
    login = actions.add_parser(
        "login",
        help=_(
            "open CNKI in Chrome, Edge or Chromium; when you have passed its check, keep the session"
        ),
    )
    login.add_argument("--browser", metavar="PATH", help=_("the browser program (default: found)"))
    login.add_argument(
        "--cdp",
        type=int,
        metavar="PORT",
        help=_("use your running browser, started with --remote-debugging-port=PORT"),
    )
    login.add_argument(
        "--headless",
        action="store_true",
        help=_("no window: no person can pass a real CNKI check this way (tests, scripts)"),
    )
    login.add_argument(
        "--port", type=int, default=0, help=_("DevTools port to open (default: any free one)")
    )
    login.add_argument(
        "--timeout", type=float, default=300.0, help=_("seconds to wait for the pass (default 300)")
    )
    add = actions.add_parser("add", help=_("add a session from a browser's request or cookies"))
    given = add.add_mutually_exclusive_group(required=True)
    given.add_argument(
        "--from-curl",
        metavar="FILE",
        help=_(
            "DevTools -> Network -> a kns.cnki.net request -> Copy as cURL (bash or cmd); - reads it from standard input"
        ),
    )
    given.add_argument("--cookie-string", metavar='"a=1; b=2"', help=_("a Cookie header's value"))
    given.add_argument("--cookie-file", metavar="FILE", help=_("a Netscape cookies.txt"))
    add.add_argument(
        "--host",
        help=_("--cookie-string: the host the cookies are for (default: [cnki] base_url's)"),
    )
    add.add_argument(
        "--egress",
        metavar="HOST:PORT",
        help=_("the proxy the check was passed through (default: direct)"),
    )
    actions.add_parser("list", help=_("every session: id, source, age, requests, state"))
    remove = actions.add_parser("remove", help=_("drop a session (an id or its unique start)"))
    remove.add_argument("id", help=_("the session's id, or its unique start (session list)"))
    check = actions.add_parser(
        "check", help=_("one request per session: passed (ready) or checked (needs a person)")
    )
    check.add_argument("id", nargs="?", help=_("only this session"))
    session.set_defaults(func=cmd_session)
