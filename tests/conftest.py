"""Test-wide fixtures live in plugin modules, one per concern, so each stays small.

`make test` runs the suite on several xdist workers (`-n`, `--dist loadgroup`, see the Makefile).
Every test has its own MariaDB database, Redis key namespace and tmp_path (tests/fixtures/), so
tests can share a worker or run side by side. What must stay on one worker says so with
``pytest.mark.xdist_group``: the executables' tests (one build each, tests/fixtures/build_once.py)
and the tests that read one module-scoped crawl. Tests that measure wall-clock gaps of a fraction
of a second are marked ``timing``; `make test` runs them alone after the parallel pass.
"""

import os
import sys
import time

import pytest

pytest_plugins = [
    "tests.fixtures.services",  # real MariaDB, SQLite and Redis
    "tests.fixtures.standin",  # the local CNKI stand-in site
    "tests.fixtures.scheduling",  # the scheduler driven by hand on the real Redis
    "tests.fixtures.crawls",  # crawls of the stand-in in a worker subprocess
    "tests.fixtures.commands",  # the command line in-process on the test's database
    "tests.fixtures.tls_services",  # private MariaDB and Redis that speak TLS only
    "tests.fixtures.browser",  # Debian's Chromium through Playwright
]

#: Fixtures that make a test long (a build, a crawl shared by a module, private services, a
#: browser): a test that uses one is in the full tier only, whatever its markers say.
SLOW_FIXTURES = {
    "exe",
    "services",
    "watched_crawl",
    "crawled",
    "browser",
    "crawl_setup",  # and all built on it: census_crawl, verified_crawl (tests/fixtures/crawls.py)
    "tls_servers",  # private MariaDB and Redis over TLS, and a worker in a subprocess
}

#: The fast tier's budgets per test (its set-up and call). CPU seconds, of the test's process and
#: the subprocesses it waited for: what a test costs, which a busy machine hardly changes (wall
#: time on two cores shared by five engineers' tests stretches tenfold). Its tests take well
#: under a second of CPU; a crawl or a build in a subprocess takes more than FAST_CPU_BUDGET. Wall
#: seconds catch a test that mostly waits (a timer, a lease), generously.
FAST_CPU_BUDGET = 4.0
#: The environment variable naming a file to which each test appends its CPU and wall seconds.
CPU_LOG = "CNKI_TEST_CPU_LOG"
FAST_WALL_BUDGET = 60.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="the fast tier (make test-fast): no slow or timing test, each within "
        f"{FAST_CPU_BUDGET:g} s of CPU and {FAST_WALL_BUDGET:g} s",
    )


def is_slow(item: pytest.Item) -> bool:
    """In the full tier only: marked ``slow`` (or ``timing``), or using a slow fixture."""
    if item.get_closest_marker("slow") or item.get_closest_marker("timing"):
        return True
    return bool(SLOW_FIXTURES & set(getattr(item, "fixturenames", ())))


def _weight(item: pytest.Item) -> int:
    """0: the executables' groups (a build of minutes, then their tests on one worker), and
    the tests marked ``waits`` (minutes of an outage or a cut line: started late, one of them
    was the whole pass's last three minutes, the other workers idle); 1: crawls and other long
    tests; 2: the executables' tests outside their groups (handed out after the crawls: the
    build is done by then, where at the start they held a worker idle on the build's lock for
    minutes); 3: the rest (quick, they fill the workers at the end)."""
    fixtures = set(getattr(item, "fixturenames", ()))
    if "exe" in fixtures:
        return 0 if item.get_closest_marker("xdist_group") else 2
    if item.get_closest_marker("waits"):
        return 0
    if is_slow(item):
        return 1
    return 3


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest first: xdist hands tests out in collection order (`--no-loadscope-reorder`), so
    the builds and crawls start at once and the quick tests fill in behind them, instead of a
    build starting in the last minute. A stable sort: within a weight, the crawls in a worker
    subprocess (``crawl_setup``) first, else the files' order (in the timing pass its crawls,
    the 70 s pace crawl among them, start first). With ``--fast``, the slow tests are
    deselected."""
    if config.getoption("fast"):
        slow = [item for item in items if is_slow(item)]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if not is_slow(item)]
    items.sort(
        key=lambda item: (_weight(item), "crawl_setup" not in getattr(item, "fixturenames", ()))
    )


def _cpu() -> float:
    """This process's CPU and its ended children's, those forked by its zygote too."""
    from tests.fixtures import launcher

    t = os.times()
    return t.user + t.system + t.children_user + t.children_system + launcher.children_cpu()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_STARTED] = (_cpu(), time.monotonic(), time.time())
    item.stash[_HAD_REACTOR] = "twisted.internet.reactor" in sys.modules


def _installed_a_reactor(item: pytest.Item) -> bool:
    """Whether a reactor was installed in this process during the test (set-up to teardown)."""
    return item.stash.get(_HAD_REACTOR, True) is False and "twisted.internet.reactor" in sys.modules


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """In the fast tier, a test whose set-up and call took over a budget fails, naming the
    cure: so that a slow test cannot land in the tier unnoticed (the tier is "every test not
    known to be slow"). Each test's CPU seconds go to the report (printed at the end)."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "teardown" and CPU_LOG in os.environ and _STARTED in item.stash:
        # where the suite's CPU goes: set-up, call and teardown (a stand-in's CPU is counted
        # when its fixture waits for it), one line a test (docs/TESTING.md)
        # (and when it started, on which xdist worker: the suite's timeline)
        cpu0, wall0, started = item.stash[_STARTED]
        worker = os.environ.get("PYTEST_XDIST_WORKER", "-")
        with open(os.environ[CPU_LOG], "a") as log:
            log.write(
                f"{_cpu() - cpu0:.2f}\t{time.monotonic() - wall0:.2f}\t{item.nodeid}"
                f"\t{started:.1f}\t{worker}\n"
            )
    if report.when == "teardown" and report.passed and _installed_a_reactor(item):
        # the culprit fails, not its victims: later tests on this xdist worker crawl without a
        # reactor (tests/test_middlewares.py, test_session.py) and would fail far from the cause
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} installed a Twisted reactor in the test process (an import of "
            "twisted.internet.reactor, threads.deferToThread, reactor.callLater); code that may "
            "run without a reactor uses scrapy.utils.asyncio.call_later or cnkispider.runtime.offload"
        )
    if report.when != "call" or _STARTED not in item.stash:
        return
    cpu0, wall0, _ = item.stash[_STARTED]
    cpu, wall = _cpu() - cpu0, time.monotonic() - wall0
    report.user_properties.append(("cpu_seconds", round(cpu, 2)))
    if not item.config.getoption("fast") or not report.passed:
        return
    if cpu > FAST_CPU_BUDGET or wall > FAST_WALL_BUDGET:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} took {cpu:.1f} s of CPU and {wall:.1f} s, over the fast tier's "
            f"budget ({FAST_CPU_BUDGET:g} s of CPU, {FAST_WALL_BUDGET:g} s): mark it "
            "`@pytest.mark.slow` (docs/TESTING.md), or make it cheaper"
        )


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """With --fast: the tier's CPU seconds in all and its ten costliest tests (what its budget
    measures): the sum is what the tier costs whatever the load (on two idle cores, about half
    of it in wall time), where the wall time says how busy the machine was."""
    if not config.getoption("fast"):
        return
    costs = [
        (dict(r.user_properties).get("cpu_seconds", 0.0), r.nodeid)
        for r in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", [])
        if r.when == "call"
    ]
    if not costs:  # --collect-only, or nothing ran
        return
    terminalreporter.section("fast tier: the costliest tests (CPU seconds)")
    total = sum(cpu for cpu, _ in costs)
    terminalreporter.write_line(f"{len(costs)} tests, {total:.1f} CPU seconds in all")
    for cpu, nodeid in sorted(costs, reverse=True)[:10]:
        terminalreporter.write_line(f"{cpu:6.2f}  {nodeid}")


_STARTED = pytest.StashKey[tuple[float, float, float]]()
_HAD_REACTOR = pytest.StashKey[bool]()
