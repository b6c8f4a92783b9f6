"""``cnkispider web``: the operator's page, over the same database and Redis as ``status``.

One room per concern:

  app       the Starlette app (:func:`create_app`, from the Config): pages, ``/api/status``,
            ``/metrics``, the action routes; every number comes from
            :mod:`cnkispider.status` (the report, the views of rounds), no query lives here
  summaries a task's state, rounds done and the banners, in the page's words
  wrappers  around every answer: the reader's language, the security headers
  actions   the ONLY place that steers: resume, stop, extend, move, recrawl, add a session;
            each is a plan (what it will do, in words) and then the deed, recorded in ``audit``
  guard     the token (``[web] token``, or made once and kept in ``data_dir/web-token``) and
            the check every POST passes: the token AND the same origin (CSRF)
  metrics   the report as Prometheus text (the official ``prometheus_client``)
  history   the report sampled over time, in memory, for the charts
  serve     ``cnkispider web``: the app under uvicorn, bound to 127.0.0.1 unless told otherwise

Templates and static files are package data (Jinja2's PackageLoader, importlib.resources), so
the one-file .exe finds them; htmx and uPlot are vendored in static/ (no CDN: an offline LAN
page), each with its LICENSE.
"""

from cnkispider.web.app import create_app

__all__ = ["create_app"]
