"""A task that carries a CNKI professional-search expression (issue 39): read and checked before
it is saved, sent as CNKI's expert search sends it, answered by the stand-in from its documents'
texts, and crawled whole past the 6,000-row cap at every depth (docs/QUERY.md)."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from cnkispider.cnki.protocol import Protocol
from cnkispider.cnki.query import QueryError, normalize, parse, task_query
from cnkispider.cnki.search import Search
from cnkispider.store.schema import round_
from tests.fixtures.commands import cli
from tests.fixtures.crawl_harness import EXPORT_DEPTH_FIELDS, LIST_DEPTH_FIELDS, compare
from tests.fixtures.crawls import CAP, IPC, YEAR

# The realistic year at scale 0.002 (surge rows 300, cap 250): on Tue 5 March 267 of the 307
# patents have 一种 in their title, more than the cap; on Fri 1 March 56 of 72.
OVER, WITHIN = "2024-03-05", "2024-03-01"
QUERY = "TI%'一种'"


# -- reading and checking ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        "SU='碳中和' AND AF='清华大学'",
        "TKA='深度学习' OR TI='神经网络'",
        "KY='生态文明' AND AB%'治理'",
        "FT='环境保护' NOT AU='张三'",
        "FI='李四' AND FU='国家自然科学基金'",
        "LY='计算机学报' OR JN='软件学报'",
        "DOI='10.1000/xyz.2024.1' OR CLC='TP18'",
        "SU=('经济发展' + '可持续发展') * '转变' - '泡沫'",
        "(TI='生态' or KY='生态文明') and (AU % '陈' + '王')",
    ],
)
def test_every_common_field_and_operator_is_read(expression):
    for doc_type in ("paper", "patent", "achievement"):
        written = normalize(expression, doc_type)
        assert normalize(written, doc_type) == written  # the one spelling is a fixed point


def test_the_patent_fields_are_a_patent_s_alone():
    expression = "SQR='华为技术有限公司' AND FMR='张三' AND SQH='CN202310001234.5' OR GKH='CN1'"
    assert normalize(expression, "patent").startswith("((SQR='华为技术有限公司' AND FMR='张三')")
    with pytest.raises(QueryError, match="unknown field 'SQR'"):
        parse(expression, "paper")


def test_logic_has_one_priority_read_left_to_right_as_cnki_does():
    # A OR B AND C is (A OR B) AND C, and the saved spelling says so with parentheses
    assert normalize("TI='a' OR TI='b' AND TI='c'", "paper") == "(TI='a' OR TI='b') AND TI='c'"
    assert normalize("TI='a' OR (TI='b' AND TI='c')", "paper") == "TI='a' OR (TI='b' AND TI='c')"


@pytest.mark.parametrize(
    ("expression", "where", "what"),
    [
        ("SU='碳中和' AND", 13, "expected a field code"),
        ("XX='a'", 1, "unknown field 'XX'"),
        ("SU='碳中和", 4, "the quote ' is never closed"),
        ("(SU='a' OR TI='b'", 18, "expected ) to close the ( at character 1"),
        ("SU='a')", 7, "an unopened ')'"),
        ("SU 'a'", 4, "expected = or % after SU"),
        ("SU=''", 4, "an empty value"),
        ("SU='a' TI='b'", 8, "expected AND, OR or NOT"),
        ("", 1, "an empty query"),
    ],
)
def test_a_malformed_expression_says_where_it_fails(expression, where, what):
    with pytest.raises(QueryError) as caught:
        parse(expression, "paper")
    assert caught.value.position + 1 == where
    assert what in str(caught.value)
    assert str(caught.value).startswith(f"at character {where}:")


# -- what is sent -----------------------------------------------------------------------------


def test_a_task_s_query_is_read_by_one_function_everywhere():
    """None for none (nothing or blanks), else the one spelling; and no reader of a task's query
    (config.ini, task add/set, a task row, `task add`'s drift) spells it by another way."""
    import re
    from pathlib import Path

    assert task_query(None, "paper") is None and task_query(" \t", "paper") is None
    assert task_query("su＝‘碳中和’", "paper") == normalize("SU='碳中和'", "paper") == "SU='碳中和'"
    with pytest.raises(QueryError):
        task_query("SU=", "paper")
    root = Path(__file__).resolve().parents[1]
    spellers = [
        str(path.relative_to(root))
        for folder in ("cnkispider", "tasks")
        for path in (root / folder).rglob("*.py")
        if re.search(r"cnki\.query import [^\n]*\bnormalize\b", path.read_text(encoding="utf-8"))
    ]
    assert spellers == []


def test_the_query_is_sent_as_the_expert_search_with_the_day_and_category():
    protocol = Protocol(base_url="https://kns.cnki.net")
    search = Search.for_day("paper", "2024-03-05", "TP3", query="SU='碳中和'")
    sent = json.loads(protocol.query_json(search, True))
    subject = sent["QNode"]["QGroup"][0]["Items"]
    assert subject[0] == {
        "Key": "Expert",
        "Title": "",
        "Logic": 0,
        "Field": "EXPERT",
        "Operator": 0,
        "Value": "SU='碳中和'",
        "Value2": "",
    }
    assert subject[1]["Field"] == "CLC" and subject[1]["Value"] == "TP3"
    assert subject[1]["Logic"] == 0  # AND'ed with the expression
    assert sent["QNode"]["QGroup"][1]["Items"][0]["Value"] == "2024-03-05"
    assert sent["SearchType"] == 4
    # a search travels through Redis as JSON: the query with it, and none for a category task
    assert Search.from_dict(search.to_dict()) == search
    assert "query" not in Search.for_day("paper", "2024-03-05", "TP3").to_dict()
    plain = json.loads(protocol.query_json(Search.for_day("paper", "2024-03-05", "TP3"), True))
    assert plain["SearchType"] == 2


# -- the stand-in answers it -------------------------------------------------------------------


def _total(body: bytes) -> int:
    import lxml.html

    found = lxml.html.fromstring(body).xpath("//span[@class='pagerTitleCell']/em/text()")
    return int(found[0].replace(",", "")) if found else -1


def test_the_stand_in_answers_an_expression_from_its_documents_and_refuses_a_broken_one(
    cnki_site,
):
    site = cnki_site(**YEAR)
    client = site.client()
    client.warmup()
    everything = site.truth("patent", OVER)
    found = site.truth("patent", OVER, query=QUERY)
    assert 250 < len(found) < len(everything)
    assert all("一种" in doc["title"] for doc in found)
    assert _total(client.grid("patent", OVER, expert=QUERY)[2]) == len(found)
    # a patent's own fields: its applicant and its inventors
    applicant = found[0]["applicant"]
    inventor = found[0]["inventors"].split(";")[0]
    expression = f"SQR='{applicant}' AND FMR='{inventor}'"
    matched = site.truth("patent", OVER, query=expression)
    assert found[0]["filename"] in {d["filename"] for d in matched}
    assert all(applicant in d["applicant"] for d in matched)
    assert _total(client.grid("patent", OVER, expert=expression)[2]) == len(matched)
    # NOT narrows: the expression's documents less the inventor's
    narrowed = site.truth("patent", OVER, query=f"{QUERY} NOT FMR='{inventor}'")
    assert len(narrowed) == len(found) - sum(inventor in d["inventors"].split(";") for d in found)
    status, _, body = client.grid("patent", OVER, expert="TI='a' AND")
    assert status == 200 and 'class="no-content" value="' in body.decode()
    assert 'value=""' not in body.decode()  # a rejection, never CNKI's soft block or a zero


# -- steering: checked before anything is written ---------------------------------------------


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_task_add_refuses_a_malformed_query_and_writes_nothing(ini, capsys):
    args = ("task", "add", "q", "--type", "paper", "--start", "2024-01-01")
    assert cli(ini, *args, "--query", "SU='碳中和' AND XX='a'") == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "--query: at character 14: unknown field 'XX'" in line
    assert cli(ini, "task", "list") == 0
    assert capsys.readouterr().out == "no tasks\n"
    assert cli(ini, *args, "--query", "su='碳中和'  and AF = 清华大学") == 0
    assert "query SU='碳中和' AND AF='清华大学'" in capsys.readouterr().out
    assert cli(ini, "task", "show", "q") == 0
    assert "query SU='碳中和' AND AF='清华大学'" in capsys.readouterr().out


def test_task_add_again_compares_the_query_in_its_one_spelling(ini, capsys):
    """The same query in another spelling (or none given) is the same task; another query is
    said with the command that would make it, and changes nothing."""
    args = ("task", "add", "q", "--type", "paper", "--start", "2024-01-01")
    assert cli(ini, *args, "--query", "SU='碳中和'") == 0
    for same in (("--query", "su＝‘碳中和’"), ("--query", "  "), ()):
        assert cli(ini, *args, *same) == 0, same
        assert "exists: " in capsys.readouterr().out
    assert cli(ini, *args, "--query", "SU='碳达峰'") == 2
    assert "task add q-2 --like q --query ..." in _one_error_line(capsys.readouterr().err)
    assert cli(ini, "task", "show", "q") == 0
    assert "query SU='碳中和'" in capsys.readouterr().out


def test_task_set_query_only_before_the_first_round(ini, capsys):
    from cnkispider.store.db import open_database

    assert cli(ini, "task", "add", "q", "--type", "patent", "--start", "2024-01-01") == 0
    assert cli(ini, "task", "set", "q", "--query", "SQR='华为'") == 0
    assert "query SQR='华为'" in capsys.readouterr().out
    assert cli(ini, "task", "set", "q", "--type", "paper") == 2  # SQR is no paper field
    assert "unknown field 'SQR'" in _one_error_line(capsys.readouterr().err)
    engine = open_database(ini_url(ini))
    try:
        with engine.begin() as conn:
            conn.execute(
                round_.insert().values(task_id=1, day="2024-01-01", category="H04", state="done")
            )
    finally:
        engine.dispose()
    assert cli(ini, "task", "set", "q", "--query", "SQR='小米'") == 2
    assert "1 rounds are already crawled" in _one_error_line(capsys.readouterr().err)
    assert cli(ini, "task", "show", "q") == 0
    assert "query SQR='华为'" in capsys.readouterr().out


def ini_url(ini: str) -> str:
    import configparser

    parser = configparser.ConfigParser()
    parser.read(ini, encoding="utf-8")
    return parser["database"]["url"]


def test_a_hand_edited_bad_query_is_a_bad_row_reported_and_skipped(ini, capsys):
    from cnkispider.store.db import open_database
    from cnkispider.store.schema import task

    assert cli(ini, "task", "add", "q", "--type", "patent", "--start", "2024-01-01") == 0
    engine = open_database(ini_url(ini))
    try:
        with engine.begin() as conn:
            conn.execute(task.update().values(query="SU='a' AND ("))
    finally:
        engine.dispose()
    capsys.readouterr()
    assert cli(ini, "task", "list") == 0
    assert "query: at character" in capsys.readouterr().out


def test_config_ini_with_a_malformed_query_names_file_section_and_key(tmp_path, capsys):
    path = tmp_path / "c.ini"
    path.write_text(
        "[task]\ntype = patent\nquery = SQR='华为' OR\n",
        encoding="utf-8",
    )
    from cnkispider.cli import main

    assert main(["--config", str(path), "task", "list"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "[task] query: at character 12: expected a field code" in line
    assert str(path) in line
    assert not (tmp_path / "data").exists()  # nothing created for a refused config


# -- crawls: every result of the search, past the cap ------------------------------------------


def _rows(setup):
    return setup.query(
        sa.select(round_.c.day, round_.c.category, round_.c.state, round_.c.total).order_by(
            round_.c.id
        )
    )


def _equal_to_truth(setup, doc_type="patent"):
    truth = setup.truth()
    assert truth, "the query finds nothing: the test would prove nothing"
    fields = {"list": LIST_DEPTH_FIELDS, "export": EXPORT_DEPTH_FIELDS}.get(setup.depth)
    assert compare(setup.stored(), truth, doc_type, fields and fields[doc_type]) == {
        "missing": [],
        "extra": [],
        "differing": {},
    }


@pytest.mark.slow  # a crawl in a worker subprocess
@pytest.mark.parametrize("depth", ["list", "export", "detail"])
def test_a_query_day_over_the_cap_is_split_and_harvested_whole_at_each_depth(crawl_setup, depth):
    setup = crawl_setup(
        "patent", IPC, "sqlite", OVER, OVER, site=YEAR, cnki=CAP, day_census="on", depth=depth
    )
    setup.search_query = QUERY
    setup.run_ok(timeout=300)
    truth = setup.truth()
    assert len(truth) > CAP["cap_rows"]  # more rows than one search can list
    _equal_to_truth(setup)
    rounds = _rows(setup)
    assert all(state == "done" for _, _, state, _ in rounds), rounds
    census = [total for _, category, _, total in rounds if category == "*"]
    assert census == [0]  # split by its facet counts: the day is its root rounds'
    roots = [total for _, category, _, total in rounds if category != "*"]
    # the query's day by category (a patent under one class on the stand-in), counted by one
    # group/result of the census's search with the query
    assert len(roots) == 8 and sum(roots) == len(truth), rounds
    stats = setup.site.stats()
    assert stats["kinds"]["group"] == 1
    assert stats["searches"]["first"] >= 2  # the census, then its parts


@pytest.mark.slow  # a crawl in a worker subprocess
def test_a_query_day_within_the_cap_costs_one_search_and_a_page_per_50_rows(crawl_setup):
    setup = crawl_setup(
        "patent", IPC, "sqlite", WITHIN, WITHIN, site=YEAR, cnki=CAP, day_census="on", depth="list"
    )
    setup.search_query = QUERY
    setup.run_ok(timeout=300)
    truth = setup.truth()
    _equal_to_truth(setup)
    grid = setup.site.stats()["kinds"]["grid"]
    pages = -(-len(truth) // 50)
    assert grid == pages, (grid, pages, len(truth))  # one search, its pages, nothing else
    assert grid / len(truth) <= 0.06


@pytest.mark.slow  # crawls in worker subprocesses
@pytest.mark.parametrize("depth", ["export", "detail"])
def test_a_query_task_stores_exactly_what_the_query_finds_at_each_depth(crawl_setup, depth):
    setup = crawl_setup(
        "patent", IPC, "sqlite", WITHIN, WITHIN, site=YEAR, cnki=CAP, day_census="on", depth=depth
    )
    setup.search_query = "TI%'一种' NOT AB%'装置'"
    setup.run_ok(timeout=300)
    _equal_to_truth(setup)
    everything = setup.site.truth("patent", WITHIN)
    assert len(setup.stored()) < len(everything)  # nothing outside the query is stored


def test_status_shows_the_query_in_text_and_json(sqlite_url):
    """`status` (text and --json) carries the task's query (issue 39 point 5; the web page's
    test is tests/test_web.py's, on its crawl)."""
    from cnkispider.status import collect, render
    from cnkispider.store.db import open_database
    from cnkispider.store.schema import task

    engine = open_database(sqlite_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                task.insert().values(
                    name="carbon",
                    type="paper",
                    start_date="2024-01-01",
                    categories="builtin",
                    phase="crawl",
                    query="SU='碳中和' AND AF='清华大学'",
                )
            )
        report = collect(engine, None)
    finally:
        engine.dispose()
    (entry,) = report["tasks"]
    assert entry["query"] == "SU='碳中和' AND AF='清华大学'"
    assert "  query SU='碳中和' AND AF='清华大学'" in render(report).splitlines()
    assert json.loads(json.dumps(report))["tasks"][0]["query"] == entry["query"]


# -- a saved search that never misses a late arrival (with issue 38, following today) ----------


@pytest.mark.slow  # crawls in worker subprocesses
def test_a_query_task_that_follows_today_catches_the_query_s_late_arrivals(crawl_setup):
    """Issue 39 point 4: crawled as of a week ago, then again today, a query task that follows
    today holds exactly what its query finds in the look-back as of today, nothing outside it,
    and the second run counts each look-back day with one search (the day's, with the query)."""
    from tests.fixtures.crawls import IPC
    from tests.fixtures.follow import AS_OF_A, FOLLOW, SITE, START, TODAY, WINDOW, days

    query = "TI%'方法'"
    setup = crawl_setup(
        "patent",
        IPC,
        "sqlite",
        START.isoformat(),
        "",
        site=SITE,
        day_census="on",
        depth="list",
        task_keys=FOLLOW,
    )
    setup.search_query = query
    setup.run_ok("run", "--until-idle", timeout=240)
    site = setup.site

    def truth() -> dict[str, dict]:
        rows = site.truth("patent", START.isoformat(), TODAY.isoformat(), IPC.split(","), query)
        return {r["filename"]: r for r in rows if str(r["date"])[:10] >= WINDOW.isoformat()}

    before = truth()
    assert AS_OF_A < TODAY
    site.control(as_of=TODAY.isoformat(), reset_stats=True)  # CNKI entered more since
    after = truth()
    assert set(after) - set(before), "no late arrival matches the query: the test proves nothing"
    setup.run_ok("run", "--until-idle", timeout=240)
    stored = {d["filename"]: d for d in setup.stored() if str(d["date"])[:10] >= WINDOW.isoformat()}
    assert compare(
        list(stored.values()), list(after.values()), "patent", LIST_DEPTH_FIELDS["patent"]
    ) == {"missing": [], "extra": [], "differing": {}}
    everything = site.truth("patent", START.isoformat(), TODAY.isoformat(), IPC.split(","))
    assert len(setup.stored()) < len(everything)  # nothing outside the query
    assert site.stats()["searches"]["first"] == days(WINDOW, TODAY)
