"""The environment's ``CNKI_*`` variables: each ``CNKI_<SECTION>_<KEY>`` overrides that key of
config.ini (``CNKI_DATABASE_URL``).

One naming a known section but no key of it (``CNKI_DATABASE_URLL``) is an error, like a typo in
the file; any other unknown ``CNKI_*`` variable is a warning naming it and the nearest known one
(a ``CNKI_`` prefix is generic enough that other tools may use it; only the names in
``OTHER_ENV`` are ours without being config keys).
"""

from __future__ import annotations

import difflib
import logging
from pathlib import Path

from cnkispider.config.keys import SCHEMA
from cnkispider.exceptions import ConfigError
from cnkispider.words.i18n import _

logger = logging.getLogger(__package__)  # "cnkispider.config": the reader's, as the log shows it

ENV_PREFIX = "CNKI_"
# CNKI_* variables that are ours but no config key: read elsewhere, never warned about.
OTHER_ENV = frozenset({"CNKI_CONFIG", "CNKI_RELOAD_WATCH"})
OTHER_ENV_PREFIXES = ("CNKI_TEST_",)  # the test suite's own (services, injected failures)
_warned_env: set[str] = set()


def env_names() -> dict[str, tuple[str, str]]:
    """Every ``CNKI_<SECTION>_<KEY>`` variable that overrides a key, with its (section, key)."""
    return {
        f"{ENV_PREFIX}{section.upper()}_{key.upper()}": (section, key)
        for section, keys in SCHEMA.items()
        for key in keys
    }


def check_environment(environ) -> None:
    """Refuse or warn about ``CNKI_*`` variables that override nothing (see the module's doc)."""
    known = env_names()
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name in known or name in OTHER_ENV:
            continue
        if name.startswith(OTHER_ENV_PREFIXES):
            continue
        rest = name[len(ENV_PREFIX) :]
        # The section left out (CNKI_BASE_URL for CNKI_CNKI_BASE_URL) first, then spelling.
        nearest = [k for k in known if k.endswith(f"_{rest}")] or difflib.get_close_matches(
            name, [*known, *OTHER_ENV], n=1, cutoff=0.6
        )
        hint = f"; did you mean {nearest[0]}?" if nearest else ""  # the log's, in English
        section = next((s for s in SCHEMA if rest.startswith(f"{s.upper()}_")), None)
        if section is not None:
            key = rest[len(section) + 1 :].lower()
            words = {"keys": ", ".join(SCHEMA[section]), "name": nearest[0] if nearest else ""}
            if nearest:
                problem = _("unknown key; expected one of %(keys)s; did you mean %(name)s?") % words
            else:
                problem = _("unknown key; expected one of %(keys)s") % words
            raise ConfigError(Path(f"${name}"), section, key, problem)
        if name not in _warned_env:
            _warned_env.add(name)
            logger.warning(
                "environment variable %s is not a cnkispider setting and is ignored%s "
                "(settings are CNKI_<SECTION>_<KEY>, for example CNKI_DATABASE_URL)",
                name,
                hint,
            )
