"""Downloader middlewares that make the crawler look like a patient browser to CNKI.

- :mod:`.session`: one CNKI session (cookie jar + warm-up) per group of requests, renewed before
  CNKI's page-turn limit (``SESSION_*``).
- :mod:`.useragent`: one User-Agent per session (``USERAGENT_*``).
- :mod:`.referer`: the Referer a browser would send per document type (``REFERER_ENABLED``).
- :mod:`.proxy`: proxies from the pool in :mod:`proxy` (``PROXY_*``; off unless ``PROXY_ENABLED``).
- :mod:`.retry`: retries on errors and on CNKI's ways of saying no, each with a fresh session and
  another proxy, with backoff; then :class:`~cnkispider.exceptions.GaveUp` (``RETRY_*``). A
  rejection is never retried; challenges that persist pause the task (a shared cool-down).

``DEFAULTS`` holds the default of every setting these middlewares read, in one place; the
project settings (and config.ini through them) override them. ``SETTINGS`` is what the project
settings should contain for these middlewares to work as designed.
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

DEFAULTS = {
    # session.py
    "SESSION_ENABLED": True,
    "SESSION_TURN_LIMIT": 14,  # CNKI allows 15 turns after the first grid request: renew one early
    "SESSION_MAX_AGE": 600.0,  # seconds; 0 = no limit
    "SESSION_POOL_SIZE": 4,
    # a retired session's cookie jar is freed after this long: PROXY_WAIT_MAX + DOWNLOAD_TIMEOUT
    # + RETRY_BACKOFF_MAX, the longest a request holding a session may still be on its way
    "SESSION_JAR_GRACE": 660.0,
    # useragent.py
    "USERAGENT_ENABLED": True,
    "USERAGENT_BROWSERS": ["Chrome", "Edge", "Firefox", "Safari"],
    "USERAGENT_OS": ["Windows", "Mac OS X", "Linux"],
    "USERAGENT_PLATFORMS": ["desktop"],
    # referer.py reads Scrapy's REFERER_ENABLED (default True); session.py and referer.py read
    # CNKI_BASE_URL, the site protocol's setting (its default is the protocol's)
    # proxy.py
    "PROXY_ENABLED": False,  # the global switch (the seed's PROXY_OPEN)
    "PROXY_API_URL": "",
    "PROXY_API_FORMAT": "lines",  # lines | json
    "PROXY_API_JSON_PATH": "data",
    "PROXY_API_JSON_IP": "ip",
    "PROXY_API_JSON_PORT": "port",
    "PROXY_API_TIMEOUT": 10.0,
    "PROXY_CREDENTIALS": "",  # user:pass for proxies that come without
    "PROXY_STATIC": [],  # fixed proxies instead of an API
    "PROXY_REUSE": 10,  # average uses per proxy
    "PROXY_FETCH_INTERVAL": 5.0,  # seconds between provider calls (its rate limit)
    "PROXY_MAX_AGE": 0.0,  # seconds a proxy may be handed out after purchase; 0 = no limit
    "PROXY_BAN_STATUSES": [403, 407, 429],
    "PROXY_BAN_REASONS": ["captcha"],
    "PROXY_BAN_TIME": 300.0,  # seconds an evicted address is refused when offered again
    "PROXY_WAIT_MAX": 600.0,  # seconds a request waits for a proxy before it gives up
    # retry.py (RETRY_ENABLED, RETRY_TIMES, RETRY_HTTP_CODES, RETRY_EXCEPTIONS,
    # RETRY_PRIORITY_ADJUST and RETRY_GIVE_UP_LOG_LEVEL are Scrapy's own)
    "RETRY_BACKOFF_BASE": 0.5,  # seconds before the first retry (x2 each time, jittered)
    "RETRY_BACKOFF_MAX": 30.0,
    # challenges that persist across this many fresh sessions pause the task for the cool-down
    "RETRY_CHALLENGE_SESSIONS": 4,
    "RETRY_CHALLENGE_COOLDOWN": 300.0,  # seconds; shared by every worker (Redis); 0 = no pause
}


def cnki_protocol(settings):
    """The site protocol for ``CNKI_BASE_URL`` (the protocol's own default when unset).
    Imported when called, so that importing this package stays cheap."""
    from cnkispider.cnki.protocol import Protocol

    base_url = settings.get("CNKI_BASE_URL")
    return Protocol(base_url) if base_url else Protocol()


# What the project settings should hold (merged over DEFAULTS) for the design to work.
SETTINGS = {
    "DOWNLOADER_MIDDLEWARES": DOWNLOADER_MIDDLEWARES,
    "RETRY_TIMES": 5,  # CNKI says no often and transiently; Scrapy's default is 2
    "RETRY_PRIORITY_ADJUST": 1,  # retry at once: ahead of new work, not behind it (Scrapy: -1)
    "COOKIES_ENABLED": True,  # sessions are cookie jars
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
    return classify(kind, response.status, response.url, response.body, location=location)
