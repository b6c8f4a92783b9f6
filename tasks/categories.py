"""Category trees: the second axis of a round (day x category), and how an overflowing
search is split.

A tree comes from a spec string (the task row's ``categories`` column or ``[task] categories``):

- ``builtin``: the project's tree for the task's type (IPC for patents, CLC otherwise);
- ``builtin:ipc`` / ``builtin:clc``: a named shipped tree;
- a path to a file: an indented text tree (two spaces per level, ``CODE name``), a plain code
  list (one code per line, every code a root), or a YAML tree such as
  ``../shared/cnki/codes/navi_code_tree.yml`` (``A:`` / ``- A001:`` / ``  - A001_1``);
- an inline list ``H04,G06``: those codes as roots, with their children when the type's
  shipped tree knows them.

Rounds walk the roots in file order. Children are used only to split a search whose total
passes CNKI's cap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

BUILTIN_DIR = Path(__file__).resolve().parent / "categories"
BUILTIN_FOR_TYPE = {"patent": "ipc", "paper": "clc", "achievement": "clc"}


class CategoryError(ValueError):
    """A category spec or file that cannot be used."""


@dataclass
class CategoryTree:
    roots: list[str]
    names: dict[str, str] = field(default_factory=dict)
    _children: dict[str, list[str]] = field(default_factory=dict)

    def children(self, code: str) -> list[str]:
        return self._children.get(code, [])

    def __contains__(self, code: str) -> bool:
        return code in self.roots

    def next_root(self, code: str | None) -> str | None:
        """The root after ``code`` (the first root when code is None); None past the last."""
        if code is None:
            return self.roots[0] if self.roots else None
        position = self.roots.index(code)
        return self.roots[position + 1] if position + 1 < len(self.roots) else None

    def leaves(self, code: str) -> list[str]:
        kids = self.children(code)
        if not kids:
            return [code]
        return [leaf for kid in kids for leaf in self.leaves(kid)]


def _parse_lines(lines: list[str], yaml_style: bool) -> CategoryTree:
    tree = CategoryTree(roots=[])
    stack: list[tuple[int, str]] = []
    for raw in lines:
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        text = raw.strip()
        dashed = text.startswith("- ")
        if dashed:
            text = text[2:].strip()
        depth = indent // 2 + (1 if yaml_style and dashed else 0)
        code, _, name = text.partition(" ")
        code = code.rstrip(":")
        if not code:
            continue
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            tree._children.setdefault(stack[-1][1], []).append(code)
        else:
            tree.roots.append(code)
        tree.names[code] = name.strip()
        stack.append((depth, code))
    if not tree.roots:
        raise CategoryError("no category codes found")
    if len(set(tree.roots)) != len(tree.roots):
        raise CategoryError("a root code appears twice")
    return tree


@lru_cache(maxsize=32)
def _load_file(path: str) -> CategoryTree:
    file = Path(path)
    try:
        lines = file.read_text(encoding="utf-8-sig").splitlines()
    except OSError as exc:
        raise CategoryError(f"cannot read category file {path}: {exc.strerror}") from None
    try:
        return _parse_lines(lines, yaml_style=file.suffix.lower() in (".yml", ".yaml"))
    except CategoryError as exc:
        raise CategoryError(f"{path}: {exc}") from None


def load_tree(spec: str, doc_type: str, base_dir: Path | None = None) -> CategoryTree:
    """The category tree a task's ``categories`` spec names (see the module docstring)."""
    spec = (spec or "builtin").strip()
    if spec == "builtin":
        spec = f"builtin:{BUILTIN_FOR_TYPE[doc_type]}"
    if spec.startswith("builtin:"):
        name = spec.split(":", 1)[1]
        path = BUILTIN_DIR / f"{name}.txt"
        if not path.is_file():
            shipped = ", ".join(sorted(p.stem for p in BUILTIN_DIR.glob("*.txt")))
            raise CategoryError(f"no shipped category tree {name!r}; shipped: {shipped}")
        return _load_file(str(path))
    candidate = Path(spec)
    if base_dir is not None and not candidate.is_absolute():
        candidate = base_dir / candidate
    if candidate.suffix and (candidate.is_file() or "/" in spec or "\\" in spec):
        return _load_file(str(candidate))
    codes = [code.strip() for code in spec.split(",") if code.strip()]
    if not codes or any(" " in code for code in codes):
        raise CategoryError(f"not a category file or comma-separated code list: {spec!r}")
    shipped = load_tree("builtin", doc_type)
    tree = CategoryTree(roots=codes, names=dict(shipped.names))
    for code in codes:
        _copy_subtree(shipped, tree, code)
    return tree


def _copy_subtree(source: CategoryTree, target: CategoryTree, code: str) -> None:
    kids = source.children(code)
    if kids:
        target._children[code] = list(kids)
        for kid in kids:
            _copy_subtree(source, target, kid)
