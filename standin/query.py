"""The stand-in's reading of CNKI's professional search (专业检索): an expression in the grid's
QueryJson (an item of field ``EXPERT``), matched against the generated documents' texts.

Written apart from the crawler's own reader (cnkispider/cnki/query.py) on purpose: the tests
then check that what the crawler sends is understood by a second reader, as CNKI would read it.

- ``FIELD = value``: for a text field the value is contained; for a name (author, inventor,
  agent) or a keyword, one of the field's entries is the value; for a code (CLC, the main
  IPC) the code starts with it; for a number (application, publication, DOI) it is the number.
- ``FIELD % value``: fuzzy: contained, for every kind of field.
- one field's values combine with ``*`` (and), ``+`` (or), ``-`` (not), in parentheses;
  conditions with AND, OR, NOT (any case) and parentheses, all of one priority, left to right.

An expression it cannot read raises :class:`ExpertError`; the site answers it as CNKI answers a
query it rejects (a ``p.no-content`` with a value: markup.BAD_EXPERT).
"""

from __future__ import annotations

import re
from collections.abc import Callable

TEXT, NAMES, WORDS, CODE, NUMBER = "text", "names", "words", "code", "number"

# field -> (kind, the document fields it reads), per type; a field missing here is refused
_COMMON = {
    "TI": (TEXT, ("title",)),
    "AB": (TEXT, ("abstract", "summary")),
    "FU": (TEXT, ("fund",)),
    "LY": (TEXT, ("source",)),
    "JN": (TEXT, ("source",)),
    "DOI": (NUMBER, ("doi",)),
    "CLC": (CODE, ("_codes",)),
}
FIELDS: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {
    "paper": {
        **_COMMON,
        "SU": (TEXT, ("title", "keywords", "abstract")),
        "TKA": (TEXT, ("title", "keywords", "abstract")),
        "FT": (TEXT, ("title", "keywords", "abstract")),
        "KY": (WORDS, ("keywords",)),
        "AU": (NAMES, ("authors",)),
        "FI": (NAMES, ("_first:authors",)),
        "AF": (TEXT, ("institutions",)),
    },
    "patent": {
        **_COMMON,
        "SU": (TEXT, ("title", "abstract")),
        "TKA": (TEXT, ("title", "abstract")),
        "FT": (TEXT, ("title", "abstract", "claim")),
        "KY": (TEXT, ("title", "abstract")),
        "AU": (NAMES, ("inventors",)),
        "FI": (NAMES, ("_first:inventors",)),
        "AF": (TEXT, ("applicant", "co_applicants")),
        "SQR": (TEXT, ("applicant", "co_applicants")),
        "FMR": (NAMES, ("inventors",)),
        "SQH": (NUMBER, ("application_no",)),
        "GKH": (NUMBER, ("publication_no",)),
        "CLZ": (CODE, ("main_ipc",)),
        "DLR": (NAMES, ("agent",)),
        "DLJG": (TEXT, ("agency",)),
    },
    "achievement": {
        **_COMMON,
        "SU": (TEXT, ("title", "keywords", "summary")),
        "TKA": (TEXT, ("title", "keywords", "summary")),
        "FT": (TEXT, ("title", "keywords", "summary")),
        "KY": (WORDS, ("keywords",)),
        "AU": (NAMES, ("completers",)),
        "FI": (NAMES, ("_first:completers",)),
        "AF": (TEXT, ("first_unit",)),
    },
}

_TOKENS = re.compile(r"""\s*('[^']*'|"[^"]*"|[()=%*+\-]|[^\s()=%*+\-'"]+|['"])""")
_LOGIC = {"AND", "OR", "NOT"}

Match = Callable[[object], bool]


class ExpertError(ValueError):
    pass


def _split(text: str) -> list[str]:
    tokens, at = [], 0
    while at < len(text):
        m = _TOKENS.match(text, at)
        if not m:
            break
        token = m.group(1)
        if token in ("'", '"'):
            raise ExpertError("unclosed quote")
        tokens.append(token)
        at = m.end()
    if text[at:].strip():
        raise ExpertError(f"unreadable from {at}")
    return tokens


def _values(doc, reads: tuple[str, ...], codes: tuple[str, ...]) -> list[str]:
    out = []
    for name in reads:
        if name == "_codes":
            out += list(codes)
        elif name.startswith("_first:"):
            names = [n for n in str(doc.fields.get(name[7:], "")).split(";") if n.strip()]
            out += names[:1]
        else:
            out.append(str(doc.fields.get(name, "") or ""))
    return out


def _term_match(kind: str, operator: str, term: str, values: list[str]) -> bool:
    if operator == "%" or kind == TEXT:
        return any(term in v for v in values)
    if kind in (NAMES, WORDS):
        return any(term == part.strip() for v in values for part in v.split(";"))
    if kind == CODE:
        return any(v.startswith(term) for v in values)
    return any(term.upper() == v.strip().upper() for v in values)  # NUMBER


class _Parser:
    def __init__(self, text: str, fields: dict):
        self.tokens = _split(text)
        self.at = 0
        self.fields = fields

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise ExpertError("unexpected end")
        self.at += 1
        return token

    def expression(self) -> Match:
        match = self.operand()
        while (self.peek() or "").upper() in _LOGIC:
            op = self.take().upper()
            right = self.operand()
            match = _combine(op, match, right)
        return match

    def operand(self) -> Match:
        token = self.take()
        if token == "(":
            match = self.expression()
            if self.take() != ")":
                raise ExpertError("unbalanced (")
            return match
        field = token.upper()
        if field not in self.fields:
            raise ExpertError(f"unknown field {token}")
        operator = self.take()
        if operator not in ("=", "%"):
            raise ExpertError(f"no operator after {field}")
        kind, reads = self.fields[field]
        test = self.values(kind, operator)

        def condition(doc) -> bool:
            return test(_values(doc, reads, tuple(doc.codes)))

        return condition

    def values(self, kind: str, operator: str) -> Callable[[list[str]], bool]:
        test = self.value(kind, operator)
        while self.peek() in ("*", "+", "-"):
            op = self.take()
            right = self.value(kind, operator)
            test = _combine({"*": "AND", "+": "OR", "-": "NOT"}[op], test, right)
        return test

    def value(self, kind: str, operator: str) -> Callable[[list[str]], bool]:
        token = self.take()
        if token == "(":
            test = self.values(kind, operator)
            if self.take() != ")":
                raise ExpertError("unbalanced (")
            return test
        if token[0] in "'\"":
            token = token[1:-1].strip()
        elif token in ("=", "%", "*", "+", "-", ")") or token.upper() in _LOGIC:
            raise ExpertError(f"no value: {token}")
        if not token:
            raise ExpertError("empty value")
        return lambda values: _term_match(kind, operator, token, values)


def _combine(op: str, left, right):
    if op == "AND":
        return lambda x: left(x) and right(x)
    if op == "OR":
        return lambda x: left(x) or right(x)
    return lambda x: left(x) and not right(x)


def compile_expert(expression: str, doc_type: str) -> Match:
    """A predicate over a document of ``doc_type``, or ExpertError."""
    parser = _Parser(expression, FIELDS[doc_type])
    match = parser.expression()
    if parser.peek() is not None:
        raise ExpertError(f"unexpected {parser.peek()}")
    return match
