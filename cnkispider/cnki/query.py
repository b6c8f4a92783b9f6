"""CNKI's professional search (专业检索) expressions: read, checked, and written back.

A task may carry one expression (``[task] query``, ``task add --query``); every search of the
task is that expression AND'ed with the round's day and category (docs/QUERY.md). The
expression is checked here before it is saved, so a typo costs one line at the keyboard, never
a task of refused searches: :func:`parse` raises :class:`QueryError` naming the position and
what was expected there.

The grammar, as CNKI's help for the expert search defines it (and public clients write it):

- a condition is ``FIELD = value`` (the field contains the value; for a person, the exact name)
  or ``FIELD % value`` (a fuzzy match); a value is a quoted string (``'碳中和'`` or ``"碳中和"``)
  or one bare word;
- one field's values combine with ``*`` (and), ``+`` (or), ``-`` (not), in parentheses if
  need be: ``SU=('经济发展' + '可持续发展') * '转变' - '泡沫'``;
- conditions combine with ``AND``, ``OR``, ``NOT`` (any case) and parentheses. CNKI gives the
  three the same priority, read left to right: ``A OR B AND C`` is ``(A OR B) AND C``.

Fields (:data:`FIELDS`): the ones every document type has, and each type's own (a patent's
applicant, inventor, numbers). A field another type has is refused for this one by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cnkispider.words.i18n import N_, _

#: Field codes every type is searched by, with CNKI's label.
COMMON_FIELDS = {
    "SU": "主题",
    "TKA": "篇关摘",
    "TI": "篇名",
    "KY": "关键词",
    "AB": "摘要",
    "FT": "全文",
    "AU": "作者",
    "FI": "第一作者",
    "AF": "作者单位",
    "FU": "基金",
    "LY": "文献来源",
    "JN": "期刊名称",
    "DOI": "DOI",
    "CLC": "分类号",
}
#: Each type's own fields: the patent search's numbers and parties (CNKI's patent field codes,
#: shared/cnki/PROTOCOL.md "kns8s search").
TYPE_FIELDS = {
    "patent": {
        "SQR": "申请人",
        "FMR": "发明人",
        "SQH": "申请号",
        "GKH": "公开号",
        "CLZ": "主分类号",
        "DLR": "代理人",
        "DLJG": "代理机构",
    },
    "paper": {},
    "achievement": {},
}
FIELDS = {doc_type: {**COMMON_FIELDS, **own} for doc_type, own in TYPE_FIELDS.items()}

OPERATORS = ("=", "%")
LOGIC = ("AND", "OR", "NOT")


class QueryError(ValueError):
    """An expression CNKI would refuse (or that would not mean what it says). ``message`` is
    in the reader's words (marked where it is raised); the expression's own text stays as it
    was typed."""

    def __init__(self, expression: str, position: int, message: str):
        self.expression = expression
        self.position = position
        self.message = message
        super().__init__(
            _("at character %(n)s: %(problem)s") % {"n": position + 1, "problem": message}
        )

    def pointer(self) -> str:
        """The expression with a caret under the place it fails."""
        return f"{self.expression}\n{' ' * self.position}^"


# -- the tree -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Term:
    """One value of a condition."""

    text: str


@dataclass(frozen=True)
class Terms:
    """Values combined inside one condition: op is ``*`` (and), ``+`` (or) or ``-`` (not)."""

    op: str
    left: Term | Terms
    right: Term | Terms


@dataclass(frozen=True)
class Condition:
    field: str
    operator: str  # = or %
    value: Term | Terms


@dataclass(frozen=True)
class Logic:
    op: str  # AND, OR, NOT (A NOT B: A and not B)
    left: Node
    right: Node


Node = Condition | Logic


# -- reading ------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<quoted>'[^']*'|"[^"]*")
      | (?P<punct>[()=%*+\-])
      | (?P<word>[^\s()=%*+\-'"]+)
      | (?P<open_quote>['"])
    )""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Token:
    kind: str  # quoted, punct, word, end
    text: str
    position: int


def _tokens(expression: str) -> list[_Token]:
    tokens = []
    at = 0
    while at < len(expression):
        match = _TOKEN.match(expression, at)
        if match is None or match.end() == at:  # only white space left
            break
        kind = match.lastgroup or "word"
        start = match.start(kind)
        if kind == "open_quote":
            raise QueryError(
                expression,
                start,
                _("the quote %(quote)s is never closed") % {"quote": match.group(kind)},
            )
        tokens.append(_Token(kind, match.group(kind), start))
        at = match.end()
    tokens.append(_Token("end", "", len(expression.rstrip())))
    return tokens


class _Reader:
    def __init__(self, expression: str, fields: dict[str, str]):
        self.expression = expression
        self.fields = fields
        self.tokens = _tokens(expression)
        self.at = 0

    @property
    def token(self) -> _Token:
        return self.tokens[self.at]

    def fail(self, message: str, token: _Token | None = None) -> QueryError:
        return QueryError(self.expression, (token or self.token).position, message)

    def take(self) -> _Token:
        token = self.token
        self.at += 1
        return token

    def is_logic(self) -> bool:
        return self.token.kind == "word" and self.token.text.upper() in LOGIC

    def expression_(self) -> Node:
        node = self.operand()
        while self.is_logic():
            op = self.take().text.upper()
            node = Logic(op, node, self.operand())
        return node

    def unclosed(self, opening: _Token) -> QueryError:
        return self.fail(
            _("expected ) to close the ( at character %(n)s") % {"n": opening.position + 1}
        )

    def expected(self, at_end: str, got: str, **values) -> QueryError:
        """What was expected where the reader is: ``at_end`` at the end of the expression,
        ``got`` (its ``%(seen)r`` the token found) anywhere else: two whole sentences."""
        if self.token.kind == "end":
            return self.fail(_(at_end) % values)
        return self.fail(_(got) % {**values, "seen": self.token.text})

    def operand(self) -> Node:
        token = self.token
        if token.kind == "punct" and token.text == "(":
            self.take()
            node = self.expression_()
            if not (self.token.kind == "punct" and self.token.text == ")"):
                raise self.unclosed(token)
            self.take()
            return node
        fields = ", ".join(self.fields)
        if token.kind != "word" or token.text.upper() in LOGIC:
            raise self.expected(
                N_("expected a field code (%(fields)s), got the end"),
                N_("expected a field code (%(fields)s), got %(seen)r"),
                fields=fields,
            )
        field = token.text.upper()
        if field not in self.fields:
            raise self.fail(
                _("unknown field %(field)r (fields: %(fields)s)")
                % {"field": token.text, "fields": fields},
                token,
            )
        self.take()
        if not (self.token.kind == "punct" and self.token.text in OPERATORS):
            raise self.expected(
                N_("expected = or %% after %(field)s, got the end"),
                N_("expected = or %% after %(field)s, got %(seen)r"),
                field=field,
            )
        operator = self.take().text
        return Condition(field, operator, self.values())

    def values(self) -> Term | Terms:
        node = self.value()
        while self.token.kind == "punct" and self.token.text in "*+-":
            op = self.take().text
            node = Terms(op, node, self.value())
        return node

    def value(self) -> Term | Terms:
        token = self.token
        if token.kind == "punct" and token.text == "(":
            self.take()
            node = self.values()
            if not (self.token.kind == "punct" and self.token.text == ")"):
                raise self.unclosed(token)
            self.take()
            return node
        if token.kind == "quoted":
            text = token.text[1:-1].strip()
            if not text:
                raise self.fail(_("an empty value"), token)
        elif token.kind == "word" and token.text.upper() not in LOGIC:
            text = token.text
        else:
            raise self.expected(
                N_("expected a value ('text' or a word), got the end"),
                N_("expected a value ('text' or a word), got %(seen)r"),
            )
        self.take()
        return Term(text)


def fields_of(doc_type: str) -> dict[str, str]:
    try:
        return FIELDS[doc_type]
    except KeyError:
        raise ValueError(f"unknown document type {doc_type!r}") from None


def parse(expression: str, doc_type: str) -> Node:
    """The tree of ``expression`` for a ``doc_type`` task, or :class:`QueryError`."""
    text = (expression or "").strip()
    if not text:
        raise QueryError(expression or "", 0, _("an empty query"))
    reader = _Reader(text, fields_of(doc_type))
    node = reader.expression_()
    if reader.token.kind != "end":
        extra = reader.token
        if extra.text == ")":
            message = _("expected nothing (an unopened ')'), got %(seen)r")
        else:
            message = _("expected AND, OR or NOT, got %(seen)r")
        raise reader.fail(message % {"seen": extra.text}, extra)
    return node


def _write_values(node: Term | Terms, nested: bool = False) -> str:
    if isinstance(node, Term):
        quote = "'" if "'" not in node.text else '"'
        return f"{quote}{node.text}{quote}"
    text = f"{_write_values(node.left, True)} {node.op} {_write_values(node.right, True)}"
    return f"({text})" if nested else text


def write(node: Node, nested: bool = False) -> str:
    """The expression of a tree, in one spelling: upper-case fields and logic, quoted values,
    every nested group in parentheses (so its reading never depends on priorities)."""
    if isinstance(node, Condition):
        return f"{node.field}{node.operator}{_write_values(node.value)}"
    text = f"{write(node.left, True)} {node.op} {write(node.right, True)}"
    return f"({text})" if nested else text


#: a Chinese input method's quotes, always read as the ASCII ones
_QUOTES = {"‘": "'", "’": "'", "“": '"', "”": '"'}
#: full-width operators and parentheses, read as ASCII outside a quoted value (inside one they
#: are the searched text)
_OPERATORS = {"＝": "=", "％": "%", "（": "(", "）": ")", "＋": "+", "－": "-", "＊": "*"}


def fold_full_width(expression: str) -> str:
    """``expression`` with a Chinese keyboard's quotes and operators in ASCII: ``SU=‘碳中和’``
    is ``SU='碳中和'`` (not a search for the quotes themselves)."""
    out, quote = [], None
    for char in expression:
        char = _QUOTES.get(char, char)
        if quote is None:
            char = _OPERATORS.get(char, char)
            if char in "'\"":
                quote = char
        elif char == quote:
            quote = None
        out.append(char)
    return "".join(out)


def normalize(expression: str, doc_type: str) -> str:
    """``expression`` checked and written in its one spelling (what the task row keeps)."""
    return write(parse(fold_full_width(expression), doc_type))


def task_query(expression: str | None, doc_type: str) -> str | None:
    """A task's query as every reader of one takes it (config.ini, `task add/set`, a task row,
    the drift of `task add` from its row): None for none (nothing, or blanks), else its one
    spelling; :class:`QueryError` where it fails, for the reader to say in its own terms."""
    if expression is None or not expression.strip():
        return None
    return normalize(expression, doc_type)
