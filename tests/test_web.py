"""`cnkispider web`: the operator's page (issue 22).

The browser tests run one crawl of the stand-in (three days x three categories, one document that
always fails: an errorLink row) into a MariaDB database, start `cnkispider web` on it in its own
process, as an operator would, and drive a real headless Chromium (Debian's, through Playwright:
no browser is downloaded) against it. What the page shows is checked against the database read
directly here. The other tests build their rows by hand (SQLite and MariaDB).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import threading
import urllib.error
import urllib.request
import uuid

import pytest
import sqlalchemy as sa

from cnkispider.config import load_config
from cnkispider.status.round_views import GRID_CELLS_MAX, round_grid
from cnkispider.store.db import open_database
from cnkispider.store.schema import audit, documents, error_link, round_, task, worker
from cnkispider.web import guard
from standin.client import start_site
from tests.fixtures.crawl_harness import ROOT, CrawlSetup
from tests.fixtures.services import MYSQL_HOST, MYSQL_PORT, _mysql_admin
from tests.fixtures.waiting import wait_until
from tests.fixtures.webserver import WebServer, free_local_port

SCRIPT_TITLE = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'
HALT_REASON = "http-500: CNKI answered <script>window.__xss = 3</script> five times"
LAST_ERROR = "parse-error: ValueError: <script>window.__xss = 4</script> in the pager"
#: The page's colour classes by the round's state (cnkispider/status/round_views.py cell_state).
COLOUR = {"claimed": "in-flight", "seeded": "in-flight", "done": "done", "failed": "failed"}


@pytest.fixture(scope="module")
def crawled(tmp_path_factory):
    """One crawl of the stand-in into its own MariaDB database, and the web page on it."""
    name = f"cnkit_{uuid.uuid4().hex[:10]}"
    admin = _mysql_admin()
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    admin.close()
    url = f"mysql+pymysql://root@{MYSQL_HOST}:{MYSQL_PORT}/{name}?charset=utf8mb4"
    # a few captcha pages (challenges the workers count), retried without the task's cool-down
    site = start_site(seed=7, scale=0.1, latency="0.005-0.01", faults={"captcha": 0.03})
    setup = CrawlSetup(
        tmp_path_factory.mktemp("web"),
        site,
        url,
        "patent",
        "2024-01-01",
        "2024-01-03",
        "A61,G06,H04",
        crawl={"concurrent_requests": 4, "log_file": "", "challenge_cooldown": 0},
    )
    site.control(doomed=[setup.truth()[2]["filename"]])  # always fails: an errorLink row
    server = None
    engine = open_database(url)
    try:
        done = setup.run(timeout=240)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        server = WebServer(setup)
        yield {"setup": setup, "engine": engine, "server": server, "site": site}
    finally:
        if server is not None:
            server.stop()
        engine.dispose()
        setup.cleanup_redis()
        site.stop()
        admin = _mysql_admin()
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        admin.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    yield context.new_page()
    context.close()


def _task_id(engine, name: str) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.select(task.c.id).where(task.c.name == name)).scalar()


# -- in a real browser, after a real crawl ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.xdist_group("web-crawl")
def test_the_grid_has_one_cell_per_round_in_its_state_colour(crawled, page, tmp_path):
    setup, engine, server = crawled["setup"], crawled["engine"], crawled["server"]
    with engine.connect() as conn:
        rounds = {
            str(r.id): r
            for r in conn.execute(
                sa.select(round_).where(round_.c.task_id == _task_id(engine, setup.task))
            )
        }
    problems = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(f"{server.url}/tasks/{setup.task}")
    page.wait_for_load_state("networkidle")
    # the vendored scripts loaded and ran under the Content-Security-Policy, with no error
    assert page.evaluate("typeof window.htmx + ' ' + typeof window.uPlot") == "object function"
    assert problems == []
    cells = page.locator("table.grid td[data-round]")
    shown = {
        cells.nth(i).get_attribute("data-round"): cells.nth(i).get_attribute("class")
        for i in range(cells.count())
    }
    assert len(rounds) == 9 and set(shown) == set(rounds)
    assert shown == {rid: f"c-{COLOUR[r.state]}" for rid, r in rounds.items()}
    assert all(r.state == "done" for r in rounds.values())  # after the crawl: every cell green
    colour = page.locator("table.grid td.c-done").first.evaluate(
        "cell => getComputedStyle(cell).backgroundColor"
    )
    assert colour == "rgb(129, 199, 132)"
    target = ROOT / "docs" if os.environ.get("CNKI_TEST_WRITE_DOCS") else tmp_path
    page.locator("table.grid td[data-round]").first.click()  # the screenshot shows a round too
    page.locator("#round h3").wait_for()
    page.screenshot(path=str(target / "web-grid.png"), full_page=False)


@pytest.mark.slow
@pytest.mark.xdist_group("web-crawl")
def test_a_cell_opens_its_round_and_a_title_holding_script_shows_as_text(crawled, page):
    setup, engine, server = crawled["setup"], crawled["engine"], crawled["server"]
    with engine.begin() as conn:
        row = conn.execute(
            sa.select(error_link.c.id, error_link.c.round_id).where(
                error_link.c.task_id == _task_id(engine, setup.task)
            )
        ).first()
        assert row is not None, "the doomed document left no errorLink row"
        conn.execute(
            error_link.update().where(error_link.c.id == row.id).values(title=SCRIPT_TITLE)
        )
    page.goto(f"{server.url}/tasks/{setup.task}")
    page.locator(f"table.grid td[data-round='{row.round_id}']").click()
    title = page.locator("#round td.title").first
    title.wait_for()
    assert title.inner_text() == SCRIPT_TITLE
    assert page.evaluate("window.__xss") is None
    assert page.locator("#round img").count() == 0


@pytest.mark.slow
@pytest.mark.xdist_group("web-crawl")
def test_a_halted_task_shows_its_banner_and_resumes_from_the_page_with_the_token(crawled, page):
    setup, engine, server = crawled["setup"], crawled["engine"], crawled["server"]
    from tasks.flow import TaskStore

    task_id = _task_id(engine, setup.task)
    assert TaskStore(engine).halt(task_id, HALT_REASON)
    page.goto(server.url + "/")
    banner = page.locator(f".banner-halted[data-task='{setup.task}']")
    assert HALT_REASON in banner.inner_text()  # the reason as text, its script never run
    assert page.evaluate("window.__xss") is None
    banner.locator("a", has_text="Resume").click()
    assert "will clear the halt" in page.locator(".plan").inner_text()
    with engine.connect() as conn:  # the preview changed nothing
        assert conn.execute(sa.select(task.c.halt_reason).where(task.c.id == task_id)).scalar()
    page.fill("input[name=token]", server.token)
    page.click("button[name=confirm]")
    assert page.locator(".result").inner_text().startswith("resumed: ")
    with engine.connect() as conn:
        assert (
            conn.execute(sa.select(task.c.halt_reason).where(task.c.id == task_id)).scalar() is None
        )
        recorded = conn.execute(sa.select(audit).where(audit.c.task_name == setup.task)).all()
    assert [(a.action, a.ok) for a in recorded] == [("resume", 1)]
    assert "127.0.0.1" in recorded[0].who and "halt cleared" in recorded[0].detail


@pytest.mark.slow
@pytest.mark.xdist_group("web-crawl")
def test_an_action_without_the_token_or_from_another_origin_is_refused(crawled, page):
    setup, engine, server = crawled["setup"], crawled["engine"], crawled["server"]
    path = f"/tasks/{setup.task}/stop"
    same = {"Origin": server.url}

    def row():
        with engine.connect() as conn:
            found = conn.execute(sa.select(task).where(task.c.name == setup.task)).first()
            actions = conn.execute(sa.select(sa.func.count()).select_from(audit)).scalar()
        return (found.end_date, found.cur_date, found.phase, found.halt_reason), actions

    before = row()
    assert server.post(path, {}, same) == 403  # no token
    assert server.post(path, {"token": "wrong"}, same) == 403
    assert server.post(path, {"token": server.token}, {"Origin": "http://evil.test"}) == 403
    assert server.post(path, {"token": server.token}, {"Referer": "http://evil.test/x"}) == 403
    assert server.post(path, {"token": server.token}, {}) == 403  # neither Origin nor Referer
    assert server.post("/sessions", {"token": server.token, "paste": "curl x"}, {}) == 403
    # a page of another site, in the browser, posting the right token: the browser says its origin
    page.route(
        "http://evil.test/",
        lambda route: route.fulfill(
            content_type="text/html",
            body=f'<form method="post" action="{server.url}{path}">'
            f'<input name="token" value="{server.token}"><button>go</button></form>',
        ),
    )
    page.goto("http://evil.test/")
    with page.expect_response(server.url + path) as answer:
        page.click("button")
    assert answer.value.status == 403
    assert row() == before  # nothing changed, nothing recorded


@pytest.mark.slow
@pytest.mark.xdist_group("web-crawl")
def test_a_page_asked_for_under_another_host_name_is_refused(crawled):
    """Bound to 127.0.0.1, the page answers only its loopback names (no DNS rebinding)."""
    server = crawled["server"]
    request = urllib.request.Request(server.url + "/api/status", headers={"Host": "evil.test"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 400
    assert json.loads(server.get("/api/status"))["tasks"]


@pytest.mark.slow
@pytest.mark.xdist_group("web-crawl")
def test_metrics_parse_and_count_the_documents_of_the_database(crawled):
    from prometheus_client.parser import text_string_to_metric_families

    setup, engine, server = crawled["setup"], crawled["engine"], crawled["server"]
    families = {f.name: f for f in text_string_to_metric_families(server.get("/metrics"))}
    with engine.connect() as conn:
        stored = conn.execute(sa.select(sa.func.count()).select_from(documents["patent"])).scalar()
        states = dict(
            conn.execute(sa.select(round_.c.state, sa.func.count()).group_by(round_.c.state)).all()
        )
    docs = {s.labels["task"]: s.value for s in families["cnkispider_documents"].samples}
    assert stored > 0 and docs == {setup.task: stored}
    rounds = {s.labels["state"]: s.value for s in families["cnkispider_rounds"].samples}
    assert rounds == states
    errors = [s for s in families["cnkispider_errors"].samples if s.labels["table"] == "errorLink"]
    assert sum(s.value for s in errors) >= 1
    assert {"cnkispider_sessions", "cnkispider_workers", "cnkispider_waiting_for_person"} <= set(
        families
    )


@pytest.mark.slow
@pytest.mark.xdist_group("web-crawl")
def test_metrics_count_the_challenges_the_workers_heartbeats_wrote(crawled):
    """``cnkispider_challenges_total`` is the sum of the task's worker.challenges: the crawl met
    the stand-in's captcha pages, and each worker's last heartbeat wrote how many it met."""
    from prometheus_client.parser import text_string_to_metric_families

    setup, engine, server = crawled["setup"], crawled["engine"], crawled["server"]
    with engine.connect() as conn:
        met = conn.execute(
            sa.select(sa.func.sum(worker.c.challenges)).where(
                worker.c.task_id == _task_id(engine, setup.task)
            )
        ).scalar()
    assert met > 0, "the crawl met none of the stand-in's captcha pages"
    families = {f.name: f for f in text_string_to_metric_families(server.get("/metrics"))}
    assert families["cnkispider_challenges"].type == "counter"
    counted = {
        s.labels["task"]: s.value
        for s in families["cnkispider_challenges"].samples
        if s.name == "cnkispider_challenges_total"
    }
    assert counted == {setup.task: met}
    assert json.loads(server.get("/api/status"))["tasks"][0]["challenges"] == met
    with engine.connect() as conn:  # the doomed document's failure, as its worker recorded it
        last = [e for e in conn.execute(sa.select(worker.c.last_error)).scalars() if e]
    assert last and all(len(e) <= 300 for e in last), last


@pytest.mark.slow
@pytest.mark.xdist_group("web-crawl")
def test_the_workers_table_shows_a_last_error_holding_script_as_text(crawled, page):
    from tasks.flow import TaskStore

    setup, engine, server = crawled["setup"], crawled["engine"], crawled["server"]
    task_id = _task_id(engine, setup.task)
    store = TaskStore(engine)
    worker_id = f"web-test:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    store.register_worker(worker_id, task_id)
    store.heartbeat(worker_id, task_id, pages=1, challenges=2, last_error=LAST_ERROR)
    try:
        page.goto(f"{server.url}/tasks/{setup.task}")
        row = page.locator("table.workers tr", has_text="web-test")
        row.locator("td.last-error").wait_for()
        assert row.locator("td.last-error").inner_text() == LAST_ERROR
        assert page.evaluate("window.__xss") is None
    finally:
        with engine.begin() as conn:  # the other tests count the crawl's workers only
            conn.execute(worker.delete().where(worker.c.id == worker_id))


@pytest.mark.slow
@pytest.mark.xdist_group("web-crawl")
def test_api_status_is_status_json(crawled):
    setup, server = crawled["setup"], crawled["server"]
    over_http = json.loads(server.get("/api/status"))
    done = subprocess.run(
        setup.command("status", "--json"), cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    local = json.loads(done.stdout)
    assert set(over_http) == set(local)
    for a, b in zip(over_http["tasks"], local["tasks"], strict=True):
        assert (a["name"], a["documents"], a["rounds"], a["errors"]) == (
            b["name"],
            b["documents"],
            b["rounds"],
            b["errors"],
        )


@pytest.mark.slow
@pytest.mark.xdist_group("web-crawl")
def test_a_pasted_copy_as_curl_joins_the_pool_after_its_preview(crawled, page):
    from playwright.sync_api import expect

    from cnkispider.sessions.pool import SessionStore, namespace_for

    site, server = crawled["site"], crawled["server"]
    host = site.base_url.split("/")[2]
    store = SessionStore(redis_client(), namespace_for(site.base_url))
    before = {s.id for s in store.list()}
    page.goto(server.url + "/sessions")
    page.fill("textarea[name=paste]", "curl 'https://www.example.com/' -b 'a=1'")
    page.fill("input[name=token]", server.token)
    page.click("button[name=preview]")
    assert "is a request to www.example.com" in page.locator(".error").inner_text()
    # the tab remembers the token: the page's script types it in once loaded (until then the
    # required field is empty and the browser would not send the form)
    token_field = page.locator("input[name=token]")
    expect(token_field).to_have_value(server.token, timeout=120_000)
    paste = f"curl 'http://{host}/kns8s/defaultresult/index' -b 'SID=s1; Ecp_ClientId=c2' -A 'Mozilla/5.0 Chrome/130.0'"
    page.fill("textarea[name=paste]", paste)
    page.click("button[name=preview]")
    assert "will add a session" in page.locator(".plan").inner_text()
    assert {s.id for s in store.list()} == before  # the preview added nothing
    expect(token_field).to_have_value(server.token, timeout=120_000)
    page.click("button[name=confirm]")
    assert page.locator(".result").inner_text().startswith("added session ")
    added = [s for s in store.list() if s.id not in before]
    try:
        assert [s.cookie_names() for s in added] == [["Ecp_ClientId", "SID"]]
        assert "s1" not in page.content()  # never a cookie value on the page
    finally:
        for s in added:
            store.remove(s.id)


def redis_client():
    import redis

    from tests.fixtures.crawl_harness import REDIS_URL

    return redis.Redis.from_url(REDIS_URL)


# -- without a crawl --------------------------------------------------------------------------


def test_a_version_3_database_gets_the_audit_table(db_url):
    from cnkispider.store import schema

    engine = open_database(db_url)
    with engine.begin() as conn:  # what a version-3 cnkispider left behind
        conn.exec_driver_sql("DROP TABLE audit")
        conn.execute(schema.schema_version.update().values(version=3))
    engine.dispose()
    for _ in range(2):  # idempotent: a second start finds everything in place
        upgraded = open_database(db_url)
        with upgraded.connect() as conn:
            assert (
                conn.execute(sa.select(schema.schema_version.c.version)).scalar()
                == schema.SCHEMA_VERSION
            )
            assert "audit" in sa.inspect(conn).get_table_names()
        upgraded.dispose()


def test_the_chart_gives_challenges_per_minute_from_the_summed_count_between_samples():
    from cnkispider.web.history import History

    clock = iter([0.0, 30.0, 90.0, 150.0])
    history = History(clock=lambda: next(clock))
    empty = {"errorCode": {"by_reason": {}}, "errorLink": {"by_reason": {}}}
    for challenges, waiting in ((4, None), (10, None), (10, "a person"), (7, None)):
        history.add(
            {
                "tasks": [
                    {
                        "name": "t",
                        "documents": 0,
                        "workers": [],
                        "challenges": challenges,
                        "waiting": waiting,
                        "errors": empty,
                    }
                ]
            }
        )
    series = history.series("t")
    # 6 in 30 s, none in the next minute; a gone worker's row removed: a fall, never below 0
    assert series["challenges_per_min"] == [None, 12.0, 0.0, 0.0]
    assert series["waiting"] == [0, 0, 1, 0]


def test_a_version_4_database_gets_the_workers_challenges_and_last_error(db_url):
    from cnkispider.store import schema

    engine = open_database(db_url)
    with engine.begin() as conn:  # what a version-4 cnkispider left behind
        conn.execute(worker.insert().values(id="pc:1:x", host="pc", pid=1, state="running"))
        for column in ("challenges", "last_error"):
            conn.exec_driver_sql(f"ALTER TABLE worker DROP COLUMN {column}")
        conn.execute(schema.schema_version.update().values(version=4))
    engine.dispose()
    for _ in range(2):  # idempotent: a second start finds everything in place
        upgraded = open_database(db_url)
        with upgraded.connect() as conn:
            assert (
                conn.execute(sa.select(schema.schema_version.c.version)).scalar()
                == schema.SCHEMA_VERSION
            )
            columns = {c["name"] for c in sa.inspect(conn).get_columns("worker")}
            assert {"challenges", "last_error"} <= columns
            row = conn.execute(sa.select(worker.c.challenges, worker.c.last_error)).one()
            assert tuple(row) in {(None, None), (0, None)}  # the old row: nothing met yet
        upgraded.dispose()


def test_the_grid_rolls_up_to_months_past_its_cell_limit(sqlite_url, tmp_path):
    """400 days x 60 categories is past 20,000 cells: a cell per month, the worst state first."""
    codes = [f"C{i:03d}" for i in range(60)]
    (tmp_path / "codes.txt").write_text("\n".join(codes) + "\n", encoding="utf-8")
    engine = open_database(sqlite_url)
    first = dt.date(2024, 1, 1)
    with engine.begin() as conn:
        conn.execute(
            task.insert().values(
                id=1,
                name="big",
                type="patent",
                start_date="2024-01-01",
                cur_date="2025-02-03",
                end_date="2025-02-03",
                categories=str(tmp_path / "codes.txt"),
                phase="crawl",
            )
        )
        rows = [
            {
                "task_id": 1,
                "day": (first + dt.timedelta(days=d)).isoformat(),
                "category": code,
                "state": "done",
                "stored": 2,
                "note": None,
            }
            for d in range(400)
            for code in codes
        ]
        rows[0].update(state="failed", note="ledger: listed 3, stored 2")
        rows[1].update(state="seeded")
        conn.execute(round_.insert(), rows)
    grid = round_grid(engine, "big", base_dir=tmp_path)
    assert 400 * 60 > GRID_CELLS_MAX and grid["unit"] == "month"
    assert grid["columns"] == codes and len(grid["rows"]) == 14  # 2024-01 .. 2025-02
    january = grid["rows"][0]["cells"]
    assert [january[0]["state"], january[1]["state"], january[2]["state"]] == [
        "unbalanced",
        "in-flight",
        "done",
    ]
    assert january[2]["rounds"] == 31 and january[2]["documents"] == 62
    assert grid["by_state"] == {"unbalanced": 1, "in-flight": 1, "done": 400 * 60 - 2}
    month = round_grid(engine, "big", month="2024-02", base_dir=tmp_path)
    assert month["unit"] == "day" and len(month["rows"]) == 29
    engine.dispose()


def test_the_token_is_made_once_and_kept_for_this_user_only(tmp_path):
    token, path, made = guard.load_or_make_token("", tmp_path)
    assert made and path == tmp_path / guard.TOKEN_FILE and len(token) >= 40
    assert (path.stat().st_mode & 0o777) == 0o600
    assert guard.load_or_make_token("", tmp_path) == (token, path, False)
    assert guard.load_or_make_token("given", tmp_path) == ("given", None, False)


@pytest.mark.parametrize(
    ("headers", "same"),
    [
        ({"host": "127.0.0.1:8700", "origin": "http://127.0.0.1:8700"}, True),
        ({"host": "127.0.0.1:8700", "referer": "http://127.0.0.1:8700/tasks/a/stop"}, True),
        ({"host": "127.0.0.1:8700", "origin": "http://127.0.0.1:8701"}, False),
        ({"host": "127.0.0.1:8700", "origin": "null"}, False),
        ({"host": "127.0.0.1:8700", "origin": "http://evil.test"}, False),
        ({"host": "127.0.0.1:8700"}, False),
    ],
)
def test_the_same_origin_check(headers, same):
    assert guard.same_origin(headers)[0] is same


def test_web_is_bound_to_this_machine_unless_told_otherwise(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(environ={})
    assert config.raw["web"] == {"host": "127.0.0.1", "port": 8700, "token": "", "public_url": ""}


@pytest.mark.slow  # a command in a subprocess
def test_a_crawl_never_imports_the_web_stack():
    """`cnkispider run` and `status` import no Starlette, Jinja2, uvicorn or prometheus_client."""
    code = (
        "import sys, cnkispider.cli, cnkispider.status, cnkispider.settings;"
        "cnkispider.cli.build_parser();"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('starlette', 'jinja2', 'uvicorn', 'prometheus_client') or m.startswith('cnkispider.web')))"
    )
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stderr


@pytest.mark.slow
def test_the_grid_benchmark_prints_its_table():
    """bench/web_grid.py at a tiny size (its figures are the README's at 365 x 600)."""
    import sys

    run = subprocess.run(
        [sys.executable, "bench/web_grid.py", "--days", "40", "--categories", "30", "--runs", "1"]
        + ["--browser"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = [line for line in run.stdout.splitlines() if line.startswith("| SQLite |")]
    assert [r.split(" | ")[1].split(":")[0] for r in rows] == [
        "page",
        "page",
        "grid alone",
        "round (a cell's detail)",
        "browser",
        "browser month",
    ]


def test_the_throughput_and_error_charts_draw_the_page_s_samples(
    sqlite_url, redis_url, tmp_path, page
):
    """The app samples the report (here every 0.2 s) and uPlot draws its series in the page."""
    import uvicorn

    from cnkispider.cli import main
    from cnkispider.web import create_app
    from cnkispider.web.serve import UVICORN_OPTIONS

    ini = tmp_path / "config.ini"
    ini.write_text(
        f"[database]\nurl = {sqlite_url}\n[redis]\nurl = {redis_url}\n", encoding="utf-8"
    )
    assert (
        main(
            ["--config", str(ini), "task", "add", "t", "--type", "patent", "--start", "2024-01-01"]
        )
        == 0
    )
    engine = open_database(sqlite_url)
    with engine.begin() as conn:
        task_id = conn.execute(sa.select(task.c.id)).scalar()
        conn.execute(
            error_link.insert().values(
                task_id=task_id,
                doc_type="patent",
                url="http://x/",
                dbname="D",
                filename="F",
                reason="http-500",
                state="open",
            )
        )
    app = create_app(load_config(ini, environ={}), engine=engine, token="t", sample_seconds=0.2)
    server = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=free_local_port(), log_level="warning", **UVICORN_OPTIONS
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, 60, what="the web server")
        history = app.state.web.history  # a few samples: a rate needs two
        wait_until(lambda: len(history.samples) >= 3, 60, what="three samples")
        page.goto(f"http://127.0.0.1:{server.config.port}/tasks/t")
        page.locator("#throughput-chart canvas").wait_for()
        page.locator("#errors-chart canvas").wait_for()
        legend = page.locator("#throughput-chart").inner_text()
        assert "pages/min" in legend and "documents/min" in legend and "challenges" in legend
        assert "http-500" in page.locator("#errors-chart").inner_text()
    finally:
        server.should_exit = True
        thread.join(10)
        engine.dispose()


@pytest.mark.slow
@pytest.mark.xdist_group("web-crawl")
def test_the_task_page_and_the_task_table_show_the_depth(crawled):
    """Issue 27: a task's depth on the web page (detail, the default, on its own page; any other
    depth in the table of tasks too)."""
    setup, engine, server = crawled["setup"], crawled["engine"], crawled["server"]
    own = server.get(f"/tasks/{setup.task}")
    assert 'depth <span class="depth">detail</span>' in own
    with engine.begin() as conn:
        conn.execute(task.update().where(task.c.name == setup.task).values(depth="list"))
    try:
        assert 'depth <span class="depth">list</span>' in server.get(f"/tasks/{setup.task}")
        assert '<span class="depth">(list depth)</span>' in server.get("/")
    finally:
        with engine.begin() as conn:
            conn.execute(task.update().where(task.c.name == setup.task).values(depth=None))


def test_the_banner_of_a_task_without_a_worker_starts_a_worker_of_that_task(sqlite_url):
    """Issue 41: the banner's command crawls the task it stands on, not config.ini's."""
    from cnkispider.status import collect
    from cnkispider.web.app import _templates
    from cnkispider.web.summaries import banners

    engine = open_database(sqlite_url)
    with engine.begin() as conn:
        conn.execute(
            task.insert().values(
                name="q2", type="patent", start_date="2024-05-01", cur_date="2024-05-01",
                end_date="2024-05-03", categories="G06,H04", phase="crawl",
            )
        )  # fmt: skip
    shown = banners(collect(engine, None))
    engine.dispose()
    assert [(b["task"], b["kind"]) for b in shown] == [("q2", "idle")]
    html = _templates().env.get_template("_banners.html").render(banners=shown)
    assert "start a worker: <code>cnkispider run --task q2</code>" in html


@pytest.mark.slow
@pytest.mark.xdist_group("web-crawl")
def test_the_task_page_shows_the_task_s_query(crawled):
    """Issue 39: a query task's expression on its page, as text."""
    setup, engine, server = crawled["setup"], crawled["engine"], crawled["server"]
    assert 'class="query"' not in server.get(f"/tasks/{setup.task}")  # a category task
    with engine.begin() as conn:
        conn.execute(
            task.update().where(task.c.name == setup.task).values(query="SQR='<b>华为</b>'")
        )
    try:
        own = server.get(f"/tasks/{setup.task}")
        assert '<code class="query">SQR=&#39;&lt;b&gt;华为&lt;/b&gt;&#39;</code>' in own
    finally:
        with engine.begin() as conn:
            conn.execute(task.update().where(task.c.name == setup.task).values(query=None))
