"""The stand-in site's options (``SiteOptions``, what ``python -m standin`` flags set), its
``break_`` modes and the latency's spelling.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from standin.catalogue import CorpusOptions

# what each break_ mode makes false (see the package docstring)
BREAKS = (
    "client-id",
    "date-filter",
    "category-filter",
    "turn-token",
    "detail-fields",
    "patent-keys",
    "census-short",
    "references-html",
    "expert-ignored",
)


@dataclass
class SiteOptions:
    host: str = "127.0.0.1"
    port: int = 0
    cap_rows: int = 6000  # rows a search reaches, whatever the page size
    max_pages: int | None = None  # the older spelling: cap_rows = max_pages * 50
    # grid requests a session allows after its first (0: no limit); None: 15, or 0 with the
    # human check (a passed session's hidden limits and pace take the fixed count's place)
    turn_limit: int | None = None
    token_ttl: float = 600.0
    session_ttl: float = 1200.0
    latency: tuple[float, float] = (0.0, 0.0)
    proxies: int = 0
    dead_proxies: int = 0
    proxy_auth: str | None = None  # "user:pass"
    provider_interval: float = 5.0
    provider_batch: int = 5
    rate_limit: float = 0.0  # requests per second per IP; 0 = off
    burst: float = 10.0
    ban_seconds: float = 60.0
    # CNKI's 429 (PROTOCOL.md 2026 point 18): requests/s per IP past which a window closes
    # (0 = off), for throttle_seconds; its Retry-After says so in seconds, as an HTTP date
    # (throttle_date), or not at all (throttle_silent: the client must back off on its own)
    throttle: float = 0.0
    throttle_seconds: float = 3.0
    throttle_date: bool = False
    throttle_silent: bool = False
    faults: dict[str, float] = field(default_factory=dict)
    slow_seconds: float = 3.0
    pace_limit: float = 0.0  # hidden requests/s per session and per IP over 2 s; 0 = off
    pace_block_seconds: float = 30.0
    collect_missing: float = 0.3  # share of patent rows without a.icon-collect
    rows_without_keys: bool = False  # patent rows carry their key nowhere
    header_rows: float = 0.0  # share of list pages whose tbody starts with a <td> header row
    breaks: list[str] = field(default_factory=list)  # break_ modes (BREAKS)
    # the person's check (PROTOCOL.md point 11). Off in the Python API (legacy tests and
    # benchmarks), on in ``python -m standin``
    human_check: bool = False
    session_requests: int = 300  # requests a passed session answers (0: no limit)
    session_minutes: float = 30.0  # minutes a pass lasts (0: no limit)
    session_pace: float = 1.5  # requests/s over session_pace_window before a check (0: off)
    session_pace_window: float = 10.0
    session_burst: int = 4  # this many requests within 2 s draw the check (0: off)
    zero_as_soft_block: bool = False  # a genuine zero answers the soft block's bytes
    export_batch: int = 0  # GetExport's hidden limit: ids answered per request (0: all)
    corpus: CorpusOptions = field(default_factory=CorpusOptions)

    def __post_init__(self):
        if self.turn_limit is None:
            self.turn_limit = 0 if self.human_check else 15
        if self.max_pages is not None:
            self.cap_rows = int(self.max_pages) * 50
        unknown = set(self.breaks) - set(BREAKS)
        if unknown:
            raise ValueError(f"unknown break {sorted(unknown)[0]!r} (known: {', '.join(BREAKS)})")


def parse_latency(value) -> tuple[float, float]:
    """``0.05`` (fixed) or ``0.02-0.08`` (uniform), also a number or a [lo, hi] pair."""
    if isinstance(value, int | float):
        return float(value), float(value)
    if isinstance(value, list | tuple):
        lo, hi = (float(v) for v in value)
    else:
        lo_s, sep, hi_s = str(value).partition("-")
        lo = float(lo_s)
        hi = float(hi_s) if sep else lo
    if lo < 0 or hi < lo:
        raise ValueError(f"latency {value!r}: expected SECONDS or LOW-HIGH with 0 <= LOW <= HIGH")
    return lo, hi
