"""The stand-in's gate: sessions, client ids, the person's check and the challenges.

The warm-up and search pages (a new session), ``GenerateClientID``, ``/verify/home`` and the
slider's check, and the guards every grid, detail and reference request passes first (the human
check, the 429 window, the per-IP ban, the hidden pace, injected faults), with the 2026
challenge forms they answer (PROTOCOL.md points 11 and 18).
"""

from __future__ import annotations

import json
import math
import time
from email.utils import formatdate
from urllib.parse import parse_qs, quote, urlsplit

from standin import markup
from standin import references as reference_api
from standin.wire import HTML, JSON, REASONS, TEXT, Request, Response

# an IP over the pace: the share of its grid challenges sent as 200 (not 403), and of its page
# GETs answered with the vericodeForm page (the rest 302 to /verify/home)
JSON_200_SHARE = 0.25
VERICODE_SHARE = 0.3

CHALLENGE_FORMS = ("soft_block", "verify_redirect", "json_403", "json_200", "vericode_form")
CLIENT_ID_PATH = "/RCDService/api/UtilityOpenApi/GenerateClientID"


class Gate:
    """What stands in front of CNKI's pages: sessions and client ids, the human check, the
    challenges, the pace guard, the rate limit, the 429 window and injected faults. A part of
    :class:`standin.site.Site`, whose state it reads (``stats``, ``sessions``, ``human``, ...)."""

    # -- challenges and guards --------------------------------------------------------------

    def _challenge(self, form: str, cause: str) -> None:
        challenged = self.stats["challenged"]
        challenged[form] += 1
        challenged["total"] += 1
        self.stats["challenged_by"][cause] += 1

    def _verify_url(self, return_url: str, puzzle: bool | None = None) -> str:
        if puzzle is None:
            puzzle = self._random.random() < 0.5
        kind = "blockPuzzle" if puzzle else "clickWord"
        extra = f"&captchaId={self._random.getrandbits(64):016x}" if puzzle else "&platform=kns"
        return (
            f"{self.base}/verify/home?captchaType={kind}&ident={self._random.getrandbits(24):06x}"
            f"{extra}&returnUrl={quote(return_url, safe='')}"
        )

    def _verify_redirect(self, req: Request, puzzle: bool | None = False) -> Response:
        location = self._verify_url(self.base + req.target, puzzle)
        return Response(302, b"", HTML, [("Location", location)])

    def _json_403(self, req: Request, status: int = 403) -> Response:
        """The 2026 grid challenge: the -403 JSON naming a block-puzzle verify page."""
        referer = req.headers.get("referer") or f"{self.base}/kns8s/defaultresult/index"
        body = json.dumps(
            {"code": -403, "message": self._verify_url(referer, puzzle=True)},
            separators=(",", ":"),
        ).encode()
        return Response(status, body, JSON)

    def _human_gate(self, req: Request) -> Response | None:
        """The person's check in front of every kns request (PROTOCOL.md point 11). None when
        the request's session cookie names a session a person passed and it is within its
        hidden limits; else the 2026 challenge: grid POSTs the -403 JSON, page GETs the 302 to
        the block puzzle. Bound to the cookie: the IP plays no part."""
        if not self.human.on:
            return None
        now = self.clock()
        sid = self._cookie(req, "SID_kns_new")
        if self.sessions.get(sid, now) is None:
            # an idle-expired session that a person had passed: checked again, "idle"
            self.human.lapse(sid, now)
            sid = None
        kind = {
            "/kns8s/brief/grid": "list",
            "/kcms2/article/abstract": "detail",
            reference_api.PATH: "detail",  # a document's own request, as its detail page
        }.get(req.path)
        verdict = self.human.admit(sid, now, kind or "page")
        if verdict == "ok":
            self.sessions.touch(sid, now)
            return None
        self.stats["human_check_refusals"][verdict] += 1
        if req.path in ("/kns8s/brief/grid", reference_api.PATH):
            self._challenge("json_403", "human_check")
            return self._json_403(req)
        self._challenge("verify_redirect", "human_check")
        return self._verify_redirect(req, puzzle=True)

    def _session_of(self, req: Request) -> str | None:
        sid = self._cookie(req, "SID_kns_new")
        if sid is None and req.path in ("/kcms2/article/abstract", reference_api.PATH):
            info = self.tokens.check(self._token(req))
            sid = info[0] if info is not None else None
        return sid

    def _paced(self, req: Request) -> Response | None:
        """The 2026 challenge when this request's IP or session went over the hidden pace."""
        now = self.clock()
        # the JSON answers (grid, reference list) are refused in JSON or the soft block
        grid = req.path in ("/kns8s/brief/grid", reference_api.PATH)
        ip_blocked = self.ip_pace.hit(req.ip, now)
        sid = self._session_of(req)
        session_blocked = sid is not None and self.session_pace.hit(sid, now)
        if ip_blocked:
            if grid:
                if self._random.random() < JSON_200_SHARE:
                    self._challenge("json_200", "ip")
                    return self._json_403(req, 200)
                self._challenge("json_403", "ip")
                return self._json_403(req)
            if self._random.random() < VERICODE_SHARE:
                self._challenge("vericode_form", "ip")
                return Response(200, markup.VERICODE_PAGE)
            self._challenge("verify_redirect", "ip")
            return self._verify_redirect(req, None)
        if session_blocked:
            if grid:
                self._challenge("soft_block", "session")
                return Response(200, markup.SOFT_BLOCK)
            self._challenge("verify_redirect", "session")
            return self._verify_redirect(req, None)
        return None

    def _guarded(self, req: Request, handler) -> Response:
        """Latency, the per-IP ban, the pace and injected faults in front of a grid or detail."""
        lo, hi = self.latency
        delay = lo if hi <= lo else self._random.uniform(lo, hi)
        if self.human.on:
            resp = self._human_gate(req)
            if resp is not None:
                resp.delay = delay
                return resp
        if self.throttle.active:
            left = self.throttle.hit(req.ip, self.clock())
            if left is not None:
                return self._too_many(left, delay)
        if self.limiter.active and not self.limiter.allow(req.ip, self.clock()):
            self.stats["banned_responses"] += 1
            return Response(200, markup.CAPTCHA_PAGE, delay=delay)
        if self.session_pace.active:
            resp = self._paced(req)
            if resp is not None:
                resp.delay = delay
                return resp
        if self.faults.active:
            fault, slow = self.faults.draw(self._identity(req))
            if slow:
                self.stats["faults"]["slow"] += 1
                delay += self.options.slow_seconds
            if fault is not None:
                self.stats["faults"][fault] += 1
                resp = self._fault(fault, req)
                resp.delay = delay
                return resp
        resp = handler(self, req)
        resp.delay = delay
        return resp

    def _too_many(self, left: float, delay: float) -> Response:
        """429 Too Many Requests, with how long to wait as the options say."""
        o = self.options
        headers = []
        if not o.throttle_silent:
            if o.throttle_date:
                now = time.time()
                # whole seconds, rounded up: from the Date (now, rounded down) it says at least
                headers += [
                    ("Date", formatdate(now, usegmt=True)),
                    ("Retry-After", formatdate(now + math.ceil(left), usegmt=True)),
                ]
            else:
                headers.append(("Retry-After", str(math.ceil(left))))
        return Response(429, b"Too Many Requests", TEXT, headers=headers, delay=delay)

    def _identity(self, req: Request) -> bytes:
        """What makes two requests "the same request" for the fault draw: method, path and body.
        A detail request is named by the document its token names, not by the token, whose
        issue time differs from run to run (so one seed gives the same faults on every run)."""
        if req.path in ("/kcms2/article/abstract", reference_api.PATH):
            info = self.tokens.check(self._token(req))
            if info is not None:
                start = req.query.split("start=")[-1].split("&")[0] if "start=" in req.query else ""
                return f"GET {req.path} {info[2]}/{info[3]} {start}".encode()
        return b"%s %s\n%s" % (req.method.encode(), req.target.encode(), req.body)

    @staticmethod
    def _token(req: Request) -> str:
        for part in req.query.split("&"):
            if part.startswith("v="):
                return part[2:]
        return ""

    def _fault(self, fault: str, req: Request) -> Response:
        if fault == "reset":
            return Response(action="reset")
        if fault in ("e500", "e502", "e503"):
            status = int(fault[1:])
            return Response(
                status, f"<html><body><h1>{status} {REASONS[status]}</h1></body></html>".encode()
            )
        if fault == "verify":
            return self._verify_redirect(req)
        if fault == "captcha":
            return Response(200, markup.CAPTCHA_PAGE)
        if fault == "blank":
            return Response(200, b"")
        return Response(200, markup.javascript_page(f"{self._random.getrandbits(32):08x}"))

    def _cookie(self, req: Request, name: str) -> str | None:
        for part in req.headers.get("cookie", "").split(";"):
            k, _, v = part.strip().partition("=")
            if k == name:
                return v
        return None

    # -- the pages that start a session or pass a check -------------------------------------

    def home(self, req: Request) -> Response:
        return Response(200, markup.HOME_PAGE)

    def warmup(self, req: Request) -> Response:
        if self.human.on:  # no session without a person: only /verify/home starts one
            return self.search_page(req)
        if self.session_pace.active:
            resp = self._paced(req)  # a blocked session's (or IP's) warm-up is challenged too
            if resp is not None:
                return resp
        session = self.sessions.create(self.clock())
        self.stats["sessions_created"] += 1
        self.stats["pages"]["warmup"] += 1
        return Response(
            200,
            markup.WARMUP_PAGE,
            HTML,
            [
                ("Set-Cookie", f"KNS2COOKIE={session.kns2}; path=/; HttpOnly"),
                ("Set-Cookie", f"SID_kns_new={session.sid}; path=/"),
                ("Set-Cookie", "dblang=both; path=/"),
            ],
        )

    def search_page(self, req: Request) -> Response:
        """The search pages (and, with the human check, the warm-up): for a session a person
        passed, the page and nothing else (its cookies stay as they are)."""
        resp = self._human_gate(req)
        if resp is not None:
            return resp
        if self.session_pace.active:
            resp = self._paced(req)
            if resp is not None:
                return resp
        self.stats["pages"]["warmup"] += 1
        return Response(200, markup.WARMUP_PAGE)

    def _session_cookies(self, req: Request, now: float) -> list[tuple[str, str]]:
        """Set-Cookie headers for a browser with no live session (a new one) or no client id."""
        headers = []
        if self.sessions.get(self._cookie(req, "SID_kns_new"), now) is None:
            session = self.sessions.create(now)
            self.stats["sessions_created"] += 1
            headers += [
                ("Set-Cookie", f"KNS2COOKIE={session.kns2}; path=/; HttpOnly"),
                ("Set-Cookie", f"SID_kns_new={session.sid}; path=/"),
                ("Set-Cookie", "dblang=both; path=/"),
            ]
        if "client-id" not in self.breaks and not self.client_ids.valid(
            self._cookie(req, "Ecp_ClientId")
        ):
            # what the real page's script fetches from GenerateClientID into a browser's jar
            self.stats["client_ids_issued"] += 1
            headers.append(("Set-Cookie", f"Ecp_ClientId={self.client_ids.issue()}; path=/"))
        return headers

    def _same_site(self, url: str) -> str | None:
        """``url`` if it is a page of this site (returnUrl is never an open redirect)."""
        parts = urlsplit(url)
        if parts.scheme in ("http", "") and (parts.netloc in self.host_ports or not parts.netloc):
            if parts.path.startswith("/") and not url.startswith("//"):
                return url if parts.netloc else self.base + url
        return None

    def verify_check(self, req: Request) -> Response:
        """AJ-Captcha's check path: the slider of the verify page posts where the piece stopped
        and how long the drag took; a person's drag passes this browser's session (back to
        ``returnUrl``), any other gets a fresh puzzle."""
        if req.method != "POST":
            return Response(405, b"POST only", "text/plain")
        now = self.clock()
        sid = self._cookie(req, "SID_kns_new")
        if self.sessions.get(sid, now) is None:
            body = {
                "repCode": "6111",
                "repMsg": "验证失败: no CNKI session cookie",
                "success": False,
            }
            return Response(403, json.dumps(body, ensure_ascii=False).encode(), JSON)
        form = {k: v[0] for k, v in parse_qs(req.body.decode("utf-8", "replace")).items()}
        if "headless" in req.headers.get("user-agent", "").lower():
            self.stats["headless_checks"] += 1
        target = self._same_site(form.get("returnUrl", ""))
        location = target or f"{self.base}/kns8s/defaultresult/index"
        if not slid_by_a_person(form):
            # as AJ-Captcha: nothing passed, a fresh puzzle (a new gap) for another try
            self.stats["human_check_failed"] += 1
            again = self._verify_url(location, puzzle=True) + "&failed=1"
            return Response(302, b"", HTML, [("Location", again)])
        self.human.pass_(sid, now)
        self.sessions.touch(sid, now)
        self.stats["human_passes"] += 1
        return Response(302, b"", HTML, [("Location", location)])

    def client_id(self, req: Request) -> Response:
        if "client-id" in self.breaks:
            return Response(404, b"not found", "text/plain")
        self.stats["client_ids_issued"] += 1
        body = json.dumps({"Success": True, "Data": self.client_ids.issue()})
        return Response(200, body.encode(), JSON)

    def verify(self, req: Request) -> Response:
        if not self.human.on:
            return Response(200, markup.VERIFY_PAGE)
        headers = self._session_cookies(req, self.clock())
        params = {k: v[0] for k, v in parse_qs(req.query).items()}
        return Response(200, markup.verify_page(params), HTML, headers)

    def checkcode(self, req: Request) -> Response:
        return Response(
            200, json.dumps({"code": 1, "msg": "验证码错误"}, ensure_ascii=False).encode(), JSON
        )


def slid_by_a_person(form: dict[str, str]) -> bool:
    """Whether the slider's post is a person's drag: the piece stopped on the gap of the page
    the person saw (``x`` within the tolerance of :func:`standin.markup.slider_gap`) and the
    drag took a person's time (``dragMs`` within :data:`standin.markup.DRAG_MS`)."""
    try:
        x, took = int(form.get("x", "")), int(form.get("dragMs", ""))
    except ValueError:
        return False
    low, high = markup.DRAG_MS
    near = abs(x - markup.slider_gap(form)) <= markup.SLIDER_TOLERANCE
    return near and low <= took <= high
