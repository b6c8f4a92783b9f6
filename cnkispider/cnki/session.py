"""CNKI sessions: which one a request uses, and when one must be given up.

A CNKI session is a cookie jar that was warmed up on the search page, seen by CNKI from one
address (proxy) and one browser (User-Agent). CNKI stops a session after about 15 page turns
and forgets it after a while; the pool renews sessions before either happens, so that a spider
never sees those limits.

Pure state: no I/O, no settings, no Scrapy; ``clock`` is injected. The Scrapy side (warm-up
downloads, the ``SESSION_*`` settings) is :class:`cnkispider.middlewares.session.SessionMiddleware`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from cnkispider import default_settings
from cnkispider.cnki.protocol import LIST  # the request kinds' one list

# Invariants of the session pool (the state lives here and nowhere else):
# - `warmed` and `retired` are set once and never cleared. `warmed` is set (by the middleware,
#   through mark_warmed) when the session's warm-up page came back AND its Ecp_ClientId was
#   issued (`client_id`; a warm-up without one fails as a whole); `retired` by retire(), for
#   good. A session that is retired before it is warmed (its warm-up failed) is never used.
# - A retired session is never handed out again, and its id is never reused: ids are random
#   (uuid4), so a request replayed by another worker, carrying a session id this worker never
#   made, simply gets a session of this pool.
# - A session serves at most `turn_limit` grid (list) requests after its first, that is at most
#   turn_limit + 1 in all. The acquire() that hands out the last one retires it at once, so the
#   session is renewed BEFORE CNKI's own limit (15 turns) is reached; turn_limit defaults to one
#   below it.
# - A session older than `max_age` is retired before anything else is handed out.
# - At most `size` sessions are live at once. When all are live and the request names none, the
#   least used one is shared (CNKI allows concurrent requests in one session).
# - Detail and reference requests use a session (cookies, User-Agent and address of a browser
#   that searched) but are not page turns and do not count against turn_limit.


@dataclass(eq=False)
class Session:
    """One CNKI session. ``id`` is also the Scrapy ``cookiejar`` key of its cookies."""

    id: str
    created_at: float
    grid_requests: int = 0  # list requests handed out, the first one included
    requests: int = 0  # every request handed out
    warmed: bool = False
    retired: bool = False
    retired_reason: str = ""
    user_agent: str = ""  # as recorded after the warm-up
    proxy: str = ""  # the address it was opened through, without credentials
    client_id: str = ""  # its Ecp_ClientId, obtained during the warm-up (never "" once warmed)

    @property
    def turns(self) -> int:
        """Page turns used: grid requests after the first."""
        return max(0, self.grid_requests - 1)


class SessionPool:
    """Up to ``size`` live sessions, each renewed before ``turn_limit`` turns or ``max_age``."""

    def __init__(
        self,
        turn_limit: int = default_settings.SESSION_TURN_LIMIT,
        max_age: float | None = default_settings.SESSION_MAX_AGE,
        size: int = default_settings.SESSION_POOL_SIZE,
        clock: Callable[[], float] = time.monotonic,
        new_id: Callable[[], str] | None = None,
        on_retire: Callable[[Session, str], None] | None = None,
    ):
        if turn_limit < 0:
            raise ValueError(f"turn_limit must not be negative, got {turn_limit}")
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        self.turn_limit = turn_limit
        self.max_age = max_age or None
        self.size = size
        self.clock = clock
        self.new_id = new_id or (lambda: uuid.uuid4().hex[:16])
        self.on_retire = on_retire
        self._live: dict[str, Session] = {}

    def __len__(self) -> int:
        self._expire()
        return len(self._live)

    def live(self) -> list[Session]:
        self._expire()
        return list(self._live.values())

    def get(self, session_id: str | None) -> Session | None:
        """The live session with this id, or None (unknown, retired or too old)."""
        self._expire()
        return self._live.get(session_id) if session_id is not None else None

    def acquire(self, kind: str, session_id: str | None = None) -> tuple[Session, bool]:
        """A session for one request of ``kind`` (``list`` or ``detail``), with that request
        counted. Keeps ``session_id`` when it names a live session that may serve the request.
        Returns ``(session, created)``; a created session still needs its warm-up."""
        self._expire()
        session = self._live.get(session_id) if session_id is not None else None
        created = False
        if session is None:
            if len(self._live) < self.size:
                session, created = self._open(), True
            else:
                session = min(self._live.values(), key=lambda s: (s.requests, s.created_at))
        session.requests += 1
        if kind == LIST:
            session.grid_requests += 1
            if session.grid_requests > self.turn_limit:  # that was its last turn
                self.retire(session.id, "turn-limit")
        return session, created

    def mark_warmed(
        self, session: Session, user_agent: str = "", proxy: str = "", client_id: str = ""
    ) -> bool:
        """Record a finished warm-up (even of a session retired meanwhile: the request that
        warmed it may still use it). False if the session is no longer live."""
        session.warmed, session.user_agent, session.proxy = True, user_agent, proxy
        session.client_id = client_id
        return not session.retired

    def retire(self, session_id: str, reason: str) -> bool:
        """Give a session up for good. True if it was live."""
        session = self._live.pop(session_id, None)
        if session is None:
            return False
        session.retired, session.retired_reason = True, reason
        if self.on_retire is not None:
            self.on_retire(session, reason)
        return True

    def _open(self) -> Session:
        session = Session(id=self.new_id(), created_at=self.clock())
        self._live[session.id] = session
        return session

    def _expire(self) -> None:
        if self.max_age is None:
            return
        oldest = self.clock() - self.max_age
        for session in [s for s in self._live.values() if s.created_at <= oldest]:
            self.retire(session.id, "max-age")
