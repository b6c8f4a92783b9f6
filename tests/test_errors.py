"""errors.recorder: a request's meta read into an error row (real SQLite/MariaDB)."""

from __future__ import annotations

import contextlib
import json
import threading

import sqlalchemy as sa

from cnkispider.store.db import open_database
from cnkispider.store.schema import error_code, error_link
from errors.recorder import ErrorRecorder, stage_of

SEARCH = {
    "doc_type": "patent",
    "day_start": "2024-02-01",
    "day_end": "2024-02-01",
    "category": "H01",
}


def _rows(engine, table):
    with engine.connect() as conn:
        return list(conn.execute(sa.select(table)).mappings())


def test_the_stage_is_the_request_kind():
    assert [stage_of({"cnki_kind": k}) for k in ("detail", "list", "home")] == [
        "detail",
        "list",
        "list",
    ]
    assert stage_of({}) == "list"


def test_a_detail_failure_goes_to_error_link_with_its_listing(db_url):
    engine = open_database(db_url)
    meta = {
        "cnki_kind": "detail",
        "doc_key": "SCPD/CN1A",
        "round_id": 7,
        "search": SEARCH,
        "listing": {"title": "一种电池", "source": "某公司"},
    }
    stage = ErrorRecorder(engine).record_failure(
        4, "patent", meta, "http://x/a?v=1", "http-500", "gave up"
    )
    (row,) = _rows(engine, error_link)
    assert stage == "detail"
    assert (
        row["task_id"],
        row["round_id"],
        row["doc_type"],
        row["url"],
        row["dbname"],
        row["filename"],
    ) == (4, 7, "patent", "http://x/a?v=1", "SCPD", "CN1A")
    assert (row["title"], row["day"], row["category"], row["reason"], row["detail"]) == (
        "一种电池",
        "2024-02-01",
        "H01",
        "http-500",
        "gave up",
    )
    assert json.loads(row["listing"]) == meta["listing"]


def test_a_title_search_that_did_not_find_its_document_is_recorded_for_that_document(db_url):
    engine = open_database(db_url)
    meta = {
        "cnki_kind": "list",
        "refresh_for": "SCPD/CN2A",
        "search": {**SEARCH, "title": "一种"},
        "listing": {"title": "一种"},
        "page": 3,
    }
    recorder = ErrorRecorder(engine)
    assert (
        recorder.record_failure(4, "patent", meta, "stale", "not-found-on-refresh", stage="detail")
        == "detail"
    )
    assert [(r["filename"], r["url"]) for r in _rows(engine, error_link)] == [("CN2A", "stale")]
    assert _rows(engine, error_code) == []


def test_a_list_failure_goes_to_error_code_with_its_search_and_page(db_url):
    engine = open_database(db_url)
    meta = {"cnki_kind": "list", "search": SEARCH, "page": 5, "round_id": 2}
    assert ErrorRecorder(engine).record_failure(4, "patent", meta, "", "no-pager", "x") == "list"
    (row,) = _rows(engine, error_code)
    assert (
        row["task_id"],
        row["round_id"],
        row["day"],
        row["category"],
        row["page"],
        row["reason"],
    ) == (4, 2, "2024-02-01", "H01", 5, "no-pager")
    assert json.loads(row["search"]) == SEARCH and row["state"] == "open"


def test_a_failed_replay_counts_up_its_own_row(db_url):
    engine = open_database(db_url)
    recorder = ErrorRecorder(engine, max_attempts=3)
    recorder.record_failure(4, "patent", {"search": SEARCH, "page": 2}, "", "http-500")
    (first,) = _rows(engine, error_code)
    replay = {"cnki_kind": "list", "search": SEARCH, "page": 2, "error_code_id": first["id"]}
    recorder.record_failure(4, "patent", replay, "", "http-502")
    (row,) = _rows(engine, error_code)
    assert (row["id"], row["attempts"], row["reason"]) == (first["id"], 2, "http-502")


def test_a_fact_no_replay_can_mend_is_permanent_at_once(db_url):
    engine = open_database(db_url)
    ErrorRecorder(engine).record_failure(
        4, "patent", {"search": SEARCH, "page": 1}, "", "overflow", permanent=True
    )
    assert [(r["reason"], r["state"]) for r in _rows(engine, error_code)] == [
        ("overflow", "permanent")
    ]


def test_a_failed_replay_below_the_attempt_limit_stays_open(db_url):
    """MySQL evaluates an UPDATE's assignments left to right: a state computed from
    ``attempts + 1`` after ``attempts`` was raised counted one attempt twice, and a row went
    permanent one attempt early (after 2 of 3) on MariaDB only."""
    engine = open_database(db_url)
    recorder = ErrorRecorder(engine, max_attempts=3)
    recorder.record_failure(4, "patent", {"search": SEARCH, "page": 2}, "", "http-500")
    (row,) = _rows(engine, error_code)
    replay = {"cnki_kind": "list", "search": SEARCH, "page": 2, "error_code_id": row["id"]}
    recorder.record_failure(4, "patent", replay, "", "http-500")
    assert [(r["attempts"], r["state"]) for r in _rows(engine, error_code)] == [(2, "open")]
    recorder.record_failure(4, "patent", replay, "", "http-500")
    assert [(r["attempts"], r["state"]) for r in _rows(engine, error_code)] == [(3, "permanent")]


def test_two_failures_of_one_document_at_once_are_one_row_counted_twice(mysql_url):
    """Issue 43, case 6: two workers record one document's failure at the same moment (it was
    listed by two categories of the task). Each read found no row under READ COMMITTED, both
    inserted, and the second insert's key collision (1062) stopped its worker. Two real
    connections; a barrier holds each before its errorLink write until both have begun, so the
    two transactions overlap on every run."""
    engine = open_database(mysql_url)
    both_in = threading.Barrier(2)

    @sa.event.listens_for(engine, "before_cursor_execute")
    def _meet(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("INSERT INTO `ERRORLINK`"):
            with contextlib.suppress(threading.BrokenBarrierError):
                both_in.wait(timeout=10)

    recorder = ErrorRecorder(engine, max_attempts=3)
    failures: list[BaseException] = []

    def record(round_id: int) -> None:
        try:
            recorder.record_link(4, round_id, "patent", "http://x/a", "SCPD", "CN1A", "http-500")
        except Exception as exc:  # the worker's halt, kept for the assertion
            failures.append(exc)

    threads = [threading.Thread(target=record, args=(r,)) for r in (7, 8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert failures == []
    assert [(r["attempts"], r["state"]) for r in _rows(engine, error_link)] == [(2, "open")]
    engine.dispose()


def test_a_document_failing_again_counts_up_its_row_until_permanent(db_url):
    """The upsert's update: the row keeps its first listing and takes the last URL and reason;
    it goes permanent at the attempt limit, not one early (MySQL's left-to-right SET)."""
    engine = open_database(db_url)
    recorder = ErrorRecorder(engine, max_attempts=3)
    listing = {"title": "一种电池"}
    recorder.record_link(4, 7, "patent", "http://x/1", "SCPD", "CN1A", "http-500", listing=listing)
    recorder.record_link(4, 7, "patent", "http://x/2", "SCPD", "CN1A", "http-502")
    (row,) = _rows(engine, error_link)
    assert (row["attempts"], row["state"], row["url"], row["reason"]) == (
        2,
        "open",
        "http://x/2",
        "http-502",
    )
    assert json.loads(row["listing"]) == listing
    recorder.record_link(4, 7, "patent", "http://x/3", "SCPD", "CN1A", "http-502")
    assert [(r["attempts"], r["state"]) for r in _rows(engine, error_link)] == [(3, "permanent")]
