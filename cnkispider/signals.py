"""Signals the crawler's own components send to each other (Scrapy-style: plain sentinels), and
the values their handlers answer with.

They live in the base layer so that a sender need not import its receivers: errors/ asks flow
control (tasks/) for a halt, the scheduler and the session runtime (the crawl layer) tell it what
happened, and nobody below imports anybody above.

Signals (who sends each, who handles it, what a handler may answer: docs/INTERNALS.md):
``round_drained`` (a round's last request acknowledged; a handler may answer
:data:`DRAIN_LATER`), ``request_abandoned`` (a lease ran out too often), ``list_failed`` (a
list-stage failure recorded), ``request_unreadable`` (a request from Redis refused),
``halt_requested`` (a rejection: halt the task, awaited), ``task_halted``, ``person_waiting``
(no verified session left, or one back), ``look_finished`` (the rounds of a follow task's look
are all closed: tasks/feeder.py tells the notifier).

The rest of this module's story: docs/INTERNALS.md#cnkispidersignalspy.
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
look_finished = object()
