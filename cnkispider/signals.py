"""Signals the crawler's own components send to each other (Scrapy-style: plain sentinels).

round_drained(round_id: int, spider)
    Sent by the Redis scheduler on the one worker whose acknowledgement brought a round's
    outstanding-request count to zero. Flow control marks the round done in the database.

request_abandoned(request, reason: str, attempts: int, spider)
    Sent by the Redis scheduler for a request whose lease ran out more often than allowed. The
    handler records it in the error tables and may return a Deferred; the scheduler acknowledges
    the request only after every handler has finished.
"""

round_drained = object()
request_abandoned = object()
