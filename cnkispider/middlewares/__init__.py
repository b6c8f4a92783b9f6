"""Downloader middlewares that make the crawler look like a patient browser to CNKI.

- :mod:`.session`: one CNKI session (cookie jar + warm-up) per group of requests, renewed before
  CNKI's page-turn limit (``SESSION_*``).
- :mod:`.useragent`: one User-Agent per session (``USERAGENT_*``).
- :mod:`.referer`: the Referer a browser would send per document type (``REFERER_ENABLED``).
- :mod:`.proxy`: proxies from the pool in :mod:`proxy` (``PROXY_*``; off unless ``PROXY_ENABLED``).
- :mod:`.retry`: retries on errors and on CNKI's ways of saying no, each with a fresh session and
  another proxy, with backoff; then :class:`~cnkispider.exceptions.GaveUp` (``RETRY_*``). A
  rejection is never retried; challenges that persist pause the task (a shared cool-down).

The defaults of the settings they read are in :mod:`cnkispider.default_settings`;
``DOWNLOADER_MIDDLEWARES`` below is their order (``cnkispider.settings`` installs it).
"""

# Order of the downloader middlewares. process_request runs in ascending order, process_response
# and process_exception in descending order (the highest number sees the response first).
#
#   480 Session       assigns the session (meta cnki_session + cookiejar) and warms it up; first,
#                     because UA, proxy and cookies are all chosen per session.
#   500 UserAgent     ours replaces Scrapy's (500 -> None): one UA per session, not one per crawl.
#   510 Referer       the search page of the document type, as a browser sends it.
#   600 Redirect      Scrapy's, unchanged.
#   610 CnkiRetry     replaces Scrapy's RetryMiddleware (550 -> None). Above Redirect, so that it
#                     sees CNKI's "302 -> /verify" before RedirectMiddleware follows it (followed,
#                     the verify page would look like a page of its own); other redirects pass on
#                     to RedirectMiddleware.
#   620 Proxy         above CnkiRetry, so that on the way back it releases or evicts the proxy
#                     before CnkiRetry turns the response into a retry (a middleware that returns
#                     a request stops the chain); on the way out it sets meta["proxy"] before
#                     HttpProxyMiddleware (750) moves the credentials into a header.
#   640 HttpCompression  moved up from 590, so that the body is decompressed before Proxy and
#                     CnkiRetry read it to classify the page.
#   700 Cookies       Scrapy's, unchanged: reads meta cookiejar set by Session; stores the
#                     cookies of every response (a refused one only touches a retiring session).
#   750 HttpProxy     Scrapy's, unchanged: strips the credentials out of meta["proxy"].
from cnkispider.cnki.groups import FACET_PARTS

DOWNLOADER_MIDDLEWARES = {
    "scrapy.downloadermiddlewares.useragent.UserAgentMiddleware": None,
    "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
    "scrapy.downloadermiddlewares.httpcompression.HttpCompressionMiddleware": 640,
    "cnkispider.middlewares.session.SessionMiddleware": 480,
    "cnkispider.middlewares.useragent.UserAgentMiddleware": 500,
    "cnkispider.middlewares.referer.RefererMiddleware": 510,
    "cnkispider.middlewares.retry.CnkiRetryMiddleware": 610,
    "cnkispider.middlewares.proxy.ProxyMiddleware": 620,
}


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
