"""The one way off the reactor for Redis calls: ``RedisCalls``, the loop the scheduler and the rate
limiter share (one call in flight, batches, backoff). The calls are held and answered by hand;
the scheduler's and the rate limiter's own tests run it on real Redis."""

from __future__ import annotations

import asyncio

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from cnkispider.runtime.offload import RedisCalls, backoff
from tests.fixtures.scheduling import in_loop
from tests.fixtures.waiting import wait_until_async


class HeldIO:
    """Calls wait until the test answers them."""

    def __init__(self):
        self.calls: list[tuple[object, Deferred]] = []

    def run(self, fn, *args):
        d: Deferred = Deferred()
        self.calls.append((args[0], d))
        return d

    def shutdown(self):
        pass


class Owner:
    def __init__(self):
        self.waiting: list[str] = []
        self.results: list = []
        self.failures: list = []
        self.io = HeldIO()
        self.calls = RedisCalls(self.take, lambda batch: None, self.done, self.failed, io=self.io)

    def take(self):
        batch, self.waiting = self.waiting, []
        return batch or None

    def done(self, result, batch):
        self.results.append((result, batch))

    def failed(self, failure, batch, delay):
        self.failures.append((batch, delay))
        self.waiting = batch + self.waiting  # put back, in order


def test_backoff_doubles_from_a_fifth_of_a_second_up_to_five():
    assert [backoff(n) for n in range(1, 8)] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]


def test_nothing_waiting_makes_no_call():
    owner = Owner()
    owner.calls.kick()
    assert owner.io.calls == [] and not owner.calls.busy


def test_one_call_in_flight_and_what_arrives_meanwhile_waits_for_the_next():
    owner = Owner()
    owner.waiting = ["a", "b"]
    owner.calls.kick()
    owner.waiting.append("c")
    owner.calls.kick()  # in flight: only remembered
    assert [batch for batch, _ in owner.io.calls] == [["a", "b"]]
    assert owner.calls.busy and owner.calls.again
    owner.io.calls[0][1].callback("ok")
    assert owner.results == [("ok", ["a", "b"])] and not owner.calls.busy
    owner.calls.kick()
    assert owner.io.calls[1][0] == ["c"] and not owner.calls.again


@in_loop
async def test_a_failed_call_is_put_back_and_retried_after_the_backoff():
    owner = Owner()
    owner.waiting = ["a"]
    owner.calls.kick()
    owner.io.calls[0][1].errback(Failure(ConnectionError("down")))
    assert owner.failures == [(["a"], 0.2)] and owner.calls.failures == 1
    owner.calls.kick()  # too early: no call
    assert len(owner.io.calls) == 1
    await wait_until_async(lambda: len(owner.io.calls) > 1, what="the retry after the backoff")
    assert [batch for batch, _ in owner.io.calls] == [["a"], ["a"]]
    owner.io.calls[1][1].callback("ok")
    assert owner.calls.failures == 0


@in_loop
async def test_after_close_a_failed_call_is_not_retried():
    owner = Owner()
    owner.waiting = ["a"]
    owner.calls.kick()
    owner.calls.close()
    owner.io.calls[0][1].errback(Failure(ConnectionError("down")))
    await asyncio.sleep(0.3)  # time passes: past the 0.2 s backoff a retry would have waited
    assert len(owner.io.calls) == 1 and owner.waiting == ["a"]
