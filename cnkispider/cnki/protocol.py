"""The kns8s search protocol: the one place that knows how CNKI wants to be asked.

Everything here is pure (no network, no Scrapy engine): the spider builds its requests from
these values, the session/Referer middlewares read the URLs from here, and the stand-in site
speaks the same protocol (docs/CONTRACTS.md, shared/cnki/PROTOCOL.md, whose "2026 evidence"
section this module follows). When CNKI changes its interface again, this module and
:mod:`cnkispider.cnki.listgrid` and :mod:`~cnkispider.cnki.detailpage` are what changes; what a
search is (the document types' resources, :class:`~cnkispider.cnki.search.Search`) is
:mod:`cnkispider.cnki.search`.

Settings read by :func:`protocol_from_settings` (defaults in :mod:`cnkispider.default_settings`):

- ``CNKI_BASE_URL``: scheme and host of the site (``https://kns.cnki.net``, or the stand-in).
- ``CNKI_CLIENT_ID_URL``: where a session's ``Ecp_ClientId`` is issued (CNKI's recsys host).
- ``CNKI_PAGE_SIZE``: rows per list page; CNKI accepts only 10, 20 and 50 (anything else is
  rejected with 参数校验;字段【pageSize】校验失败).
- ``CNKI_CAP_ROWS``: rows one search order can reach, whatever the page size (6000: at 20 a
  page CNKI shows 300 pages, at 50 it shows 120).
- ``CNKI_MAX_PAGES``: an optional lower limit on the pages walked (0 or empty: ``cap_rows //
  page_size``); tests use it to get small caps.
- ``CNKI_CATEGORY_MODE``: ``subject`` (a Subject-group item, the search form's 分类号) or
  ``facet`` (the left-hand 学科 facet: the ``CCL`` group inside ``SCDBGroup``/``MutiGroup``).
- ``CNKI_CATEGORY_FIELD`` / ``CNKI_CATEGORY_OPERATOR``: the Subject item's field and operator
  (``CLC`` / ``SUFFIX``: the form's 分类号 is a prefix match; ``TOPRANK`` is relevance ranking
  for 主题 and matches a code only exactly).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import urljoin

from cnkispider import default_settings
from cnkispider.cnki.search import CROSSDB, RESOURCES, Resource, Search

HOME_PATH = "/kns8s/defaultresult/index"
GRID_PATH = "/kns8s/brief/grid"
CLIENT_ID_PATH = "/RCDService/api/UtilityOpenApi/GenerateClientID"
CLIENT_ID_COOKIE = "Ecp_ClientId"
# CNKI's citation export (PROTOCOL.md, 2026 evidence point 16): form-POSTed export ids, answered
# with JSON; only the three display modes together are answered (one alone: 暂无数据)
EXPORT_PATH = "/dm8/API/GetExport"
# CNKI's facet counts (PROTOCOL.md, 2026 evidence point 23; the parser is in groups.py)
GROUP_PATH = "/kns8s/group/result"
EXPORT_MODES = "GBTREFER,elearning,EndNote"
EXPORT_PLATFORM = "NZKPT"

# The kinds of CNKI request (request meta ``cnki_kind``), the one list the middlewares read:
# ``home`` warms a session up; the others are sent in a CNKI session. A document's own requests
# (its detail page, its reference list) carry its v= token, which opens only in the session
# that listed it; ``export`` (GetExport, issue 27) goes in any session of its round.
HOME, LIST, DETAIL, REFERENCES, EXPORT = "home", "list", "detail", "references", "export"
SESSION_KINDS = (LIST, DETAIL, EXPORT, REFERENCES)
DOCUMENT_KINDS = (DETAIL, REFERENCES)

PAGE_SIZES = (10, 20, 50)  # the only pageSize values CNKI accepts
CATEGORY_MODES = ("subject", "facet")
FACET_GROUP = "CCL"  # the 学科 facet's group id (and field) inside SCDBGroup / MutiGroup


# QueryJson item titles, as the search form labels the fields. The server matches on
# ``Field``; the title only mirrors what a browser sends (the form labels CLC 分类号).
FIELD_TITLES = {
    "CLC": "分类号",
    "SU": "主题",
    "TKA": "篇关摘",
    "KY": "关键词",
    "TI": "题名",
    "AU": "作者",
    "AF": "单位",
    "FU": "基金",
}

_SEARCH_FROM_NEW = 1  # QueryJson SearchFrom of a new search ...
_SEARCH_FROM_TURN = 4  # ... and of a page turn
_OPERATOR_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class Protocol:
    """Builds kns8s URLs, QueryJson and grid forms for one site (CNKI or the stand-in).

    Every argument is validated here (ValueError naming it), so a wrong value stops the crawler
    at start instead of being sent to CNKI round after round; config.py turns the same checks
    into a ConfigError naming the file, section and key.
    """

    def __init__(
        self,
        base_url: str = default_settings.CNKI_BASE_URL,
        page_size: int = default_settings.CNKI_PAGE_SIZE,
        max_pages: int | None = None,
        category_field: str = default_settings.CNKI_CATEGORY_FIELD,
        category_operator: str = default_settings.CNKI_CATEGORY_OPERATOR,
        category_mode: str = default_settings.CNKI_CATEGORY_MODE,
        client_id_url: str = default_settings.CNKI_CLIENT_ID_URL,
        cap_rows: int = default_settings.CNKI_CAP_ROWS,
    ):
        for name, url in (("base_url", base_url), ("client_id_url", client_id_url)):
            if not str(url).startswith(("http://", "https://")):
                raise ValueError(f"{name}: expected an http(s):// URL, got {url!r}")
        if int(page_size) not in PAGE_SIZES:
            raise ValueError(
                f"page_size: expected one of {', '.join(map(str, PAGE_SIZES))} (CNKI rejects "
                f"any other), got {page_size!r}"
            )
        if int(cap_rows) < int(page_size):
            raise ValueError(f"cap_rows: expected at least one page ({page_size}), got {cap_rows}")
        if max_pages is not None and int(max_pages) < 0:
            raise ValueError(
                f"max_pages: expected 0 (= cap_rows / page_size) or more, got {max_pages}"
            )
        if category_mode not in CATEGORY_MODES:
            raise ValueError(
                f"category_mode: expected one of {', '.join(CATEGORY_MODES)}, got {category_mode!r}"
            )
        if not _OPERATOR_RE.match(category_field or ""):
            raise ValueError(
                f"category_field: expected a field code such as CLC, got {category_field!r}"
            )
        if not _OPERATOR_RE.match(category_operator or ""):
            raise ValueError(
                f"category_operator: expected an operator such as SUFFIX, got {category_operator!r}"
            )
        self.base_url = base_url.rstrip("/")
        self.client_id_url = client_id_url
        self.page_size = int(page_size)
        self.cap_rows = int(cap_rows)
        # CNKI's own limit is in rows (6000 whatever the page size); max_pages may only lower it.
        pages = self.cap_rows // self.page_size
        self.max_pages = min(pages, int(max_pages)) if max_pages else pages
        self.category_field = category_field.upper()
        self.category_operator = category_operator.upper()
        self.category_mode = category_mode

    def __repr__(self) -> str:
        return (
            f"Protocol({self.base_url!r}, page_size={self.page_size}, "
            f"max_pages={self.max_pages}, category={self.category_mode}:"
            f"{self.category_field}/{self.category_operator})"
        )

    # -- URLs ---------------------------------------------------------------------------

    @property
    def home_url(self) -> str:
        """The session warm-up page: a GET here sets the kns8s cookies."""
        return self.base_url + HOME_PATH

    @property
    def grid_url(self) -> str:
        """Where list pages are POSTed."""
        return self.base_url + GRID_PATH

    def referer(self, doc_type: str) -> str:
        """The Referer a browser sends with a grid POST for this document type."""
        return self.base_url + RESOURCES[doc_type].referer_path

    def absolute(self, url: str) -> str:
        """Resolve a link as found on a page (absolute, relative or ``//host/...``).

        An empty link stays empty: resolving it would give the base URL, and fetching the
        home page as a "detail" would hide the problem instead of reporting it.
        """
        url = (url or "").strip()
        return urljoin(self.base_url + "/", url) if url else ""

    # -- which rows a search keeps ----------------------------------------------------------

    @staticmethod
    def keeps(doc_type: str, dbname: str) -> bool:
        """True if a list row of database ``dbname`` belongs to ``doc_type``'s documents.

        A single-database search (patents, achievements) lists only its own rows: every one is
        kept, its dbname (``SCPD2017``) is part of the document's key, never a filter. A 总库
        search lists every database its KuaKuCode names (and CNKI may add others): rows are kept
        by their own dbname's family, matched by prefix (``CJFDLAST2015`` is a CJFD row).
        """
        res = RESOURCES[doc_type]
        if res.resource != CROSSDB:
            return True
        name = (dbname or "").strip().upper()
        return any(name.startswith(family) for family in res.dbnames)

    # -- list requests ------------------------------------------------------------------

    def _category_item(self, code: str) -> dict[str, Any]:
        return {
            "Field": self.category_field,
            "Value": code,
            "Operator": self.category_operator,
            "Logic": 0,
            "Title": FIELD_TITLES.get(self.category_field, ""),
        }

    @staticmethod
    def _facet_group(res: Resource, *codes: str) -> dict[str, Any]:
        """The left-hand 学科 facet as a browser sends it (PROTOCOL.md, 2026 point 6); several
        ticked codes are several items, each Logic 1 (OR)."""
        items = [
            {
                "Key": code,
                "Title": "",
                "Logic": 1,
                "Field": FACET_GROUP,
                "Operator": "DEFAULT",
                "Value": code,
                "Value2": "",
                "Name": FACET_GROUP,
            }
            for code in codes
        ]
        return {
            "Key": res.facet_group,
            "Title": "",
            "Logic": 0,
            "Items": [],
            "ChildItems": [
                {"Key": FACET_GROUP, "Title": "", "Logic": 0, "Items": items, "ChildItems": []}
            ],
        }

    def query_json(self, search: Search, new_search: bool) -> str:
        """The QueryJson form value (a JSON string inside the form, never a JSON body)."""
        res = RESOURCES[search.doc_type]
        subject_items = []
        if search.query:
            # the expert search's one item, as its page sends it (docs/QUERY.md: the form's
            # expression box); the round's category and day are AND'ed beside it (Logic 0)
            subject_items.append(
                {
                    "Key": "Expert",
                    "Title": "",
                    "Logic": 0,
                    "Field": "EXPERT",
                    "Operator": 0,
                    "Value": search.query,
                    "Value2": "",
                }
            )
        if search.category and self.category_mode == "subject":
            subject_items.append(self._category_item(search.category))
        if search.any_of and self.category_mode == "subject":
            # the form's several 分类号 rows joined by OR: the first row's Logic is 0, each next
            # row's Logic 1 (OR) (PROTOCOL.md 2026 point 6)
            for i, code in enumerate(search.any_of):
                subject_items.append(dict(self._category_item(code), Logic=1 if i else 0))
        if search.title:
            subject_items.append(
                {
                    "Field": "TI",
                    "Value": search.title,
                    "Operator": "DEFAULT",
                    "Logic": 0,
                    "Title": "题名",
                }
            )
        date_item = {
            "Key": "span[value=PT]",
            "Title": "发表时间",
            "Logic": 0,
            "Field": "PT",
            "Operator": 7,
            "Value": search.day_start,
            "Value2": search.day_end,
        }
        qgroups = [
            # The Subject group is always sent, empty when there is no condition, so the
            # shape of the query never depends on the round.
            {"Key": "Subject", "Title": "", "Logic": 0, "Items": subject_items, "ChildItems": []},
            {
                "Key": "ControlGroup",
                "Title": "",
                "Logic": 0,
                "Items": [date_item],
                "ChildItems": [],
            },
        ]
        if search.category and self.category_mode == "facet":
            qgroups.append(self._facet_group(res, search.category))
        if search.any_of and self.category_mode == "facet":
            qgroups.append(self._facet_group(res, *search.any_of))
        query = {
            "Platform": "",
            "Resource": res.resource,
            "Classid": res.classid,
            "Products": "",
            "QNode": {"QGroup": qgroups},
            "ExScope": 1,
            # 4 is the expert search's type (its page's QueryJson), 2 the advanced form's
            "SearchType": 4 if search.query else 2,
            "Rlang": res.rlang,
            "KuaKuCode": res.kuaku_code,
            "Expands": {},
            "SearchFrom": _SEARCH_FROM_NEW if new_search else _SEARCH_FROM_TURN,
        }
        return json.dumps(query, ensure_ascii=False, separators=(",", ":"))

    def grid_form(
        self, search: Search, page: int, turn_token: str | None, new_search: bool | None = None
    ) -> dict[str, str]:
        """The form of one grid POST.

        ``turn_token`` is ``ListPage.turn_token`` of the previous page (None on page 1).
        ``new_search`` defaults to ``page == 1``; pass True to restart a search at a later
        page (for example in a renewed session that has never seen the query).
        """
        if page < 1:
            raise ValueError(f"page numbers start at 1, got {page}")
        if new_search is None:
            new_search = page == 1
        res = RESOURCES[search.doc_type]
        form = {
            "boolSearch": "true" if new_search else "false",
            "QueryJson": self.query_json(search, new_search),
            "pageNum": str(page),
            "pageSize": str(self.page_size),
            "sortField": search.sort_field,
            "sortType": search.sort_type,
            "dstyle": "listmode",
            "boolSortSearch": "false",
            "sentenceSearch": "false",
            # Not a database filter (KuaKuCode is): a browser sends it empty or as the page's
            # full product list, so it is sent empty.
            "productStr": "",
            "searchFrom": res.search_from,
            "CurPage": str(page),
            "turnpage": turn_token or "",
        }
        if new_search:
            # A browser sends the search summary ("aside") only with a new search.
            form["aside"] = ""
        return form

    @staticmethod
    def grid_headers() -> dict[str, str]:
        """Headers of a grid POST: CNKI answers a request without them with a refusal."""
        return {
            "X-Requested-With": "XMLHttpRequest",
            "Content-Type": "application/x-www-form-urlencoded; charset=UTF-8",
        }

    # -- facet counts (group/result) ----------------------------------------------------

    @property
    def group_url(self) -> str:
        """Where a search's facet counts are POSTed (PROTOCOL.md, 2026 point 23)."""
        return self.base_url + GROUP_PATH

    def group_request_args(
        self, search: Search, group_ids: list[str] | tuple[str, ...]
    ) -> tuple[str, dict[str, str], dict[str, str]]:
        """``(url, formdata, headers)`` of the group/result POST counting ``search``'s rows by
        ``group_ids``: the grid's QueryJson of a new search, in the grid's session, headers and
        Referer (the result page sends both)."""
        headers = dict(self.grid_headers(), Referer=self.referer(search.doc_type))
        form = group_form(self.query_json(search, new_search=True), group_ids)
        return self.group_url, form, headers

    # -- the citation export ------------------------------------------------------------

    @property
    def export_url(self) -> str:
        """Where export ids are POSTed for their citation records."""
        return self.base_url + EXPORT_PATH

    @staticmethod
    def export_form(export_ids: list[str] | tuple[str, ...]) -> dict[str, str]:
        """The form of one GetExport POST: the ids comma-joined (as
        LongMarching/cnki-search-skill sends them), the platform, the three display modes.

        The ids are the list rows' ``input.cbItem`` values, opaque: a blank one, or one
        holding the comma that joins them, is refused here (ValueError) rather than sent."""
        ids = [str(i).strip() for i in export_ids]
        if not ids:
            raise ValueError("export_form: no export ids")
        for i in ids:
            if not i or "," in i or any(c.isspace() for c in i):
                raise ValueError(f"export_form: {i!r} is not an export id")
        return {
            "filename": ",".join(ids),
            "uniplatform": EXPORT_PLATFORM,
            "displaymode": EXPORT_MODES,
        }

    def export_headers(self, referer: str | None = None) -> dict[str, str]:
        """Headers of a GetExport POST, as the list page's script sends them."""
        return {
            "X-Requested-With": "XMLHttpRequest",
            "Content-Type": "application/x-www-form-urlencoded; charset=UTF-8",
            "Origin": self.base_url,
            "Referer": referer or self.home_url,
        }

    # -- the result cap -----------------------------------------------------------------

    @property
    def cap(self) -> int:
        """How many rows one search order can reach (6000, whatever the page size)."""
        return min(self.cap_rows, self.page_size * self.max_pages)

    def reachable(self, total: int) -> int:
        """How many of ``total`` results one search order can list."""
        return max(0, min(int(total), self.cap))

    def page_count(self, total: int) -> int:
        """How many list pages a search with ``total`` results has, within the cap:
        ``min(ceil(total / page_size), cap_rows // page_size)`` (and ``max_pages``)."""
        return min(math.ceil(max(0, int(total)) / self.page_size), self.max_pages)


def group_form(query_json: str, group_ids: Sequence[str], aside: str = "") -> dict[str, str]:
    """The form CNKI's result page POSTs to group/result for the grid's ``query_json``.

    ``group_ids``: each a group id (``CCL``) or a facet of several ids, given joined
    (``ZYZT|||CYZT``) or as a tuple/list (joined here with ``|||``).
    """
    if not str(query_json or "").strip():
        raise ValueError("query_json: expected the grid's QueryJson, got nothing")
    ids = []
    for group in group_ids:
        gid = "|||".join(group) if isinstance(group, (tuple, list)) else str(group)
        if not gid.strip() or "," in gid:
            raise ValueError(f"group_ids: expected group ids such as CCL, got {group!r}")
        ids.append(gid.strip())
    if not ids:
        raise ValueError("group_ids: expected at least one group id")
    return {
        "queryJson": query_json,
        "groupIds": ",".join(ids),
        "manageId": "",
        "aside": aside or "",
        "subject": "",
    }


def parse_client_id(body: bytes | str) -> str:
    """The id in CNKI's client-id answer ``{"Success":true,"Data":"<id>"}``.

    Raises ValueError (with what was wrong) for anything else: a session without its
    ``Ecp_ClientId`` is refused by CNKI later, so the warm-up must fail now, loudly.
    """
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        data = json.loads(body)
    except ValueError:
        raise ValueError(f"client-id answer is not JSON: {body[:80]!r}") from None
    if not isinstance(data, dict) or data.get("Success") is not True:
        raise ValueError(f"client-id answer without Success true: {body[:80]!r}")
    value = data.get("Data")
    if not isinstance(value, (str, int)) or not str(value).strip():
        raise ValueError(f"client-id answer without an id in Data: {body[:80]!r}")
    value = str(value).strip()
    if any(c in value for c in ';,= \t\r\n"'):
        # it becomes a cookie value as is: never let the answer inject other cookies
        raise ValueError(f"client-id {value[:40]!r} is not a plain token")
    return value


def protocol_from_settings(settings: Any) -> Protocol:
    """Build the :class:`Protocol` from Scrapy settings (or any mapping with ``get``).

    A setting missing or empty (config.ini's ``base_url =``) is its default."""

    def get(name: str) -> Any:
        value = settings.get(name)
        return getattr(default_settings, name) if value in (None, "") else value

    return Protocol(
        base_url=str(get("CNKI_BASE_URL")),
        page_size=int(get("CNKI_PAGE_SIZE")),
        max_pages=int(get("CNKI_MAX_PAGES")) or None,
        category_field=str(get("CNKI_CATEGORY_FIELD")),
        category_operator=str(get("CNKI_CATEGORY_OPERATOR")),
        category_mode=str(get("CNKI_CATEGORY_MODE")).lower(),
        client_id_url=str(get("CNKI_CLIENT_ID_URL")),
        cap_rows=int(get("CNKI_CAP_ROWS")),
    )
