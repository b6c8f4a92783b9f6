"""Desk tickets: a notification's link opens the pass desk without typing the web page's token.

A worker that waits for a person writes a ticket into the shared Redis, beside the session pool
(``{ns}:sessions:desk-ticket:{ticket}``), and its "waiting" message links to
``PUBLIC_URL/desk?ticket=...``. The web server redeems a ticket once (a DEL that only one caller
wins: single-use) within :data:`TICKET_SECONDS` of its making (short-lived), for a desk pass that
opens the desk's routes and nothing else (good for the desk only: ``cnkispider/web/desk.py``).
A phone user taps the link and drags; nobody types a 43-character token on a phone.
"""

from __future__ import annotations

import secrets
import time

#: How long a ticket of a notification is good for (a person reads the message within it).
TICKET_SECONDS = 30 * 60
#: How long a desk pass (what a redeemed ticket becomes) opens the desk's routes.
PASS_SECONDS = 60 * 60


def _key(store, ticket: str) -> str:
    return f"{store.namespace}:sessions:desk-ticket:{ticket}"


def issue(store, seconds: float = TICKET_SECONDS) -> str:
    """A new ticket for the desk, in the pool's Redis (``store``: a SessionStore)."""
    ticket = secrets.token_urlsafe(18)
    store.client.set(_key(store, ticket), "1", ex=max(1, int(seconds)))
    return ticket


def redeem(store, ticket: str | None) -> bool:
    """True for exactly one caller, and only while the ticket lives."""
    if not ticket or len(ticket) > 64 or not ticket.replace("-", "").replace("_", "").isalnum():
        return False
    return store.client.delete(_key(store, ticket)) == 1


class DeskPasses:
    """The desk passes a web server gave out: random, in its memory, each good for
    :data:`PASS_SECONDS` (a server restart ends them: the person follows a new link or types
    the token). Time injected for tests."""

    def __init__(self, clock=time.monotonic, seconds: float = PASS_SECONDS):
        self.clock, self.seconds = clock, seconds
        self._passes: dict[str, float] = {}

    def give(self) -> str:
        now = self.clock()
        self._passes = {p: t for p, t in self._passes.items() if t > now}
        desk_pass = secrets.token_urlsafe(24)
        self._passes[desk_pass] = now + self.seconds
        return desk_pass

    def ok(self, given: str | None) -> bool:
        if not given:
            return False
        until = self._passes.get(given)
        return until is not None and until > self.clock()
