"""Downloader middlewares that make the crawler look like a patient browser to CNKI.

- :mod:`.session`: one CNKI session (cookie jar + warm-up) per group of requests, renewed before
  CNKI's page-turn limit (``SESSION_*``).
- :mod:`.useragent`: one User-Agent per session (``USERAGENT_*``).
- :mod:`.referer`: the Referer a browser would send per document type (``REFERER_ENABLED``).
- :mod:`.proxy`: proxies from the pool in :mod:`proxy` (``PROXY_*``; off unless ``PROXY_ENABLED``).
- :mod:`.retry`: retries on errors and on CNKI's ways of saying no, each with a fresh session and
  another proxy, with backoff; then :class:`~cnkispider.exceptions.GaveUp` (``RETRY_*``). A
  rejection is never retried; challenges that persist pause the task (a shared cool-down).

The defaults of the settings they read are in :mod:`cnkispider.default_settings`; their
order, and why each sits where it does, is the one table of the crawl's components in
:mod:`cnkispider.settings` (``DOWNLOADER_MIDDLEWARES``).
"""

from cnkispider.cnki.groups import FACET_PARTS


class Recent(dict):
    """A dict that forgets its oldest entries beyond ``maxsize`` (per-session choices of the
    middlewares: sessions are many over a long crawl, and only the recent ones are in use)."""

    def __init__(self, maxsize: int = 4096):
        super().__init__()
        self.maxsize = maxsize

    def __setitem__(self, key, value):
        self.pop(key, None)
        super().__setitem__(key, value)
        while len(self) > self.maxsize:
            del self[next(iter(self))]


def refusal_of(classify, request, response) -> str | None:
    """CNKI's way of saying no in ``response`` (a reason slug), or None for a usable page.

    Only requests with meta ``cnki_kind`` are classified, by ``classify`` (normally
    :func:`cnkispider.cnki.refusals.classify`). A redirect is passed with its ``Location``, so
    that CNKI's ``302 -> /verify/...`` is told apart from other redirects before
    RedirectMiddleware follows it.
    """
    kind = request.meta.get("cnki_kind")
    if not kind or classify is None:
        return None
    location = None
    if 300 <= response.status < 400:
        raw = response.headers.get("Location")
        location = raw.decode("latin-1") if raw else None
    reason = classify(kind, response.status, response.url, response.body, location=location)
    if reason == "no-pager" and request.meta.get(FACET_PARTS) is not None:
        return None  # a group/result fragment is no grid: cnki/groups.py tells an odd one
    return reason
