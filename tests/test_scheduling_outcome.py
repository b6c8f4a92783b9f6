"""The outcome tracker: which leases may be acked, and holds."""

from __future__ import annotations

import scrapy

from cnkispider.scheduling.outcome import BUFFERED, OutcomeTracker
from cnkispider.scheduling.queue import Held


def leased(tracker: OutcomeTracker, lease_id: str) -> scrapy.Request:
    request = scrapy.Request(f"https://x/{lease_id}", meta={"lease_id": lease_id})
    tracker.leased(Held(lease_id, "t1"), request, BUFFERED)
    return request


def test_a_lease_is_finished_once_handed_out_and_no_longer_in_progress():
    tracker = OutcomeTracker()
    buffered, handed, running = (leased(tracker, i) for i in ("1", "2", "3"))
    tracker.handed_out(handed)
    tracker.handed_out(running)
    assert tracker.finished(inprogress={running}) == [Held("2", "t1")]
    assert tracker.finished(inprogress={running}) == []  # reported once
    assert len(tracker) == 2 and tracker.request_of("1") is buffered


def test_a_hold_keeps_a_finished_request_until_released():
    tracker = OutcomeTracker()
    request = leased(tracker, "1")
    tracker.handed_out(request)
    first, second = tracker.hold(request), tracker.hold(request)
    assert tracker.finished(inprogress=()) == []
    first.release()
    first.release()  # idempotent
    assert tracker.finished(inprogress=()) == []
    with second:
        pass
    assert tracker.finished(inprogress=()) == [Held("1", "t1")]


def test_a_hold_on_an_acked_request_does_nothing():
    tracker = OutcomeTracker()
    request = scrapy.Request("https://x/gone", meta={"lease_id": "9"})
    tracker.hold(request).release()
    assert len(tracker) == 0


def test_buffered_leases_are_taken_for_release_and_all_leases_renewed():
    tracker = OutcomeTracker()
    leased(tracker, "1")
    handed = leased(tracker, "2")
    tracker.handed_out(handed)
    assert sorted(h.lease_id for h in tracker.held()) == ["1", "2"]
    assert tracker.take_buffered() == [Held("1", "t1")]
    assert [h.lease_id for h in tracker.held()] == ["2"]
