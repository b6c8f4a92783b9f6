"""pytest fixture for the local CNKI stand-in site (registered in tests/conftest.py).

``cnki_site`` is a factory: ``site = cnki_site(**options)`` starts ``python -m tests.cnki_site
--port 0 ...`` in a subprocess and returns a :class:`~tests.cnki_site.client.SiteHandle` with
``.base_url``, ``.proxy_urls``, ``.provider_url``, ``.control(**kw)``, ``.stats()``,
``.truth(doc_type, start, end, categories)``, ``.rounds(...)``, ``.doomed(...)``, ``.client()``
and ``.stop()``. Options are the command line's in Python spelling (see
:func:`tests.cnki_site.client.site_argv`): ``pace_limit=5``, ``rows_without_keys=True``,
``break_="turn-token"`` (or a list), ``cap_rows=6000``, ... Every site a test started is stopped at teardown.
"""

from __future__ import annotations

import pytest

from tests.cnki_site.client import SiteHandle, start_site


@pytest.fixture
def cnki_site():
    started: list[SiteHandle] = []

    def factory(**options) -> SiteHandle:
        site = start_site(**options)
        started.append(site)
        return site

    yield factory
    for site in started:
        site.stop()
