"""The web page in the operator's language (issue 28): Chinese or English (Accept-Language, and
a switch kept in a cookie), a grid to read (cells of 20 px or more, the box sized to the grid,
a title per cell), "no samples yet" instead of an empty chart, every page styled when opened
directly. In `cnkispider web` itself and a headless Chromium (Debian's chromium)."""

from __future__ import annotations

import datetime as dt
import html.parser
import json
import os
import re
import types
import urllib.error
import urllib.request
import uuid

import pytest
import redis
import sqlalchemy as sa

from cnkispider.store.db import open_database
from tasks.flow import TaskStore
from tests.fixtures.crawl_harness import ROOT, CrawlSetup
from tests.fixtures.latin import latin_words
from tests.fixtures.waiting import wait_until
from tests.fixtures.webserver import WebServer

# every test reads the page of a `cnkispider web` started for the module (16 s of set-up at a load
# of 20): over a second alone
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A task of 3 days x 2 categories, two rounds done and one in flight, and its page."""
    tmp = tmp_path_factory.mktemp("words")
    url = f"sqlite:///{tmp / 'db.sqlite'}"
    prefix = f"cnkitest:{uuid.uuid4().hex[:10]}:"
    setup = CrawlSetup(
        tmp,
        types.SimpleNamespace(base_url="http://127.0.0.1:9"),
        url,
        "patent",
        "2024-01-01",
        "2024-01-03",
        "G06,H04",
        redis={"prefix": prefix},
    )
    engine = open_database(url)
    store = TaskStore(engine)
    current, _ = store.register(setup.task, "patent", "2024-01-01", "2024-01-03", "G06,H04")
    for _ in range(2):
        r = store.claim(current.id, "pc:1:x")
        store.mark_seeded(r.id, "pc:1:x", "e")
        store.close_round(r.id, total=0)
    store.claim(current.id, "pc:1:x")
    setup.write()
    server = WebServer(setup)
    yield {"setup": setup, "server": server, "engine": engine, "store": store, "prefix": prefix}
    server.stop()
    engine.dispose()
    client = redis.Redis.from_url(setup.redis_url)
    keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def _get(server, path, language=None, cookie=None):
    headers = {}
    if language:
        headers["Accept-Language"] = language
    if cookie:
        headers["Cookie"] = cookie
    request = urllib.request.Request(server.url + path, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.read().decode("utf-8"), answer.headers


def test_the_page_speaks_chinese_to_a_chinese_browser_and_english_otherwise(served):
    server, name = served["server"], served["setup"].task
    zh, _ = _get(server, f"/tasks/{name}", "zh-CN,zh;q=0.9,en;q=0.8")
    for label in ("任务", "进度", "覆盖", "工作进程", "错误", "暂停"):
        assert label in zh, label
    assert '<html lang="zh-CN">' in zh
    en, _ = _get(server, f"/tasks/{name}", "en-GB,en;q=0.9")
    assert "Coverage" in en and "Workers" in en and "覆盖" not in en
    index, _ = _get(server, "/", "zh-TW,zh")
    assert "<h1>任务</h1>" in index


def test_the_switch_is_kept_for_the_next_pages(served):
    server = served["server"]
    page, headers = _get(server, "/?lang=zh", "en")
    assert "<h1>任务</h1>" in page
    cookie = headers.get("set-cookie", "").split(";")[0]
    assert cookie == "lang=zh"
    again, _ = _get(server, "/", "en", cookie=cookie)
    assert "<h1>任务</h1>" in again
    english, _ = _get(server, "/?lang=en", "zh-CN", cookie=cookie)
    assert "<h1>Tasks</h1>" in english


def test_a_round_opened_directly_is_a_styled_page(served):
    server, store = served["server"], served["store"]
    assert store.round_info(1).category == "G06"
    page, _ = _get(server, "/rounds/1", "en")
    assert '<link rel="stylesheet" href="/static/app.css">' in page
    assert "<h3>round 2024-01-01 G06" in page


@pytest.mark.slow
def test_the_grid_is_readable_and_the_chart_speaks_chinese(served, browser, tmp_path):
    server, name = served["server"], served["setup"].task
    context = browser.new_context(
        viewport={"width": 1100, "height": 700}, locale="zh-CN", extra_http_headers={}
    )
    page = context.new_page()
    page.goto(f"{server.url}/tasks/{name}?lang=zh")
    page.wait_for_load_state("networkidle")
    cells = page.locator("table.grid td[data-round]")
    assert cells.count() == 3
    box = cells.first.bounding_box()
    assert box["width"] >= 20 and box["height"] >= 20
    assert cells.first.get_attribute("title").startswith("2024-01-01 G06: 完成")
    wrap = page.locator(".grid-wrap").bounding_box()
    grid = page.locator("table.grid").bounding_box()
    assert wrap["width"] <= grid["width"] + 4  # the box is sized to its grid, not the window
    label_size = page.locator("table.grid thead th").first.evaluate(
        "th => parseFloat(getComputedStyle(th).fontSize)"
    )
    assert label_size >= 12
    # before its server has two samples the chart says so (in the page as served, and as drawn
    # while there is one); then it is drawn, titled and labelled in Chinese too
    html = server.get(f"/tasks/{name}?lang=zh")
    assert '<p class="empty">尚无采样数据</p>' in html
    assert "由本页面的服务器自启动起采样" in html
    chart = page.locator("#throughput-chart")
    wait_until(lambda: chart.locator("canvas").count(), 120, what="a second sample drawn")
    drawn = chart.inner_text()
    assert "吞吐量" in drawn and "页/分钟" in drawn and "文献/分钟" in drawn, drawn
    assert "pages/min" not in drawn and "throughput" not in drawn, drawn
    assert "时间" in drawn and "Time" not in drawn, drawn  # the time axis's legend (48.3)
    target = ROOT / "docs" if os.environ.get("CNKI_TEST_WRITE_DOCS") else tmp_path
    page.screenshot(path=str(target / "web-task-zh.png"), full_page=False)
    context.close()


@pytest.mark.slow
def test_pause_and_resume_from_the_page_keep_the_task_s_dates(served, browser):
    from playwright.sync_api import expect

    server, store, name = served["server"], served["store"], served["setup"].task
    context = browser.new_context(viewport={"width": 1100, "height": 700})
    page = context.new_page()
    page.goto(f"{server.url}/tasks/{name}?lang=en")
    offered = page.locator("nav.actions a").evaluate_all(
        "links => links.map(a => a.dataset.action)"
    )
    assert offered == ["pause", "stop", "extend", "move", "recrawl"]
    page.locator("nav.actions a[data-action=pause]").click()
    assert "its dates stay (2024-01-01 .. 2024-01-03)" in page.locator(".plan").inner_text()
    page.fill("input[name=token]", server.token)
    page.click("button[name=confirm]")
    assert page.locator(".result").inner_text().startswith("paused: ")
    paused = store.get(name)
    assert paused.halt_reason.startswith("paused") and paused.end_date.isoformat() == "2024-01-03"
    page.goto(f"{server.url}/tasks/{name}?lang=en")
    offered = page.locator("nav.actions a").evaluate_all(
        "links => links.map(a => a.dataset.action)"
    )
    assert offered == ["resume", "stop", "extend", "move"]
    page.locator("nav.actions a[data-action=resume]").click()
    # the tab remembers the token: the page's script types it in once loaded. Typing it here as
    # well raced that script (a select-all, the script's value, then the typed text after it:
    # the token twice, refused as wrong, once in a clean-clone run)
    expect(page.locator("input[name=token]")).to_have_value(server.token, timeout=120_000)
    page.click("button[name=confirm]")
    assert page.locator(".result").inner_text().startswith("resumed: ")
    resumed = store.get(name)
    assert resumed.halt_reason is None and resumed.end_date.isoformat() == "2024-01-03"
    context.close()


# -- a Chinese page has no English word but names and codes --------------------------------------

# The allow-list (names, codes, units) is tests/fixtures/latin.py's, shared with the command
# line's test (tests/test_cli_latin.py): one home.


class _Text(html.parser.HTMLParser):
    """The words a person reads: text, and the attributes shown (title, placeholder, the chart's
    words), outside <code>, <script> and <style> (commands and programs) and <textarea> (what the
    operator pasted, shown back)."""

    SHOWN = ("title", "placeholder", "data-empty", "data-title", "data-labels")

    def __init__(self):
        super().__init__()
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("code", "script", "style", "textarea"):
            self.skip += 1
        for key, value in attrs:
            if key in self.SHOWN and value:
                # the chart's labels are JSON (its Chinese as \u escapes): read as the chart does
                self.parts += json.loads(value) if value.startswith("[") else [value]

    def handle_endtag(self, tag):
        if tag in ("code", "script", "style", "textarea"):
            self.skip -= 1

    def handle_data(self, data):
        if not self.skip:
            self.parts.append(data)


def english_words(page: str, data: list[str]) -> set[str]:
    """The English words left on ``page`` once ``data`` (what the database holds: names, hosts,
    reasons) and the shared allow-list (tests/fixtures/latin.py) are set aside."""
    parser = _Text()
    parser.feed(page)
    return latin_words(" ".join(parser.parts), data)


def _fetch(server, path, *, data=None, headers=None):
    """(status, body) of a GET (or a POST of ``data``) asked in Chinese."""
    headers = {"Accept-Language": "zh-CN,zh;q=0.9", **(headers or {})}
    body = None
    if data is not None:
        body = "&".join(f"{k}={urllib.request.quote(v)}" for k, v in data.items()).encode()
        headers["Origin"] = server.url
    request = urllib.request.Request(server.url + path, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8")


def test_a_chinese_page_has_no_english_word_in_any_state(served):
    """Every page the tests can bring about (the tasks in every state, their banners, each
    action's form, preview, result and refusal, the errors, the sessions form), asked in
    Chinese, shows no English word but names and codes."""
    from cnkispider.sessions.pool import SessionStore, namespace_for
    from cnkispider.store.schema import error_code, error_link, fill, worker
    from cnkispider.watch.halting import Breaker
    from cnkispider.web.actions import TASK_ACTIONS
    from tasks.phase import Phase

    server, store, engine = served["server"], served["store"], served["engine"]
    names = {
        state: f"w{state}{uuid.uuid4().hex[:6]}"
        for state in ("run", "halt", "pause", "idle", "done")
    }
    ids = {}
    for state, name in names.items():
        current, _created = store.register(name, "patent", "2024-01-01", "2024-01-02", "G06,H04")
        ids[state] = current.id
    # running: a round done, one failed, one in flight, a live worker with its last error, error rows
    worker_id = "pc-7:4242:ab12"
    done = store.claim(ids["run"], worker_id)
    store.mark_seeded(done.id, worker_id, "e")
    store.close_round(done.id, total=0)
    failed = store.claim(ids["run"], worker_id)
    store.mark_seeded(failed.id, worker_id, "e")
    store.close_round(failed.id, total=None)
    store.claim(ids["run"], worker_id)
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    with engine.begin() as conn:
        conn.execute(
            worker.insert().values(
                id=worker_id,
                task_id=ids["run"],
                host="pc-7",
                pid=4242,
                started_at=now,
                last_seen=now + dt.timedelta(hours=1),
                pages=120,
                items=40,
                errors=1,
                state="running",
                challenges=0,
                last_error="timeout: TimeoutError",
            )
        )
        conn.execute(
            error_code.insert().values(
                task_id=ids["run"],
                round_id=failed.id,
                day="2024-01-01",
                category="H04",
                page=3,
                reason="timeout",
                detail="TimeoutError",
                attempts=1,
                state="open",
            )
        )
        # the field table: each field by its label (摘要, 公开号), never its column's name
        conn.execute(
            fill.insert(),
            [
                {"task_id": ids["run"], "round_id": done.id, "doc_type": "patent",
                 "field": field, "documents": 4, "filled": 3}
                for field in ("abstract", "publication_no", "application_date", "ipc", "claim")
            ],
        )  # fmt: skip
        conn.execute(
            error_link.insert().values(
                task_id=ids["run"],
                round_id=failed.id,
                doc_type="patent",
                url="http://x/d",
                dbname="SCPD",
                filename="CN1234567A",
                title="一种装置",
                reason="parse",
                detail="ValueError",
                attempts=3,
                state="permanent",
            )
        )
    # a reason as the breaker writes it (stored in English, shown in the reader's language)
    breaker = Breaker(consecutive=2)
    breaker.failed("timeout", "TimeoutError")
    store.halt(ids["halt"], breaker.failed("timeout", "TimeoutError"))
    store.pause(ids["pause"])
    store.set_phase(ids["done"], Phase.DONE)
    client = redis.Redis.from_url(served["setup"].redis_url)
    SessionStore(client, namespace_for("http://127.0.0.1:9", served["prefix"])).set_waiting(
        worker_id, names["run"], for_seconds=3600
    )
    client.close()
    with engine.connect() as conn:
        rounds = [r for (r,) in conn.execute(sa.text("SELECT id FROM round"))]

    pages = ["/", "/fragment/tasks", "/sessions", "/desk", "/tasks/nothere", "/rounds/999999"]
    for name in [*names.values(), served["setup"].task]:
        pages += [f"/tasks/{name}", f"/tasks/{name}/grid", f"/tasks/{name}?month=2024-13"]
        pages += [f"/tasks/{name}/{action}" for action in (*TASK_ACTIONS, "nothing")]
        pages += [
            f"/tasks/{name}/extend?end=2024-02-30",
            f"/tasks/{name}/extend?end=2023-01-01",
            f"/tasks/{name}/extend?end=2024-03-01",
            f"/tasks/{name}/move?date=2024-01-02&code=G06",
            f"/tasks/{name}/move?date=2024-01-02&code=X99",
            f"/tasks/{name}/resume?end=2024-03-01",
        ]
    pages += [f"/rounds/{r}" for r in rounds]
    seen = {}
    for path in pages:
        status, page = _fetch(server, path)
        assert status < 500, (path, page)
        seen[path] = page
    # the audit's rows written before (by the other tests, in English): a record, shown as it
    # was written (the ones this test writes, asked in Chinese, are checked below)
    with engine.connect() as conn:
        earlier = [
            text
            for who, detail in conn.execute(sa.text("SELECT who, detail FROM audit"))
            for text in (who, detail)
        ]
    idle = names["idle"]
    token = {"token": server.token}
    posts = [
        (f"/tasks/{idle}/pause", {"preview": "1", **token}),
        (f"/tasks/{idle}/pause", {"confirm": "1", **token}),
        (f"/tasks/{idle}/resume", token),
        (f"/tasks/{idle}/extend", {"end": "2024-01-05", **token}),
        (f"/tasks/{idle}/move", {"date": "2024-01-01", **token}),
        (f"/tasks/{idle}/recrawl", token),
        (f"/tasks/{idle}/stop", token),
        (f"/tasks/{idle}/extend", {"end": "not a day", **token}),
        (f"/tasks/{idle}/stop", {}),  # no token: refused
        (
            "/sessions",
            {
                "paste": "curl 'http://127.0.0.1:9/kns8s/' -H 'Cookie: a=1; b=2'",
                "preview": "1",
                **token,
            },
        ),
        (
            "/sessions",
            {"paste": "curl 'http://elsewhere.example/' -H 'Cookie: a=1'", "preview": "1", **token},
        ),
        ("/sessions", {"paste": "curl 'http://127.0.0.1:9/kns8s/' -H 'Cookie: a=1; b=2'", **token}),
    ]
    for n, (path, fields) in enumerate(posts):
        status, page = _fetch(server, path, data=fields)
        assert status < 500, (path, page)
        seen[f"POST {n} {path} {sorted(fields)}"] = page
    _status, seen["/ after the actions"] = _fetch(server, "/")

    data = [
        *names.values(),
        served["setup"].task,
        worker_id,
        "pc:1:x",
        "pc-7",
        *earlier,
        "timeout: TimeoutError",  # the worker's last error: the failure's code and its class
        "TimeoutError",
        "ValueError",
        "SCPD/CN1234567A",
        "timeout",  # error reasons and the halt's reason: codes of the error tables
        "parse",
        "Python-urllib",  # who acted (the audit's client)
        "elsewhere.example",
        "127.0.0.1",
        "G06",
        "H04",
        "X99",
        "a, b",  # the cookies' names
        "kns8s",
        "kns.cnki.net",  # the site the crawler searches, and CNKI's domains
        "cnki.net",
        "nothere",  # what the operator typed: a task, an action, a day that are not
        "nothing",
        "not a day",
    ]
    english = {path: english_words(page, data) for path, page in seen.items()}
    left = {path: sorted(words) for path, words in english.items() if words}
    assert left == {}, "\n".join(f"{path}: {' '.join(words)}" for path, words in left.items())
    assert "专利" in seen["/"] and "等待人工验证" in seen["/"]  # the type and the states are words


def test_every_marked_word_has_its_chinese():
    """Every string marked for the catalogue (extracted now from the code and the templates,
    as `make catalogue` does) has a translation in zh_CN: a word added without one fails here."""
    from babel.messages.frontend import CommandLineInterface
    from babel.messages.pofile import read_po

    pot = ROOT / "build" / f"test-{uuid.uuid4().hex[:8]}.pot"
    pot.parent.mkdir(exist_ok=True)
    try:
        CommandLineInterface().run(
            [
                "pybabel",
                "-q",
                "extract",
                "-F",
                str(ROOT / "babel.cfg"),
                "-k",
                "N_",
                "-o",
                str(pot),
                str(ROOT),
            ]
        )
        with pot.open("rb") as f:
            marked = {m.id for m in read_po(f) if m.id}
    finally:
        pot.unlink(missing_ok=True)
    po = ROOT / "cnkispider" / "words" / "locale" / "zh_CN" / "LC_MESSAGES" / "cnkispider.po"
    with po.open("rb") as f:
        catalogue = read_po(f)
    translated = {
        m.id
        for m in catalogue
        if m.id and not m.fuzzy and all(m.string if isinstance(m.string, tuple) else (m.string,))
    }
    key = lambda m: m if isinstance(m, str) else m[0]  # noqa: E731 (plural ids: the singular)
    missing = sorted(key(m) for m in marked if m not in translated)
    assert missing == [], f"{len(missing)} words without Chinese (make catalogue, then translate)"
    # and the compiled catalogue is the .po's: a translation not compiled is not read
    mo = po.with_suffix(".mo")
    assert _same_catalogue(po, mo), "the .mo is not the .po's: make catalogue"


def _same_catalogue(po, mo) -> bool:
    import gettext

    from babel.messages.pofile import read_po

    with po.open("rb") as f:
        catalogue = read_po(f)
    with mo.open("rb") as f:
        compiled = gettext.GNUTranslations(f)
    return all(
        compiled.gettext(m.id) == m.string
        for m in catalogue
        if m.id and isinstance(m.id, str) and m.string
    )


def test_the_compiled_catalogue_is_the_one_translated():
    """The program reads the compiled .mo, the translator edits the .po: a .po translated and
    not compiled (`make catalogue`) would ship the older words."""
    import gettext

    from babel.messages.pofile import read_po

    folder = ROOT / "cnkispider" / "words" / "locale" / "zh_CN" / "LC_MESSAGES"
    with (folder / "cnkispider.po").open("rb") as f:
        catalogue = read_po(f)
    with (folder / "cnkispider.mo").open("rb") as f:
        compiled = gettext.GNUTranslations(f)
    stale = []
    for m in catalogue:
        if not m.id or not m.string:
            continue
        if isinstance(m.id, tuple):
            if compiled.ngettext(m.id[0], m.id[1], 1) != m.string[0]:
                stale.append(m.id[0])
        elif compiled.gettext(m.id) != m.string:
            stale.append(m.id)
    assert not stale, f"{len(stale)} words not compiled (make catalogue): {stale[:5]}"


def test_the_page_s_refusals_and_not_found_are_chinese(served):
    """Issue 48.3: a POST from another origin, or with neither Origin nor Referer, and a page
    that does not exist, are answered in the reader's language (not Starlette's "Not Found")."""
    server = served["server"]
    task = served["setup"].task
    path = f"/tasks/{task}/stop"
    headers = {
        "Accept-Language": "zh-CN,zh;q=0.9",
        "Content-Type": "application/x-www-form-urlencoded",
    }
    answers = []
    for origin in ({"Origin": "http://evil.example"}, {}):
        request = urllib.request.Request(
            server.url + path, data=b"token=x", headers={**headers, **origin}, method="POST"
        )
        try:
            urllib.request.urlopen(request, timeout=30)
        except urllib.error.HTTPError as exc:
            answers.append((exc.code, exc.read().decode("utf-8")))
    answers.append(_fetch(server, "/no/such/page"))
    assert [status for status, _body in answers] == [403, 403, 404]
    for _status, body in answers:
        assert english_words(body, [task, "evil.example", "Origin", "Referer"]) == set(), body
    assert "Not Found" not in answers[2][1]


def test_the_home_page_s_redis_line_is_one_chinese_sentence_when_the_embedded_redis_idles(
    tmp_path,
):
    """Issue 48.3: `Redis 未运行 (not running (it runs while a worker of this machine does))`:
    the embedded Redis that is not running is said once, in the reader's language."""
    import socket
    import threading

    import uvicorn

    from cnkispider.config import load_config
    from cnkispider.web import create_app
    from cnkispider.web.serve import UVICORN_OPTIONS

    ini = tmp_path / "config.ini"
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    ini.write_text(
        f"[database]\nurl = {url}\n[redis]\nurl =\n[crawl]\ndata_dir = {tmp_path / 'data'}\n",
        "utf-8",
    )
    engine = open_database(url)
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
        wait_until(lambda: server.started, 60)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/", headers={"Accept-Language": "zh-CN,zh;q=0.9"}
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            page = answer.read().decode("utf-8")
    finally:
        server.should_exit = True
        thread.join(10)
        engine.dispose()
    assert "Redis 未运行（本机有工作进程运行时它才运行）" in page
    assert "not running" not in page


def test_the_field_table_shows_each_field_by_its_label(served):
    """The task page's field table names a field as CNKI's page labels it (摘要, 公开号) in
    Chinese, by an English label in English: never the column's name (abstract, publication_no)."""
    from cnkispider.store.schema import fill

    server, store, engine = served["server"], served["store"], served["engine"]
    name = f"fill{uuid.uuid4().hex[:6]}"
    current, _created = store.register(name, "patent", "2024-01-01", "2024-01-02", "G06")
    r = store.claim(current.id, "pc:1:x")
    with engine.begin() as conn:
        conn.execute(
            fill.insert(),
            [
                {"task_id": current.id, "round_id": r.id, "doc_type": "patent", "field": field,
                 "documents": 4, "filled": 3}
                for field in ("abstract", "publication_no", "main_ipc")
            ],
        )  # fmt: skip

    def cells(language):
        page, _headers = _get(server, f"/tasks/{name}", language)
        table = page[page.index('<table class="fill">') :]
        table = table[: table.index("</table>")]
        return re.findall(r"<tr[^>]*><td>([^<]*)</td><td>75%</td>", table)

    assert sorted(cells("zh-CN,zh;q=0.9")) == sorted(["摘要", "公开号", "主分类号"])
    assert sorted(cells("en")) == sorted(["abstract", "publication number", "main IPC class"])
