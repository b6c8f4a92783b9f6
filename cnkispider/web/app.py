"""The Starlette app of ``cnkispider web`` (see the package's docstring for the rooms).

Pages (GET, never changing anything)::

    /                          every task: phase, state, rounds, documents, rate, ETA; banners
    /tasks/<name>[?month=M]    the coverage grid, workers, errors by reason, throughput chart
    /tasks/<name>/grid         the grid alone
    /rounds/<id>               one round (the grid's cell opens it): history, worker, errors
    /tasks/<name>/<action>     what the action will do, and the form that confirms it
    /sessions                  the form to paste a "Copy as cURL"
    /api/status                `cnkispider status --json`, over HTTP
    /api/tasks/<name>/history  the chart's series (in memory, since the page started)
    /metrics                   Prometheus text

Actions (POST, each through :mod:`cnkispider.web.guard`, then :mod:`cnkispider.web.actions`)::

    /tasks/<name>/<action>     pause | resume | stop | extend | move | recrawl ("preview" in the
                               form: say what it will do; else do it and record it in audit)
    /sessions                  add the pasted session (same two steps)

Every text of CNKI or the database reaches the page through Jinja2 with autoescape on, or as
JSON through ``tojson`` (which escapes ``<``, ``>``, ``&``); the page runs no inline script
(Content-Security-Policy ``script-src 'self'``).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from jinja2 import Environment, PackageLoader
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from cnkispider.exceptions import CnkiSpiderError
from cnkispider.status.collecting import collect
from cnkispider.status.following import tiers_line
from cnkispider.status.round_views import round_detail, round_grid
from cnkispider.web import actions, guard, words
from cnkispider.web.desk import pool_line
from cnkispider.web.history import History
from cnkispider.web.metrics import metrics_text
from cnkispider.web.summaries import banners, rounds_done, state_of
from cnkispider.web.wrappers import Language, SecurityHeaders
from cnkispider.words import i18n
from cnkispider.words.i18n import _
from cnkispider.words.vocabulary import field_label, halt_reason, ledger_note, word
from tasks.categories import round_label

logger = logging.getLogger(__name__)

REDIS_RETRY_SECONDS = 30
SAMPLE_SECONDS = 10.0


class Web:
    """The app's state: the configuration, the database, Redis (when it runs), the token."""

    def __init__(self, config, engine, token: str, *, sample_seconds: float = SAMPLE_SECONDS):
        from cnkispider.sessions.pool import namespace_for
        from cnkispider.store.redisconn import connect_if_running

        self.config = config
        self.engine = engine
        self.token = token
        self.sample_seconds = sample_seconds
        self.namespace = namespace_for(config.cnki["base_url"], config.redis_prefix)
        self._connect = lambda: connect_if_running(config.redis_url, config.data_dir)
        self.redis, self.redis_label, self.redis_error = self._connect()
        self._tried = 0.0
        self.history = History()
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    # -- the one way to the numbers: cnkispider.status ----------------------------------------

    def report(self, task_name: str | None = None) -> dict:
        import time

        if self.redis is None and time.monotonic() - self._tried >= REDIS_RETRY_SECONDS:
            self.redis, self.redis_label, self.redis_error = self._connect()
            self._tried = time.monotonic()
        report = collect(
            self.engine,
            self.redis,
            heartbeat_seconds=self.config.crawl["heartbeat_seconds"],
            base_dir=self.config.base_dir,
            task_name=task_name,
            redis_label=self.redis_label,
            redis_error=self.redis_error,
            sessions_namespace=self.namespace,
            key_prefix=self.config.redis_prefix,
            look=(self.config.task.look_back_days, self.config.task.look_tiers),
        )
        if task_name is None:
            age = self.history.age()
            if age is None or age >= self.sample_seconds / 2:
                self.history.add(report)
        return report

    def pool(self):
        """The session pool (None while Redis is away)."""
        from cnkispider.sessions.pool import SessionStore

        return None if self.redis is None else SessionStore(self.redis, self.namespace)

    def pool_view(self) -> dict | None:
        """The pool at a glance (cnkispider.web.desk.pool_view), None while Redis is away."""
        from cnkispider.web.desk import pool_view

        store = self.pool()
        if store is None:
            return None
        try:
            return pool_view(store)
        except Exception:  # Redis away a moment: the page without the pool
            logger.warning("web: reading the session pool failed", exc_info=True)
            return None

    def plan(self, name: str) -> dict | None:
        """The task's plan (cnkispider.status.plan), None when it cannot be read now."""
        from cnkispider.status.plan import task_plan

        try:
            return task_plan(self.config, self.engine, name, self.pool())
        except Exception:  # the plan is a hint: a page without it beats no page
            logger.warning("web: the plan of task %s failed", name, exc_info=True)
            return None

    def start(self) -> None:
        def run():
            while not self._stop.wait(self.sample_seconds):
                try:
                    self.report()
                except Exception:  # the database away a moment: the next sample tries again
                    logger.warning("web: sampling the status failed", exc_info=True)

        self._sampler = threading.Thread(target=run, name="web-sampler", daemon=True)
        self._sampler.start()

    def stop(self) -> None:
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join(5)
        if self.redis is not None:
            self.redis.close()


def _templates() -> Jinja2Templates:
    # One environment for every request: `_` and the filters read the request's language
    # (i18n.using, set by wrappers.Language for the whole request), so nothing is installed per request
    # and two requests in two languages at once never see each other's words.
    env = Environment(loader=PackageLoader("cnkispider.web", "templates"), autoescape=True)
    env.globals["_"] = i18n._
    env.globals["ngettext"] = i18n.ngettext
    env.globals["word"] = word
    env.globals["field_label"] = field_label  # a document field by its label
    env.globals["ledger_note"] = ledger_note  # a round's stored note, in the reader's words
    env.globals["halt_reason"] = halt_reason  # a stored reason or error, in the reader's words
    env.globals["pool_line"] = pool_line  # the pool in the desk's own words
    env.globals["state_of"] = state_of
    env.globals["tiers_line"] = tiers_line  # a follow task's looks, as status says them
    env.globals["rounds_done"] = rounds_done
    env.globals["fields"] = actions.FIELDS
    env.globals["offered"] = actions.offered
    env.globals["states"] = {
        s: word(s) for s in ("pending", "in-flight", "done", "failed", "unbalanced", "skipped")
    }
    env.filters["duration"] = lambda seconds: i18n.duration(seconds)
    env.filters["ago"] = lambda seconds, unknown=None: i18n.ago(seconds, unknown=unknown)
    env.filters["number"] = lambda value, decimals=0: i18n.number(value, decimals)
    env.filters["percent"] = lambda value, decimals=1: i18n.percent(value, decimals)
    env.filters["when"] = i18n.moment
    env.filters["round_label"] = round_label
    return Jinja2Templates(env=env)


def create_app(
    config,
    *,
    engine=None,
    token: str,
    sample_seconds: float = SAMPLE_SECONDS,
    allowed_hosts: list[str] | None = None,
    desk_browser: str | None = None,
    desk_idle: float | None = None,
    desk_cdp: int | None = None,
):
    """The app over ``config``'s database and Redis. ``engine``: an open engine (default: one
    opened here, which creates the ``audit`` table when missing); ``token``: see guard;
    ``allowed_hosts``: the names the ``Host`` header may give (None: any). Bound to this machine,
    ``cnkispider web`` allows only its loopback names, so a site that points its own name at
    127.0.0.1 (DNS rebinding) cannot read the page from a browser on this machine."""
    from contextlib import asynccontextmanager

    from starlette.middleware.trustedhost import TrustedHostMiddleware

    from cnkispider.store.db import open_database

    engine = engine or open_database(config.database_url)
    web = Web(config, engine, token, sample_seconds=sample_seconds)
    from cnkispider.web.desk import DeskRoom

    room = DeskRoom(web, browser=desk_browser, idle=desk_idle, cdp=desk_cdp)
    templates = _templates()

    def page(request, template, status=200, /, **context):
        context.setdefault("lang", words.page_language(request))
        response = templates.TemplateResponse(request, template, context, status_code=status)
        if request.query_params.get("lang") in words.LANGUAGES:  # the switch: kept for later pages
            response.set_cookie(
                words.COOKIE, context["lang"], max_age=365 * 86400, samesite="strict"
            )
        return response

    def problem(request, status: int, text: str):
        return page(request, "problem.html", status, status_code=status, text=text)

    # -- pages ---------------------------------------------------------------------------------

    def index(request: Request):
        report = web.report()
        return page(
            request,
            "index.html",
            report=report,
            banners=banners(report),
            audit=actions.recent(engine, 20),
            pool=web.pool_view(),
        )

    def tasks_fragment(request: Request):
        report = web.report()
        return page(request, "_tasks.html", report=report, banners=banners(report))

    def task_page(request: Request):
        name = request.path_params["name"]
        month = request.query_params.get("month") or None
        if month is not None and not _is_month(month):
            return problem(request, 400, _("month %(month)r: expected YYYY-MM") % {"month": month})
        # the task's report and its grid are read at once, each on its own connection: the
        # page waits for the slower of the two queries, not their sum
        with ThreadPoolExecutor(max_workers=1) as pool:
            grid_read = pool.submit(round_grid, engine, name, month=month, base_dir=config.base_dir)
            try:
                report = web.report(name)
                grid = grid_read.result()
            except LookupError as exc:
                return problem(request, 404, str(exc))
        t = report["tasks"][0]
        plan = web.plan(name)
        alive = {w["id"] for w in t["workers"] if w["state"] == "alive"}
        claims = [dict(r, gone=r["worker"] not in alive) for r in t["current_rounds"]]
        return page(
            request,
            "task.html",
            t=t,
            report=report,
            grid=grid,
            claims=claims,
            banners=banners(report),
            plan=plan,
        )

    def grid_fragment(request: Request):
        """The grid alone (for a script, or a page that redraws only its grid)."""
        name = request.path_params["name"]
        month = request.query_params.get("month") or None
        if month is not None and not _is_month(month):
            return problem(request, 400, _("month %(month)r: expected YYYY-MM") % {"month": month})
        try:
            grid = round_grid(engine, name, month=month, base_dir=config.base_dir)
        except LookupError as exc:
            return problem(request, 404, str(exc))
        return page(request, "_grid.html", grid=grid)

    def round_page(request: Request):
        try:
            detail = round_detail(
                engine,
                request.path_params["round_id"],
                heartbeat_seconds=config.crawl["heartbeat_seconds"],
            )
        except LookupError as exc:
            return problem(request, 404, str(exc))
        # the grid's cell asks for the fragment (htmx); opened directly, the round is a page
        template = "_round.html" if request.headers.get("hx-request") else "round.html"
        return page(request, template, r=detail)

    def refused_form(request: Request, action: str, name: str, form: dict, exc: Exception):
        """The action's form again, with why its values were refused (400): nothing was done."""
        return page(
            request,
            "action.html",
            400,
            action=action,
            name=name,
            plan=None,
            values=form,
            error=str(exc),
        )

    def action_form(request: Request):
        name, action = request.path_params["name"], request.path_params["action"]
        form = dict(request.query_params)
        try:
            plan = actions.plan(config, engine, action, name, form)
        except LookupError as exc:
            return problem(request, 404, str(exc))
        except (ValueError, CnkiSpiderError) as exc:
            return refused_form(request, action, name, form, exc)
        return page(
            request,
            "action.html",
            action=action,
            name=name,
            plan=plan,
            values=plan.values or form,
            error=None,
        )

    async def action_post(request: Request):
        name, action = request.path_params["name"], request.path_params["action"]
        form, refusal = await _guarded(request)
        if refusal is not None:
            return refusal
        if action not in actions.TASK_ACTIONS:
            return problem(request, 404, _("no action %(action)r") % {"action": action})
        who = _who(request)
        try:
            plan = await run_in_threadpool(actions.plan, config, engine, action, name, form)
        except LookupError as exc:
            return problem(request, 404, str(exc))
        except (ValueError, CnkiSpiderError) as exc:
            return refused_form(request, action, name, form, exc)
        if "preview" in form or not plan.ready:
            return page(
                request,
                "action.html",
                action=action,
                name=name,
                plan=plan,
                values=plan.values,
                error=None,
            )
        try:
            said = await run_in_threadpool(actions.carry_out, config, engine, plan)
        except (LookupError, ValueError, CnkiSpiderError) as exc:
            await run_in_threadpool(
                actions.record,
                engine,
                who=who,
                action=action,
                task=name,
                detail=f"{plan.says}; " + _("failed: %(error)s") % {"error": exc},
                ok=False,
            )
            return page(request, "done.html", 400, ok=False, text=str(exc), plan=plan)
        await run_in_threadpool(
            actions.record,
            engine,
            who=who,
            action=action,
            task=plan.task,
            detail=f"{plan.says}; {said}",
            ok=True,
        )
        logger.info("web: %s %s by %s: %s", action, plan.task, who, said)
        return page(request, "done.html", ok=True, text=said, plan=plan)

    def sessions_form(request: Request):
        return page(request, "session.html", says=None, paste="", error=None)

    async def sessions_post(request: Request):
        form, refusal = await _guarded(request)
        if refusal is not None:
            return refusal
        text = form.get("paste") or ""
        try:
            paste, says = await run_in_threadpool(actions.plan_session, config, text)
        except (ValueError, CnkiSpiderError) as exc:
            return page(request, "session.html", 400, says=None, paste="", error=str(exc))
        if "preview" in form:
            return page(request, "session.html", says=says, paste=text, error=None)
        if web.redis is None:
            return page(
                request,
                "session.html",
                503,
                says=None,
                paste="",
                error=_("Redis is not reachable (%(error)s): the pool lives there")
                % {"error": web.redis_error},
            )
        said = await run_in_threadpool(actions.add_session, config, web.redis, paste)
        await run_in_threadpool(
            actions.record,
            engine,
            who=_who(request),
            action="session",
            task=None,
            detail=f"{says}; {said}",
            ok=True,
        )
        return page(request, "done.html", ok=True, text=said, plan=None)

    # -- data ----------------------------------------------------------------------------------

    def api_status(request: Request):
        try:
            report = web.report(request.query_params.get("task") or None)
        except LookupError as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)
        return JSONResponse(report, headers={"Cache-Control": "no-store"})

    def api_history(request: Request):
        return JSONResponse(web.history.series(request.path_params["name"]))

    def metrics(request: Request):
        return Response(
            metrics_text(web.report()),
            media_type="text/plain; version=0.0.4; charset=utf-8",
        )

    # -- the guard -----------------------------------------------------------------------------

    async def _guarded(request: Request):
        """(the form, None) when the POST carries the token and comes from this origin; else
        (None, a 403 response). Nothing else is read before this."""
        same, why = guard.same_origin(request.headers)
        form = dict(await request.form())
        given = request.headers.get(guard.TOKEN_HEADER) or form.get(guard.TOKEN_FIELD)
        if not same:
            logger.warning("web: refused a POST to %s: %s", request.url.path, why)
            said = guard.same_origin(request.headers, said=True)[1]
            return None, problem(request, 403, _("refused: %(why)s") % {"why": said})
        if not guard.token_ok(web.token, given if isinstance(given, str) else None):
            logger.warning("web: refused a POST to %s: no valid token", request.url.path)
            return None, problem(request, 403, _("refused: the token is missing or wrong"))
        return {k: v for k, v in form.items() if isinstance(v, str)}, None

    @asynccontextmanager
    async def lifespan(app):
        web.start()
        try:
            yield
        finally:
            room.close()
            web.stop()

    routes = [
        Route("/", index),
        Route("/fragment/tasks", tasks_fragment),
        Route("/api/status", api_status),
        Route("/api/tasks/{name}/history", api_history),
        Route("/metrics", metrics),
        Route("/sessions", sessions_form, methods=["GET"]),
        Route("/sessions", sessions_post, methods=["POST"]),
        Route("/desk", room.page_route(page), methods=["GET"]),
        Route("/desk/open", room.open_route, methods=["POST"]),
        Route("/desk/close", room.close_route, methods=["POST"]),
        Route("/desk/input", room.input_route, methods=["POST"]),
        Route("/desk/frame", room.frame_route, methods=["GET"]),
        Route("/desk/state", room.state_route, methods=["GET"]),
        Route("/rounds/{round_id:int}", round_page),
        Route("/tasks/{name}", task_page),
        Route("/tasks/{name}/grid", grid_fragment, methods=["GET"]),
        Route("/tasks/{name}/{action}", action_form, methods=["GET"]),
        Route("/tasks/{name}/{action}", action_post, methods=["POST"]),
        Mount("/static", StaticFiles(packages=[("cnkispider.web", "static")]), name="static"),
    ]
    middleware = [Middleware(SecurityHeaders), Middleware(Language)]
    if allowed_hosts:
        middleware.insert(0, Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts))

    async def not_found(request: Request, exc):
        # Starlette's own answer is an English "Not Found": the page's, in the reader's language
        return problem(request, 404, _("no such page: %(path)s") % {"path": request.url.path})

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=middleware,
        exception_handlers={404: not_found},
    )
    app.state.web = web
    return app


def _who(request: Request) -> str:
    client = request.client.host if request.client else "?"
    return f"{client} {request.headers.get('user-agent', '')[:200]}"


def _is_month(value: str) -> bool:
    import re

    return bool(re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", value))
