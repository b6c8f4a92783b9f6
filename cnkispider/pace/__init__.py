"""One rate limit per site and per proxy, and one learned pace per CNKI session and per IP,
shared by every worker through Redis.

- :mod:`.store`: the limits and paces, their keys and invariants, and the blocking call that
  reserves send times (:class:`~.store.SharedRateLimit`);
- :mod:`.script`: the Lua script that call runs.

The downloader middleware that holds each request until its send time is
:class:`cnkispider.middlewares.ratelimit.RateLimitMiddleware`.
"""
