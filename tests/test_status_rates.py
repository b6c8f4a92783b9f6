"""Rates and ETAs (issue 28): one definition in status, the run's summary, the web page and
/metrics; an ETA that counts the rounds in flight; none ("-", JSON null) when finished."""

from __future__ import annotations

import datetime as dt

from cnkispider.status.collecting import collect
from cnkispider.status.rates import round_rate_eta
from cnkispider.status.rendering import render, render_summary
from cnkispider.web.metrics import metrics_text
from tests.test_status import NOW, add_round, add_task, add_worker, engine  # noqa: F401


def test_rounds_in_flight_past_their_mean_are_not_done_in_0_s():
    """The demo's "3 of 6 rounds finished, 3 in flight; ETA 0 s", standing still."""
    finished = [(0.0, 30.0), (0.0, 30.0), (0.0, 30.0)]
    _, eta = round_rate_eta(finished, [30.0, 30.0, 30.0], 3, now=150.0)
    assert eta is not None and eta > 0


def test_the_rate_is_rounds_over_the_time_they_took_whatever_runs_now():
    # four rounds of 10 min, two at a time, over 20 min: 12 rounds/h, in flight or not
    finished = [(0.0, 600.0), (0.0, 600.0), (600.0, 1200.0), (600.0, 1200.0)]
    assert round_rate_eta(finished, [], 4, now=1200.0)[0] == 12.0
    assert round_rate_eta(finished, [1200.0] * 3, 4, now=1250.0)[0] == 12.0


def test_a_finished_task_has_no_eta_and_one_rate_everywhere(engine):  # noqa: F811
    with engine.begin() as conn:
        tid = add_task(conn, end_date="2024-01-02")
        for i, minutes in enumerate((30, 20, 10, 0)):
            add_round(
                conn,
                tid,
                f"2024-01-0{i // 2 + 1}",
                ("G06", "H04")[i % 2],
                "done",
                NOW - dt.timedelta(minutes=minutes),
            )
        add_worker(conn, tid, 1, NOW)
    report = collect(engine, None, NOW)
    t = report["tasks"][0]
    assert t["rounds"]["remaining"] == 0
    assert t["eta_seconds"] is None and t["eta_at"] is None
    rate = t["rate"]["rounds_per_hour"]
    assert rate == 6.0
    text = render(report)
    assert "6.0 rounds/h; ETA -" in text and "ETA 0 s" not in text
    summary = render_summary(t, {"elapsed_seconds": 30.0, "rounds/done": 4})
    assert "6.0 rounds/h (the task's, as status shows it)" in summary
    metrics = metrics_text(report).decode()
    assert f'cnkispider_rounds_per_hour{{task="{t["name"]}"}} {rate}' in metrics
    assert "cnkispider_eta_seconds{" not in metrics


def test_failed_rounds_are_not_finished_and_make_no_rate_nor_percent(engine):  # noqa: F811
    """Issue 41: a halted task whose 6 rounds all failed (in 52 s) said "85.7% 6 of 7 finished,
    rate 415.4 rounds/h" with no document stored. Failed rounds stored nothing: 0%, no rate,
    "0 of 7 done, 6 failed"."""
    with engine.begin() as conn:
        tid = add_task(
            conn, end_date="2024-01-07", categories="G06", halt_reason="http-500: 6 rounds failed"
        )
        for day in range(1, 7):
            add_round(
                conn,
                tid,
                f"2024-01-0{day}",
                "G06",
                "failed",
                NOW - dt.timedelta(seconds=52 - 8 * day),
                took=dt.timedelta(seconds=8),
            )
    report = collect(engine, None, NOW)
    t = report["tasks"][0]
    assert t["rounds"]["total"] == 7 and t["rounds"]["failed"] == 6
    assert t["progress"] == 0.0
    assert t["rate"]["rounds_per_hour"] is None and t["eta_seconds"] is None
    text = render(report)
    assert "0.0%  0 of 7 done, 6 failed, 0 in flight" in text, text
    assert "- rounds/h" in text and "finished" not in text
    metrics = metrics_text(report).decode()
    assert "cnkispider_rounds_per_hour{" not in metrics
