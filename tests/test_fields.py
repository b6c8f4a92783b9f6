"""Issue 26: the fields researchers cite, crawled from the stand-in and compared with its truth.

The list-row fields (cited, downloads, counted_at, export_id, online_first) ride on the list page
that is fetched anyway: a crawl asks exactly one detail page per document and no other page.
"""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
import sqlalchemy as sa

from cnkispider import default_settings
from cnkispider.items import FIELDS
from cnkispider.store import schema
from cnkispider.store.db import open_database
from cnkispider.store.storage import fetch_all, row_for, upsert_documents
from tests.fixtures.crawl_harness import compare

SITE = {"seed": 11}
DAY = "2024-01-01"


@pytest.mark.parametrize(
    ("doc_type", "categories", "db"),
    [("paper", "TP3,F0", "sqlite"), ("achievement", "TP3", "mysql"), ("patent", "G06", "mysql")],
)
def test_list_row_fields_equal_the_truth_and_cost_no_request(crawl_setup, doc_type, categories, db):
    setup = crawl_setup(doc_type, categories, db, end=DAY, site=SITE)
    before = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    setup.run_ok()
    after = dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(seconds=1)
    truth, stored = setup.truth(), setup.stored()
    assert len(truth) > 20
    assert compare(stored, truth, doc_type) == {"missing": [], "extra": [], "differing": {}}
    # every field of the issue is compared: the truth holds them, and they vary
    row_fields = (
        {"export_id"}
        | ({"cited", "downloads"} if doc_type != "patent" else set())
        | ({"online_first"} if doc_type == "paper" else set())
    )
    assert row_fields <= set(FIELDS[doc_type])
    for name in row_fields:
        assert len({str(d[name]) for d in stored}) > 1, name
    if doc_type != "patent":
        assert all(isinstance(d["cited"], int) and isinstance(d["downloads"], int) for d in stored)
        assert any(d["cited"] == 0 for d in stored) and any(d["cited"] > 0 for d in stored)
        assert all(before <= d["counted_at"] <= after for d in stored), (before, after)
    # opaque: never the key
    assert all(d["export_id"] and d["filename"] not in d["export_id"] for d in stored)
    if doc_type == "paper":
        _paper_detail_fields_are_filled(stored)
    # no request for them: one detail page per document, the list pages, the session's pages
    kinds = setup.site.stats()["kinds"]
    assert kinds["detail"] == len(truth), kinds


def test_a_version_5_database_is_upgraded_with_the_new_fields(db_url):
    engine = open_database(db_url)
    new = [(t.name, c) for t, c in schema.UPGRADES[6]]
    assert ("paper", "cited") in new and ("achievement", "export_id") in new
    with engine.begin() as conn:  # what a version-5 cnkispider left behind
        for table, column in new:
            conn.exec_driver_sql(f"ALTER TABLE {table} DROP COLUMN {column}")
        conn.execute(schema.schema_version.update().values(version=5))
        conn.exec_driver_sql("DROP TABLE fill")
        conn.exec_driver_sql(
            "INSERT INTO paper (dbname, filename, title, source, date, database) "
            "VALUES ('CJFQ', 'OLD2020001', 'old', 'j', '2020-01-01', '期刊')"
        )
    engine.dispose()
    for _ in range(2):  # a second start finds everything in place
        upgraded = open_database(db_url)
        with upgraded.connect() as conn:
            assert (
                conn.execute(sa.select(schema.schema_version.c.version)).scalar()
                == schema.SCHEMA_VERSION
            )
            for table, column in new:
                assert column in {c["name"] for c in sa.inspect(conn).get_columns(table)}
            assert sa.inspect(conn).has_table("fill")  # the drift alarm's table, created too
        upgraded.dispose()
    engine = open_database(db_url)
    (old,) = fetch_all(engine, "paper")
    assert (old["title"], old["cited"], old["counted_at"], old["export_id"]) == (
        "old",
        None,
        None,
        None,
    )
    values = {
        "dbname": "CJFQ",
        "filename": "OLD2020001",
        "title": "old",
        "cited": "12",
        "downloads": "0",
        "counted_at": "2026-11-26 10:30:00",
        "export_id": "kd9kq!",
        "online_first": "1",
    }
    with engine.begin() as conn:
        upsert_documents(conn, "paper", [row_for("paper", values, None, dt.datetime(2026, 11, 26))])
    (old,) = fetch_all(engine, "paper")
    assert (old["cited"], old["downloads"], old["online_first"]) == (12, 0, 1)
    assert old["counted_at"] == dt.datetime(2026, 11, 26, 10, 30)
    engine.dispose()


def _paper_detail_fields_are_filled(stored: list[dict]) -> None:
    """The truth equals the crawl on every field; here: each field is really there, by kind."""
    journals = [d for d in stored if d["database"] == "期刊"]
    issued = [d for d in journals if not d["online_first"]]
    theses = [d for d in stored if d["database"] in ("博士", "硕士")]
    assert issued and theses and len(issued) < len(journals)  # some 网络首发 papers too
    for d in issued:
        assert d["year"] == d["date"][:4] and d["volume"] and d["issue"].isdigit(), d
        assert re.fullmatch(r"\d+-\d+", d["page_range"]), d
    for d in journals:
        assert re.fullmatch(r"\d{4}-\d{3}[\dX]", d["issn"]), d
    for d in stored:
        people = json.loads(d["author_affiliations"])
        assert [p["author"] for p in people] == d["authors"].split(";")
        assert all(set(p["institutions"]) <= set(d["institutions"].split(";")) for p in people)
    for d in theses:
        assert d["supervisor"] and d["degree"] == d["database"] and not d["page_range"], d


# -- the markup drift alarm -------------------------------------------------------------------


def test_drift_verdict_names_the_field_and_the_round():
    from cnkispider.watch.drift import verdict

    history = {
        "page_range": [(1, 60, 50), (2, 50, 40), (3, 60, 0), (4, 40, 0)],
        "fund": [(1, 40, 5), (2, 50, 0), (3, 60, 0), (4, 40, 0)],  # rarely filled: not "most"
    }
    found = verdict(history, 100)
    assert (found.field, found.empty, found.since_round) == ("page_range", 100, 3)
    assert found.reason() == "markup drift: page_range empty on 100 of 100 documents since round 3"
    assert verdict(history, 101) is None  # not yet that many documents
    assert verdict({"page_range": [(1, 40, 30), (3, 60, 0), (4, 40, 1)]}, 50) is None
    assert verdict({"page_range": [(3, 500, 0)]}, 100) is None  # never filled: no baseline
    assert verdict(history, 0) is None  # off


def test_a_field_the_pages_lose_halts_the_task_and_stored_documents_stay(crawl_setup):
    setup = crawl_setup("paper", "TP3,F0", "sqlite", end=DAY, site=SITE)
    setup.run_ok("run", "-s", "CNKI_DRIFT_DOCUMENTS=15")
    before = {(d["dbname"], d["filename"]): d for d in setup.stored()}
    assert len(before) > 20 and all(d["keywords"] for d in before.values())
    # CNKI changes its markup: every detail page from now on lacks 关键词
    setup.site.control(drop_field="keywords")
    extended = setup.run("task", "extend", setup.task, "2024-01-05")
    assert extended.returncode == 0, extended.stderr
    result = setup.run("run", "-s", "CNKI_DRIFT_DOCUMENTS=15")
    assert result.returncode == 3, result.stdout[-2000:] + result.stderr[-2000:]
    line = result.stderr.strip().splitlines()[-1]
    found = re.search(
        r"halted: markup drift: keywords empty on (\d+) of \1 documents since round (\d+); "
        r"sample page (\S+\.html)",
        line,
    )
    assert found, line
    sample = (
        setup.tmp_path / found.group(3) if not found.group(3).startswith("/") else found.group(3)
    )
    assert "关键词" not in open(sample, encoding="utf-8").read()
    # among the rounds in flight at the change (rounds of day 1 came first, by id): which of them
    # stores its documents first is the machine's choice, and the alarm names the first it saw
    engine = open_database(setup.db_url)
    with engine.connect() as conn:
        rounds = conn.execute(
            sa.select(schema.round_.c.id, schema.round_.c.day).order_by(schema.round_.c.id)
        ).all()
        halted = conn.execute(sa.select(schema.task.c.halt_reason)).scalar()
    engine.dispose()
    assert halted.startswith("markup drift: keywords")
    later = [rid for rid, day in rounds if day > "2024-01-01"]
    in_flight = default_settings.TASKS_ROUNDS_IN_FLIGHT
    assert int(found.group(2)) in later[:in_flight], (found.group(2), later)
    after = {(d["dbname"], d["filename"]): d for d in setup.stored()}
    for key, doc in before.items():  # what was stored before is untouched
        assert after[key] == doc
    # it stopped: the rounds in flight drain, no further round is handed out
    later_truth = setup.site.truth("paper", "2024-01-02", "2024-01-05", ["TP3", "F0"])
    assert len(after) - len(before) < len(later_truth)
    # fill rates per field in `status --json`: the lost field, and the others still there
    status = setup.run("status", "--json")
    report = json.loads(status.stdout)
    [entry] = [t for t in report["tasks"] if t["name"] == setup.task]
    assert entry["halted"].startswith("markup drift: keywords")
    fill = entry["fill"]
    assert 0 <= fill["keywords"] < 1 and fill["abstract"] == 1 and fill["authors"] == 1


# -- refresh-counts -----------------------------------------------------------------------------


def test_refresh_counts_updates_only_the_counts_at_a_list_page_per_50(crawl_setup):
    setup = crawl_setup(
        "paper", "TP3,TN9", "mysql", end="2024-01-02", site={"seed": 11, "scale": 16}
    )
    setup.run_ok()
    before = {(d["dbname"], d["filename"]): d for d in setup.stored()}
    day1 = [k for k, d in before.items() if d["date"][:10] == "2024-01-01"]
    assert len(day1) > 500 and len(before) > len(day1)
    # CNKI's counts grow; the refresh reads day 1 again, day 2 is not listed
    setup.site.control(count_shift=7, reset_stats=True)
    result = setup.run("refresh-counts", setup.task, "--from", "2024-01-01", "--to", "2024-01-01")
    assert result.returncode == 0, (
        result.stdout[-2000:] + result.stderr[-2000:] + setup.log()[-2000:]
    )
    found = re.search(r"counts read again from ([\d,]+) listed rows", result.stdout)
    assert found and int(found.group(1).replace(",", "")) >= len(day1), result.stdout
    stats = setup.site.stats()
    print(result.stdout, stats["requests"], "requests for", len(day1), "documents", stats["kinds"])
    assert stats["kinds"]["detail"] == 0, stats["kinds"]  # no detail page
    assert stats["requests"] / len(day1) <= 0.03, (stats["requests"], len(day1), stats["kinds"])
    truth = {
        (d["dbname"], d["filename"]): d
        for d in setup.site.truth("paper", "2024-01-01", "2024-01-02", ["TP3", "TN9"])
    }
    after = {(d["dbname"], d["filename"]): d for d in setup.stored()}
    assert after.keys() == before.keys()
    for key, doc in after.items():
        old = before[key]
        if key in day1:
            assert (doc["cited"], doc["downloads"]) == (
                int(truth[key]["cited"]),
                int(truth[key]["downloads"]),
            )
            assert doc["cited"] == old["cited"] + 7 and doc["counted_at"] > old["counted_at"]
        else:  # not listed by this refresh: its last counts stay
            assert (doc["cited"], doc["downloads"], doc["counted_at"]) == (
                old["cited"],
                old["downloads"],
                old["counted_at"],
            )
        unchanged = {f for f in doc if f not in ("cited", "downloads", "counted_at")}
        assert {f: doc[f] for f in unchanged} == {f: old[f] for f in unchanged}


def test_refresh_counts_of_a_patent_task_or_no_task_is_one_line(crawl_setup):
    setup = crawl_setup("patent", "G06", "sqlite", end=DAY, site=SITE)
    setup.write()
    missing = setup.run("refresh-counts", "nosuchtask")
    assert missing.returncode == 2 and "no task 'nosuchtask'" in missing.stderr
    assert missing.stderr.strip().count("\n") == 0
    setup.run_ok()
    patent = setup.run("refresh-counts", setup.task)
    assert patent.returncode == 2 and "patent rows carry no counts" in patent.stderr


def test_drift_counts_a_field_only_where_it_applies():
    """A run of 网络首发 papers or theses has no issue or pages: no drift of the source line."""
    from cnkispider.watch.drift import counts

    online = {"database": "期刊", "online_first": "1", "issn": "1001-1668", "abstract": "x"}
    issued = {"database": "期刊", "online_first": "", "page_range": "1-7", "issn": "1001-1668"}
    thesis = {"database": "硕士", "supervisor": "张三", "degree": "硕士", "abstract": "x"}
    got = counts("paper", [online, issued, thesis, thesis])
    assert got["page_range"] == (1, 1) and got["issn"] == (2, 2)
    assert got["supervisor"] == (2, 2) and got["abstract"] == (4, 3)


def test_the_task_page_shows_the_fill_rates(sqlite_url, redis_url, tmp_path):
    import socket
    import threading
    import time
    import urllib.request

    import uvicorn

    from cnkispider.cli import main
    from cnkispider.config import load_config
    from cnkispider.watch.drift import note_fill
    from cnkispider.web import create_app
    from cnkispider.web.serve import UVICORN_OPTIONS

    ini = tmp_path / "config.ini"
    ini.write_text(f"[database]\nurl = {sqlite_url}\n[redis]\nurl = {redis_url}\n", "utf-8")
    args = ["--config", str(ini), "task", "add", "t", "--type", "paper", "--start", "2024-01-01"]
    assert main(args) == 0
    engine = open_database(sqlite_url)
    with engine.begin() as conn:
        task_id = conn.execute(sa.select(schema.task.c.id)).scalar()
        note_fill(conn, task_id, "paper", 1, {"keywords": (40, 40), "page_range": (40, 0)})
    app = create_app(load_config(ini, environ={}), engine=engine, token="t", sample_seconds=60)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **UVICORN_OPTIONS)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:  # a condition, polled
            time.sleep(0.05)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/tasks/t", timeout=30) as answer:
            html = answer.read().decode("utf-8")
        status = urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=30)
        report = json.loads(status.read())
    finally:
        server.should_exit = True
        thread.join(10)
        engine.dispose()
    assert "Fields filled" in html
    assert re.search(r"<td>keywords</td><td>100%</td>", html)
    # the field by its label (cnkispider/words/vocabulary.py FIELD_LABELS)
    assert re.search(r'<tr class="empty"><td>page range</td><td>0%</td>', html)
    [entry] = [t for t in report["tasks"] if t["name"] == "t"]
    assert entry["fill"] == {"keywords": 1.0, "page_range": 0.0}
