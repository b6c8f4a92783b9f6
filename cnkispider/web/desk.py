"""The pass desk's routes (the browser and its screen: cnkispider/sessions/desk.py).

    GET  /desk          the page (asks the token once per browser, then opens the desk)
    POST /desk/open     open the desk, or join the one open: one desk at a time per server
    POST /desk/input    the person's mouse, touch and keys, JSON ``{"events": [...]}``
    POST /desk/close    close it
    GET  /desk/frame    the newest screen past ``?after=N`` (JSON, JPEG base64), waiting up to
                        10 s; 204 when none came
    GET  /desk/state    where the desk is, and the pool's state once the pass is in

Every route but the page needs the token in ``X-CNKI-Token``; every POST also needs the same
origin (cnkispider/web/guard.py); the ``Host`` rule of the app applies as everywhere. A GET of a
frame or the state carries the token too: only a token holder sees CNKI's check, and a page of
another site cannot send that header without a CORS preflight, which this app never answers.
"""

from __future__ import annotations

import logging
import threading

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from cnkispider.sessions import tickets
from cnkispider.sessions.tickets import DeskPasses
from cnkispider.web import guard
from cnkispider.words.i18n import _

#: The header of a notification's ticket (``/desk/open`` only) and of the desk pass it becomes.
TICKET_HEADER = "X-CNKI-Desk-Ticket"
PASS_HEADER = "X-CNKI-Desk-Pass"

logger = logging.getLogger(__name__)


def pool_view(store) -> dict:
    """The pool at a glance: sessions by state and the requests the passes have served."""
    from cnkispider.sessions.pool import STATES

    sessions = store.list()
    counts = dict.fromkeys(STATES, 0)
    for s in sessions:
        counts[s.state] = counts.get(s.state, 0) + 1
    return {
        "counts": counts,
        "sessions": len(sessions),
        "requests": sum(s.requests for s in sessions),
    }


def pool_line(view: dict) -> str:
    c = view["counts"]
    return _(
        "session pool: %(ready)d ready, %(leased)d in use, %(person)d need a person, "
        "%(cooling)d cooling; %(requests)d requests served by the passes so far"
    ) % {
        "ready": c.get("ready", 0),
        "leased": c.get("leased", 0),
        "person": c.get("needs-person", 0),
        "cooling": c.get("cooling", 0),
        "requests": view["requests"],
    }


class DeskRoom:
    """The server's one desk (None until someone opens it) and its routes."""

    def __init__(
        self, web, *, browser: str | None = None, idle: float | None = None, cdp: int | None = None
    ):
        self.web = web
        self.browser = browser
        self.cdp = cdp
        self.idle = idle
        self.desk = None
        self._lock = threading.Lock()
        self.passes = DeskPasses()  # what a notification's ticket became (sessions/tickets.py)

    # -- the guard ------------------------------------------------------------------------------

    def _refusal(self, request: Request, *, post: bool) -> Response | None:
        if post:
            same, why = guard.same_origin(request.headers)
            if not same:
                logger.warning("web: refused %s %s: %s", request.method, request.url.path, why)
                return JSONResponse({"error": f"refused: {why}"}, status_code=403)
        if not guard.token_ok(
            self.web.token, request.headers.get(guard.TOKEN_HEADER)
        ) and not self.passes.ok(request.headers.get(PASS_HEADER)):
            logger.warning("web: refused %s %s: no valid token", request.method, request.url.path)
            return JSONResponse(
                {"error": _("refused: the token is missing or wrong")}, status_code=403
            )
        return None

    # -- the desk -------------------------------------------------------------------------------

    def _on_pass(self, paste) -> str:
        """Into the pool exactly as ``session login`` puts a browser's cookies."""
        from cnkispider.sessions.waysin import added_line
        from cnkispider.web import actions

        store = self.web.pool()
        if store is None:
            raise RuntimeError(
                f"Redis is not reachable ({self.web.redis_error}): the pool lives there"
            )
        session = store.add(paste.cookies, source="browser", user_agent=paste.user_agent)
        said = added_line(session, paste, "browser")
        try:
            actions.record(
                self.web.engine, who="desk", action="session", task=None, detail=said, ok=True
            )
        except Exception:  # the audit row is a record, the pass is what matters
            logger.warning("desk: the audit row of the pass failed", exc_info=True)
        return _("Passed: %(said)s") % {"said": said}

    def _open(self):
        from cnkispider.sessions.desk import FAILED, IDLE_SECONDS, Desk
        from cnkispider.sessions.login import LoginError
        from cnkispider.sessions.waysin import cnki_site_of

        with self._lock:
            if self.desk is not None and self.desk.open_now:
                self.desk.touch()
                return self.desk
            home_url, hosts = cnki_site_of(self.web.config.cnki["base_url"])
            desk = Desk(
                home_url,
                hosts,
                self._on_pass,
                browser=self.browser,
                cdp=self.cdp,
                idle=IDLE_SECONDS if self.idle is None else self.idle,
            )
            self.desk = desk
        try:
            return desk.open()
        except LoginError as exc:
            # said once and kept: the page shows why and offers to try again (a new open)
            desk.state = FAILED
            desk.says = _(
                "the desk's browser could not start: %(why)s. Fix that, then try again."
            ) % {"why": exc}
            raise

    def status(self) -> dict:
        desk = self.desk
        if desk is not None:
            out = desk.status()
        else:
            out = {"state": "closed", "says": _("the desk's browser is closed")}
        store = self.web.pool()
        if store is not None:
            try:
                out["pool"] = pool_line(pool_view(store))
            except Exception:  # Redis away a moment: the desk still answers
                out["pool"] = ""
        return out

    def close(self) -> None:
        if self.desk is not None:
            self.desk.close()

    # -- routes ---------------------------------------------------------------------------------

    def page_route(self, page):
        def desk_page(request: Request):
            return page(request, "desk.html")

        return desk_page

    def _redeem(self, ticket: str) -> str | None:
        """A notification's ticket, once: a desk pass for this browser, or None."""
        store = self.web.pool()
        if store is None or not tickets.redeem(store, ticket):
            return None
        return self.passes.give()

    async def open_route(self, request: Request):
        from cnkispider.sessions.login import LoginError

        given = {}
        ticket = request.headers.get(TICKET_HEADER)
        if ticket and guard.same_origin(request.headers)[0]:
            desk_pass = await run_in_threadpool(self._redeem, ticket)
            if desk_pass is None:
                return JSONResponse(
                    {"error": _("refused: this link was used already or is too old")},
                    status_code=403,
                )
            given = {"desk_pass": desk_pass}
        else:
            refusal = self._refusal(request, post=True)
            if refusal is not None:
                return refusal
        try:
            await run_in_threadpool(self._open)
        except LoginError:
            return JSONResponse({**await run_in_threadpool(self.status), **given}, status_code=503)
        return JSONResponse({**await run_in_threadpool(self.status), **given})

    async def close_route(self, request: Request):
        refusal = self._refusal(request, post=True)
        if refusal is not None:
            return refusal
        await run_in_threadpool(self.close)
        return JSONResponse(await run_in_threadpool(self.status))

    async def input_route(self, request: Request):
        refusal = self._refusal(request, post=True)
        if refusal is not None:
            return refusal
        try:
            events = (await request.json()).get("events") or []
        except (ValueError, AttributeError):
            return JSONResponse({"error": 'expected JSON {"events": [...]}'}, status_code=400)
        desk = self.desk
        if desk is None or not isinstance(events, list):
            return JSONResponse({"state": "closed"}, status_code=409)
        await run_in_threadpool(desk.input, [e for e in events if isinstance(e, dict)])
        return JSONResponse({"state": desk.state})

    async def frame_route(self, request: Request):
        refusal = self._refusal(request, post=False)
        if refusal is not None:
            return refusal
        desk = self.desk
        if desk is None:
            return JSONResponse({"state": "closed"}, status_code=409)
        try:
            after = int(request.query_params.get("after", "0"))
        except ValueError:
            after = 0
        frame = await run_in_threadpool(desk.frame, after, 10.0)
        if frame is None:
            return Response(status_code=204)
        return JSONResponse(frame)

    async def state_route(self, request: Request):
        refusal = self._refusal(request, post=False)
        if refusal is not None:
            return refusal
        return JSONResponse(await run_in_threadpool(self.status))
