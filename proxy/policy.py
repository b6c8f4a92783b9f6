"""Whose fault was it: the proxy's (evict it) or the site's (keep it)?

Pure: no settings, no I/O. The proxy middleware builds :class:`BanPolicy` from
``PROXY_BAN_STATUSES`` and ``PROXY_BAN_REASONS``.

The proxy's fault:
- a transport failure: with a proxy in the path the connection goes to the proxy, so a refused,
  reset, timed-out or lost connection, a failed CONNECT tunnel or an unresolvable proxy host
  means the proxy is dead or overloaded;
- 407 Proxy Authentication Required, and the statuses CNKI answers an address it has banned
  (not 429: "come back later" cools the proxy for its window, see :class:`proxy.pool.ProxyPool`);
- a ban signal in a page CNKI sent (``captcha``: the slider captcha comes after a few dozen fast
  requests from one IP).

The site's fault (the proxy stays): a verify redirect (the session's page-turn limit or a stale
detail token), a blank or JavaScript page, a list without its pager, a 5xx from CNKI.
"""

from __future__ import annotations

from collections.abc import Iterable

DEFAULT_BAN_STATUSES = (403, 407)
DEFAULT_BAN_REASONS = ("captcha",)

# Matched by class name along the exception's MRO, so that neither Twisted's reactor nor a
# particular download handler has to be imported to recognise them. Scrapy >= 2.14 wraps the
# handlers' own errors in the scrapy.exceptions.Download* classes; the Twisted names cover the
# HTTP/1.1 handler's unwrapped ones.
PROXY_FAULT_EXCEPTIONS = frozenset(
    {
        # scrapy.exceptions
        "DownloadConnectionRefusedError",
        "DownloadTimeoutError",
        "DownloadFailedError",
        "CannotResolveHostError",
        "ResponseDataLossError",
        # scrapy.core.downloader.handlers.http11
        "TunnelError",
        # twisted.internet.error (ConnectError covers refused, TCP timeout, DNS lookup)
        "ConnectError",
        "ConnectionLost",
        "ConnectionDone",
        "TimeoutError",
        # twisted.web._newclient
        "ResponseNeverReceived",
        "ResponseFailed",
        # builtins (ConnectionError covers refused, reset, aborted)
        "ConnectionError",
    }
)


class BanPolicy:
    """Decides whether a failed request through a proxy should evict the proxy.

    Each method returns the eviction reason (a short slug for stats and logs) or None.
    """

    def __init__(
        self,
        ban_statuses: Iterable[int] = DEFAULT_BAN_STATUSES,
        ban_reasons: Iterable[str] = DEFAULT_BAN_REASONS,
    ):
        self.ban_statuses = frozenset(int(s) for s in ban_statuses)
        self.ban_reasons = frozenset(ban_reasons)

    def response_ban(self, status: int, refusal: str | None = None) -> str | None:
        """For a response with HTTP ``status`` that CNKI's classifier called ``refusal``."""
        if refusal is not None and refusal in self.ban_reasons:
            return refusal
        if status in self.ban_statuses:
            return f"http-{status}"
        return None

    def exception_ban(self, exception: BaseException) -> str | None:
        """For a request that ended in ``exception`` instead of a response."""
        for cls in type(exception).__mro__:
            if cls.__name__ in PROXY_FAULT_EXCEPTIONS:
                return type(exception).__name__
        return None
