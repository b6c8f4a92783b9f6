"""errors.recorder: a request's meta read into an error row (real SQLite/MariaDB)."""

from __future__ import annotations

import json

import sqlalchemy as sa

from cnkispider.db import open_database
from cnkispider.schema import error_code, error_link
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
