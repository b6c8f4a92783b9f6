"""Test-wide fixtures live in plugin modules, one per concern, so each stays small.

`make test` runs the suite on several xdist workers (`-n`, `--dist loadgroup`, see the Makefile).
Every test has its own MariaDB database, Redis key namespace and tmp_path (tests/fixtures/), so
tests can share a worker or run side by side. What must stay on one worker says so with
``pytest.mark.xdist_group``: the executables' tests (one build each, tests/fixtures/build_once.py)
and the tests that read one module-scoped crawl. Tests that measure wall-clock gaps of a fraction
of a second are marked ``timing``; `make test` runs them alone after the parallel pass.
"""

import pytest

pytest_plugins = [
    "tests.fixtures.services",  # real MariaDB, SQLite and Redis
    "tests.fixtures.standin",  # the local CNKI stand-in site
    "tests.fixtures.scheduling",  # the scheduler driven by hand on the real Redis
    "tests.fixtures.crawls",  # crawls of the stand-in in a worker subprocess
]

#: Fixtures that make a test long (a build, a crawl shared by a module, private services, a
#: browser): a test that uses one is in the full tier only, whatever its markers say.
SLOW_FIXTURES = {"exe", "services", "watched_crawl", "crawled", "browser", "crawl_setup"}

#: The fast tier's budget per test (set-up, call and tear-down), in seconds. Its tests take well
#: under a second alone; the budget is ten times more so that a busy machine does not fail them,
#: and little enough that a crawl or a build landing in the tier fails it (see pytest_runtest_makereport).
FAST_BUDGET = 10.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="the fast tier (make test-fast): no slow or timing test, each within "
        f"{FAST_BUDGET:g} s",
    )


def is_slow(item: pytest.Item) -> bool:
    """In the full tier only: marked ``slow`` (or ``timing``), or using a slow fixture."""
    if item.get_closest_marker("slow") or item.get_closest_marker("timing"):
        return True
    return bool(SLOW_FIXTURES & set(getattr(item, "fixturenames", ())))


def _weight(item: pytest.Item) -> int:
    """0: the executables' groups (a build of minutes, then their tests on one worker);
    1: crawls and other long tests; 2: the rest (quick, they fill the workers at the end)."""
    if item.get_closest_marker("xdist_group") and "exe" in getattr(item, "fixturenames", ()):
        return 0
    if is_slow(item):
        return 1
    return 2


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest first: xdist hands tests out in collection order (`--no-loadscope-reorder`), so
    the builds and crawls start at once and the quick tests fill in behind them, instead of a
    build starting in the last minute. A stable sort: within a weight the order is the files'.
    With ``--fast``, the slow tests are deselected."""
    if config.getoption("fast"):
        slow = [item for item in items if is_slow(item)]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if not is_slow(item)]
    items.sort(key=_weight)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """In the fast tier, a test whose set-up and call took over FAST_BUDGET fails, naming the
    cure: so that a slow test cannot land in the tier unnoticed (the tier is "every test not
    known to be slow")."""
    outcome = yield
    if not item.config.getoption("fast"):
        return
    report = outcome.get_result()
    spent = item.stash.get(_SPENT, 0.0) + call.duration
    item.stash[_SPENT] = spent
    if report.when == "call" and report.passed and spent > FAST_BUDGET:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} took {spent:.1f} s, over the fast tier's {FAST_BUDGET:g} s per "
            "test: mark it `@pytest.mark.slow` (docs/TESTING.md), or make it faster"
        )


_SPENT = pytest.StashKey[float]()
