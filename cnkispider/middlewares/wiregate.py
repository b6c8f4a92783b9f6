"""The last look before the wire: Scrapy's HTTP download handler, with the rate limit's window
checked just before a request is sent (issue 47.8).

Why: :class:`~cnkispider.middlewares.ratelimit.RateLimitMiddleware` lets a request go when its
windows are open, but Scrapy then queues it in its download slot until a transfer is free. A
429 that comes meanwhile (to this worker, or to another that Redis tells of) closed the window
the queued request would go into. Here, at the wire, such a request is held until the window
opens again (not failed, not lost); one the window did not touch goes at once. Owns no state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler

from cnkispider.middlewares.ratelimit import HandBack, RateLimitMiddleware

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.http import Response


class GatedHTTPHandler(HTTP11DownloadHandler):
    """Scrapy's HTTP/1.1 handler (proxies, TLS and all), behind the rate limit's gate."""

    async def download_request(self, request: Request) -> Response:
        limiter = RateLimitMiddleware.of(self._crawler)
        if limiter is not None:
            again = await limiter.at_wire(request)
            if again is not None:
                raise HandBack(again)
        return await super().download_request(request)
