"""Test-wide fixtures live in plugin modules, one per concern, so each stays small."""

pytest_plugins = [
    "tests.fixtures.services",  # real MariaDB, SQLite and Redis
    "tests.fixtures.standin",  # the local CNKI stand-in site
]
