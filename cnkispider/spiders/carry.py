"""What a list request passes on to the requests made from its page.

One search's pages stay on one CNKI session, as a browser's would, until the session middleware
renews it before CNKI's page-turn limit; a v= link opens only in the verified session that
listed it. Shared by the round's own pages (``cnkispider/spiders/base.py``) and the title
searches refreshing a stale link (``cnkispider/spiders/stale_links.py``).
"""

from __future__ import annotations

#: The meta a follow-up list request inherits from its parent: its round, its cut, its session.
#: ``look``: the round a look re-opened is walked again (its stored rows are not fetched again).
CARRIED = ("round_id", "sort_cut", "cnki_session", "cnki_verified", "look")


def carry(meta: dict) -> dict:
    """What a follow-up list request inherits from its parent (:data:`CARRIED`)."""
    return {k: meta[k] for k in CARRIED if meta.get(k) is not None}


def verified_session(meta: dict) -> dict:
    """The verified session a list page was fetched in, for the detail requests it yields."""
    if not meta.get("cnki_verified"):
        return {}
    return {"cnki_session": meta.get("cnki_session"), "cnki_verified": True}
