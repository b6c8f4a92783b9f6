"""The shared limits and paces of a cluster in one Redis: which keys a request counts against,
and the blocking call that reports CNKI's answers and reserves send times.

Ten machines together must be as polite as one: the limits are per site, per proxy, per CNKI
session and per IP for the whole cluster, not per worker.

Fixed limits (per site, per proxy, per verified session) are GCRA keys: a request goes at the
latest time its keys allow. Paces (``PACE_*``, for CNKI pages) are learned per session and per
IP by AIMD (:class:`PaceRule`): grow on clean answers, fall and go quiet on a challenge, never
above the fixed limits. Windows (``:window:{site}:ip:`` and ``:window:{site}:session:``) are
closed by CNKI's "come back later" (a 429, or a 503 with ``Retry-After``) until the time it
names, or for a backoff of 5, 15, 45 s... (``RATELIMIT_MAX_BACKOFF`` at most) when it names
none; a request whose window is closed is held, nothing booked. Keys: ``{prefix}:site:``,
``:proxy:``, ``:verified:``, ``:pace:{site}:ip:``, ``:pace:{site}:session:`` and the windows
(how each rule works: docs/INTERNALS.md).

Invariants, kept by one Lua script (:mod:`cnkispider.pace.script`) that does everything
atomically on the Redis server's clock, so that machines with skewed clocks share one schedule:

- a pace changes only through an answer to a request *granted after its last decrease*: the
  dozen answers in flight when CNKI said no halve it once, not a dozen times, and their clean
  answers do not grow it back during the cool-down;
- a cool-down starts after the last send time already granted (``max(tat, now)``), so the
  address is quiet for the whole cool-down even though those sends were promised earlier;
- every call returns the last decrease of each pace key it touched; a request granted before
  it is not sent but reserves again (*revoked*, in the middleware);
- likewise every call returns when each window it touched was last closed: a request granted
  before that close is not sent but reserves again, and is held until the window opens.

The rest of this module's story: docs/INTERNALS.md#cnkispiderpacestorepy.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from scrapy.utils.httpobj import urlparse_cached

from cnkispider import default_settings
from cnkispider.pace.script import RESERVE_LUA
from proxy.provider import proxy_key

if TYPE_CHECKING:
    import redis
    from scrapy import Request

#: A session's pace outlives the session (10 minutes at most) by a margin; then it is garbage.
SESSION_PACE_TTL = 3600.0


@dataclasses.dataclass(frozen=True)
class PaceRule:
    """The parameters of AIMD (see the module docstring); the same for every pace."""

    start: float = default_settings.PACE_START
    step: float = default_settings.PACE_STEP
    decrease: float = default_settings.PACE_DECREASE
    ceiling: float = default_settings.PACE_CEILING
    probe_seconds: float = default_settings.PACE_PROBE_SECONDS
    min_rate: float = default_settings.PACE_MIN
    cooldown: float = default_settings.PACE_COOLDOWN
    cooldown_max: float = default_settings.PACE_COOLDOWN_MAX
    window: float = default_settings.PACE_WINDOW

    def __post_init__(self) -> None:
        if not 0 < self.min_rate <= self.start:
            raise ValueError("PACE_MIN must be positive and at most PACE_START")
        if self.step <= 0 or self.probe_seconds <= 0:
            raise ValueError("PACE_STEP and PACE_PROBE_SECONDS must be positive")
        if not 0 < self.decrease < 1:
            raise ValueError("PACE_DECREASE must be between 0 and 1")
        if not 0 < self.ceiling <= 1:
            raise ValueError("PACE_CEILING must be in (0, 1]")
        if self.window < 0:
            raise ValueError("PACE_WINDOW must be at least 0")
        if self.cooldown < 0 or self.cooldown_max < self.cooldown:
            raise ValueError("PACE_COOLDOWN must be at least 0 and at most PACE_COOLDOWN_MAX")

    def as_json(self) -> dict[str, float]:
        return dataclasses.asdict(self)


class Limit(NamedTuple):
    """One limit on one request: a fixed rate (``interval``, ``tolerance`` in µs), a pace
    (``max_rate`` requests/s, 0 = none, and the key's ``ttl`` in seconds) or a window
    (``window``: closed while CNKI said to come back later)."""

    key: str
    pace: bool
    interval: float = 0.0
    tolerance: float = 0.0
    max_rate: float = 0.0
    ttl: float = 0.0
    window: bool = False


class Closed(NamedTuple):
    """A 429 (or 503 with ``Retry-After``) to report: it closes ``limits`` (the request's
    windows), for ``seconds`` (None: the backoff). A clean answer (``closed`` False) resets
    their backoff."""

    closed: bool
    granted: int  # µs, Redis clock
    limits: tuple[Limit, ...]
    seconds: float | None = None


class Window(NamedTuple):
    """What one call saw of a window: when it was last closed and opens again (µs, Redis
    clock; -1 / 0: never), its strikes (429s with no clean answer since)."""

    closed_at: int
    until: int
    strikes: int


class Answer(NamedTuple):
    """A CNKI answer to report to the paces of its request: 0 (or False) a clean page, 1 (True)
    a challenge, 2 a 429 (the pace falls, without a cool-down of its own: its window is one)."""

    challenge: int
    granted: int  # µs, Redis clock
    limits: tuple[Limit, ...]  # the request's paces
    rates: tuple[float, ...]  # the pace of each when the request was granted


class Reply(NamedTuple):
    """What one script call answered."""

    now: int  # µs, Redis clock
    waits: list[float]  # seconds, per reservation
    decreased_at: dict[str, int]  # µs, per pace key touched (-1: never)
    decreases: list[tuple[str, float, float, float]]  # key, old rate, new rate, cool-down s
    returned: float  # time.monotonic() when the call returned, on the calling thread
    rates: list[tuple[float, ...]]  # per reservation, the paces of its pace keys
    windows: dict[str, Window] = {}  # per window key touched
    closes: list[tuple[str, float, int]] = []  # key, seconds closed, strikes: closed by this call


def windows_index(prefix: str) -> str:
    return f"{prefix}:windows"


def windows_report(client: redis.Redis, prefix: str) -> dict[str, Any]:
    """What status shows of the windows (read only, no SCAN): the 429s they counted
    (``answers``; each window's count is kept ``WINDOW_KEEP`` after it last opened) and each
    window closed now: what (``ip`` or ``session``), its name and site, the seconds left on
    Redis's clock and its strikes."""
    seconds, micros = client.time()
    now = seconds * 1_000_000 + micros
    keys = [k.decode() for k in client.zrange(windows_index(prefix), 0, -1)]
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.hmget(key, "u", "n", "c")
    closed, answers = [], 0
    for key, (until, strikes, count) in zip(keys, pipe.execute(), strict=True):
        site, _, rest = key.removeprefix(f"{prefix}:window:").partition(":ip:")
        what, name = ("ip", rest) if rest else ("session", site.rpartition(":session:")[2])
        if what == "session":
            site = site.rpartition(":session:")[0]
        else:  # every 429 closes one address's window (and maybe its session's too)
            answers += int(count or 0)
        if until is None or int(until) <= now:
            continue
        closed.append(
            {
                "what": what,
                "name": name,
                "site": site,
                "seconds_left": round((int(until) - now) / 1_000_000, 1),
                "strikes": int(strikes or 0),
            }
        )
    return {"answers": answers, "closed": closed}


class SharedRateLimit:
    """The limits and paces of a cluster in one Redis: which keys a request counts against, and
    the blocking call that reports answers and reserves send times for a batch of requests."""

    def __init__(
        self,
        client_factory: Callable[[], redis.Redis],
        *,
        site_rate: float = 0.0,
        proxy_rate: float = 0.0,
        burst: int = 1,
        prefix: str = default_settings.RATELIMIT_KEY_PREFIX,
        pace: PaceRule | None = None,
        pace_max: float = 0.0,
        pace_ttl: float = default_settings.PACE_TTL,
        direct_name: str = default_settings.PACE_DIRECT_NAME,
        verified_rate: float = 0.0,
        windows: bool = True,
        max_backoff: float = default_settings.RATELIMIT_MAX_BACKOFF,
        backoff: tuple[float, float] = default_settings.RATELIMIT_BACKOFF,
    ):
        if site_rate < 0 or proxy_rate < 0 or pace_max < 0:
            raise ValueError("rate limits must be 0 (none) or positive")
        if burst < 1:
            raise ValueError(f"RATELIMIT_BURST must be at least 1, got {burst}")
        self.site_rate, self.proxy_rate, self.burst = site_rate, proxy_rate, burst
        self.prefix = prefix
        self.pace = pace
        # "bounded by the site's limit": a pace that outgrew what may be sent would be a lie
        self.pace_max = pace_max or site_rate
        self.pace_ttl = pace_ttl
        self.direct_name = direct_name
        # A session a person passed is checked again past a pace CNKI does not publish, and a
        # check costs a person's slider, not a cool-down: it never goes faster than this
        # (requests/s, every worker together), whether or not paces are learned.
        self.verified_rate = verified_rate
        # CNKI's "come back later" closes a window for every worker (see the module docstring)
        self.windows = windows
        if max_backoff <= 0 or backoff[0] <= 0 or backoff[1] < 1:
            raise ValueError("RATELIMIT_MAX_BACKOFF and RATELIMIT_BACKOFF must be positive")
        self.max_backoff = max_backoff
        self.backoff = backoff
        self._client_factory = client_factory
        self._client: redis.Redis | None = None
        self._script: Any = None

    @property
    def active(self) -> bool:
        return (
            self.site_rate > 0
            or self.proxy_rate > 0
            or self.pace is not None
            or self.verified_rate > 0
            or self.windows
        )

    def _limit(self, kind: str, name: str, rate: float) -> Limit:
        interval = 1_000_000 / rate
        return Limit(f"{self.prefix}:{kind}:{name}", False, interval, (self.burst - 1) * interval)

    def limits(self, request: Request) -> list[Limit]:
        """The limits ``request`` counts against (none for a non-HTTP URL or ``dont_ratelimit``)."""
        if request.meta.get("dont_ratelimit"):
            return []
        parsed = urlparse_cached(request)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            return []
        out = []
        site = parsed.hostname.lower() + (f":{parsed.port}" if parsed.port else "")
        if self.site_rate > 0:
            out.append(self._limit("site", site, self.site_rate))
        proxy = proxy_key(request.meta.get("proxy"))
        if self.proxy_rate > 0 and proxy:
            out.append(self._limit("proxy", proxy, self.proxy_rate))
        verified = request.meta.get("cnki_verified") and request.meta.get("cnki_session")
        if verified and self.verified_rate > 0:
            interval = 1_000_000 / self.verified_rate
            out.append(Limit(f"{self.prefix}:verified:{verified}", False, interval, 0.0))
        if self.pace is not None and request.meta.get("cnki_kind"):
            base = f"{self.prefix}:pace:{site}"
            ip_max = self.pace_max
            if proxy and self.proxy_rate > 0:
                ip_max = min(ip_max, self.proxy_rate) if ip_max else self.proxy_rate
            out.append(
                Limit(
                    f"{base}:ip:{proxy or self.direct_name}",
                    True,
                    max_rate=ip_max,
                    ttl=self.pace_ttl,
                )
            )
            session = request.meta.get("cnki_session")
            if session:
                out.append(
                    Limit(f"{base}:session:{session}", True, max_rate=ip_max, ttl=SESSION_PACE_TTL)
                )
        if self.windows:
            # the address CNKI sees (the site from here, or the proxy) and, when a person passed
            # the session, the session: CNKI binds a pass's limits to its cookie
            base = f"{self.prefix}:window:{site}"
            out.append(Limit(f"{base}:ip:{proxy or self.direct_name}", False, window=True))
            if verified:
                out.append(Limit(f"{base}:session:{verified}", False, window=True))
        return out

    def call(
        self,
        batch: list[list[Limit]],
        answers: Iterable[Answer] = (),
        closes: Iterable[Closed] = (),
    ) -> Reply:
        """Report ``answers`` and ``closes``, then reserve send times for ``batch``, in order.
        Blocking: one script call (the client is made on first use, on the calling thread)."""
        if self._client is None:
            self._client = self._client_factory()
            self._script = self._client.register_script(RESERVE_LUA)
        keys: list[str] = []
        meta: list[list[float]] = []
        index: dict[str, int] = {}

        def key_index(limit: Limit) -> int:
            # Each key once in KEYS: the script keeps state per key name anyway.
            if limit.key not in index:
                keys.append(limit.key)
                if limit.window:
                    meta.append([2, 0, 0])
                elif limit.pace:
                    meta.append([1, limit.max_rate, int(limit.ttl * 1000)])
                else:
                    meta.append([0, limit.interval, limit.tolerance])
                index[limit.key] = len(keys)  # Lua counts from 1
            return index[limit.key]

        requests = [[key_index(limit) for limit in limits] for limits in batch]
        feedback = []
        for answer in answers:
            event: list[Any] = [int(answer.challenge), answer.granted]
            for limit, rate in zip(answer.limits, answer.rates, strict=True):
                event += [key_index(limit), rate]
            feedback.append(event)
        windows = []
        for close in closes:
            after = -1 if close.seconds is None else int(close.seconds * 1000)
            windows.append(
                [int(close.closed), close.granted, after, *(key_index(w) for w in close.limits)]
            )
        document = {
            "p": self.pace.as_json() if self.pace else PaceRule().as_json(),
            "m": meta,
            "f": feedback,
            "w": windows,
            "k": {"base": self.backoff[0], "factor": self.backoff[1], "max": self.max_backoff},
            "c": self.channel,
            "x": len(keys) + 1 if windows else None,
            "r": requests,
        }
        if windows:
            keys = [*keys, self.index]
        now, waits, decreases, changes, rates, states, closed = self._script(
            keys=keys, args=[json.dumps(document)]
        )
        returned = time.monotonic()
        return Reply(
            now=now,
            waits=[w / 1_000_000 for w in waits],
            decreased_at={keys[i - 1]: d for i, d in decreases},
            decreases=[
                (keys[i - 1], old / 1000, new / 1000, cool) for i, old, new, cool in changes
            ],
            returned=returned,
            rates=[tuple(float(r) for r in granted) for granted in rates],
            windows={keys[i - 1]: Window(a, u, n) for i, a, u, n in states},
            closes=[(keys[i - 1], ms / 1000, n) for i, ms, n in closed],
        )

    @property
    def channel(self) -> str:
        """Where a closed window is published (see :meth:`listen`)."""
        return f"{self.prefix}:windows:closed"

    @property
    def index(self) -> str:
        """The windows by when they open again (a sorted set; see :func:`windows_report`)."""
        return windows_index(self.prefix)

    def listen(self, heard: Callable[[str, int], None]) -> Callable[[], None]:
        """Call ``heard(window key, closed at µs)`` for every window any worker closes, from a
        daemon thread of its own (its own connection, from the same factory); returns the
        function that stops it. Redis trouble: it connects again a second later (a close it
        missed meanwhile reaches this worker through its next call, as without listening)."""
        stop = threading.Event()

        def run() -> None:
            while not stop.is_set():
                client = pubsub = None
                try:
                    client = self._client_factory()
                    pubsub = client.pubsub(ignore_subscribe_messages=True)
                    pubsub.subscribe(self.channel)
                    while not stop.is_set():
                        message = pubsub.get_message(timeout=0.5)
                        if message and message.get("type") == "message":
                            key, _, at = message["data"].decode().rpartition(" ")
                            heard(key, int(at))
                except Exception:  # any Redis trouble: connect again
                    stop.wait(1.0)
                finally:
                    for one in (pubsub, client):
                        try:
                            if one is not None:
                                one.close()
                        except Exception:  # closing a broken connection
                            pass

        threading.Thread(target=run, name="cnki-windows", daemon=True).start()
        return stop.set

    def reserve(self, batch: list[list[Limit]]) -> list[float]:
        """The seconds each request of ``batch`` must wait (see :meth:`call`)."""
        return self.call(batch).waits

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
