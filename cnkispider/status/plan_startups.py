"""The plan's count of session start-ups: the requests a run sends to open its CNKI sessions.

A plain session is opened by a warm-up (the search page, for CNKI's cookies) and its
``Ecp_ClientId`` (cnkispider/middlewares/session.py): 2 requests. The crawler keeps up to
``SESSION_POOL_SIZE`` of them live and renews one after ``turn_limit`` page turns, so ``G``
list requests open about ``min(pool, G) + G // (turn_limit + 1)`` sessions. A session a person
passed needs no warm-up, only its client id, once for each pass (``[cnki] sessions =
verified``). Without this a week of two classes at list depth planned 9 requests where the
run sent 19 (issue 48.4). Pure: figures in, requests out; no state.
"""

from __future__ import annotations

import math

#: requests that open a plain session: its warm-up page and its client id
PLAIN_STARTUP = 2
#: requests that open a passed session in a run: its client id
VERIFIED_STARTUP = 1


def startup_requests(
    list_requests: float,
    *,
    turn_limit: int,
    pool_size: int,
    mode: str = "plain",
    passes: int = 0,
) -> int:
    """The start-up requests of a run sending ``list_requests`` grid requests: 2 a plain
    session (``mode`` plain or auto: plain until CNKI checks), 1 a pass (``mode`` verified)."""
    if list_requests <= 0:
        return 0
    if mode == "verified":
        return VERIFIED_STARTUP * max(1, passes)
    grids = math.ceil(list_requests)
    sessions = min(max(1, pool_size), grids) + grids // (turn_limit + 1)
    return PLAIN_STARTUP * sessions
