"""`cnkispider probe`: a live self-check of every assumption the crawler makes about CNKI.

No machine of ours reaches kns.cnki.net, so what the crawler believes about the live site is
second-hand (``shared/cnki/PROTOCOL.md``). A user who can reach CNKI runs ``cnkispider probe``
once before a long crawl: about 30 requests, at most one every ``--delay`` seconds (3 by default),
each answer judged by the crawler's own code (:mod:`cnkispider.cnki.protocol`,
:mod:`cnkispider.cnki.listgrid`, :mod:`cnkispider.cnki.detailpage`, :mod:`cnkispider.cnki.refusals`), so a FAIL here is a FAIL of
the crawler, not of a second implementation. Every raw answer can be saved (``--save DIR``,
gzip, with an ``index.json`` of the requests) to become a test fixture; docs/PROBE.md says how
to turn a FAIL into a fix.

One line per assumption: ``PASS``, ``FAIL`` (the site contradicts it: the crawler would lose
data or be refused) or ``UNKNOWN`` (the probe could not tell, e.g. an earlier step failed).
Exit status: 0 when nothing failed, 1 when something did, 2 for a configuration error.

The probe is deliberately plain and sequential (urllib, one cookie jar per CNKI session): it
must run where the crawl cannot yet, and ~30 requests need no engine. Here: the probe built
from config.ini; checks.py: the checks in order; sessions.py, searches.py, records.py: the checks
by what they check; facets.py: group/result and the update-time control; verdicts.py: a check's
words; answers.py: the requests and their record.
"""

from __future__ import annotations

import logging

from cnkispider.cnki.protocol import protocol_from_settings
from cnkispider.cnki.search import RESOURCES
from cnkispider.probe.checks import CLIENT_ID_URL, default_day
from cnkispider.probe.facets import Probe  # every check, the facet ones too
from cnkispider.probe.verdicts import FAIL, PASS, UNKNOWN, Check

__all__ = [
    "FAIL",
    "PASS",
    "UNKNOWN",
    "Check",
    "Probe",
    "category_samples",
    "default_day",
    "probe_from_config",
]

logger = logging.getLogger(__name__)


def category_samples(tree, most_children: int = 6, count: int = 3) -> list[tuple[str, list[str]]]:
    """Up to ``count`` parent codes with a few children each, from a category tree (for the
    prefix check): parents with 2..most_children children first, then any with children."""
    if tree is None:
        return []
    few = [
        (r, list(tree.children(r)))
        for r in tree.roots
        if 2 <= len(tree.children(r)) <= most_children
    ]
    some = [(r, list(tree.children(r))[:most_children]) for r in tree.roots if tree.children(r)]
    picked = few + [c for c in some if c not in few]
    return (picked or [(r, []) for r in tree.roots])[:count]


def probe_from_config(
    config, *, day=None, delay=3.0, save_dir=None, out=print, session_id=None, session_budget=0
) -> Probe:
    """The probe for the site config.ini points at, with the shipped category trees."""
    from cnkispider.launch.crawlsettings import crawler_settings
    from tasks.categories import load_tree

    settings = crawler_settings(config)
    protocol = protocol_from_settings(settings)
    categories = {}
    for doc_type in RESOURCES:
        try:
            categories[doc_type] = category_samples(load_tree("builtin", doc_type))
        except Exception:  # a tree that cannot load leaves the category check UNKNOWN
            categories[doc_type] = []
    return Probe(
        protocol,
        client_id_url=settings.get("CNKI_CLIENT_ID_URL") or CLIENT_ID_URL,
        day=day,
        delay=delay,
        save_dir=save_dir,
        categories=categories,
        out=out,
        verified=_verified_from_pool(config, session_id),
        session_pace=config.cnki["session_pace"] or 0.5,
        session_budget=session_budget,
    )


def _verified_from_pool(config, session_id: str | None = None):
    """The pool's session ``session_id``, or its first ready one; None if none (or no Redis)."""
    try:
        from cnkispider.sessions import READY, SessionStore

        store = SessionStore.from_config(config)
        if session_id:
            return store.get(session_id)
        return next((s for s in store.list() if s.state == READY), None)
    except Exception as exc:  # Redis down: the probe says there is no session
        logger.debug("no session pool: %s", exc)
        return None
