"""Signals the crawler's own components send to each other (Scrapy-style: plain sentinels), and
the values their handlers answer with.

They live in the base layer so that a sender need not import its receivers: errors/ asks flow
control (tasks/) for a halt, the scheduler and the session runtime (the crawl layer) tell it what
happened, and nobody below imports anybody above.

round_drained(round_id: int, epoch: str, spider)
    Sent by the Redis scheduler on the one worker whose acknowledgement brought a round's
    outstanding-request count to zero, with the epoch of the Redis it drained in. Flow control
    marks the round done in the database if it was seeded under that epoch; a handler returns
    :data:`DRAIN_LATER` to have the drain checked again later.

request_abandoned(request, reason: str, attempts: int, spider)
    Sent by the Redis scheduler for a request whose lease ran out more often than allowed. The
    handler (errors.middleware) records it in the error tables and may return a Deferred; the
    scheduler acknowledges the request only after every handler has finished.

list_failed(reason: str, detail: str, request, spider)
    Sent by errors.middleware after it recorded a list-stage failure in errorCode (``request``
    is the failed request, or the request of a response its parser did not understand). The task
    feeder counts it in its circuit breaker (cnkispider/halting.py), which may halt the task.

request_unreadable(reason: str, spider)
    Sent by the Redis scheduler when a request read back from Redis is refused (a host, meta key
    or callback the trust boundary does not allow) and set aside in ``{ns}:unreadable``. What it
    held is not crawled, so the feeder halts the task with the reason: a configuration that
    refuses the crawler's own requests must stop the task loudly, never end it "done".
halt_requested(reason: str, spider)
    Sent (and awaited: ``send_catch_log_async``) by errors.middleware for a rejection it has just
    recorded. The feeder halts the task (:meth:`tasks.feeder.RoundFeeder.halt`: the crawl context's
    ``halted`` first, so that no retry slips in, then the task row); the sender re-raises what the
    handler raised, as a direct call would.

task_halted(task_id: int, reason: str, spider)
    Sent on the worker that halted the task (task.halt_reason set by its conditional UPDATE).
    The feeder stops this worker at once; other workers see the halt at their next feed.


person_waiting(waiting: bool, spider)
    Sent by the verified-session runtime (cnkispider.sessions.runtime) when the worker starts
    waiting for a person to pass a session (``waiting`` True: no usable session is left) and when
    a session is there again (False). The feeder claims no new round while the worker waits.
"""

round_drained = object()
#: What a ``round_drained`` handler returns when it cannot take the drain yet (see above).
DRAIN_LATER = "drain-later"

request_abandoned = object()
list_failed = object()
halt_requested = object()
task_halted = object()
request_unreadable = object()
person_waiting = object()
