"""Reading config.ini's text whatever a Windows editor saved it as: UTF-8 (with or without the BOM
Notepad writes) or GBK/GB18030 (a Chinese Windows' "ANSI"), saying so when it is not UTF-8.

:func:`ui_language` reads ``[ui] language`` alone, leniently, line by line: a file configparser
refuses (a line before any section, a key twice, a stray line) still says which language its
errors are to be said in."""

from __future__ import annotations

import configparser
import re
import sys
from pathlib import Path

from cnkispider.exceptions import ConfigError
from cnkispider.words.i18n import _

#: tried in this order; GB18030 is a superset of GBK (and of GB2312), so it reads both
ENCODINGS = ("utf-8-sig", "gb18030")


def read_ini(parser: configparser.ConfigParser, path: Path, *, say: bool = True) -> str:
    """Read ``path`` into ``parser``; the encoding it was read as. Not UTF-8: one line on
    standard error says which was used (``say``). Neither: ConfigError asking for UTF-8."""
    data = Path(path).read_bytes()
    for encoding in ENCODINGS:
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError:
            continue
        parser.read_string(text, source=str(path))
        if say and encoding != "utf-8-sig":
            print(
                _(
                    "note: %(path)s is not UTF-8; read as GBK/GB18030 (saving it as UTF-8 "
                    "avoids this guess)"
                )
                % {"path": path},
                file=sys.stderr,
            )
        return encoding
    raise ConfigError(
        path, "-", None, _("the file is neither UTF-8 nor GBK/GB18030 text: save it as UTF-8")
    )


_SECTION = re.compile(r"^\[(?P<name>[^\]]*)\]")
_LANGUAGE = re.compile(r"^language\s*[=:]\s*(?P<value>\S.*?)\s*$", re.IGNORECASE)


def ui_language(path: Path) -> str | None:
    """``[ui] language`` of the file at ``path`` (the last one given wins, as configparser's
    non-strict reading would have it), read whatever else is wrong with the file; None when it
    has none or cannot be read at all (the locale's language then)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    for encoding in ENCODINGS:
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError:
            continue
        break
    else:
        return None
    section, found = None, None
    for line in text.splitlines():
        if not line or line[0] in " \t#;":  # blank, indented (a continuation) or a comment
            continue
        header = _SECTION.match(line)
        if header:
            section = header["name"].strip()
        elif section == "ui" and (value := _LANGUAGE.match(line)):
            found = value["value"]
    return found or None
