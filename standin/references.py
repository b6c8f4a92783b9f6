"""The stand-in's reference lists: CNKI's citation API, per paper, deterministic from the seed.

``GET /restapi/citation-api/v1/literature/references?v=<v>&type=<TYPE>&start=1&size=10``
(PROTOCOL.md point 17). Every paper of a journal or thesis family has a list drawn from
hash(seed, dbname, filename): a quarter have none, half 1-10 entries, a quarter 11-35 (so paging
is tested); about 60% of the entries link the cited document (its dbname/filename).

The request is checked as strictly as CNKI checks a detail page, by the site (session, token,
pace: standin/gate.py and standin/detail.py); here, what is wrong with the request itself: a missing ``v``, an unknown
``type``, ``start`` < 1 or ``size`` outside 1..50 is refused with HTTP 400 and CNKI's
parameter-check words (参数校验;字段【size】校验失败, as the grid says for pageSize: PROTOCOL.md
point 8). A known type that is not the paper's family answers an empty list.
"""

from __future__ import annotations

import json
import random
from urllib.parse import parse_qs

from standin import vocab

PATH = "/restapi/citation-api/v1/literature/references"
MAX_SIZE = 50
# the citing database family (a prefix: CNKI's names carry a year) -> the API's type
FAMILY_TYPES = {
    "CJFD": "CJFDREF",
    "CJFQ": "CJFDREF",
    "CAPJ": "CJFDREF",
    "CDFD": "CDFDREF",
    "CMFD": "CMFDREF",
    "CPFD": "CPFDREF",
}
TYPES = frozenset(FAMILY_TYPES.values())
_JOURNALS = tuple(name for group in vocab.JOURNALS.values() for name, _ in group)
_CITED_FAMILIES = ("CJFD", "CJFD", "CJFD", "CMFD", "CDFD")


def type_of(dbname: str) -> str | None:
    name = (dbname or "").upper()
    return next((t for family, t in FAMILY_TYPES.items() if name.startswith(family)), None)


def check(query: str) -> tuple[dict, str | None]:
    """The request's parameters, and CNKI's words when it is malformed (else None)."""
    params = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}
    if not params.get("v"):
        return params, "参数校验;字段【v】校验失败"
    if params.get("type") not in TYPES:
        return params, "参数校验;字段【type】校验失败"
    for name, lo, hi in (("start", 1, 10**6), ("size", 1, MAX_SIZE)):
        try:
            value = int(params.get(name, ""))
        except ValueError:
            return params, f"参数校验;字段【{name}】校验失败"
        if not lo <= value <= hi:
            return params, f"参数校验;字段【{name}】校验失败"
        params[name] = value
    return params, None


def refused(words: str) -> bytes:
    return json.dumps({"code": 400, "message": words, "data": None}, ensure_ascii=False).encode()


def reference_list(seed_hash, dbname: str, filename: str) -> list[dict]:
    """The paper's whole list, as the truth has it (``seed_hash(*parts)`` is the corpus's h)."""
    if type_of(dbname) is None:
        return []
    rnd = random.Random(seed_hash("references", dbname, filename))
    u = rnd.random()
    count = 0 if u < 0.25 else rnd.randint(1, 10) if u < 0.75 else rnd.randint(11, 35)
    out = []
    for position in range(1, count + 1):
        year = rnd.randint(1985, 2023)
        authors = ";".join(
            rnd.choice(vocab.SURNAMES) + rnd.choice(vocab.GIVEN) for _ in range(rnd.randint(1, 4))
        )
        title = f"{rnd.choice(vocab.TECHS)}在{rnd.choice(vocab.OBJECTS)}中的应用研究"
        cited_dbname = cited_filename = ""
        if rnd.random() < 0.6:
            family = rnd.choice(_CITED_FAMILIES)
            cited_dbname = f"{family}{year}"
            cited_filename = f"{'ABCDEFGH'[rnd.randrange(8)]}XXB{year}{rnd.randint(1, 12):02d}{rnd.randint(1, 999):03d}"
        out.append(
            {
                "position": position,
                "title": title,
                "authors": authors,
                "source": rnd.choice(_JOURNALS),
                "year": str(year),
                "cited_dbname": cited_dbname,
                "cited_filename": cited_filename,
            }
        )
    return out


def answer(entries: list[dict], start: int, size: int) -> bytes:
    """One page of the list, in the API's JSON."""
    page = entries[start - 1 : start - 1 + size]
    data = []
    for entry in page:
        item = {
            "metadata": [
                {"name": "TI", "value": entry["title"]},
                {"name": "AU", "value": entry["authors"]},
                {"name": "LY", "value": entry["source"]},
                {"name": "YE", "value": entry["year"]},
            ]
        }
        if entry["cited_dbname"]:
            item["dbname"], item["filename"] = entry["cited_dbname"], entry["cited_filename"]
        data.append(item)
    body = {"code": 200, "msg": "success", "data": {"total": len(entries), "data": data}}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
