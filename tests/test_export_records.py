"""GetExport answers read into fields (cnkispider.cnki.export_records), the learned batch size
and content matching (cnkispider.cnki.export_batch), the request (protocol) and its refusals.

Fixtures: tests/fixtures/exports/<case>/ (answer.json, expected.json, README), all hand-made
from the forms PROTOCOL.md point 16 and l0o0/jasminum document; no live answer is public.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from cnkispider.cnki import refusals
from cnkispider.cnki.export_batch import (
    ALONE_AFTER,
    ExportBatches,
    ExportQueue,
    ExportRow,
    check_batch,
    match_records,
)
from cnkispider.cnki.export_records import (
    ExportAnswerError,
    ExportRecord,
    endnote_values,
    parse_export,
)
from cnkispider.cnki.protocol import Protocol

CASES = Path(__file__).parent / "fixtures" / "exports"
CASE_NAMES = sorted(p.name for p in CASES.iterdir() if p.is_dir())


@pytest.mark.parametrize("case", CASE_NAMES)
def test_each_hand_made_answer_reads_into_its_expected_fields(case):
    answer = (CASES / case / "answer.json").read_bytes()
    expected = json.loads((CASES / case / "expected.json").read_text(encoding="utf-8"))
    records = parse_export(answer)
    assert [r.kind for r in records] == [e["kind"] for e in expected]
    for record, want in zip(records, expected, strict=True):
        got = {k: record.fields.get(k) for k in want["fields"]}
        assert got == want["fields"]


def test_every_fixture_is_marked_hand_made():
    for case in CASE_NAMES:
        assert (CASES / case / "README").read_text(encoding="utf-8").startswith("hand-made")


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"<html>verify</html>", "not JSON"),
        (b'{"code":0,"msg":"\xe6\x9a\x82\xe6\x97\xa0\xe6\x95\xb0\xe6\x8d\xae"}', "code 0"),
        (b'{"code":1,"data":[{"key":"GB/T 7714-2015","value":["x"]}]}', "without an EndNote"),
        (b'{"code":1}', "without a data list"),
    ],
)
def test_an_answer_that_is_not_usable_is_an_error_naming_why(body, words):
    with pytest.raises(ExportAnswerError, match=words):
        endnote_values(body)


def _record(title: str, people: str = "") -> ExportRecord:
    return ExportRecord("paper", "Journal Article", {"title": title, "authors": people})


def test_records_are_matched_by_title_not_by_position():
    rows = [ExportRow(f"id{i}", f"题名{i}", "甲") for i in range(5)]
    records = [_record(f"题名{i}", "甲") for i in (3, 0, 4)]  # CNKI's order, two left out
    pairs, left, strays = match_records(rows, records)
    assert [(r.export_id, rec.title) for r, rec in pairs] == [
        ("id3", "题名3"),
        ("id0", "题名0"),
        ("id4", "题名4"),
    ]
    assert [r.export_id for r in left] == ["id1", "id2"] and strays == []


def test_rows_with_the_same_title_are_told_apart_by_their_people():
    rows = [ExportRow("a", "综述", "张三;李四"), ExportRow("b", "综述", "王五")]
    pairs, left, _ = match_records(rows, [_record("综述", "王五")])
    assert [r.export_id for r, _ in pairs] == ["b"] and [r.export_id for r in left] == ["a"]


def test_titles_match_across_full_width_forms_and_spacing():
    rows = [ExportRow("a", "TiB2 颗粒（增强）", "")]
    pairs, _, _ = match_records(rows, [_record("ＴｉＢ２颗粒(增强)")])
    assert len(pairs) == 1


def test_a_record_matching_no_row_is_a_stray_never_stored():
    pairs, left, strays = match_records([ExportRow("a", "甲")], [_record("乙")])
    assert pairs == [] and len(left) == 1 and len(strays) == 1


def test_a_short_answer_sets_the_size_to_what_it_held_for_every_later_session():
    batches = ExportBatches(50)
    assert batches.size("s1") == 50
    assert batches.answered("s1", 50, 10) == 10  # one answer settles it (issue 39 point 6)
    assert batches.answered("s1", 10, 10) == 10  # settled
    assert batches.size("s2") == 10  # a new session starts where the worker learned
    fresh = ExportBatches(50)
    assert fresh.answered("s3", 50, 0) == 25  # nothing held: no limit learned, halved
    assert fresh.size("s4") == 50


def test_a_site_answering_10_ids_costs_one_request_per_10_documents():
    """401 documents, a site that answers at most 10 ids a request: 41 requests, not 54."""
    batches, left, requests, session = ExportBatches(50), 401, 0, "s1"
    while left:
        asked = min(batches.size(session), left)
        got = min(asked, 10)
        batches.answered(session, asked, got)
        left -= got
        requests += 1
        if requests % 7 == 0:
            session = f"s{requests}"  # sessions renew as the crawl goes
    assert requests == 41


@pytest.mark.parametrize("bad", ["0", "-1", "x", "501", ""])
def test_a_bad_configured_batch_is_refused_naming_the_key(bad):
    with pytest.raises(ValueError, match="export_batch"):
        check_batch(bad)


def _simulate(seed: int) -> tuple[ExportQueue, int, int, set[str]]:
    """A queue against a random hidden limit and random records that never come; returns the
    queue, requests made, the limit, and the ids whose record never comes."""
    rnd = random.Random(seed)
    n = rnd.randint(1, 180)
    limit = rnd.randint(1, 60)
    rows = [ExportRow(f"id{i}", f"题名{i}", f"作者{i % 7}") for i in range(n)]
    never = {r.export_id for r in rows if rnd.random() < 0.08}
    queue = ExportQueue.of(rows)
    batches = ExportBatches(rnd.choice((1, 10, 50, 100)))
    requests = 0
    while not queue.finished:
        number, asked = queue.take(batches.size("s"))
        requests += 1
        answered = [r for r in asked[:limit] if r.export_id not in never]
        rnd.shuffle(answered)
        queue.answered(number, [_record(r.title, r.people) for r in answered])
        batches.answered("s", len(asked), len(answered))
        assert queue.balanced()
        assert requests < 20 * n + 20, "the queue does not finish"
    return queue, requests, limit, never


@pytest.mark.parametrize("seed", range(60))
def test_every_finished_queue_balances_and_each_row_ends_where_it_should(seed):
    queue, _, _, never = _simulate(seed)
    assert queue.balanced() and queue.finished
    assert {r.export_id for r, _ in queue.done} == {f"id{i}" for i in range(queue.total)} - never
    assert {r.export_id for r in queue.missing} == never
    assert all(rec.title == row.title for row, rec in queue.done)


def test_a_settled_size_costs_about_one_request_per_limit_of_rows():
    rows = [ExportRow(f"id{i}", f"题名{i}") for i in range(1000)]
    queue = ExportQueue.of(rows)
    batches = ExportBatches(50)
    requests = 0
    while not queue.finished:
        number, asked = queue.take(batches.size("s"))
        requests += 1
        queue.answered(number, [_record(r.title) for r in asked[:10]])
        batches.answered("s", len(asked), min(10, len(asked)))
    assert len(queue.done) == 1000
    assert requests <= 1000 / 10 + 6  # the learning costs a few requests, once


def test_a_row_left_out_again_and_again_is_asked_alone_then_given_up():
    rows = [ExportRow(f"id{i}", f"题名{i}") for i in range(6)]
    queue = ExportQueue.of(rows)
    sizes = []
    while not queue.finished:
        number, asked = queue.take(3)
        sizes.append(len(asked))
        queue.answered(number, [_record(r.title) for r in asked if r.export_id != "id0"])
    assert [r.export_id for r in queue.missing] == ["id0"]
    assert sizes.count(1) == 1 and len(sizes) <= ALONE_AFTER + 3


def test_the_export_form_carries_the_ids_and_the_three_modes():
    form = Protocol(base_url="https://kns.cnki.net").export_form(["a1!", "b2"])
    assert form == {
        "filename": "a1!,b2",
        "uniplatform": "NZKPT",
        "displaymode": "GBTREFER,elearning,EndNote",
    }


@pytest.mark.parametrize("bad", [[], [""], ["a,b"], ["a b"]])
def test_the_export_form_refuses_what_is_not_an_export_id(bad):
    with pytest.raises(ValueError, match="export"):
        Protocol().export_form(bad)


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (403, b'{"message":"https://kns.cnki.net/verify/home?captchaType=blockPuzzle"}', "verify"),
        (200, b'{"code":-403,"message":"https://kns.cnki.net/verify/home?x=1"}', "verify"),
        (200, '{"code":0,"msg":"暂无数据","data":null}'.encode(), "rejected"),
        (200, b'{"code":1,"data":[]}', None),
        (200, b"", "blank"),
        (200, b"<html><body>oops</body></html>", "unexpected"),
        (500, b"<html><body><h1>500</h1></body></html>", "http-500"),
    ],
)
def test_export_answers_are_told_apart(status, body, reason):
    url = "https://kns.cnki.net/dm8/API/GetExport"
    assert refusals.classify("export", status, url, body) == reason


def test_the_one_mode_answer_is_a_rejection_in_cnkis_words():
    body = '{"code":0,"msg":"暂无数据","data":null}'.encode()
    assert refusals.kind_of(refusals.classify("export", 200, "u", body)) == refusals.REJECTION
    assert refusals.rejection_text(body) == "暂无数据"
