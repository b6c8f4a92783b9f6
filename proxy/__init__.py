"""Proxy pool: batch fetch from a provider, reuse counts, eviction, the global switch.

- :mod:`proxy.pool`: :class:`ProxyPool`, pure state with injected time.
- :mod:`proxy.policy`: :class:`BanPolicy`, whose fault a failure was.
- :mod:`proxy.provider`: parsing provider answers, :class:`ProviderClient`, :func:`mask`.

The Scrapy side (the ``PROXY_*`` settings, the global switch ``PROXY_ENABLED``) is
:class:`cnkispider.middlewares.proxy.ProxyMiddleware`.
"""

from proxy.policy import BanPolicy
from proxy.pool import Proxy, ProxyPool
from proxy.provider import ProviderClient, ProviderError, mask, proxy_key

__all__ = [
    "BanPolicy",
    "ProviderClient",
    "ProviderError",
    "Proxy",
    "ProxyPool",
    "mask",
    "proxy_key",
]
