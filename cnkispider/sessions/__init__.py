"""CNKI sessions a person verified, shared by every worker (see :mod:`cnkispider.sessions.pool`)."""

from cnkispider.sessions.pool import (
    COOLING,
    EXPIRED,
    LEASED,
    NEEDS_PERSON,
    READY,
    STATES,
    WAITING_MESSAGE,
    Cookie,
    Lease,
    SessionStore,
    VerifiedSession,
    namespace_for,
)

__all__ = [
    "COOLING",
    "EXPIRED",
    "LEASED",
    "NEEDS_PERSON",
    "READY",
    "STATES",
    "WAITING_MESSAGE",
    "Cookie",
    "Lease",
    "SessionStore",
    "VerifiedSession",
    "namespace_for",
]
