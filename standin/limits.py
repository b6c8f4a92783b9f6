"""CNKI's limits and the stand-in's faults as plain state classes (time is passed in).

- ``SessionTable``: warm-up sessions. A session allows ``1 + turn_limit`` grid requests (0: no
  limit) and expires after ``ttl`` idle seconds.
  Invariant: a session id is in the table iff it was issued and has not been idle longer
  than ``ttl`` (expired ones are dropped when met, and swept now and then).
- ``TokenSigner``: detail ``v=`` tokens, a keyed-BLAKE2 MAC over (session id, dbname, filename,
  issue time) in base64url. Opaque to the crawler, unforgeable, and tied to its session.
- ``ClientIds``: the ``Ecp_ClientId`` values GenerateClientID hands out, keyed-BLAKE2 MACed, so
  "was it issued here" needs no table (a forged or foreign id fails the MAC).
- ``PaceGuard``: CNKI's 2026 challenge trigger. Requests per key (a session or an IP) over a
  sliding window; a key whose count in the window passes ``limit * window`` is blocked. A blocked
  session stays blocked ``block_seconds`` from the moment it went over; a blocked IP stays blocked
  until it has been quiet for ``block_seconds`` (every request while blocked restarts the quiet).
  Invariant: a key is in ``_blocked`` iff it went over and its block has not been seen to end;
  its window is emptied when it is blocked, so it starts afresh after recovery.
- ``RateLimiter``: a token bucket per client address (``rate``/s, ``burst``); an address that
  empties its bucket is banned for ``ban_seconds`` and starts with a full bucket afterwards.
- ``Throttle``: CNKI's "come back later" (HTTP 429, PROTOCOL.md 2026 point 18). Requests per
  key (an IP) over a sliding second; the request past ``rate`` closes the key's window for
  ``seconds`` and is answered 429, and so is every request inside the window (counted apart:
  ``inside``; of them ``told``: those that came more than ``TOLD_AFTER`` seconds after the
  window closed, when the client had its 429 and cannot have sent them before it was told;
  ``after``: each one's seconds after the close, for a test to tell the two apart). The window
  is not extended by the requests inside it.
  Invariant: a key is in ``_until`` iff its window was closed and not yet seen to open.
- ``FaultPlan``: which fault (if any) a request gets. The draw is hash(seed, fault, request
  identity, occurrence of that identity) < rate, so one seed and one request sequence give the
  same faults, and a retried request (same identity, next occurrence) draws afresh.
- ``ProxyProvider``: the proxy-provider API, a few proxies per call round-robin, at most one
  successful call per ``interval`` seconds.
- ``HumanCheck``: which sessions a person passed (CNKI's 2026 slider check, bound to the session
  cookie, not the IP). A pass lets its session make at most ``requests`` requests within
  ``minutes`` of the pass, at most ``pace * pace_window`` of them in any ``pace_window`` seconds
  and fewer than ``burst`` in any ``BURST_WINDOW`` seconds; the request that breaks a rule is
  the first one checked again, and so is every later one until a person passes it again.
  Invariant: a session id is in ``_current`` iff a person passed it; its record's ``reason`` is
  None while it is answered and names the broken rule (limit, minutes, pace, control) from the
  moment it was checked again (or its session expired: idle). Every pass is a new record in ``records`` (kept for /_stats).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections import deque
from dataclasses import dataclass, field

# Order of precedence when several faults are drawn for one request.
FAULTS = ("reset", "e500", "e502", "e503", "verify", "captcha", "blank", "javascript")
ALL_FAULTS = FAULTS + ("slow",)


class Session:
    __slots__ = ("sid", "kns2", "last_used", "grid_requests")

    def __init__(self, sid: str, kns2: str, now: float):
        self.sid, self.kns2, self.last_used, self.grid_requests = sid, kns2, now, 0


class SessionTable:
    def __init__(self, seed: int, ttl: float, turn_limit: int):
        self.ttl, self.turn_limit = ttl, turn_limit
        self._key = hashlib.blake2b(f"sessions|{seed}".encode(), digest_size=32).digest()
        self._sessions: dict[str, Session] = {}
        self.created = 0

    def create(self, now: float) -> Session:
        self.created += 1
        digest = hashlib.blake2b(
            str(self.created).encode(), key=self._key, digest_size=16
        ).hexdigest()
        session = Session(digest[:24], f"{digest[24:32]}{self.created:08d}", now)
        self._sessions[session.sid] = session
        if self.created % 1024 == 0:
            self.sweep(now)
        return session

    def get(self, sid: str | None, now: float) -> Session | None:
        """The live session, or None; does not count as use."""
        session = self._sessions.get(sid) if sid else None
        if session is not None and now - session.last_used > self.ttl:
            del self._sessions[sid]
            return None
        return session

    def grid(self, sid: str | None, now: float) -> str:
        """Count one grid request: ``ok``, ``unknown`` (no live session) or ``turn-limit``."""
        session = self.get(sid, now)
        if session is None:
            return "unknown"
        session.last_used = now
        session.grid_requests += 1
        if self.turn_limit <= 0 or session.grid_requests <= 1 + self.turn_limit:
            return "ok"
        return "turn-limit"

    def touch(self, sid: str, now: float) -> bool:
        session = self.get(sid, now)
        if session is None:
            return False
        session.last_used = now
        return True

    def sweep(self, now: float) -> None:
        for sid in [s for s, v in self._sessions.items() if now - v.last_used > self.ttl]:
            del self._sessions[sid]

    def __len__(self) -> int:
        return len(self._sessions)


class TokenSigner:
    MAC_SIZE = 12

    def __init__(self, seed: int):
        self._key = hashlib.blake2b(f"tokens|{seed}".encode(), digest_size=32).digest()

    def _mac(self, payload: bytes) -> bytes:
        return hashlib.blake2b(payload, key=self._key, digest_size=self.MAC_SIZE).digest()

    def prefix(self, sid: str, issued_ms: int) -> bytes:
        """The per-response part of the payload (shared by all rows of one list page)."""
        return f"{sid}\x1f{issued_ms}\x1f".encode()

    def issue(self, prefix: bytes, dbname: str, filename: str) -> bytes:
        payload = prefix + f"{dbname}\x1f{filename}".encode()
        return base64.urlsafe_b64encode(self._mac(payload) + payload)

    def check(self, token: str) -> tuple[str, int, str, str] | None:
        """(session id, issue time in ms, dbname, filename) of a genuine token, else None."""
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (binascii.Error, ValueError):
            return None
        mac, payload = raw[: self.MAC_SIZE], raw[self.MAC_SIZE :]
        if len(mac) != self.MAC_SIZE or mac != self._mac(payload):
            return None
        try:
            sid, issued, dbname, filename = payload.decode().split("\x1f")
            return sid, int(issued), dbname, filename
        except ValueError:
            return None


class ClientIds:
    """Issue and check ``Ecp_ClientId`` values (``o`` + 12 digits + 8 hex of MAC)."""

    def __init__(self, seed: int):
        self._key = hashlib.blake2b(f"client-ids|{seed}".encode(), digest_size=32).digest()
        self.issued = 0

    def _mac(self, serial: str) -> str:
        return hashlib.blake2b(serial.encode(), key=self._key, digest_size=4).hexdigest()

    def issue(self) -> str:
        self.issued += 1
        serial = f"{self.issued:012d}"
        return f"o{serial}{self._mac(serial)}"

    def valid(self, value: str | None) -> bool:
        if not value or len(value) != 21 or value[0] != "o":
            return False
        return self._mac(value[1:13]) == value[13:]


class PaceGuard:
    """Requests per key over a sliding window; going over blocks the key (see the module doc)."""

    def __init__(self, limit: float, block_seconds: float, window: float = 2.0, quiet=False):
        self.limit, self.block_seconds, self.window, self.quiet = (
            limit,
            block_seconds,
            window,
            quiet,
        )
        self._hits: dict[str, deque] = {}
        self._blocked: dict[str, float] = {}
        self.blocks = 0
        self._calls = 0

    @property
    def active(self) -> bool:
        return self.limit > 0

    def hit(self, key: str, now: float) -> bool:
        """Count one request of ``key`` at ``now``; True if the key is (now) blocked."""
        until = self._blocked.get(key)
        if until is not None:
            if now < until:
                if self.quiet:  # an IP must be quiet for block_seconds to recover
                    self._blocked[key] = now + self.block_seconds
                return True
            del self._blocked[key]
        hits = self._hits.get(key)
        if hits is None:
            hits = self._hits[key] = deque()
        horizon = now - self.window
        while hits and hits[0] <= horizon:
            hits.popleft()
        hits.append(now)
        if len(hits) > self.limit * self.window:
            del self._hits[key]
            self._blocked[key] = now + self.block_seconds
            self.blocks += 1
            return True
        self._calls += 1
        if self._calls % 4096 == 0:  # forget keys that have been idle a whole window
            for k in [k for k, h in self._hits.items() if not h or h[-1] <= horizon]:
                del self._hits[k]
        return False

    def blocked(self, now: float) -> list[str]:
        return sorted(k for k, until in self._blocked.items() if until > now)

    def clear(self) -> None:
        self._hits.clear()
        self._blocked.clear()


class RateLimiter:
    def __init__(self, rate: float, burst: float, ban_seconds: float):
        self.rate, self.burst, self.ban_seconds = rate, max(1.0, burst), ban_seconds
        self._buckets: dict[str, tuple[float, float]] = {}
        self._banned_until: dict[str, float] = {}
        self.bans = 0

    @property
    def active(self) -> bool:
        return self.rate > 0

    def allow(self, ip: str, now: float) -> bool:
        until = self._banned_until.get(ip)
        if until is not None:
            if now < until:
                return False
            del self._banned_until[ip]
            self._buckets.pop(ip, None)
        tokens, last = self._buckets.get(ip, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens < 1.0:
            self._banned_until[ip] = now + self.ban_seconds
            self._buckets.pop(ip, None)
            self.bans += 1
            return False
        self._buckets[ip] = (tokens - 1.0, now)
        return True

    def banned(self, now: float) -> list[str]:
        return sorted(ip for ip, until in self._banned_until.items() if until > now)

    def unban(self) -> None:
        self._banned_until.clear()
        self._buckets.clear()


class Throttle:
    """Per-key windows closed by going past ``rate`` requests/s (see the module doc)."""

    #: Seconds after a window closed from which a request inside it was sent by a client that
    #: had its 429 (a request already on the wire when the 429 left cannot be called back): a
    #: loaded machine's answer time, generously.
    TOLD_AFTER = 0.25
    #: Inside requests whose lateness is kept (a stand-in runs for minutes, not for ever).
    MAX_AFTER = 100_000

    def __init__(self, rate: float, seconds: float):
        self.rate, self.seconds = rate, seconds
        self._hits: dict[str, deque] = {}
        self._until: dict[str, tuple[float, float]] = {}  # key -> (closed at, until)
        self.closed = 0  # windows closed
        self.inside = 0  # requests that came inside a window
        self.told = 0  # of them, after the client had been told
        self.after: list[float] = []  # each inside request's seconds after its window closed

    @property
    def active(self) -> bool:
        return self.rate > 0

    def hit(self, key: str, now: float) -> float | None:
        """Count one request of ``key``: None if it may be answered, else the seconds left of
        its window (the request is answered 429)."""
        window = self._until.get(key)
        if window is not None:
            closed_at, until = window
            if now < until:
                self.inside += 1
                if len(self.after) < self.MAX_AFTER:
                    self.after.append(now - closed_at)
                if now - closed_at > self.TOLD_AFTER:
                    self.told += 1
                return until - now
            del self._until[key]
        hits = self._hits.setdefault(key, deque())
        while hits and hits[0] <= now - 1.0:
            hits.popleft()
        hits.append(now)
        if len(hits) > self.rate:
            hits.clear()
            self._until[key] = (now, now + self.seconds)
            self.closed += 1
            return self.seconds
        return None

    def closed_now(self, now: float) -> dict[str, float]:
        return {k: until - now for k, (_, until) in sorted(self._until.items()) if until > now}

    def clear(self) -> None:
        self._hits.clear()
        self._until.clear()


class FaultPlan:
    def __init__(self, seed: int, rates: dict[str, float] | None = None):
        self._key = hashlib.blake2b(f"faults|{seed}".encode(), digest_size=32).digest()
        self.rates = dict.fromkeys(ALL_FAULTS, 0.0)
        self._seen: dict[bytes, int] = {}
        self.update(rates or {})

    def update(self, rates: dict[str, float]) -> None:
        for name, rate in rates.items():
            if name not in self.rates:
                raise ValueError(f"unknown fault {name!r} (known: {', '.join(ALL_FAULTS)})")
            rate = float(rate)
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"fault {name}: rate {rate} is not within 0..1")
            self.rates[name] = rate
        self.active = any(self.rates.values())

    def _u(self, name: str, identity: bytes, occurrence: int) -> float:
        digest = hashlib.blake2b(
            b"%s|%d|" % (name.encode(), occurrence) + identity, key=self._key, digest_size=8
        ).digest()
        return int.from_bytes(digest, "big") / 2.0**64

    def draw(self, identity: bytes) -> tuple[str | None, bool]:
        """(fault to answer with or None, whether to answer slowly) for one request."""
        key = hashlib.blake2b(identity, digest_size=16).digest()
        occurrence = self._seen.get(key, 0)
        self._seen[key] = occurrence + 1
        slow = self.rates["slow"] > 0 and self._u("slow", key, occurrence) < self.rates["slow"]
        for name in FAULTS:
            rate = self.rates[name]
            if rate > 0 and self._u(name, key, occurrence) < rate:
                return name, slow
        return None, slow


@dataclass
class ProxyProvider:
    ports: list[int]
    interval: float = 5.0
    batch: int = 5
    _next: int = 0
    _last_ok: float | None = None
    calls: dict[str, int] = field(default_factory=lambda: {"ok": 0, "refused": 0})

    def take(self, num: int, now: float) -> list[int] | None:
        """Ports handed out by one call, or None when called again too soon."""
        if self._last_ok is not None and now - self._last_ok < self.interval:
            self.calls["refused"] += 1
            return None
        self._last_ok = now
        self.calls["ok"] += 1
        if not self.ports:
            return []
        out = []
        for _ in range(max(0, min(num, self.batch))):
            out.append(self.ports[self._next % len(self.ports)])
            self._next += 1
        return out


BURST_WINDOW = 2.0  # seconds: "4 rapid requests drew the captcha" (PROTOCOL.md, point 11)


class Pass:
    """One pass of the human check: a session answered until one of its limits is reached."""

    __slots__ = ("sid", "number", "passed_at", "requests", "hits", "reason", "checked_at")
    __slots__ += ("checked_after_requests", "check_after", "by_kind", "documents")

    def __init__(self, sid: str, number: int, now: float):
        self.sid, self.number, self.passed_at = sid, number, now
        self.requests = 0  # requests answered (not challenged) since the pass
        self.hits: deque = deque()  # times of the recent requests (the pace windows)
        self.reason: str | None = None  # why it was checked again; None while answered
        self.checked_at: float | None = None
        self.checked_after_requests: int | None = None
        self.check_after: int | None = None  # control: checked after this many more requests
        self.by_kind = {
            "page": 0,
            "list": 0,
            "detail": 0,
            "export": 0,
        }  # admitted requests by route kind
        self.documents = 0  # detail pages served (200) in this pass

    def view(self, now: float) -> dict:
        return {
            "session": self.sid,
            "pass": self.number,
            "requests": self.requests,
            **{f"{kind}_requests": n for kind, n in self.by_kind.items()},
            "documents": self.documents,
            "seconds_since_pass": round(now - self.passed_at, 3),
            "checked": self.reason is not None,
            "reason": self.reason,
            "checked_after_requests": self.checked_after_requests,
            "checked_after_seconds": (
                None if self.checked_at is None else round(self.checked_at - self.passed_at, 3)
            ),
        }


class HumanCheck:
    """Sessions a person passed and their hidden limits (see the module docstring)."""

    def __init__(
        self,
        on: bool,
        requests: int,
        minutes: float,
        pace: float,
        pace_window: float,
        burst: int,
    ):
        self.on = on
        self.requests, self.minutes = requests, minutes
        self.pace, self.pace_window, self.burst = pace, pace_window, burst
        self._current: dict[str, Pass] = {}
        self.records: list[Pass] = []

    def limits(self) -> dict:
        return {
            "session_requests": self.requests,
            "session_minutes": self.minutes,
            "session_pace": self.pace,
            "session_pace_window": self.pace_window,
            "session_burst": self.burst,
            "burst_window": BURST_WINDOW,
        }

    def pass_(self, sid: str, now: float) -> Pass:
        """A person passed the check in session ``sid``: a fresh pass, whatever came before."""
        record = Pass(sid, len(self.records) + 1, now)
        self._current[sid] = record
        self.records.append(record)
        return record

    def current(self, sid: str | None) -> Pass | None:
        return self._current.get(sid) if sid else None

    def admit(self, sid: str | None, now: float, kind: str = "page") -> str:
        """Count one request of session ``sid`` (``kind``: page, list or detail): ``ok``
        (answer it), ``plain`` (no person passed this session) or ``checked`` (passed, but
        checked again: now or before)."""
        record = self.current(sid)
        if record is None:
            return "plain"
        if record.reason is not None:
            return "checked"
        reason = self._broken_rule(record, now)
        if reason is not None:
            self._check(record, reason, now)
            return "checked"
        record.requests += 1
        record.by_kind[kind] += 1
        return "ok"

    def _broken_rule(self, record: Pass, now: float) -> str | None:
        if record.check_after is not None and record.requests >= record.check_after:
            return "control"
        if self.requests > 0 and record.requests >= self.requests:
            return "limit"
        if self.minutes > 0 and now - record.passed_at >= self.minutes * 60.0:
            return "minutes"
        hits = record.hits
        hits.append(now)
        longest = max(self.pace_window, BURST_WINDOW)
        while hits and hits[0] <= now - longest:
            hits.popleft()
        if self.burst > 0 and sum(1 for t in hits if t > now - BURST_WINDOW) >= self.burst:
            return "pace"
        if self.pace > 0 and self.pace_window > 0:
            in_window = sum(1 for t in hits if t > now - self.pace_window)
            if in_window > self.pace * self.pace_window:
                return "pace"
        return None

    def _check(self, record: Pass, reason: str, now: float) -> None:
        record.reason, record.checked_at = reason, now
        record.checked_after_requests = record.requests
        record.hits.clear()

    def lapse(self, sid: str | None, now: float) -> None:
        """The session of a pass expired (idle too long): its pass ends with it."""
        record = self.current(sid)
        if record is not None and record.reason is None:
            self._check(record, "idle", now)

    def expire(self, sid: str, now: float) -> bool:
        """Check a passed session again now (control); False if no person passed it."""
        record = self.current(sid)
        if record is None:
            return False
        if record.reason is None:
            self._check(record, "control", now)
        return True

    def check_after(self, sid: str, more: int) -> bool:
        """Check a passed session again after ``more`` further requests (control)."""
        record = self.current(sid)
        if record is None or record.reason is not None:
            return False
        record.check_after = record.requests + max(0, int(more))
        return True

    def view(self, now: float) -> dict:
        return {
            "on": self.on,
            "limits": self.limits(),
            "passes": len(self.records),
            "checked_again": {
                reason: sum(1 for r in self.records if r.reason == reason)
                for reason in ("limit", "minutes", "pace", "control", "idle")
            },
            "sessions": [r.view(now) for r in self.records],
        }
