"""The documentation points at what exists, and the product's docstrings stay short.

Every repository path that README.md, docs/*.md and the product's docstrings cite (in backticks,
in a link or in a code block) must exist: a file moved or renamed leaves a dead pointer
otherwise (`tasks/ledger.py` was cited for months after the ledger moved). A path counts as a
repository path when its first part is a top-level entry of the repository; paths made at run
time (data/, dist/, build/, .venv/) and examples (/path/to/...) are not. Every relative link
resolves to a file, and its #anchor to a heading of that file. A module docstring of the
product runs at most 30 lines: it says why and links to docs/ for the rest.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cnkispider", "tasks", "errors", "proxy")
# made by running the program, never committed: citing them is an example, not a pointer
RUNTIME = {"data", "dist", "build", ".venv"}
MAX_DOCSTRING_LINES = 30

TOP_LEVEL = {p.name for p in ROOT.iterdir() if p.name != ".git"} - RUNTIME
# a path-like run of characters: letters, digits, _ . - / (a leading ./ allowed)
PATH_TOKEN = re.compile(r"(?<![\w./\\-])(?:\./)?([\w.-]+(?:/[\w.-]*)+)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _cited_spans(text: str) -> list[str]:
    """The text of every backtick span and every fenced code block."""
    spans = re.findall(r"```.*?\n(.*?)```", text, flags=re.S)
    unfenced = re.sub(r"```.*?```", "", text, flags=re.S)
    spans += re.findall(r"`+([^`]+)`+", unfenced)
    return spans


def repository_paths(text: str) -> set[str]:
    """The repository paths cited in ``text``: a path whose first part is a top-level entry."""
    found = set()
    for span in _cited_spans(text):
        for match in PATH_TOKEN.finditer(span):
            path = match.group(1).rstrip(".")
            first = path.split("/", 1)[0]
            if first in TOP_LEVEL:
                found.add(path)
    return found


def _missing(paths: set[str]) -> list[str]:
    return sorted(p for p in paths if not (ROOT / p).exists())


def test_paths_cited_in_the_docs_exist():
    missing = {}
    for document in _documents():
        gone = _missing(repository_paths(document.read_text(encoding="utf-8")))
        if gone:
            missing[document.relative_to(ROOT).as_posix()] = gone
    assert not missing, f"paths cited but not in the repository: {missing}"


def test_paths_cited_in_the_product_docstrings_exist():
    missing = {}
    for package in PACKAGES:
        for module in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(module.read_text(encoding="utf-8"))
            nodes = [tree, *ast.walk(tree)]
            docstrings = [
                ast.get_docstring(n, clean=False) or ""
                for n in nodes
                if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            ]
            # a docstring cites a path bare as often as in backticks: read it all as one span
            cited = repository_paths("\n".join(f"```\n{d}\n```" for d in docstrings))
            gone = _missing(cited)
            if gone:
                missing[module.relative_to(ROOT).as_posix()] = gone
    assert not missing, f"paths cited in docstrings but not in the repository: {missing}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    text = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return text.replace(" ", "-")


def _anchors(document: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", document.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#+\s+(.*)$", text, flags=re.M)}


def test_relative_links_resolve():
    broken = []
    for document in _documents():
        text = re.sub(r"```.*?```", "", document.read_text(encoding="utf-8"), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: not ours to check
            path, _, anchor = target.partition("#")
            resolved = (document.parent / path).resolve() if path else document
            where = f"{document.relative_to(ROOT).as_posix()}: {target}"
            if not resolved.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{where} (no such heading)")
    assert not broken, f"links that lead nowhere: {broken}"


def test_docs_anchors_cited_in_the_product_exist():
    """A docstring's ``docs/PAGE.md#anchor`` names a heading of that page."""
    broken = []
    for package in PACKAGES:
        for module in sorted((ROOT / package).rglob("*.py")):
            text = module.read_text(encoding="utf-8")
            for page, anchor in re.findall(r"\bdocs/([\w-]+\.md)#([\w-]+)", text):
                target = ROOT / "docs" / page
                if not target.exists() or anchor not in _anchors(target):
                    broken.append(f"{module.relative_to(ROOT).as_posix()}: docs/{page}#{anchor}")
    assert not broken, f"anchors that lead nowhere: {broken}"


def test_module_docstrings_are_short():
    long = {}
    for package in PACKAGES:
        for module in sorted((ROOT / package).rglob("*.py")):
            docstring = ast.get_docstring(
                ast.parse(module.read_text(encoding="utf-8")), clean=False
            )
            lines = len((docstring or "").splitlines())
            if lines > MAX_DOCSTRING_LINES:
                long[module.relative_to(ROOT).as_posix()] = lines
    assert not long, f"module docstrings over {MAX_DOCSTRING_LINES} lines: {long}"


def test_the_checker_sees_a_dead_path_and_ignores_examples():
    """The rule above catches what it was written for, and not the examples around it."""
    text = (
        "the ledger (`tasks/ledger.py`), the demo's `data/demo/cnki-demo.db`, "
        "`/path/to/data/x.db`, `../shared/cnki/PROTOCOL.md`, `tests/test_docs.py::test_x`,\n"
        "```\n.venv/bin/cnkispider run\npython bench/chaos.py --runs 20\n```\n"
    )
    assert repository_paths(text) == {"tasks/ledger.py", "tests/test_docs.py", "bench/chaos.py"}
    assert _missing(repository_paths(text)) == ["tasks/ledger.py"]
