"""A task's selection: which listed documents a deepening task crawls (docs/DEPTH.md).

A deepening task lists the rounds of another task again (``task add NAME --like OTHER``: detail
links are bound to the session that lists them, so old links cannot be reused) and crawls only
the rows its rule selects; every other row is dropped by the rule ``not-selected`` and counted in
its round's ledger. Pure: the rule is read from the task row, a row is a mapping of the list
row's fields.

Two kinds of rule, stored in ``task.selection`` as text:

- ``where:<conditions>``: conditions on the list row, joined by ``and``, each
  ``FIELD OP VALUE`` with OP one of ``>= <= > < = != ~`` (``~``: contains). Numbers compare as
  numbers (an empty count is not a number: the condition is false). FIELD is one of
  :data:`FIELDS`. Example: ``cited >= 10 and database = 期刊``.
- ``keys:<path>``: a file of document keys, one ``dbname/filename`` (or ``dbname!filename``) a
  line; ``#`` starts a comment. Read once per change of the file.
"""

from __future__ import annotations

import operator
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cnkispider.exceptions import InputError
from cnkispider.words.i18n import _

NOT_SELECTED = "not-selected"
#: What a condition may look at: the list row's fields (a deepening task decides before it asks
#: for anything else).
FIELDS = (
    "title",
    "authors",
    "source",
    "date",
    "database",
    "dbname",
    "filename",
    "cited",
    "downloads",
    "online_first",
    "export_id",
)
_OPS = {
    ">=": operator.ge,
    "<=": operator.le,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
    "=": operator.eq,
    "~": None,  # contains
}
_CONDITION_RE = re.compile(r"^\s*([A-Za-z_]+)\s*(>=|<=|!=|>|<|=|~)\s*(.*?)\s*$")
_AND_RE = re.compile(r"\s+and\s+", re.I)


class SelectionError(InputError):
    """A rule that cannot be read; the message says what is wrong."""


def _number(text) -> float | None:
    try:
        return float(str(text).strip())
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Condition:
    field: str
    op: str
    value: str

    def holds(self, row) -> bool:
        have = row.get(self.field)
        have = "" if have is None else str(have)
        if self.op == "~":
            return self.value in have
        left, right = _number(have), _number(self.value)
        if left is not None and right is not None:
            return _OPS[self.op](left, right)
        if self.op in ("=", "!="):
            return _OPS[self.op](have, self.value)
        return False  # an order between texts (or an empty count) is no answer


@dataclass(frozen=True)
class Selection:
    """A parsed rule: conditions (all must hold) or a set of document keys."""

    text: str
    conditions: tuple[Condition, ...] = ()
    keys: frozenset[str] | None = None

    def selects(self, row) -> bool:
        """Whether the row (a mapping of :data:`FIELDS`) is crawled."""
        if self.keys is not None:
            return f"{row.get('dbname', '')}/{row.get('filename', '')}" in self.keys
        return all(c.holds(row) for c in self.conditions)


def parse_where(text: str) -> tuple[Condition, ...]:
    parts = [p for p in _AND_RE.split(text.strip()) if p.strip()]
    if not parts:
        raise SelectionError(
            _("%(option)s: empty rule (expected e.g. %(example)s)")
            % {"option": "--where", "example": "'cited >= 10'"}
        )
    out = []
    for part in parts:
        match = _CONDITION_RE.match(part)
        if match is None:
            raise SelectionError(
                _("%(option)s: %(part)r is not FIELD OP VALUE (OP: %(ops)s)")
                % {"option": "--where", "part": part, "ops": ">= <= > < = != ~"}
            )
        field, op, value = match.groups()
        field = field.lower()
        if field not in FIELDS:
            raise SelectionError(
                _("%(option)s: unknown field %(field)r (one of: %(fields)s)")
                % {"option": "--where", "field": field, "fields": ", ".join(FIELDS)}
            )
        value = value.strip().strip("'\"")
        if op in (">=", "<=", ">", "<") and _number(value) is None:
            raise SelectionError(
                _("%(option)s: %(part)r: %(op)s needs a number")
                % {"option": "--where", "part": part, "op": op}
            )
        out.append(Condition(field, op, value))
    return tuple(out)


_KEYS_CACHE: dict[str, tuple[float, frozenset[str]]] = {}


def read_keys(path: str) -> frozenset[str]:
    """The document keys of a keys file (``dbname/filename`` or ``dbname!filename`` a line)."""
    file = Path(path)
    try:
        mtime = os.stat(file).st_mtime
    except OSError as exc:
        raise SelectionError(
            _("%(option)s: cannot read %(path)s: %(error)s")
            % {"option": "--keys", "path": path, "error": exc.strerror or exc}
        ) from None
    cached = _KEYS_CACHE.get(str(file))
    if cached is not None and cached[0] == mtime:
        return cached[1]
    keys = set()
    for number, line in enumerate(file.read_text(encoding="utf-8-sig").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        dbname, sep, filename = line.replace("!", "/", 1).partition("/")
        if not sep or not dbname.strip() or not filename.strip() or " " in line:
            raise SelectionError(
                _("%(option)s: %(path)s line %(n)s: %(line)r is not dbname/filename")
                % {"option": "--keys", "path": path, "n": number, "line": line}
            )
        keys.add(f"{dbname.strip()}/{filename.strip()}")
    if not keys:
        raise SelectionError(
            _("%(option)s: %(path)s holds no document key") % {"option": "--keys", "path": path}
        )
    frozen = frozenset(keys)
    _KEYS_CACHE[str(file)] = (mtime, frozen)
    return frozen


def parse_selection(text: str | None) -> Selection | None:
    """The task row's ``selection`` (None or "" : every row is crawled)."""
    if not text:
        return None
    kind, sep, rule = str(text).partition(":")
    if kind == "where" and sep:
        return Selection(text, conditions=parse_where(rule))
    if kind == "keys" and sep:
        return Selection(text, keys=read_keys(rule))
    raise SelectionError(
        _("selection %(text)r: expected where:RULE or keys:PATH") % {"text": text[:40]}
    )


def selection_text(where: str | None, keys: str | None) -> str | None:
    """What ``task add --where/--keys`` stores (checked: SelectionError names what is wrong)."""
    if where and keys:
        raise SelectionError(
            _("give %(where)s or %(keys)s, not both") % {"where": "--where", "keys": "--keys"}
        )
    if where:
        text = f"where:{where.strip()}"
    elif keys:
        text = f"keys:{Path(keys).resolve()}"
    else:
        return None
    parse_selection(text)
    return text
