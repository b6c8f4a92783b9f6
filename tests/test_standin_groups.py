"""The stand-in's group/result (PROTOCOL.md 2026 point 23): the crawler's own request, answered
with counts equal to the grid's totals for the same query, on the site's clock."""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

import pytest

from cnkispider.cnki.groups import counts_of, parse_groups
from cnkispider.cnki.listgrid import parse_list
from cnkispider.cnki.protocol import Protocol
from cnkispider.cnki.search import Search
from cnkispider.exceptions import RefusedPage

DAY = "2024-05-06"


def post(client, url, form, headers):
    return client.request("POST", urlsplit(url).path, urlencode(form).encode(), headers)


def grid_total(client, protocol, search) -> int:
    status, _, body = post(
        client, protocol.grid_url, protocol.grid_form(search, 1, None), protocol.grid_headers()
    )
    assert status == 200
    return parse_list(body, search.doc_type).total


def facet(client, protocol, search) -> dict[str, int]:
    status, _, body = post(client, *protocol.group_request_args(search, ["CCL"]))
    assert status == 200
    return counts_of(parse_groups(body, ["CCL"]), "CCL")


@pytest.mark.parametrize("doc_type", ["paper", "patent"])
def test_facet_counts_are_the_grids_totals_and_add_up_to_the_day(cnki_site, doc_type):
    site = cnki_site(seed=3, late_arrivals=True, as_of="2024-05-20", turn_limit=0)
    client = site.client()
    client.warmup()
    protocol = Protocol(site.base_url, category_mode="facet")
    day = Search.for_day(doc_type, DAY)
    counts = facet(client, protocol, day)
    assert len(counts) >= 2
    total = grid_total(client, protocol, day)
    assert sum(counts.values()) == total > 0
    for code, count in counts.items():
        assert grid_total(client, protocol, Search.for_day(doc_type, DAY, category=code)) == count
    assert site.stats()["kinds"]["group"] == 1


def test_a_recount_sees_the_late_arrivals(cnki_site):
    site = cnki_site(seed=3, late_arrivals=True, as_of=DAY)
    client = site.client()
    client.warmup()
    protocol = Protocol(site.base_url, category_mode="facet")
    day = Search.for_day("paper", DAY)
    before = facet(client, protocol, day)
    site.control(as_of="2024-06-30")
    after = facet(client, protocol, day)
    assert sum(after.values()) > sum(before.values())
    assert all(after.get(code, 0) >= n for code, n in before.items())
    assert sum(after.values()) == grid_total(client, protocol, day)


def test_refused_as_the_grid_is(cnki_site):
    site = cnki_site(seed=3)
    protocol = Protocol(site.base_url)
    url, form, headers = protocol.group_request_args(Search.for_day("paper", DAY), ["CCL"])
    stranger = site.client()  # no session, no client id: CNKI's -403 JSON
    status, _, body = post(stranger, url, form, headers)
    with pytest.raises(RefusedPage) as err:
        parse_groups(body)
    assert err.value.reason == "verify"
    client = site.client()
    client.warmup()
    for broken in ({**form, "queryJson": ""}, {**form, "queryJson": "{not json"}):
        _, _, body = post(client, url, broken, headers)
        with pytest.raises(RefusedPage) as err:
            parse_groups(body)
        assert err.value.reason == "rejected"
        assert b"queryJson" in body
    _, _, body = post(client, url, {**form, "groupIds": "AFC"}, headers)
    with pytest.raises(RefusedPage) as err:  # a facet the site does not offer: never a zero
        parse_groups(body, ["AFC"])
    assert err.value.reason in ("blank", "unexpected")
