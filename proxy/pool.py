"""The proxy pool: which proxy to use, how often, and when to buy the next batch.

Pure state: the pool does no I/O and reads no settings. Time (``clock``) and randomness
(``rng``) are injected, so tests drive it deterministically. The owner (the proxy middleware)
asks :meth:`ProxyPool.need_fetch` whether a batch is needed and :meth:`ProxyPool.fetch_delay`
how long the provider's rate limit still asks it to wait; :meth:`ProxyPool.refill` does exactly
that around the caller's ``fetch_batch`` coroutine and an injected ``sleep``, so the waiting is
one explicit sleep, never a loop that polls.
"""

from __future__ import annotations

import inspect
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from proxy.provider import mask, proxy_key

# Invariants of the pool (the state lives here and nowhere else):
# - Each proxy is in exactly one state:
#     live     may be handed out by get();
#     spent    its budget of uses is used up, or it is older than max_age: get() never hands it
#              out again, but a holder that already has it (a CNKI session bound to it) may go
#              on with use() until the holder ends, so a session stays on one address;
#     evicted  it failed (refused, timed out, 407, banned): nobody uses it again, use() says no,
#              and add_batch() refuses its address for ban_time seconds.
#   Beside its state, a proxy may be *cooling* (CNKI said "come back later" through it: a 429):
#   get() skips it until its window ends, a holder may go on (its requests wait for the window
#   in the rate limiter). A 429 while it cools is the same window (requests already in flight),
#   not a new one; COOL_STRIKES windows in a row with no clean answer between evict it.
#   live -> spent and live|spent -> evicted are the only moves; nothing comes back to life
#   (a provider that sells the same address again gives a new Proxy with a new budget).
# - Every get() and use() counts one use. The use that reaches the budget makes the proxy spent,
#   so a live proxy always has uses < budget.
# - The budget is drawn once per proxy, uniformly in reuse * (1 +- reuse_jitter), rounded, at
#   least 1: the average is `reuse`, and a batch bought at one moment does not run dry at one
#   moment (which would make every request wait for the provider at once).
# - Calls to the provider start at least min_fetch_interval apart, counted from the start of
#   each call, failed or not (note_fetch() is called before the call): the provider counts
#   calls, not successes.
# - A proxy URL holds credentials: Proxy.__repr__ and every message show mask(url) only.


@dataclass(eq=False)
class Proxy:
    """One proxy address bought from the provider, with its use counts."""

    url: str = field(repr=False)
    budget: int
    added_at: float
    key: str = ""
    uses: int = 0
    in_flight: int = 0
    successes: int = 0
    failures: int = 0
    state: str = "live"  # live | spent | evicted
    reason: str = ""
    cooling_until: float = 0.0  # clock time its window ends (CNKI said "come back later")
    cools: int = 0  # windows in a row with no clean answer between

    def __post_init__(self):
        self.key = self.key or proxy_key(self.url)

    @property
    def masked(self) -> str:
        return mask(self.url)

    def __repr__(self) -> str:
        return f"<Proxy {self.masked} {self.state} {self.uses}/{self.budget}>"


#: Windows in a row ("come back later" with no clean answer between) that evict a proxy: one is
#: CNKI's pace signal, a proxy that draws them again and again is one CNKI is wary of.
COOL_STRIKES = 3


class ProxyPool:
    """Proxies bought in batches, each used about ``reuse`` times, evicted on failure.

    ``fetch_batch`` is the caller's function (usually a coroutine function) returning a list of
    proxy URLs; only :meth:`refill` calls it.
    """

    def __init__(
        self,
        fetch_batch: Callable[[], Awaitable[list[str]] | list[str]] | None = None,
        *,
        # no defaults here: the crawler's are PROXY_REUSE, PROXY_FETCH_INTERVAL and
        # PROXY_BAN_TIME in cnkispider/default_settings.py, their one home
        reuse: int,
        min_fetch_interval: float,
        ban_time: float,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        reuse_jitter: float = 0.5,
        max_age: float | None = None,
    ):
        if reuse < 1:
            raise ValueError(f"reuse must be at least 1, got {reuse}")
        if not 0 <= reuse_jitter < 1:
            raise ValueError(f"reuse_jitter must be in [0, 1), got {reuse_jitter}")
        self.fetch_batch = fetch_batch
        self.reuse = reuse
        self.reuse_jitter = reuse_jitter
        self.min_fetch_interval = min_fetch_interval
        self.max_age = max_age or None
        self.ban_time = ban_time
        self.clock = clock
        self.rng = rng or random.Random()
        self._live: dict[str, Proxy] = {}
        self._banned: dict[str, float] = {}  # key -> until
        self._last_fetch: float | None = None

    # -- state -------------------------------------------------------------------------------

    def __len__(self) -> int:
        """The number of live proxies (the ones get() may hand out)."""
        self._expire()
        return len(self._live)

    def live(self) -> list[Proxy]:
        self._expire()
        return list(self._live.values())

    # -- fetching ----------------------------------------------------------------------------

    def need_fetch(self) -> bool:
        """True when no proxy is left to hand out."""
        return len(self) == 0

    def next_fetch_at(self) -> float:
        """The clock time from which the provider may be called again."""
        if self._last_fetch is None:
            return self.clock()
        return self._last_fetch + self.min_fetch_interval

    def fetch_delay(self) -> float:
        """Seconds to wait before the provider may be called (0 when it may be now)."""
        return max(0.0, self.next_fetch_at() - self.clock())

    def note_fetch(self) -> None:
        """Record that a provider call starts now (call it before calling the provider)."""
        self._last_fetch = self.clock()

    def add_batch(self, urls: Iterable[str]) -> int:
        """Add the proxies of a batch; returns how many were new. Addresses already live, and
        addresses evicted less than ``ban_time`` ago, are skipped."""
        now = self.clock()
        self._banned = {k: until for k, until in self._banned.items() if until > now}
        added = 0
        for url in urls:
            proxy = Proxy(url, budget=self._draw_budget(), added_at=now)
            if not proxy.key or proxy.key in self._live or proxy.key in self._banned:
                continue
            self._live[proxy.key] = proxy
            added += 1
        return added

    async def refill(self, sleep: Callable[[float], Awaitable[None]]) -> int:
        """Wait out the provider interval with one ``sleep``, call ``fetch_batch`` once, add the
        batch. Returns the number of new proxies. The caller makes sure only one refill runs at a
        time; errors of ``fetch_batch`` propagate (the call still counts for the interval)."""
        if self.fetch_batch is None:
            raise RuntimeError("this pool has no fetch_batch")
        delay = self.fetch_delay()
        if delay > 0:
            await sleep(delay)
        self.note_fetch()
        urls = self.fetch_batch()
        if inspect.isawaitable(urls):
            urls = await urls
        return self.add_batch(urls)

    # -- handing out ---------------------------------------------------------------------------

    def get(self, exclude: Iterable[str] = ()) -> Proxy | None:
        """A random live proxy whose key is not in ``exclude`` (one use counted), or None."""
        self._expire()
        excluded = set(exclude)
        now = self.clock()
        candidates = [
            p for key, p in self._live.items() if key not in excluded and p.cooling_until <= now
        ]
        if not candidates:
            return None
        proxy = self.rng.choice(candidates)
        self._count_use(proxy)
        return proxy

    def use(self, proxy: Proxy) -> bool:
        """Count one more use of a proxy the caller already holds. False if it was evicted
        (the caller must get another); a spent proxy may still serve its holder."""
        self._expire()
        if proxy.state == "evicted":
            return False
        self._count_use(proxy)
        return True

    def release(self, proxy: Proxy, ok: bool) -> None:
        """A request through ``proxy`` has ended; ``ok`` is False when the page was unusable for
        a reason that is not the proxy's fault (it is then only counted)."""
        proxy.in_flight = max(0, proxy.in_flight - 1)
        if ok:
            proxy.successes += 1
            proxy.cools = 0
        else:
            proxy.failures += 1

    def cool(self, proxy: Proxy, seconds: float) -> bool:
        """CNKI said "come back later" through ``proxy`` (its request was released already):
        get() skips it for ``seconds``. True if this evicted it (see COOL_STRIKES)."""
        now = self.clock()
        if proxy.cooling_until <= now:
            proxy.cools += 1  # a new window, not the answer of a request already in flight
        proxy.cooling_until = max(proxy.cooling_until, now + seconds)
        if proxy.cools >= COOL_STRIKES:
            return self.evict(proxy, "http-429")
        return False

    def cooling(self) -> list[Proxy]:
        """Live proxies in a window now."""
        now = self.clock()
        return [p for p in self._live.values() if p.cooling_until > now]

    def evict(self, proxy: Proxy, reason: str) -> bool:
        """Take ``proxy`` out for good because it failed. True if it was not evicted before."""
        if proxy.state == "evicted":
            return False
        proxy.state, proxy.reason = "evicted", reason
        if self._live.get(proxy.key) is proxy:
            del self._live[proxy.key]
        self._banned[proxy.key] = self.clock() + self.ban_time
        return True

    # -- internals -------------------------------------------------------------------------------

    def _draw_budget(self) -> int:
        spread = int(self.reuse * self.reuse_jitter)
        return max(1, self.rng.randint(self.reuse - spread, self.reuse + spread))

    def _count_use(self, proxy: Proxy) -> None:
        proxy.uses += 1
        proxy.in_flight += 1
        if proxy.state == "live" and proxy.uses >= proxy.budget:
            self._spend(proxy, "reused")

    def _spend(self, proxy: Proxy, reason: str) -> None:
        proxy.state, proxy.reason = "spent", reason
        if self._live.get(proxy.key) is proxy:
            del self._live[proxy.key]

    def _expire(self) -> None:
        if self.max_age is None:
            return
        oldest = self.clock() - self.max_age
        for proxy in [p for p in self._live.values() if p.added_at <= oldest]:
            self._spend(proxy, "expired")
