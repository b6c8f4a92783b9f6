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

import logging
import re
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from cnkispider.exceptions import InputError
from cnkispider.words.i18n import _
from cnkispider.words.vocabulary import word

logger = logging.getLogger(__name__)

BUILTIN_DIR = Path(__file__).resolve().parent / "categories"
BUILTIN_FOR_TYPE = {"patent": "ipc", "paper": "clc", "achievement": "clc"}


# The category of a day's census round (tasks/rounds.py "The day census"): the day's search
# without a category condition. Not a code of any tree (codes start with a letter).
DAY = "*"
#: What the operator reads for a census round's category (logs, status, the web page): the
#: table keeps DAY, a value no tree code can take.
DAY_LABEL = "day"


def round_label(code: str | None) -> str:
    """A round's category in the operator's words: ``day`` for the day's census round."""
    return DAY_LABEL if code == DAY else (code or "-")


def covers(tree: CategoryTree, doc_type: str) -> bool:
    """The tree's roots are those of the type's whole shipped tree: a search without category
    lists what the tree's rounds would list together (a day within the cap is one round)."""
    return list(tree.roots) == list(load_tree("builtin", doc_type).roots)


class CategoryError(InputError):
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
        code, _sep, name = text.partition(" ")
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
        raise CategoryError(_("no category codes found"))
    if len(set(tree.roots)) != len(tree.roots):
        raise CategoryError(_("a root code appears twice"))
    return tree


@lru_cache(maxsize=32)
def _load_file(path: str) -> CategoryTree:
    file = Path(path)
    try:
        lines = file.read_text(encoding="utf-8-sig").splitlines()
    except OSError as exc:
        raise CategoryError(
            _("cannot read category file %(path)s: %(error)s")
            % {"path": path, "error": exc.strerror}
        ) from None
    try:
        return _parse_lines(lines, yaml_style=file.suffix.lower() in (".yml", ".yaml"))
    except CategoryError as exc:
        raise CategoryError(f"{path}: {exc}") from None


# A category file's (mtime, size) when this process last read it: load_tree caches a file's tree
# per path for the process's life; a file edited while workers run is read again on its next use.
_FILE_SEEN: dict[str, tuple[int, int]] = {}
_FILE_LOCK = threading.Lock()


def reload_if_changed(spec: str | None, base_dir: Path | None = None) -> bool:
    """Forget the cached category trees when the file ``spec`` names changed since it was last
    seen here (True then). Called wherever a task row is validated (each claim, each phase
    decision), so a worker takes up an edited categories file within a second: new roots get
    rounds (after the cursor: as it walks; before it: see ``missing_round``). A stat per call;
    shipped trees (``builtin``) and inline code lists never change."""
    spec = (spec or "builtin").strip()
    if spec.startswith("builtin") or not Path(spec).suffix:
        return False
    path = Path(spec)
    if base_dir is not None and not path.is_absolute():
        path = base_dir / path
    try:
        stat = path.stat()
    except OSError:
        return False  # load_tree says why
    key, signature = str(path), (stat.st_mtime_ns, stat.st_size)
    with _FILE_LOCK:
        before = _FILE_SEEN.get(key)
        _FILE_SEEN[key] = signature
    if before is None or before == signature:
        return False
    _load_file.cache_clear()
    logger.info("categories file %s changed: read again", key)
    return True


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
            raise CategoryError(
                _("no shipped category tree %(name)r; shipped: %(shipped)s")
                % {"name": name, "shipped": shipped}
            )
        return _load_file(str(path))
    candidate = Path(spec)
    if base_dir is not None and not candidate.is_absolute():
        candidate = base_dir / candidate
    if candidate.suffix and (candidate.is_file() or "/" in spec or "\\" in spec):
        return _load_file(str(candidate))
    codes = [code.strip() for code in spec.split(",") if code.strip()]
    if not codes or any(" " in code for code in codes):
        raise CategoryError(
            _("not a category file or comma-separated code list: %(spec)r") % {"spec": spec}
        )
    shipped = load_tree("builtin", doc_type)
    tree = CategoryTree(roots=codes, names=dict(shipped.names))
    for code in codes:
        _copy_subtree(shipped, tree, code)
    return tree


MAX_CODE_LENGTH = 64  # the task table's cur_code column is String(64)
# The shape of a code finer than the shipped trees go (H04L9/32, TP311.13): accepted under a
# known code only when it has its classification's shape, so "GO6" (letter O) is a typo, not
# a finer code of G.
CODE_SHAPES = {
    "ipc": re.compile(r"[A-H](\d\d([A-Z](\d{1,4}(/\d{1,6})?)?)?)?"),
    # two letters only in class T (工业技术: TB..TV); ZZ9 or XX is a typo, not a finer Z or X
    "clc": re.compile(r"(T[BDEFGHJKLMNPQSUV]|[A-Z])(\d+(\.\d+)*)?(-\d+)?"),
}
_SEPARATORS = (";", "，", "；", "、", "|", " ")


def _known_codes(doc_type: str) -> list[str]:
    shipped = load_tree("builtin", doc_type)
    return list(shipped.names)


def _nearest(code: str, known: list[str]) -> str:
    import difflib

    near = difflib.get_close_matches(code.upper(), known, n=3, cutoff=0.5)
    # letter O for zero, I or l for one (GO6 for G06) first: the commonest typo in a code
    fixed = code[:1].upper() + code[1:].upper().replace("O", "0").replace("I", "1").replace(
        "L", "1"
    )
    if fixed in known:
        near = [fixed] + [k for k in near if k != fixed][:2]
    if not near:  # the codes that share its first letter, shortest first
        near = sorted((k for k in known if k[:1] == code[:1].upper()), key=lambda k: (len(k), k))[
            :3
        ]
    if not near:  # nothing alike: the top-level codes
        near = [k for k in known if len(k) == 1][:8]
    return ", ".join(near) if near else "none"


def check_spec(spec: str, doc_type: str, base_dir: Path | None = None) -> CategoryTree:
    """The tree of ``spec`` after checking it as user input, else CategoryError in one line.

    Stricter than :func:`load_tree` (which reads what is already stored): an inline list's
    codes must be codes of the type's shipped tree or finer codes under one of them (a search
    on a code matches every classification starting with it), written in capitals and separated
    by commas; a file must exist; no code may pass the ``cur_code`` column's 64 characters.
    """
    raw = (spec or "builtin").strip()
    if raw == "builtin" or raw.startswith("builtin:"):
        return load_tree(raw, doc_type, base_dir)
    candidate = Path(raw)
    if base_dir is not None and not candidate.is_absolute():
        candidate = base_dir / candidate
    looks_like_file = bool(candidate.suffix) or "/" in raw or "\\" in raw
    if looks_like_file and not candidate.is_file():
        for part in (p.strip() for p in raw.split(",")):
            if part and Path(part).suffix and not (base_dir or Path()).joinpath(part).is_file():
                raise CategoryError(
                    _("category file %(file)r does not exist (looked in %(folder)s)")
                    % {"file": part, "folder": candidate.parent}
                )
        raise CategoryError(
            _("category file %(file)r does not exist (looked in %(folder)s)")
            % {"file": raw, "folder": candidate.parent}
        )
    if looks_like_file:
        tree = load_tree(raw, doc_type, base_dir)
        long = [c for c in tree.names if len(c) > MAX_CODE_LENGTH]
        if long:
            raise CategoryError(
                _("category code %(code)r... is longer than %(n)s characters")
                % {"code": long[0][:20], "n": MAX_CODE_LENGTH}
            )
        return tree
    for sep in _SEPARATORS:
        if sep in raw:
            fixed = ",".join(p.strip() for p in raw.replace(sep, ",").split(",") if p.strip())
            raise CategoryError(
                _("categories %(raw)r: separate codes with commas, e.g. %(fixed)r")
                % {"raw": raw, "fixed": fixed}
            )
    codes = [code.strip() for code in raw.split(",") if code.strip()]
    if not codes:
        raise CategoryError(_("categories %(raw)r: no codes") % {"raw": raw})
    known = _known_codes(doc_type)
    known_set = set(known)
    shape = CODE_SHAPES[BUILTIN_FOR_TYPE[doc_type]]
    problems = []
    for code in codes:
        if len(code) > MAX_CODE_LENGTH:
            problems.append(
                _("%(code)r... is longer than %(n)s characters")
                % {"code": code[:20], "n": MAX_CODE_LENGTH}
            )
        elif code not in known_set and code.upper() in known_set:
            problems.append(
                _("%(code)r should be %(upper)r (codes are in capitals)")
                % {"code": code, "upper": code.upper()}
            )
        elif code not in known_set and not (
            any(code.startswith(k) for k in known_set) and shape.fullmatch(code)
        ):
            problems.append(
                _("%(code)r is unknown (nearest: %(nearest)s)")
                % {"code": code, "nearest": _nearest(code, known)}
            )
    if len(set(codes)) != len(codes):
        problems.append(_("a code appears twice"))
    if problems:
        tree_name = BUILTIN_FOR_TYPE[doc_type].upper()
        raise CategoryError(
            _("categories for %(type)s (%(tree)s tree): %(problems)s")
            % {"type": word(doc_type), "tree": tree_name, "problems": "; ".join(problems)}
        )
    return load_tree(raw, doc_type, base_dir)


def _copy_subtree(source: CategoryTree, target: CategoryTree, code: str) -> None:
    kids = source.children(code)
    if kids:
        target._children[code] = list(kids)
        for kid in kids:
            _copy_subtree(source, target, kid)
