"""The stand-in's application: routes, CNKI's protocol, limits, faults, control endpoints.

``Site.handle(request)`` is synchronous and returns a :class:`Response` (with a delay for
latency and slow faults, which the HTTP layer honours without blocking other connections).
This module holds the site's state and dispatches; the routes are served by the parts the site is
made of: standin/gate.py (sessions, the person's check, challenges and the guards before a page),
standin/grid.py (grid and group/result), standin/detail.py (detail page and reference list),
standin/export.py (GetExport) and standin/control.py (the test-only endpoints).

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
import random
import time

from standin import groups as facets
from standin import references as reference_api
from standin.control import ControlDesk
from standin.corpus import Corpus
from standin.detail import DocumentPages
from standin.export import EXPORT_PATH, ExportDesk
from standin.gate import CHALLENGE_FORMS, CLIENT_ID_PATH, Gate
from standin.grid import REJECTIONS, SearchGrid
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
from standin.options import SiteOptions, parse_latency
from standin.wire import Request, Response

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

CONTROL_PATHS = (
    "/_control",
    "/_stats",
    "/_truth",
    "/_rounds",
    "/_doomed",
    "/_references",
    "/proxy-api",
)


class Site(Gate, SearchGrid, DocumentPages, ControlDesk):
    """The stand-in site: its state (options, corpus, sessions, guards, counters), the dispatch
    of a request to its route, and the routes of the parts it is made of."""

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

    def export(self, req: Request) -> Response:
        return self.exports.handle(self, req)

    def references_guarded(self, req: Request) -> Response:
        return self._guarded(req, Site.references)

    def grid_guarded(self, req: Request) -> Response:
        return self._guarded(req, Site.grid)

    def group_guarded(self, req: Request) -> Response:
        return self._guarded(req, Site.group_result)

    def detail_guarded(self, req: Request) -> Response:
        return self._guarded(req, Site.detail)

    ROUTES = {
        "/": Gate.home,
        "/kns8s/defaultresult/index": Gate.warmup,
        "/kns8s/search": Gate.search_page,
        "/kns8s/AdvSearch": Gate.search_page,
        "/kns8s/brief/grid": grid_guarded,
        "/kcms2/article/abstract": detail_guarded,
        EXPORT_PATH: export,
        facets.PATH: group_guarded,
        reference_api.PATH: references_guarded,
        CLIENT_ID_PATH: Gate.client_id,
        "/verify/home": Gate.verify,
        "/verify-api/web/check": Gate.verify_check,
        "/kns8s/brief/checkcode": Gate.checkcode,
        "/_control": ControlDesk.control,
        "/_stats": ControlDesk.stats_page,
        "/_truth": ControlDesk.truth,
        "/_rounds": ControlDesk.rounds,
        "/_doomed": ControlDesk.doomed,
        "/_references": ControlDesk.references_truth,
        "/proxy-api": ControlDesk.proxy_api,
    }
