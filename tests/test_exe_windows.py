"""The Windows executable, cnkispider.exe, built and run on this Linux machine under Wine (issue 16).

scripts/build_exe_windows.sh builds it once per session: Wine, the embeddable Windows CPython and
the Windows wheels of the pinned dependencies come from the package registries and are cached in
~/.cache/cnkispider-wine, and PyInstaller runs under Wine every time (about two minutes). Each
test copies the .exe alone into an empty folder beside a config.ini and starts it with no
arguments, as a double-click would, under Wine, against the stand-in CNKI, MariaDB and Redis of
this machine. The folder, the config, the ground truth and its comparison are those of
tests/test_exe.py (the Linux executable's tests), so both follow what the crawl tests check.

Two Windows locales: Wine started with LANG=C.UTF-8 is an English Windows (code page 1252), with
LANG=zh_CN.UTF-8 a Chinese one (code page 936, GBK). The program's console output is in that code
page, as a redirected console on Windows is, and is decoded here the same way.

Not a Windows matter but Wine's: a Windows Python under Wine cannot have a regular Linux file as a
standard stream ("[WinError 6] Invalid handle"), so the program's output always goes into pipes.
Never skipped: the build installs Wine (as root, like CI) when it is missing.
"""

from __future__ import annotations

import csv
import io
import os
import pty
import select
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from cnkispider.store.schema import documents, error_code, error_link, task
from tests.fixtures import exe as exe_support
from tests.fixtures.build_once import build_key, build_once
from tests.fixtures.crawl_harness import REDIS_URL, ROOT, compare
from tests.fixtures.exe import (
    LOG_NAME,
    SAME,
    SITE,
    Install,
    a_home_pc_over_tls_crawls_the_truth,
    crawl_config,
    ini_text,
    installed_rows,
    stop_process,
    truth,
)
from tests.fixtures.waiting import wait_until

task_name = exe_support.task_name  # the fixture: a unique task whose Redis keys go afterwards

# The session's first test also waits for the build (several minutes on a busy machine).
pytestmark = pytest.mark.timeout(1800)
# One xdist group, on one worker, after the one build (tests/fixtures/build_once.py). Two groups side
# by side ran two Wine programs at once in one prefix, and three times on 2026-11-24 a bad-config
# check then ended with no output at all (exit 0, exit 1, a 180 s hang) while the other group's
# crawl ran: never alone. Wine's own concurrency, not the program's: so one at a time.
QUICK = CRAWLS = pytest.mark.xdist_group("exe-windows")  # (the names say what each test is)

EXE = "cnkispider.exe"
CACHE = Path(
    os.environ.get("CNKISPIDER_WINE_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cnkispider-wine"
)
#: Wine's Windows locale comes from the Linux one; the console output is in its ANSI code page.
LOCALES = {"english": ("C.UTF-8", "cp1252"), "chinese": ("zh_CN.UTF-8", "gbk")}
CHINESE_FOLDER = "家用 电脑 中文"  # where the Chinese PC keeps cnkispider.exe: spaces and 中文


def _wine() -> str:
    for candidate in (shutil.which("wine64"), "/usr/lib/wine/wine64", shutil.which("wine")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise AssertionError("no Wine after scripts/build_exe_windows.sh")


def windows_path(path: Path) -> str:
    """A Linux path as the program under Wine sees it (drive Z: is /)."""
    return "Z:" + str(path).replace("/", "\\")


def _script(*args: str, cwd: Path | None = None) -> str:
    """scripts/build_exe_windows.sh ARGS with this session's Wine cache; its output."""
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build_exe_windows.sh"), *args],
        cwd=cwd,
        env={**os.environ, "CNKISPIDER_WINE_CACHE": str(CACHE)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result.stdout


def _build(out: Path) -> Path:
    started = time.monotonic()
    output = _script(str(out / "dist"), str(out / "work"), cwd=out)
    path = out / "dist" / EXE
    assert path.is_file(), output[-3000:]
    print(
        f"built {path} ({path.stat().st_size / 2**20:.0f} MiB) under Wine in "
        f"{time.monotonic() - started:.0f} s: {output.strip().splitlines()[-1]}"
    )
    return path


@pytest.fixture(scope="session")
def exe(tmp_path_factory) -> Path:
    """cnkispider.exe, built once per session (shared by the xdist workers) under Wine into a
    temporary folder."""
    return build_once(tmp_path_factory, "exe-windows-build", _build, key=build_key(_host()))


def _host() -> str:
    """Wine and its prefix set up (what running the .exe needs, built or cached); Wine's
    version, part of the build's key with the pins the script hashes."""
    return "windows " + _script("--host-only").strip().splitlines()[-1]


class WindowsInstall(Install):
    """A folder with only cnkispider.exe and a config.ini, run under Wine in a Windows locale."""

    def __init__(self, exe: Path, folder: Path, config: dict[str, dict], locale: str = "english"):
        folder.mkdir(parents=True)
        shutil.copy2(exe, folder / EXE)
        self.folder, self.program, self.config = folder, folder / EXE, config
        self.lang, self.encoding = LOCALES[locale]
        (folder / "config.ini").write_text(ini_text(config), encoding="utf-8")

    def env(self) -> dict:
        env = {k: v for k, v in super().env().items() if not k.startswith(("LC_", "LANG"))}
        return {
            **env,
            "WINEPREFIX": str(CACHE / "prefix"),  # the build's prefix: Windows as the .exe needs it
            "WINEDEBUG": "-all",
            "WINEDLLOVERRIDES": "mscoree,mshtml=",
            "LANG": self.lang,
        }

    def run(self, *args: str, cwd: Path | None = None, timeout: float = 300):
        """Start it (with no arguments: a double-click) and wait; its output decoded from the
        Windows code page."""
        result = subprocess.run(
            [_wine(), str(self.program), *args],
            cwd=cwd or self.folder,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
        )
        result.stdout = result.stdout.decode(self.encoding, errors="replace")
        result.stderr = result.stderr.decode(self.encoding, errors="replace")
        return result

    def popen(self, *args: str) -> subprocess.Popen:
        """Start it under Wine in its folder, its console a pipe (stdout and stderr), in a
        process group of its own (to be signalled whole)."""
        return subprocess.Popen(
            [_wine(), str(self.program), *args],
            cwd=self.folder,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start(self) -> subprocess.Popen:
        """Start it with no arguments; its console (a pipe, see the module) goes to
        :meth:`console`, outside the folder."""
        process = self.popen()
        console = self.folder.parent / "console.txt"

        def copy() -> None:
            with open(console, "wb") as out:
                for chunk in iter(lambda: process.stdout.read1(65536), b""):
                    out.write(chunk)
                    out.flush()

        self._copier = threading.Thread(target=copy, daemon=True)
        self._copier.start()
        return process

    def console(self) -> str:
        self._copier.join(timeout=30)
        raw = (self.folder.parent / "console.txt").read_bytes()
        return raw.decode(self.encoding, errors="replace")

    @property
    def db_url(self) -> str:
        url = self.config["database"]["url"]
        if not url.startswith("sqlite:///"):
            return url
        path = url[len("sqlite:///") :].replace("\\", "/")
        if path.startswith("Z:"):
            return f"sqlite:///{path[2:]}"
        return f"sqlite:///{self.folder / path}"


@QUICK
def test_the_build_is_a_64_bit_windows_console_program_without_the_wine_only_dll(exe):
    from PyInstaller.archive.readers import CArchiveReader

    header = exe.read_bytes()[:4096]
    pe = int.from_bytes(header[0x3C:0x40], "little")
    assert header[:2] == b"MZ" and header[pe : pe + 4] == b"PE\0\0"
    assert int.from_bytes(header[pe + 4 : pe + 6], "little") == 0x8664  # x86-64
    optional = pe + 24
    assert int.from_bytes(header[optional : optional + 2], "little") == 0x20B  # PE32+
    assert int.from_bytes(header[optional + 68 : optional + 70], "little") == 3  # console
    bundled = {name.lower() for name in CArchiveReader(str(exe)).toc}
    assert "python311.dll" in bundled
    # the ProcessPrng forwarder stands in for Windows' own DLL in the Wine prefix only
    assert not any("bcryptprimitives" in name for name in bundled)


@pytest.mark.parametrize("locale", ["english", "chinese"])
@pytest.mark.parametrize(
    ("config", "english", "chinese"),
    [
        (
            "[database]\nurll = sqlite:///data/cnki.db\n",
            "config.ini: [database] urll: unknown key; expected one of url",
            "config.ini: [database] urll: 未知的键；应为 url",
        ),
        (
            "[database]\nurl = mysql+pymysql://root@127.0.0.1:1/cnki\n"
            "[redis]\nurl = redis://127.0.0.1:6379/0\n",
            "error: cannot use the database mysql+pymysql://root@127.0.0.1:1/cnki",
            "错误：无法使用数据库 mysql+pymysql://root@127.0.0.1:1/cnki",
        ),
        (
            "[database]\nurl = sqlite:///data/cnki.db\n[redis]\nurl =\n"
            "[task]\nname = smoke\nstart_date = 2024-01-01\nend_date = 2024-01-02\n",
            "error: No Redis URL is configured and Windows has no embedded Redis: set [redis] url",
            "错误：未配置 Redis URL，而 Windows 上没有内置 Redis：请在 config.ini 中把 [redis] url",
        ),
    ],
    ids=["typo-in-a-key", "unreachable-database", "empty-redis-url"],
)
@pytest.mark.slow
@QUICK
def test_a_bad_config_ini_stops_with_one_clear_line_and_no_traceback(
    exe, tmp_path, locale, config, english, chinese
):
    # The Chinese PC's folder has spaces and 中文 in its name; the typo's line names it.
    folder = tmp_path / (CHINESE_FOLDER if locale == "chinese" else "pc")
    install = WindowsInstall(exe, folder, {}, locale)
    (install.folder / "config.ini").write_text(config, encoding="utf-8")
    result = install.run(timeout=180)
    output = result.stdout + result.stderr
    lines = [line for line in output.splitlines() if line.strip()]
    # the line in the PC's language (issue 41); what it names (file, section, key, URL) the same
    message = chinese if locale == "chinese" else english
    assert result.returncode != 0 and len(lines) == 1 and message in lines[0], install.explain(
        result
    )
    assert "Traceback" not in output and "Press Enter" not in output
    if locale == "chinese" and "urll" in message:
        # GBK on the console, the folder's name readable in it
        assert f"{CHINESE_FOLDER}\\config.ini" in lines[0], lines


class Console:
    """The program in a console window: Wine started on a terminal (a pseudo-terminal here) gives
    its Windows programs a real console, as a double-click on Windows opens one."""

    def __init__(self, install: WindowsInstall, *argv: str):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: exec Wine, never return into pytest
            os.chdir(install.folder)
            os.execve(_wine(), [_wine(), *argv], install.env())
        self.screen = b""

    def read_until(self, text: bytes, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while text not in self.screen and time.monotonic() < deadline:
            if select.select([self.fd], [], [], 0.2)[0]:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:  # the terminal closed: every program on it has ended
                    return False
                if not chunk:
                    return False
                self.screen += chunk
        return text in self.screen

    def exit_code(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            self.read_until(b"\0", 0.2)  # keep the terminal drained
            time.sleep(0.05)  # (once the terminal has closed, read_until returns at once)
        return None

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(self.fd)


@pytest.mark.slow
@CRAWLS
def test_a_console_window_of_its_own_waits_for_enter_and_one_shared_with_cmd_does_not(
    exe, tmp_path
):
    """Double-clicked, the window waits so the last line can be read; started from cmd.exe, the
    window stays anyway and the program must not wait. (Without a console at all, e.g. input
    from NUL, the other tests see no prompt.)"""
    install = WindowsInstall(exe, tmp_path / "pc", {})
    (install.folder / "config.ini").write_text("[database]\nurll = x\n", encoding="utf-8")

    console = Console(install, EXE)
    try:
        assert console.read_until(b"Press Enter to close this window.", 120), console.screen
        time.sleep(1)
        assert console.exit_code(0.5) is None, console.screen  # still waiting for Enter
        os.write(console.fd, b"\r")
        assert console.exit_code(60) == 2, console.screen
    finally:
        console.close()
    assert b"unknown key" in console.screen and b"Traceback" not in console.screen

    shared = Console(install, "cmd", "/c", EXE)
    try:
        assert shared.exit_code(120) is not None, shared.screen  # it ended without an Enter
    finally:
        shared.close()
    assert b"unknown key" in shared.screen and b"Press Enter" not in shared.screen, shared.screen


@pytest.mark.slow
@CRAWLS
def test_the_exe_alone_creates_the_database_and_task_crawls_recrawls_and_a_second_start_adds_nothing(
    exe, tmp_path, cnki_site, mysql_missing_db_url, task_name
):
    """An English Windows and the shared MariaDB, which the program creates."""
    # One document fails every time during the crawl, so it lands in errorLink; once it is
    # there the site serves it again, and only the recrawl phase can store it.
    site = cnki_site(**SITE, latency="0.01")
    expected = truth(site)
    assert len(expected) > 100
    doomed = expected[0]["filename"]
    site.control(doomed=[doomed])
    install = WindowsInstall(
        exe, tmp_path / "pc", crawl_config(site, mysql_missing_db_url, REDIS_URL, task_name)
    )
    started = time.monotonic()
    process = install.start()
    try:
        wait_until(
            lambda: installed_rows(install, error_link),
            300,
            workers=[process],
            log=lambda: install.console(),
            every=0.1,
        )
        site.control(doomed=[])
        process.wait(timeout=600)
    finally:
        stop_process(process)
    output = install.console()
    print(f"crawl of {len(expected)} patents under Wine: {time.monotonic() - started:.0f} s")
    assert process.returncode == 0 and "Traceback" not in output, (
        output[-3000:] + install.log()[-3000:]
    )
    assert "Press Enter" not in output  # not double-clicked: its input is no console
    assert sorted(p.name for p in install.folder.iterdir()) == sorted([EXE, "config.ini", LOG_NAME])
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
@CRAWLS
def test_the_exe_of_a_home_pc_crawls_over_tls_with_a_workers_rights_only(
    exe, tmp_path, cnki_site, tls_servers, task_name
):
    """tests/test_exe.py's home PC, on Windows: Python's own OpenSSL in the .exe, the
    certificates read from the Windows path of the folder."""
    a_home_pc_over_tls_crawls_the_truth(
        exe, WindowsInstall, tmp_path, cnki_site(**SITE), tls_servers, task_name
    )


@pytest.mark.slow
@CRAWLS
def test_on_a_chinese_windows_sqlite_and_data_dir_paths_with_backslashes_spaces_and_chinese_work(
    exe, tmp_path, cnki_site, task_name
):
    """Code page 936, a folder named with spaces and 中文, a relative SQLite path and an
    absolute data_dir written the Windows way, a log file named in Chinese; then `export`
    replaces an existing file (a plain rename onto an existing file fails on Windows)."""
    site = cnki_site(**SITE)
    expected = truth(site)
    folder = tmp_path / CHINESE_FOLDER
    data_dir = folder / "数据 目录" / "子 文件夹"
    config = crawl_config(site, "sqlite:///数据 目录\\专利 库.db", REDIS_URL, task_name)
    config["crawl"].update(
        data_dir=windows_path(data_dir), archive_html="true", log_file="爬虫 日志.log"
    )
    install = WindowsInstall(exe, folder, config, "chinese")
    result = install.run()
    log = (folder / "爬虫 日志.log").read_text(encoding="utf-8")
    assert result.returncode == 0, install.explain(result) + log[-3000:]
    output = result.stdout + result.stderr
    assert "Traceback" not in output and "UnicodeEncodeError" not in log
    # a Chinese Windows: the summary in Chinese (issue 41: the locale's language)
    assert f"== cnkispider 汇总：任务 '{task_name}'（专利），阶段 完成 ==" in result.stdout
    assert (folder / "数据 目录" / "专利 库.db").is_file()
    assert compare(install.stored(), expected, "patent") == SAME
    archived = list((data_dir / "archive").rglob("*.html.gz"))
    assert len(archived) == len(expected)

    again = install.run()
    assert again.returncode == 0, install.explain(again)
    assert f"本任务已存储 {len(expected)} 篇（本次运行 0 篇）" in again.stdout  # nothing new

    out = folder / "导出 文件" / "专利.csv"
    out.parent.mkdir()
    out.write_text("an older export\n", encoding="utf-8")
    exported = install.run("export", "--format", "csv", "--out", "导出 文件\\专利.csv")
    assert exported.returncode == 0, install.explain(exported)
    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8-sig"))))
    assert sorted(r["filename"] for r in rows) == sorted(d["filename"] for d in expected)
    assert sorted(r["title"] for r in rows) == sorted(d["title"] for d in expected)
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no .part left


@pytest.mark.slow
@CRAWLS
def test_ctrl_c_under_wine_stops_the_exe_gracefully_and_a_second_start_resumes_to_the_truth(
    exe, tmp_path, cnki_site, mysql_url, task_name
):
    site = cnki_site(**SITE, latency="0.05")  # slow enough to be stopped halfway
    install = WindowsInstall(
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
        os.killpg(process.pid, signal.SIGINT)  # Wine turns it into the console's CTRL_C_EVENT
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


def chrome_cmd_curl(url: str, cookies: dict[str, str], user_agent: str) -> str:
    """A request as Chrome on Windows copies it with DevTools' "Copy as cURL (cmd)": every
    argument in ^"...^", ^ before each character cmd.exe could take, %^ after a % that starts a
    name, " ^" and CRLF at each line's end (tests/fixtures/curl/chrome_cmd_index.txt is one)."""
    import re

    def escape(text: str) -> str:
        text = text.replace("\\", "\\\\").replace('"', '\\"')
        text = re.sub(r"[^a-zA-Z0-9\s_\-:=+~'/.',?;()*`]", lambda m: "^" + m.group(0), text)
        return '^"' + re.sub(r"%(?=[a-zA-Z0-9_])", "%^", text) + '^"'

    args = [
        escape(url),
        "-H " + escape("accept: text/html,application/xhtml+xml,*/*;q=0.8"),
        "-H " + escape("accept-language: zh-CN,zh;q=0.9"),
        "-b " + escape("; ".join(f"{k}={v}" for k, v in cookies.items())),
        "-H " + escape('sec-ch-ua-platform: "Windows"'),
        "-H " + escape("user-agent: " + user_agent),
    ]
    return "curl " + " ^\r\n  ".join(args) + "\r\n"


@pytest.mark.slow
@CRAWLS
def test_the_exe_adds_a_session_copied_as_curl_and_crawls_with_it_on_a_site_that_checks(
    exe, tmp_path, cnki_site, task_name
):
    """CNKI checks for a person: on a Windows PC, the person passes the check in a browser, copies
    a request as cURL (cmd) into a file, `cnkispider.exe session add --from-curl FILE` puts the
    session in the pool, and the double-clicked crawl uses it: equal to the truth, never checked."""
    import redis

    from cnkispider.sessions import SessionStore, namespace_for

    site = cnki_site(**SITE, human_check=True, session_pace=0, session_burst=0)
    expected = truth(site)
    cookies = site.pass_check()  # the person's pass, as a browser gets it
    config = crawl_config(site, "sqlite:///cnki.db", REDIS_URL, task_name)
    config["cnki"].update(sessions="verified", session_pace="30")
    install = WindowsInstall(exe, tmp_path / "pc", config)
    agent = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/141.0.0.0 Safari/537.36 Edg/141.0.0.0"
    request = tmp_path / "copied request.txt"  # where the person saved the paste
    request.write_bytes(
        chrome_cmd_curl(
            site.base_url + "/kns8s/defaultresult/index?kw=%E4%B8%93%E5%88%A9", cookies, agent
        ).encode()
    )
    pool = SessionStore(redis.Redis.from_url(REDIS_URL), namespace_for(site.base_url))
    try:
        added = install.run("session", "add", "--from-curl", windows_path(request), timeout=180)
        assert added.returncode == 0, install.explain(added)
        line = added.stdout.strip().splitlines()[-1]
        assert line.startswith("added session s-") and "(a request copied as cURL): " in line, line
        assert "user agent Edg/141" in line and "KNS2COOKIE" in line
        session_id = line.split()[2]
        stored = pool.get(session_id)
        assert {c["name"]: c["value"] for c in stored.cookies} == cookies
        assert stored.user_agent == agent and stored.source == "curl"

        listed = install.run("session", "list", timeout=180)
        assert listed.returncode == 0, install.explain(listed)
        row = next(r.split() for r in listed.stdout.splitlines() if r.startswith(session_id))
        assert row[1] == "curl" and row[3:5] == ["0", "ready"], listed.stdout
        for value in cookies.values():
            assert value not in added.stdout + listed.stdout + added.stderr + listed.stderr

        refused = site.stats()["human_check_refusals"]
        result = install.run()  # a double-click: the crawl of config.ini's task
        assert result.returncode == 0, install.explain(result)
        assert compare(install.stored(), expected, "patent") == SAME
        assert installed_rows(install, error_link) == 0 and installed_rows(install, error_code) == 0
        assert site.stats()["human_check_refusals"] == refused  # never sent to the check
        assert pool.get(session_id).requests > len(expected)
    finally:
        keys = list(pool.client.scan_iter(match=f"{pool.namespace}:*", count=1000))
        if keys:
            pool.client.delete(*keys)
        pool.client.close()


@pytest.mark.slow
@CRAWLS
def test_the_exe_session_login_reads_the_pass_from_a_running_browser_over_devtools(
    exe, tmp_path, cnki_site
):
    """`cnkispider.exe session login --cdp PORT`, frozen and under Wine, attaches to a running
    Chromium (no browser of Windows runs under Wine: this one is the host's, the same DevTools
    protocol as Edge's), waits while the person passes the check in it, and puts the cookies,
    HttpOnly ones too, in the pool; the browser, not its own, keeps running."""
    import redis

    from cnkispider.sessions import SessionStore, namespace_for
    from tests.fixtures.chromium import answers, pass_the_check_as_a_person, running_chromium

    site = cnki_site(human_check=True)
    install = WindowsInstall(
        exe, tmp_path / "pc", {"redis": {"url": REDIS_URL}, "cnki": {"base_url": site.base_url}}
    )
    pool = SessionStore(redis.Redis.from_url(REDIS_URL), namespace_for(site.base_url))
    browser, port = running_chromium(tmp_path / "browser-profile")
    login = None
    try:
        login = subprocess.Popen(
            [
                _wine(),
                str(install.program),
                "session",
                "login",
                "--cdp",
                str(port),
                "--timeout",
                "120",
            ],
            cwd=install.folder,
            env=install.env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        pass_the_check_as_a_person(port, timeout=120)  # the frozen program opened CNKI's page
        out, err = (b.decode(install.encoding, "replace") for b in login.communicate(timeout=120))
        assert login.returncode == 0, out + err
        added = out.strip().splitlines()[-1]
        assert added.startswith("added session s-") and "(a browser): " in added, out + err
        stored = pool.get(added.split()[2])
        assert stored.source == "browser" and stored.state == "ready"
        assert {"KNS2COOKIE", "SID_kns_new"} <= {c["name"] for c in stored.cookies}
        assert "Traceback" not in err
        for cookie in stored.cookies:
            assert cookie["value"] not in out + err
        assert browser.poll() is None and answers(port)  # not the program's browser: left running
    finally:
        if login is not None and login.poll() is None:
            login.kill()
            login.communicate()
        os.killpg(browser.pid, signal.SIGKILL)
        browser.wait()
        keys = list(pool.client.scan_iter(match=f"{pool.namespace}:*", count=1000))
        if keys:
            pool.client.delete(*keys)
        pool.client.close()


@pytest.mark.slow
@CRAWLS
def test_the_exe_opens_the_pass_desk_in_a_running_browser(exe, tmp_path, cnki_site, browser):
    """Issue 40: the .exe on a home PC opens the desk too. `cnkispider.exe web --desk-cdp PORT`,
    frozen and under Wine, opens its tab in a browser already running with remote debugging (no
    Windows browser runs under Wine: the host's Chromium, the DevTools protocol Edge speaks);
    a person's drag on the desk page puts the session into the pool."""
    import redis

    from cnkispider.sessions import SessionStore, namespace_for
    from tests.fixtures.chromium import drag, free_port, look, running_chromium, tabs

    site = cnki_site(human_check=True, session_pace=0, session_burst=0)
    install = WindowsInstall(
        exe,
        tmp_path / "pc",
        {
            "database": {"url": "sqlite:///data/cnki.db"},
            "redis": {"url": REDIS_URL},
            "cnki": {"base_url": site.base_url},
        },
    )
    pool = SessionStore(redis.Redis.from_url(REDIS_URL), namespace_for(site.base_url))
    running, cdp = running_chromium(tmp_path / "profile")
    port = free_port()
    web = install.popen("web", "--port", str(port), "--desk-cdp", str(cdp))
    base = f"http://127.0.0.1:{port}"
    context = browser.new_context(viewport={"width": 900, "height": 900})
    try:
        first = web.stdout.readline().decode(install.encoding, "replace")
        assert first.startswith("web token (shown only now"), first
        token = first.rsplit(": ", 1)[1].strip()
        page = context.new_page()
        wait_until(
            lambda: _answers(base), 120, workers=[web], what="the .exe's web page", every=0.5
        )
        page.goto(base + "/desk")
        page.fill("#desk-token", token)
        page.click("#desk-token-form button")
        drag(page, look(page))
        page.wait_for_selector("#desk-status[data-state=passed]", timeout=60_000)
        (session,) = pool.list()
        assert session.source == "browser" and "KNS2COOKIE" in session.cookie_names()
        wait_until(lambda: tabs(cdp) == ["about:blank"], 30, what="the desk's tab closed")
        assert running.poll() is None  # the person's browser goes on
    finally:
        context.close()
        os.killpg(web.pid, signal.SIGKILL)
        web.wait(30)
        os.killpg(running.pid, signal.SIGKILL)
        running.wait(30)
        keys = list(pool.client.scan_iter(match=f"{pool.namespace}:*", count=1000))
        if keys:
            pool.client.delete(*keys)
        pool.client.close()


def _answers(url: str) -> bool:
    import urllib.request

    try:
        urllib.request.urlopen(url + "/api/status", timeout=5).read()
        return True
    except OSError:
        return False
