"""The test tree's own house rules (docs/TESTING.md, Fixtures): support code lives in
tests/fixtures/, and no test module imports another test module, even inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_test_modules(source: str) -> list[str]:
    """The ``tests.test_*`` modules a module's source imports, anywhere in it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
            if node.module == "tests":
                names = [f"tests.{alias.name}" for alias in node.names]
        else:
            continue
        found += [n for n in names if n.startswith("tests.test_")]
    return found


def test_no_test_module_imports_another():
    offenders = {
        path.relative_to(TESTS.parent).as_posix(): imported
        for path in sorted(TESTS.rglob("*.py"))
        if (imported := imported_test_modules(path.read_text(encoding="utf-8")))
    }
    assert not offenders, f"move what they share into tests/fixtures/: {offenders}"


def test_support_modules_live_in_fixtures():
    """At tests/' root: the test modules, conftest.py and the package's face, nothing else."""
    others = sorted(
        p.name
        for p in TESTS.glob("*.py")
        if not p.name.startswith("test_") and p.name not in ("conftest.py", "__init__.py")
    )
    assert not others, f"support modules outside tests/fixtures/: {others}"


def test_the_finder_sees_every_spelling():
    """(The first test would pass on a finder that sees nothing.)"""
    source = (
        "from tests.test_a import x\nimport tests.test_b\nfrom tests import test_c, fixtures\n"
        "def f():\n    from tests.test_d import y\nfrom tests.fixtures.e import z\n"
    )
    assert imported_test_modules(source) == [
        "tests.test_a",
        "tests.test_b",
        "tests.test_c",
        "tests.test_d",
    ]
