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
]

#: Fixtures that mark a test as long: a build, a crawl against the stand-in, private services.
_LONG_FIXTURES = {"exe", "cnki_site", "services", "watched_crawl"}


def _weight(item: pytest.Item) -> int:
    """0: the executables' groups (a build of minutes, then their tests on one worker);
    1: crawls and other long tests; 2: the rest (quick, they fill the workers at the end)."""
    if item.get_closest_marker("xdist_group") and "exe" in getattr(item, "fixturenames", ()):
        return 0
    if item.get_closest_marker("slow") or _LONG_FIXTURES & set(getattr(item, "fixturenames", ())):
        return 1
    return 2


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest first: xdist hands tests out in collection order (`--no-loadscope-reorder`), so
    the builds and crawls start at once and the quick tests fill in behind them, instead of a
    build starting in the last minute. A stable sort: within a weight the order is the files'."""
    items.sort(key=_weight)
