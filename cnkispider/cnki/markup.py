"""How the page parsers read CNKI's HTML, one reader for every page (the list grid, detail pages,
group/result's facets): the bytes parsed with the charset the page declares, an XPath test for a
class token, visible text (hidden elements and scripts dropped), values joined CNKI's way
("A;B"), the page's hidden inputs. Pure: HTML in, text out.
"""

from __future__ import annotations

import codecs
import re

from lxml import etree

from cnkispider.exceptions import RefusedPage


def css_class(name: str) -> str:
    """XPath test for one class token (``contains(@class, 'name')`` alone would match 'names').

    The plain ``contains`` runs first because it is cheap and rejects almost every element;
    the exact token test alone costs a millisecond per query on a full page.
    """
    return f"(contains(@class, '{name}') and contains(concat(' ', normalize-space(@class), ' '), ' {name} '))"


def hidden_inputs(root) -> dict[str, str]:
    """``{id: value}`` of the page's inputs, in one pass (the first of a repeated id wins)."""
    found: dict[str, str] = {}
    for el in root.iter("input"):
        key = el.get("id")
        if key and key not in found:
            found[key] = (el.get("value") or "").strip()
    return found


ONLINE_FIRST = "网络首发"


_ALWAYS_SKIP = frozenset({"script", "style", "noscript", "template"})
NO_SUP = frozenset({"sup"})
NO_LINKS = frozenset({"a"})
# Elements whose boundaries separate words ("a<br>b" is two words, not "ab").
_BREAKS = frozenset({"br", "p", "div", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6"})
_SEPARATORS_RE = re.compile(r"[\s;；,，、]+")
_SPLIT_RE = re.compile(r"[;；]")
_CHARSET_RE = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", re.I)


def as_bytes(page: str | bytes) -> bytes:
    if isinstance(page, str):
        return page.encode("utf-8", "surrogateescape")
    return bytes(page)


def document(data: bytes, original: str | bytes):
    """Parse HTML bytes; text given as ``str`` is utf-8 here whatever its <meta> claims."""
    encoding = "utf-8"
    if not isinstance(original, str):
        match = _CHARSET_RE.search(data, 0, 4096)
        if match:
            try:
                encoding = codecs.lookup(match.group(1).decode("ascii")).name
            except LookupError:
                pass  # an unknown charset name: CNKI serves utf-8
    # A parser per call: lxml parsers must not be shared between threads, and one costs
    # microseconds next to the parse itself.
    parser = etree.HTMLParser(
        encoding=encoding, remove_comments=True, remove_pis=True, collect_ids=False
    )
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        raise RefusedPage("unexpected", f"unparsable HTML: {exc}") from None
    if root is None:
        raise RefusedPage("blank", "no HTML in the body")
    return root


def is_hidden(el) -> bool:
    style = el.get("style")
    if style and "display:none" in style.replace(" ", "").lower():
        return True
    return el.get("hidden") is not None


def _collect(el, parts: list[str], skip_tags: frozenset[str], exclude) -> None:
    if el.text:
        parts.append(el.text)
    for child in el:
        tag = child.tag
        if isinstance(tag, str) and tag not in skip_tags and tag not in _ALWAYS_SKIP:
            if child is not exclude and not is_hidden(child):
                if tag in _BREAKS:
                    parts.append(" ")
                _collect(child, parts, skip_tags, exclude)
                if tag in _BREAKS:
                    parts.append(" ")
        if child.tail:
            parts.append(child.tail)


def text_of(el, skip_tags: frozenset[str] = frozenset(), exclude=None) -> str:
    """Visible text of ``el``: hidden elements and scripts dropped, whitespace collapsed."""
    if not len(el):  # a leaf (most cells and links): no walk needed
        return " ".join((el.text or "").split())
    parts: list[str] = []
    _collect(el, parts, skip_tags, exclude)
    return " ".join("".join(parts).split())


def join_values(pieces) -> str:
    """``["A;", "B；C", " "]`` -> ``"A;B;C"``: CNKI's list separator, without spaces."""
    out = []
    for piece in pieces:
        for part in _SPLIT_RE.split(piece):
            part = part.strip()
            if part:
                out.append(part)
    return ";".join(out)


def value_of(el, multi: bool, exclude=None) -> str:
    """The value held by ``el``: its ``<a>`` children joined with ";" when they are all it
    holds (people, keywords, class codes), else its text."""
    anchors = [a for a in el.iter("a") if a is not el and not is_hidden(a)]
    if anchors and not _SEPARATORS_RE.sub("", text_of(el, NO_LINKS, exclude)):
        return join_values(text_of(a, NO_SUP) for a in anchors)
    text = text_of(el, exclude=exclude)
    return join_values([text]) if multi else text
