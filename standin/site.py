"""The stand-in's application: routes, CNKI's protocol, limits, faults, control endpoints.

``Site.handle(request)`` is synchronous and returns a :class:`Response` (with a delay for
latency and slow faults, which the HTTP layer honours without blocking other connections).

Routes:
  GET  /kns8s/defaultresult/index   warm-up: new session, cookies KNS2COOKIE, SID_kns_new, dblang
                                    (with the human check: the page, for a passed session only)
  GET  /kns8s/search, /kns8s/AdvSearch   the search page (a passed session's, with the check)
  GET  /RCDService/api/UtilityOpenApi/GenerateClientID   {"Success":true,"Data":"<Ecp_ClientId>"}
  POST /kns8s/brief/grid            list fragment (client id, session, QueryJson rules, cap, pace)
  GET  /kcms2/article/abstract?v=   detail page (token checked: signature, age, session)
  POST /kns8s/group/result          facet counts of the grid's query (standin/groups.py)
  POST /dm8/API/GetExport           citation export of listed rows' ids (standin/export.py)
  GET  /restapi/citation-api/v1/literature/references?v=&type=&start=&size=
                                    a paper's reference list, JSON (standin/references.py):
                                    the detail page's token and session rules, a refusal the
                                    -403 JSON
  GET  /verify/home                 where challenges redirect to (with the human check: sets the
                                    session cookies if none, holds the slider: piece and gap)
  POST /verify-api/web/check        the slider's check: a drag that ends on the gap in a
                                    person's time passes the cookie's session, 302 returnUrl;
                                    any other drag 302 to a fresh puzzle (&failed=1)
  POST /kns8s/brief/checkcode       where the vericodeForm posts (always "wrong code")
  GET  /                            a home page (some clients visit www first)
  GET|POST /_control                state; POST JSON changes it (faults, latency, limits, ...)
  GET  /_stats                      counters (requests by path and status, faults, bans, ...)
  GET  /_truth?type=&start=&end=&categories=A,B    ground truth, JSON lines
  GET  /_rounds?type=&start=&end=&categories=      documents per (day, category)
  GET  /_doomed?type=&start=&end=&categories=      filenames whose detail always fails
  GET  /_references?type=&start=&end=&categories=  each paper's reference list, JSON lines
  GET  /proxy-api?num=5&format=text|json           the proxy provider

The human check (``human_check``) stands in front of every kns route but the client-id
endpoint (another CNKI host), before the rate limit, the pace guard and faults. Faults, the rate
limit and latency apply to grid, detail and reference requests only; the pace guard to the
warm-up, grid, detail and reference requests (the client-id endpoint is another CNKI host). A request comes
from IP ``127.0.0.1`` when direct and ``10.0.0.{i+1}`` through proxy port ``i``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import random
import time
from dataclasses import dataclass, field
from datetime import date
from email.utils import formatdate
from urllib.parse import parse_qs, quote, urlsplit

from standin import groups as facets
from standin import markup
from standin import references as reference_api
from standin.corpus import (
    DOC_TYPES,
    FOREIGN_DATABASES,
    PAPER_CLASSES,
    Corpus,
    CorpusOptions,
    Search,
    parse_day,
)
from standin.export import CONTROLS as EXPORT_CONTROLS
from standin.export import EXPORT_PATH, ExportDesk
from standin.limits import (
    ALL_FAULTS,
    ClientIds,
    FaultPlan,
    HumanCheck,
    PaceGuard,
    ProxyProvider,
    RateLimiter,
    SessionTable,
    Throttle,
    TokenSigner,
)
from standin.query import ExpertError, compile_expert
from standin.wire import HTML, JSON, REASONS, TEXT, Request, Response

CROSSDB_CLASS = "WD0FTY92"
# single-database resources (Resource, or Classid when Resource is absent): type and databases
SINGLE_RESOURCES = {
    "PATENT": ("patent", ()),
    "ACHIEVEMENTS": ("achievement", ()),
    "JOURNAL": ("paper", PAPER_CLASSES["YSTT4HG0"]),
    "DISSERTATION": ("paper", PAPER_CLASSES["LSTPFY1C"]),
}
SINGLE_CLASSES = {
    "VUDIXAIY": "PATENT",
    "BLZOG7CK": "ACHIEVEMENTS",
    "YSTT4HG0": "JOURNAL",
    "LSTPFY1C": "DISSERTATION",
}
PAGE_SIZES = ("10", "20", "50")
CLIENT_ID_PATH = "/RCDService/api/UtilityOpenApi/GenerateClientID"
# what each break_ mode makes false (see the package docstring)
BREAKS = (
    "client-id",
    "date-filter",
    "category-filter",
    "turn-token",
    "detail-fields",
    "patent-keys",
    "census-short",
    "references-html",
    "expert-ignored",
)
# break_ expert-ignored: the professional-search item is ignored, as a site that moved it would
# break_ census-short: a category search loses every CENSUS_SHORT_EVERY-th document
CENSUS_SHORT_EVERY = 10
# an IP over the pace: the share of its grid challenges sent as 200 (not 403), and of its page
# GETs answered with the vericodeForm page (the rest 302 to /verify/home)
JSON_200_SHARE = 0.25
VERICODE_SHARE = 0.3
# what each of CNKI's routes is, for /_stats "kinds" (the rest, 404s included, is "other")
REQUEST_KINDS = (
    "warmup",
    "grid",
    "detail",
    "references",
    "client_id",
    "verify",
    "home",
    "other",
    "export",
    "group",
)
PATH_KINDS = {
    "/kns8s/defaultresult/index": "warmup",
    "/kns8s/search": "warmup",
    "/kns8s/AdvSearch": "warmup",
    "/kns8s/brief/grid": "grid",
    "/kcms2/article/abstract": "detail",
    reference_api.PATH: "references",
    CLIENT_ID_PATH: "client_id",
    "/verify/home": "verify",
    "/verify-api/web/check": "verify",
    "/kns8s/brief/checkcode": "verify",
    "/": "home",
    EXPORT_PATH: "export",
    "/kns8s/group/result": "group",
}
BROKEN_DATE_DAYS = 7  # date-filter: every search covers the span's first week, whatever its PT
MAX_RANGE_DAYS = 3660


@dataclass
class SiteOptions:
    host: str = "127.0.0.1"
    port: int = 0
    cap_rows: int = 6000  # rows a search reaches, whatever the page size
    max_pages: int | None = None  # the older spelling: cap_rows = max_pages * 50
    # grid requests a session allows after its first (0: no limit); None: 15, or 0 with the
    # human check (a passed session's hidden limits and pace take the fixed count's place)
    turn_limit: int | None = None
    token_ttl: float = 600.0
    session_ttl: float = 1200.0
    latency: tuple[float, float] = (0.0, 0.0)
    proxies: int = 0
    dead_proxies: int = 0
    proxy_auth: str | None = None  # "user:pass"
    provider_interval: float = 5.0
    provider_batch: int = 5
    rate_limit: float = 0.0  # requests per second per IP; 0 = off
    burst: float = 10.0
    ban_seconds: float = 60.0
    # CNKI's 429 (PROTOCOL.md 2026 point 18): requests/s per IP past which a window closes
    # (0 = off), for throttle_seconds; its Retry-After says so in seconds, as an HTTP date
    # (throttle_date), or not at all (throttle_silent: the client must back off on its own)
    throttle: float = 0.0
    throttle_seconds: float = 3.0
    throttle_date: bool = False
    throttle_silent: bool = False
    faults: dict[str, float] = field(default_factory=dict)
    slow_seconds: float = 3.0
    pace_limit: float = 0.0  # hidden requests/s per session and per IP over 2 s; 0 = off
    pace_block_seconds: float = 30.0
    collect_missing: float = 0.3  # share of patent rows without a.icon-collect
    rows_without_keys: bool = False  # patent rows carry their key nowhere
    header_rows: float = 0.0  # share of list pages whose tbody starts with a <td> header row
    breaks: list[str] = field(default_factory=list)  # break_ modes (BREAKS)
    # the person's check (PROTOCOL.md point 11). Off in the Python API (legacy tests and
    # benchmarks), on in ``python -m standin``
    human_check: bool = False
    session_requests: int = 300  # requests a passed session answers (0: no limit)
    session_minutes: float = 30.0  # minutes a pass lasts (0: no limit)
    session_pace: float = 1.5  # requests/s over session_pace_window before a check (0: off)
    session_pace_window: float = 10.0
    session_burst: int = 4  # this many requests within 2 s draw the check (0: off)
    zero_as_soft_block: bool = False  # a genuine zero answers the soft block's bytes
    export_batch: int = 0  # GetExport's hidden limit: ids answered per request (0: all)
    corpus: CorpusOptions = field(default_factory=CorpusOptions)

    def __post_init__(self):
        if self.turn_limit is None:
            self.turn_limit = 0 if self.human_check else 15
        if self.max_pages is not None:
            self.cap_rows = int(self.max_pages) * 50
        unknown = set(self.breaks) - set(BREAKS)
        if unknown:
            raise ValueError(f"unknown break {sorted(unknown)[0]!r} (known: {', '.join(BREAKS)})")


def parse_latency(value) -> tuple[float, float]:
    """``0.05`` (fixed) or ``0.02-0.08`` (uniform), also a number or a [lo, hi] pair."""
    if isinstance(value, int | float):
        return float(value), float(value)
    if isinstance(value, list | tuple):
        lo, hi = (float(v) for v in value)
    else:
        lo_s, sep, hi_s = str(value).partition("-")
        lo = float(lo_s)
        hi = float(hi_s) if sep else lo
    if lo < 0 or hi < lo:
        raise ValueError(f"latency {value!r}: expected SECONDS or LOW-HIGH with 0 <= LOW <= HIGH")
    return lo, hi


def _lower_keys(d) -> dict:
    return {str(k).lower(): v for k, v in d.items()} if isinstance(d, dict) else {}


def _items(group: dict) -> list[dict]:
    g = _lower_keys(group)
    out = [_lower_keys(i) for i in g.get("items") or []]
    for child in g.get("childitems") or []:
        out.extend(_items(child))
    return out


CHALLENGE_FORMS = ("soft_block", "verify_redirect", "json_403", "json_200", "vericode_form")
REJECTIONS = ("no_category", "page_size", "cursor", "logic", "expert", "group_form")
REJECTION_BODIES = {
    markup.BAD_EXPERT: "expert",
    markup.BAD_LOGIC: "logic",
    markup.NO_CATEGORY: "no_category",
    markup.BAD_PAGE_SIZE: "page_size",
    markup.CURSOR_PAST_CAP: "cursor",
}
CONTROL_PATHS = (
    "/_control",
    "/_stats",
    "/_truth",
    "/_rounds",
    "/_doomed",
    "/_references",
    "/proxy-api",
)


class BadQuery(ValueError):
    """A QueryJson the stand-in cannot read (CNKI answers 抱歉，暂无数据，请稍后重试。)."""


class Site:
    def __init__(self, options: SiteOptions | None = None, clock=time.monotonic):
        self.options = o = options or SiteOptions()
        self.clock = clock
        self.corpus = Corpus(o.corpus)
        self.sessions = SessionTable(o.corpus.seed, o.session_ttl, o.turn_limit)
        self.tokens = TokenSigner(o.corpus.seed)
        self.client_ids = ClientIds(o.corpus.seed)
        self.faults = FaultPlan(o.corpus.seed, o.faults)
        self.limiter = RateLimiter(o.rate_limit, o.burst, o.ban_seconds)
        self.throttle = Throttle(o.throttle, o.throttle_seconds)
        self.session_pace = PaceGuard(o.pace_limit, o.pace_block_seconds)
        self.human = HumanCheck(
            o.human_check,
            o.session_requests,
            o.session_minutes,
            o.session_pace,
            o.session_pace_window,
            o.session_burst,
        )
        self.ip_pace = PaceGuard(o.pace_limit, o.pace_block_seconds, quiet=True)
        self.latency = parse_latency(o.latency)
        self.breaks = set(o.breaks)
        #: issue 26: a field every detail page leaves out (CNKI changed its markup), "" none
        self.drop_field = ""
        self._random = random.Random(o.corpus.seed)
        self.doomed_extra: set[str] = set()
        self.exports = ExportDesk(o.export_batch)
        # documents whose links on list pages are stale (issued long ago: the detail answers with
        # the verify page) except on a page of a title search, as a refresh gets a fresh link
        self.stale_links: set[str] = set()
        self.base = f"http://{o.host}:{o.port}"
        self.host_ports = {f"{o.host}:{o.port}"}
        self.proxy_ports: list[int] = []
        self.dead: set[int] = set()
        self.provider = ProxyProvider([], o.provider_interval, o.provider_batch)
        self._proxy_auth = None
        if o.proxy_auth:
            self._proxy_auth = "Basic " + base64.b64encode(o.proxy_auth.encode()).decode()
        self.reset_stats()

    # -- wiring (the server tells the site where it listens) --------------------------------

    def bind(self, host: str, port: int, proxy_ports: list[int]) -> None:
        host = "127.0.0.1" if host in ("", "0.0.0.0") else host
        self.base = f"http://{host}:{port}"
        self.host_ports = {f"{host}:{port}", f"localhost:{port}", f"127.0.0.1:{port}"}
        self.proxy_ports = proxy_ports
        self.provider.ports = proxy_ports
        n = len(proxy_ports)
        k = min(self.options.dead_proxies, n)
        # which proxies are dead is drawn from the seed, so it is the same on every run
        self.dead = set(random.Random(f"dead|{self.options.corpus.seed}").sample(range(n), k))

    def proxy_ip(self, index: int) -> str:
        return f"10.0.0.{index + 1}"

    def is_dead(self, index: int) -> bool:
        return index in self.dead

    # -- stats ------------------------------------------------------------------------------

    def reset_stats(self) -> None:
        self.stats = {
            "requests": 0,  # requests to CNKI's own routes (not the control endpoints)
            "by_path": {},
            "by_ip": {},
            "faults": dict.fromkeys(ALL_FAULTS, 0),
            "pages": {
                "warmup": 0,
                "list": 0,
                "no_content": 0,
                "detail": 0,
                "references": 0,
                "group": 0,
            },
            "references_malformed": 0,
            "challenged": dict.fromkeys(CHALLENGE_FORMS, 0),
            "challenged_by": {"session": 0, "ip": 0, "turn_limit": 0, "human_check": 0},
            "rejections": dict.fromkeys(REJECTIONS, 0),
            "sessions_created": 0,
            "client_ids_issued": 0,
            "turn_refusals": 0,
            "no_session_refusals": 0,
            "no_client_id_refusals": 0,
            "page_refusals": 0,
            "token_refusals": {"bad": 0, "expired": 0, "session": 0},
            "doomed_responses": 0,
            "banned_responses": 0,
            "proxy_auth_refusals": 0,
            "dead_proxy_drops": 0,
            "zeros_as_soft_block": 0,
            # the person's check: requests of sessions no person passed (plain) or checked again
            "human_check_refusals": {"plain": 0, "checked": 0},
            "human_passes": 0,
            "human_check_failed": 0,  # slider drags that did not pass (verify_check)
            # slider drags from a browser that names itself headless (a page's script sees the
            # same words): what CNKI can tell from a person's browser at a glance
            "headless_checks": 0,
            "foreign_session_details": 0,  # a v= link opened in another passed session
            # every request to CNKI's routes by what it is, whatever the answer (they add up to
            # "requests"): what a benchmark of requests per document divides
            "kinds": dict.fromkeys(REQUEST_KINDS, 0),
            # grid POSTs the site could read as a search: first pages (a new search: "first"),
            # of them without a category condition (a day census: "uncategorised") and with no
            # result ("zero"), and page turns ("turns")
            "searches": {"first": 0, "uncategorised": 0, "zero": 0, "turns": 0},
        }
        self.stats["challenged"]["total"] = 0
        self._bans_base = self.limiter.bans
        self._throttle_base = (
            self.throttle.closed,
            self.throttle.inside,
            self.throttle.told,
            len(self.throttle.after),
        )
        self._pace_base = (self.session_pace.blocks, self.ip_pace.blocks)
        self._provider_base = dict(self.provider.calls)

    def count(self, path: str, status) -> None:
        per_path = self.stats["by_path"].setdefault(path, {})
        key = str(status)
        per_path[key] = per_path.get(key, 0) + 1

    def stats_view(self) -> dict:
        out = dict(self.stats)
        out["bans"] = self.limiter.bans - self._bans_base
        closed = self.throttle.closed - self._throttle_base[0]
        inside = self.throttle.inside - self._throttle_base[1]
        told = self.throttle.told - self._throttle_base[2]
        # "throttled": every 429 answered; "inside": those to requests that came into a window,
        # "told": of them, those sent after their client had its 429 (Throttle.TOLD_AFTER)
        out["throttled"] = {
            "total": closed + inside,
            "closed": closed,
            "inside": inside,
            "told": told,
            # "after": each inside request's seconds after its window closed (ms), in order
            "after": [round(x, 3) for x in self.throttle.after[self._throttle_base[3] :]],
        }
        out["pace_blocks"] = {
            "session": self.session_pace.blocks - self._pace_base[0],
            "ip": self.ip_pace.blocks - self._pace_base[1],
        }
        out["provider"] = {
            k: v - self._provider_base.get(k, 0) for k, v in self.provider.calls.items()
        }
        out["live_sessions"] = len(self.sessions)
        out["human_check"] = self.human.view(self.clock())
        return out

    def _challenge(self, form: str, cause: str) -> None:
        challenged = self.stats["challenged"]
        challenged[form] += 1
        challenged["total"] += 1
        self.stats["challenged_by"][cause] += 1

    # -- dispatch ---------------------------------------------------------------------------

    def handle(self, req: Request) -> Response:
        if (
            req.proxy is not None
            and self._proxy_auth
            and req.headers.get("proxy-authorization") != self._proxy_auth
        ):
            self.stats["proxy_auth_refusals"] += 1
            resp = Response(
                407,
                b"proxy authentication required",
                "text/plain",
                [("Proxy-Authenticate", 'Basic realm="cnki-proxy"')],
            )
        else:
            route = self.ROUTES.get(req.path)
            if route is None:
                resp = Response(404, b"not found", "text/plain")
            else:
                resp = route(self, req)
        if req.path in self.ROUTES:
            self.count(req.path, resp.action or resp.status)
        else:
            self.count("other", resp.status)
        if req.path not in CONTROL_PATHS:
            self.stats["requests"] += 1
            kinds = self.stats["kinds"]
            kind = PATH_KINDS.get(req.path, "other")
            kinds[kind] += 1
        by_ip = self.stats["by_ip"]
        by_ip[req.ip] = by_ip.get(req.ip, 0) + 1
        return resp

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

    # -- CNKI pages -------------------------------------------------------------------------

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

    def _cookie(self, req: Request, name: str) -> str | None:
        for part in req.headers.get("cookie", "").split(";"):
            k, _, v = part.strip().partition("=")
            if k == name:
                return v
        return None

    def _search(self, form: dict) -> tuple[Search | bytes, int, int]:
        """(search, page number, page size) from the grid form.

        The search is bytes (the answer) when CNKI rejects the query or finds nothing by rule
        (a single database asked with a KuaKuCode list); BadQuery if unreadable."""
        try:
            q = _lower_keys(json.loads(form["QueryJson"][0]))
        except (KeyError, ValueError) as exc:
            raise BadQuery(str(exc)) from None
        size_text = (form.get("pageSize") or [""])[0].strip()
        try:
            page = int((form.get("pageNum") or form.get("CurPage") or ["1"])[0] or 1)
        except ValueError as exc:
            raise BadQuery(str(exc)) from None
        if size_text not in PAGE_SIZES:
            return markup.BAD_PAGE_SIZE, page, 0
        size = int(size_text)
        resource = str(q.get("resource") or "").upper()
        classid = str(q.get("classid") or "").upper()
        kuaku = [c.strip().upper() for c in str(q.get("kuakucode") or "").split(",") if c.strip()]
        dbnames: tuple[str, ...] = ()
        foreign: tuple[str, ...] = ()
        if resource == "CROSSDB" or (not resource and classid == CROSSDB_CLASS):
            if not kuaku:  # 总库 needs the list of its databases
                return markup.NO_CATEGORY, page, size
            doc_type = "paper"
            dbnames = tuple(db for c in kuaku for db in PAPER_CLASSES.get(c, ()))
            foreign = tuple(FOREIGN_DATABASES[c][0] for c in kuaku if c in FOREIGN_DATABASES)
            if not dbnames and not foreign:
                return markup.NO_CONTENT, page, size
        else:
            single = SINGLE_RESOURCES.get(resource or SINGLE_CLASSES.get(classid, ""))
            if single is None:
                raise LookupError("no documents of this resource")
            if kuaku:  # a single database asked with a 总库 list: a genuine zero
                return markup.NO_CONTENT, page, size
            doc_type, dbnames = single
        start = end = None
        # prefix conditions (CLC SUFFIX, the CCL facet) as clauses: the codes of one clause are
        # OR'd, the clauses AND'd. In a group, a CLC row with Logic 1 joins the clause before it
        # (the form's several 分类号 rows joined by OR), with Logic 0 it starts a new one (AND);
        # the facet's ticked codes (each Logic 1) are one clause.
        clauses: list[list[str]] = []
        exact: list[str] = []
        title = ""
        expert = ""
        for group in _lower_keys(q.get("qnode")).get("qgroup") or []:
            open_clause = False
            for item in _items(group):
                name = str(item.get("field", "")).upper()
                value = str(item.get("value") or "").strip()
                logic = item.get("logic", 0)
                if type(logic) is not int or logic not in (0, 1, 2):
                    return markup.BAD_LOGIC, page, 0
                if name == "PT":
                    start, end = value, str(item.get("value2") or value).strip()
                elif name in ("CLC", "CCL") and value:
                    if logic == 2:  # NOT: not modelled; CNKI would narrow, never widen
                        raise BadQuery("NOT conditions are not modelled")
                    # TOPRANK ranks by relevance to the exact code: no prefix (child) matches
                    if name == "CLC" and str(item.get("operator", "")).upper() == "TOPRANK":
                        exact.append(value)
                    elif open_clause and (name == "CCL" or logic == 1):
                        clauses[-1].append(value)
                    else:  # SUFFIX (the form's 分类号) and the CCL facet: a prefix
                        clauses.append([value])
                        open_clause = True
                elif name == "TI":
                    title = value
                elif name == "EXPERT" and "expert-ignored" not in self.breaks:
                    if expert or not value:
                        return markup.BAD_EXPERT, page, 0
                    try:
                        compile_expert(value, doc_type)
                    except ExpertError:
                        return markup.BAD_EXPERT, page, 0
                    expert = value
        codes = clauses[0] if clauses else []
        also = tuple(tuple(sorted(set(c))) for c in clauses[1:])
        if "category-filter" in self.breaks:
            codes, exact, also = [], [], ()
        try:
            if start is None:
                first, last = self.corpus.span
            else:
                first, last = parse_day(start[:10]), parse_day(end[:10])
        except ValueError as exc:
            raise BadQuery(str(exc)) from None
        if "date-filter" in self.breaks:
            first = self.corpus.span[0]
            last = first + BROKEN_DATE_DAYS - 1
        if last - first > MAX_RANGE_DAYS:
            raise BadQuery("date range too long for the stand-in")
        sort_field = (form.get("sortField") or [""])[0]
        if sort_field not in ("", "PT", "FFD", "CF", "DFR"):
            sort_field = "PT"
        desc = (form.get("sortType") or ["desc"])[0].lower() != "asc"
        search = Search(
            doc_type,
            first,
            last,
            tuple(sorted(set(codes))),
            title,
            sort_field or "PT",
            desc,
            tuple(sorted(set(exact))),
            tuple(sorted(set(dbnames))),
            tuple(sorted(set(foreign))),
            also,
            expert,
        )
        return search, page, size

    def _variant(self, doc) -> str:
        """How a patent row carries its key: icon-collect, the link's query, or nowhere."""
        if self.options.rows_without_keys or "patent-keys" in self.breaks:
            return "bare"
        return "link" if doc.extra["keyless"] < self.options.collect_missing else "collect"

    def grid(self, req: Request) -> Response:
        if req.method != "POST":
            return Response(405, b"POST only", "text/plain")
        now = self.clock()
        if not self.client_ids.valid(self._cookie(req, "Ecp_ClientId")):
            self.stats["no_client_id_refusals"] += 1
            return self._json_403(req)
        sid = self._cookie(req, "SID_kns_new")
        verdict = self.sessions.grid(sid, now)
        if verdict == "unknown":
            self.stats["no_session_refusals"] += 1
            return self._json_403(req)
        if verdict == "turn-limit":
            self.stats["turn_refusals"] += 1
            self._challenge("soft_block", "turn_limit")
            return Response(200, markup.SOFT_BLOCK)
        if "json" in req.headers.get("content-type", ""):
            return Response(200, markup.NO_DATA_RETRY)  # CNKI wants a form, not a JSON body
        form = parse_qs(req.body.decode("utf-8", "replace"), keep_blank_values=True)
        try:
            search, page, size = self._search(form)
        except BadQuery:
            return Response(200, markup.NO_DATA_RETRY)
        except LookupError:
            return self._zero()
        if isinstance(search, bytes):
            name = REJECTION_BODIES.get(search)
            if name is None:
                return self._zero()
            self.stats["rejections"][name] += 1
            return Response(200, search)
        searches = self.stats["searches"]
        if page > 1:
            searches["turns"] += 1
        else:
            searches["first"] += 1
            if not search.codes and not search.exact:
                searches["uncategorised"] += 1
        if page > 1 and "turn-token" in self.breaks:
            self._challenge("soft_block", "turn_limit")
            return Response(200, markup.SOFT_BLOCK)
        refs = self.corpus.results(search)
        if "census-short" in self.breaks and (search.codes or search.exact):
            refs = [r for r in refs if r[-1] % CENSUS_SHORT_EVERY != CENSUS_SHORT_EVERY - 1]
        total = len(refs)
        if total == 0:
            if page <= 1:
                searches["zero"] += 1
            return self._zero()
        cap = self.options.cap_rows
        first = (page - 1) * size
        if page < 1 or first >= min(total, cap):
            self.stats["page_refusals"] += 1
            self.stats["rejections"]["cursor"] += 1
            return Response(200, markup.CURSOR_PAST_CAP)
        pages = max(1, min(math.ceil(total / size), cap // size))
        prefix = self.tokens.prefix(sid, int(now * 1000))
        # a stale link was issued long before any token_ttl (not at 0: time.monotonic() is the
        # machine's uptime, under token_ttl for the first minutes after a boot)
        stale_prefix = (
            self.tokens.prefix(sid, int(now * 1000) - 10**9)
            if self.stale_links and not search.title
            else None
        )
        issue, document, base = self.tokens.issue, self.corpus.document, self.base
        patent = search.doc_type == "patent"
        page_b = str(page).encode()
        rows = []
        for seq, ref in enumerate(refs[first : min(first + size, cap)], first + 1):
            doc = document(search.doc_type, *ref)
            variant = self._variant(doc) if patent else "collect"
            cached = doc.row_parts
            parts = cached.get(variant) if cached else None
            a, b, c = parts or markup.row_parts(doc, base, variant)
            f = doc.fields
            self.exports.remember(doc, doc.extra["cookie"])  # its input.cbItem value
            rows.append(
                markup.ROW_HEAD
                + page_b
                + a
                + str(seq).encode()
                + b
                + issue(
                    stale_prefix if stale_prefix and f["filename"] in self.stale_links else prefix,
                    f["dbname"],
                    f["filename"],
                )
                + c
            )
        if self.options.header_rows > 0:
            draw = hashlib.blake2b(
                f"header|{self.options.corpus.seed}|{search}|{page}".encode(), digest_size=8
            ).digest()
            if int.from_bytes(draw, "big") / 2.0**64 < self.options.header_rows:
                rows.insert(0, markup.td_header(search.doc_type))
        # hidTurnPage: opaque, and echoed back leniently (never checked), like CNKI's
        turn = hashlib.blake2b(f"{sid}|{search}|{page}".encode(), digest_size=16).digest()
        turn_token = base64.urlsafe_b64encode(turn).decode().replace("=", "!")
        self.stats["pages"]["list"] += 1
        return Response(
            200, markup.list_fragment(search.doc_type, total, page, pages, rows, turn_token)
        )

    def group_result(self, req: Request) -> Response:
        """Facet counts (standin/groups.py): the grid's checks and search, counted by facet."""
        if req.method != "POST":
            return Response(405, b"POST only", "text/plain")
        if not self.client_ids.valid(self._cookie(req, "Ecp_ClientId")):
            self.stats["no_client_id_refusals"] += 1
            return self._json_403(req)
        if not self.sessions.touch(self._cookie(req, "SID_kns_new"), self.clock()):
            self.stats["no_session_refusals"] += 1  # touched, not counted as a page turn
            return self._json_403(req)
        if "json" in req.headers.get("content-type", ""):
            return Response(200, markup.NO_DATA_RETRY)  # a form, as the grid wants
        asked = facets.read_form(req.body)
        try:
            search = self._search(facets.grid_form(asked[0]))[0] if asked else None
        except BadQuery:
            search = None
        except LookupError:
            search = ()  # no documents of this resource: nothing to count
        if search is None:
            self.stats["rejections"]["group_form"] += 1
            return Response(200, facets.BAD_QUERY_JSON)
        if isinstance(search, bytes) and search in REJECTION_BODIES:
            self.stats["rejections"][REJECTION_BODIES[search]] += 1
            return Response(200, search)  # what the grid answers this query
        self.stats["pages"]["group"] += 1
        counts = facets.facet_counts(self.corpus, search) if isinstance(search, Search) else []
        return Response(200, facets.fragment(counts, asked[1]))

    def _zero(self) -> Response:
        """A search with no results: CNKI's genuine zero, or (``zero_as_soft_block``) the soft
        block's very bytes, as PROTOCOL.md point 13 leaves possible."""
        self.stats["pages"]["no_content"] += 1
        if self.options.zero_as_soft_block:
            self.stats["zeros_as_soft_block"] += 1
            return Response(200, markup.SOFT_BLOCK)
        return Response(200, markup.NO_CONTENT)

    def detail(self, req: Request) -> Response:
        info = self.tokens.check(self._token(req))
        refusals = self.stats["token_refusals"]
        if info is None:
            refusals["bad"] += 1
            return self._verify_redirect(req)
        sid, issued_ms, dbname, filename = info
        now = self.clock()
        if now * 1000 - issued_ms > self.options.token_ttl * 1000:
            refusals["expired"] += 1
            return self._verify_redirect(req)
        if not self.sessions.touch(sid, now):
            refusals["session"] += 1
            return self._verify_redirect(req)
        if self.human.on and self._cookie(req, "SID_kns_new") != sid:
            # v= links answer only in the session that listed them (a passed one: the gate)
            refusals["session"] += 1
            self.stats["foreign_session_details"] += 1
            return self._verify_redirect(req)
        doc = self.corpus.locate(dbname, filename)
        if doc is None:
            return Response(404, b"not found", "text/plain")
        if filename in self.doomed_extra or self.corpus.is_doomed(doc):
            self.stats["doomed_responses"] += 1
            return Response(500, b"<html><body><h1>500 Internal Server Error</h1></body></html>")
        self.stats["pages"]["detail"] += 1
        if self.human.on:
            self.human.current(sid).documents += 1  # the gate admitted this passed session
        return Response(
            200, markup.detail_page(doc, "detail-fields" in self.breaks, drop=self.drop_field)
        )

    def export(self, req: Request) -> Response:
        return self.exports.handle(self, req)

    def references(self, req: Request) -> Response:
        """A paper's reference list: the detail page's token and session rules, in JSON."""
        params, words = reference_api.check(req.query)
        if words is not None:
            self.stats["references_malformed"] += 1
            return Response(400, reference_api.refused(words), JSON)
        info = self.tokens.check(params["v"])
        refusals = self.stats["token_refusals"]
        if info is None:
            refusals["bad"] += 1
            return self._json_403(req)
        sid, issued_ms, dbname, filename = info
        now = self.clock()
        if now * 1000 - issued_ms > self.options.token_ttl * 1000:
            refusals["expired"] += 1
            return self._json_403(req)
        if not self.sessions.touch(sid, now):
            refusals["session"] += 1
            return self._json_403(req)
        if self.human.on and self._cookie(req, "SID_kns_new") != sid:
            refusals["session"] += 1
            return self._json_403(req)
        doc = self.corpus.locate(dbname, filename)
        if doc is None or doc.doc_type != "paper":
            return Response(404, b"not found", "text/plain")
        if "references-html" in self.breaks:
            # the API answers a page instead of JSON (CNKI changed it): never "no references"
            return Response(200, markup.HOME_PAGE)
        entries = self.reference_list(dbname, filename)
        if reference_api.type_of(dbname) != params["type"]:
            entries = []
        self.stats["pages"]["references"] += 1
        return Response(200, reference_api.answer(entries, params["start"], params["size"]), JSON)

    def reference_list(self, dbname: str, filename: str) -> list[dict]:
        return reference_api.reference_list(self.corpus.h, dbname, filename)

    def references_guarded(self, req: Request) -> Response:
        return self._guarded(req, Site.references)

    def grid_guarded(self, req: Request) -> Response:
        return self._guarded(req, Site.grid)

    def group_guarded(self, req: Request) -> Response:
        return self._guarded(req, Site.group_result)

    def detail_guarded(self, req: Request) -> Response:
        return self._guarded(req, Site.detail)

    # -- control and inspection -------------------------------------------------------------

    def state(self) -> dict:
        o = self.options
        return {
            "base_url": self.base,
            "seed": o.corpus.seed,
            "scale": o.corpus.scale,
            "cap_rows": o.cap_rows,
            "turn_limit": self.sessions.turn_limit,
            "pace_limit": self.session_pace.limit,
            "pace_block_seconds": self.session_pace.block_seconds,
            "pace_blocked": {
                "sessions": len(self.session_pace.blocked(self.clock())),
                "ips": self.ip_pace.blocked(self.clock()),
            },
            "collect_missing": o.collect_missing,
            "rows_without_keys": o.rows_without_keys,
            "header_rows": o.header_rows,
            "break": sorted(self.breaks),
            "human_check": self.human.on,
            **self.human.limits(),
            "zero_as_soft_block": o.zero_as_soft_block,
            **self.exports.state(),
            "dbname_years": o.corpus.dbname_years,
            "profile": o.corpus.profile,
            "surge_rows": o.corpus.surge_rows,
            "late": o.corpus.late,
            "as_of": o.corpus.as_of,
            "withdrawn": sorted(o.corpus.withdrawn),
            "token_ttl": o.token_ttl,
            "session_ttl": self.sessions.ttl,
            "latency": list(self.latency),
            "faults": dict(self.faults.rates),
            "slow_seconds": o.slow_seconds,
            "rate_limit": self.limiter.rate,
            "burst": self.limiter.burst,
            "ban_seconds": self.limiter.ban_seconds,
            "banned": self.limiter.banned(self.clock()),
            "throttle": self.throttle.rate,
            "throttle_seconds": self.throttle.seconds,
            "throttled": self.throttle.closed_now(self.clock()),
            "doomed_count": o.corpus.doomed,
            "doomed": sorted(self.doomed_extra),
            "stale": sorted(self.stale_links),
            "proxies": [
                {
                    "index": i,
                    "url": f"http://127.0.0.1:{p}",
                    "ip": self.proxy_ip(i),
                    "dead": i in self.dead,
                }
                for i, p in enumerate(self.proxy_ports)
            ],
            "proxy_auth": bool(self._proxy_auth),
            "provider_url": f"{self.base}/proxy-api",
            "provider_interval": self.provider.interval,
            "provider_batch": self.provider.batch,
        }

    def apply(self, changes: dict) -> None:
        """Apply a /_control request; raises ValueError naming the first bad key."""
        o = self.options
        faults = dict(changes.pop("faults", None) or {})
        faults.update({k: changes.pop(k) for k in list(changes) if k in ALL_FAULTS})
        self.faults.update(faults)
        limiter = {
            k: changes.pop(k) for k in ("rate_limit", "burst", "ban_seconds") if k in changes
        }
        if limiter:
            self.limiter.rate = float(limiter.get("rate_limit", self.limiter.rate))
            self.limiter.burst = max(1.0, float(limiter.get("burst", self.limiter.burst)))
            self.limiter.ban_seconds = float(limiter.get("ban_seconds", self.limiter.ban_seconds))
        for key, value in changes.items():
            if key in ("pace_limit", "pace_block_seconds"):
                for guard in (self.session_pace, self.ip_pace):
                    if key == "pace_limit":
                        guard.limit = float(value)
                    else:
                        guard.block_seconds = float(value)
            elif key == "unblock":
                if value:
                    self.session_pace.clear()
                    self.ip_pace.clear()
            elif key == "collect_missing":
                o.collect_missing = float(value)
            elif key == "rows_without_keys":
                o.rows_without_keys = bool(value)
            elif key == "header_rows":
                o.header_rows = float(value)
            elif key == "break":
                names = [value] if isinstance(value, str) else list(value)
                unknown = set(names) - set(BREAKS)
                if unknown:
                    raise ValueError(f"unknown break {sorted(unknown)[0]!r}")
                self.breaks = set(names)
            elif key == "cap_rows":
                o.cap_rows = int(value)
            elif key == "latency":
                self.latency = parse_latency(value)
            elif key == "slow_seconds":
                o.slow_seconds = float(value)
            elif key == "unban":
                if value:
                    self.limiter.unban()
                    self.throttle.clear()
            elif key == "throttle":
                self.throttle.rate = float(value)
            elif key == "throttle_seconds":
                self.throttle.seconds = float(value)
            elif key in ("throttle_date", "throttle_silent"):
                setattr(o, key, bool(value))
            elif key == "doomed":
                self.doomed_extra = set(value)
            elif key == "stale":
                self.stale_links = set(value)
            elif key == "doomed_count":
                o.corpus.doomed = int(value)
                self.corpus.doomed_refs.cache_clear()
            elif key == "turn_limit":
                self.sessions.turn_limit = int(value)
            elif key == "token_ttl":
                o.token_ttl = float(value)
            elif key == "session_ttl":
                self.sessions.ttl = float(value)
            elif key == "max_pages":  # the older spelling of the cap
                o.cap_rows = int(value) * 50
            elif key == "dead_proxies":
                self.dead = {int(i) for i in value}
            elif key == "provider_interval":
                self.provider.interval = float(value)
            elif key == "provider_batch":
                self.provider.batch = int(value)
            elif key == "human_check":
                self.human.on = bool(value)
            elif key in ("session_requests", "session_burst"):
                setattr(self.human, key.removeprefix("session_"), int(value))
            elif key in ("session_minutes", "session_pace", "session_pace_window"):
                setattr(self.human, key.removeprefix("session_"), float(value))
            elif key == "expire_session":  # a session id (the SID_kns_new value) or a list
                for sid in [value] if isinstance(value, str) else list(value):
                    if not self.human.expire(sid, self.clock()):
                        raise ValueError(f"expire_session: no person passed session {sid!r}")
            elif key == "check_after":  # {session id: requests it still answers}
                for sid, more in dict(value).items():
                    if not self.human.check_after(sid, int(more)):
                        raise ValueError(f"check_after: session {sid!r} is not passed and live")
            elif key == "drop_field":  # issue 26: the drift alarm's markup change
                self.drop_field = str(value or "")
            elif key == "count_shift":  # issue 26: the counts change (refresh-counts)
                o.corpus.count_shift = int(value)
                self.corpus.document.cache_clear()  # documents (and their rows) are made anew
                self.corpus.results.cache_clear()
            elif key == "as_of":  # the site's today moves: late documents come in
                o.corpus.as_of = date.fromisoformat(str(value)).isoformat() if value else ""
                self.corpus.results.cache_clear()
            elif key == "withdrawn":  # filenames no longer listed
                o.corpus.withdrawn = frozenset(value or ())
                self.corpus.results.cache_clear()
            elif key == "late":
                o.corpus.late = bool(value)
                self.corpus.results.cache_clear()
            elif key == "zero_as_soft_block":
                o.zero_as_soft_block = bool(value)
            elif key in EXPORT_CONTROLS:
                self.exports.apply(key, value)
            elif key == "reset_stats":
                if value:
                    self.reset_stats()
            else:
                raise ValueError(f"unknown control key {key!r}")

    def control(self, req: Request) -> Response:
        if req.method == "POST":
            try:
                changes = json.loads(req.body or b"{}")
                if not isinstance(changes, dict):
                    raise ValueError("expected a JSON object")
                self.apply(changes)
            except (ValueError, TypeError) as exc:
                return Response(400, json.dumps({"error": str(exc)}).encode(), JSON)
        return Response(200, json.dumps(self.state(), ensure_ascii=False).encode(), JSON)

    def stats_page(self, req: Request) -> Response:
        return Response(200, json.dumps(self.stats_view(), ensure_ascii=False).encode(), JSON)

    def _scope(self, req: Request) -> tuple[str, str, str, list[str]]:
        params = parse_qs(req.query)
        doc_type = params.get("type", [""])[0]
        if doc_type not in DOC_TYPES:
            raise ValueError(f"type must be one of {', '.join(DOC_TYPES)}")
        start = params.get("start", [""])[0]
        end = params.get("end", [start])[0]
        parse_day(start), parse_day(end)
        categories = [c for c in ",".join(params.get("categories", [])).split(",") if c.strip()]
        return doc_type, start, end, [c.strip() for c in categories]

    def truth(self, req: Request) -> Response:
        try:
            scope = self._scope(req)
        except ValueError as exc:
            return Response(400, json.dumps({"error": str(exc)}).encode(), JSON)
        expert = parse_qs(req.query).get("query", [""])[0]
        try:
            rows = self.corpus.truth(*scope, expert=expert)
        except ExpertError as exc:
            return Response(400, json.dumps({"error": str(exc)}).encode(), JSON)
        lines = (json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        return Response(200, "".join(lines).encode(), "application/x-ndjson; charset=utf-8")

    def rounds(self, req: Request) -> Response:
        try:
            scope = self._scope(req)
        except ValueError as exc:
            return Response(400, json.dumps({"error": str(exc)}).encode(), JSON)
        rows = self.corpus.rounds(*scope)
        body = {"type": scope[0], "rounds": rows, "cap": self.options.cap_rows}
        return Response(200, json.dumps(body, ensure_ascii=False).encode(), JSON)

    def doomed(self, req: Request) -> Response:
        try:
            scope = self._scope(req)
        except ValueError as exc:
            return Response(400, json.dumps({"error": str(exc)}).encode(), JSON)
        by_rule = self.corpus.doomed_in(*scope)
        extra = (
            [
                row["filename"]
                for row in self.corpus.truth(*scope)
                if row["filename"] in self.doomed_extra
            ]
            if self.doomed_extra
            else []
        )
        return Response(200, json.dumps(sorted(set(by_rule) | set(extra))).encode(), JSON)

    def references_truth(self, req: Request) -> Response:
        """Each paper of a scope with its whole reference list (JSON lines)."""
        try:
            scope = self._scope(req)
        except ValueError as exc:
            return Response(400, json.dumps({"error": str(exc)}).encode(), JSON)
        lines = (
            json.dumps(
                {
                    "dbname": row["dbname"],
                    "filename": row["filename"],
                    "references": self.reference_list(row["dbname"], row["filename"]),
                },
                ensure_ascii=False,
            )
            + "\n"
            for row in self.corpus.truth(*scope)
        )
        return Response(200, "".join(lines).encode(), "application/x-ndjson; charset=utf-8")

    def proxy_api(self, req: Request) -> Response:
        params = parse_qs(req.query)
        fmt = params.get("format", ["text"])[0]
        try:
            num = int(params.get("num", [str(self.provider.batch)])[0])
        except ValueError:
            num = self.provider.batch
        ports = self.provider.take(num, self.clock())
        if fmt == "json":
            if ports is None:
                body = {"code": 1, "msg": "请求过于频繁"}
            else:
                body = {"code": 0, "data": [{"ip": "127.0.0.1", "port": p} for p in ports]}
            return Response(200, json.dumps(body, ensure_ascii=False).encode(), JSON)
        text = (
            "ERROR 请求过于频繁" if ports is None else "".join(f"127.0.0.1:{p}\r\n" for p in ports)
        )
        return Response(200, text.encode(), "text/plain; charset=utf-8")

    ROUTES = {
        "/": home,
        "/kns8s/defaultresult/index": warmup,
        "/kns8s/search": search_page,
        "/kns8s/AdvSearch": search_page,
        "/kns8s/brief/grid": grid_guarded,
        "/kcms2/article/abstract": detail_guarded,
        EXPORT_PATH: export,
        facets.PATH: group_guarded,
        reference_api.PATH: references_guarded,
        CLIENT_ID_PATH: client_id,
        "/verify/home": verify,
        "/verify-api/web/check": verify_check,
        "/kns8s/brief/checkcode": checkcode,
        "/_control": control,
        "/_stats": stats_page,
        "/_truth": truth,
        "/_rounds": rounds,
        "/_doomed": doomed,
        "/_references": references_truth,
        "/proxy-api": proxy_api,
    }


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
