"""The local stand-in of the CNKI site: kns8s protocol, CNKI's markup, limits and faults.

No machine here reaches cnki.net, so the crawler is proven against this site: the test bed of
every other part, the offline demo (``cnkispider demo``) and the target of the benchmarks, which
is why it is a package of its own beside ``cnkispider/`` and not part of ``tests/``. It is at least as strict as
CNKI in 2026 (docs/CONTRACTS.md, the 2026 contract, points 1-9), and it never imports the
crawler's code, so that it stays an independent judge. Modules:

  corpus    the deterministic corpus from a seed: counts, documents by filename, ground truth,
            made of searching (what a search finds, in list order), arrivals (the site's
            today: late entries, withdrawn ones) and generation (a document's fields)
  catalogue what the corpus is made of: types and fields, databases, category trees, options
  vocab     the word lists titles, people and institutions are drawn from
  markup    CNKI's list fragment and the hand-made detail pages, rendered once per document
  limits    sessions, client ids, detail tokens, the pace guard, the per-IP rate limit, the
            fault plan, the proxy provider
  site      the site's state and its dispatch, made of gate (sessions, the person's check,
            challenges, the guards before a page), grid (list pages, group/result), detail
            (detail page, reference list), export (GetExport) and control (the test endpoints)
  options   the site's options and break_ modes;  wire  a request, a response
  server    the asyncio HTTP/1.1 server and the proxy ports
  client    start a site in a subprocess, and a browser-like http.client of the protocol
            (the ``cnki_site`` pytest fixture over it is tests/fixtures/standin.py)
  __main__  ``python -m standin [options]`` and ``python -m standin truth ...``

What the site does (each is a test in tests/test_cnki_site.py, the person's check in
tests/test_standin_human.py):

- The person's check (PROTOCOL.md 2026 point 11; on in ``python -m standin``, off in the Python
  API and the ``cnki_site`` fixture unless ``human_check=True``; ``--no-human-check``). Every kns
  request (warm-up, ``/kns8s/search``, ``/kns8s/AdvSearch``, grid, detail) of a session no person
  passed is challenged: page GETs ``302`` to ``/verify/home?captchaType=blockPuzzle&ident=..
  &captchaId=..&returnUrl=<the page, urlencoded>``, grid POSTs HTTP 403 with the -403 JSON below.
  ``/verify/home`` is a page a browser can use: it sets the session cookies (and an
  ``Ecp_ClientId``) when the browser has none, and its slider (a piece to drag onto a gap; the
  release posts the piece's place and the drag's time to ``/verify-api/web/check``, which passes
  only a drag that ends on the gap in a person's time) is the person's check: the session of that
  browser's ``SID_kns_new`` cookie is passed (the IP plays no part) and the browser goes back to
  ``returnUrl``. A pass answers at most ``session_requests`` (300) requests within
  ``session_minutes`` (30), and is checked again at the request that makes more than
  ``session_pace`` (1.5) requests/s over ``session_pace_window`` (10 s) or ``session_burst`` (4)
  within 2 s (all hidden from the crawler); from then on every request of it is challenged until
  a person passes it again. The warm-up then starts no session (only the verify page does); a
  detail link answers only with the cookie of the session that listed it (else the 302);
  ``turn_limit`` defaults to 0. ``/_stats["human_check"]`` lists every pass (session, requests by
  kind, documents served, why and when it was checked again: limit, minutes, pace, control,
  idle) with the limits;
  ``/_control`` takes ``expire_session`` and ``check_after`` (client: ``SiteHandle.pass_check()``,
  ``expire_session()``, ``check_after()``).
- Warm-up. ``GET /kns8s/defaultresult/index`` starts a session: cookies ``KNS2COOKIE``,
  ``SID_kns_new`` (the session) and ``dblang=both``; no ``Ecp_ClientId``.
- Client id. ``GET /RCDService/api/UtilityOpenApi/GenerateClientID`` answers
  ``{"Success":true,"Data":"<id>"}`` (application/json). A grid POST whose ``Ecp_ClientId``
  cookie is missing or was never issued here, or whose ``SID_kns_new`` names no live session,
  gets HTTP 403 ``{"code":-403,"message":"<base>/verify/home?captchaType=blockPuzzle&ident=..
  &captchaId=..&returnUrl=<the Referer, urlencoded>"}``.
- Resources (QueryJson ``Resource``/``Classid``/``KuaKuCode``; ``productStr`` is ignored):
  ``CROSSDB`` (总库) without KuaKuCode is rejected: ``<p class="no-content" value="查询对象结构错误,
  没有指定检索分类！">抱歉，暂无数据，请稍后重试。</p>``. With a list it shows exactly the listed
  databases: ``YSTT4HG0`` CJFQ+CAPJ, ``LSTPFY1C`` CMFD+CDFD, and for each of the other eight ids of
  the browser's full list rows of a "foreign" database (CPFD, CCND, ...) that are not in the paper
  ground truth. A single database (``PATENT``, ``ACHIEVEMENTS``, ``JOURNAL``, ``DISSERTATION``)
  with a non-empty KuaKuCode is a genuine zero (``抱歉，暂无数据，请调整检索条件``).
- Categories. A ``CLC`` item with ``Operator SUFFIX`` (or any operator but TOPRANK) and a ``CCL``
  item of the facet group (``SCDBGroup``/``MutiGroup``) match code prefixes; ``CLC`` with
  ``TOPRANK`` matches only documents carrying exactly that code (so ``H04`` finds nothing).
  Several ``CLC`` rows in a group are read as the search form sends them: a row with ``Logic``
  1 is OR'd with the row before it, with 0 AND'd (documents under both); the facet's ticked
  codes are OR'd. A ``Logic`` that is not the integer 0, 1 or 2 is refused
  (``value="参数校验;字段【Logic】校验失败"``); NOT (2) on a category is not modelled (暂无数据，
  请稍后重试).
- Genuine zeros answer ``抱歉，暂无数据，请调整检索条件``; with ``zero_as_soft_block`` they answer
  the soft block's 105 bytes exactly (PROTOCOL.md point 13: a crawler cannot tell them apart).
- Database names: CNKI's real shapes by default (PROTOCOL.md point 12; ``--no-dbname-years``,
  ``dbname_years=False``: the families' bare names ``SCPD``, ``CJFQ``, ``CAPJ``, ``CMFD``, ``CDFD``,
  ``SNAD``): ``SCPD`` + the
  publication year, ``CJFQ``/``CJFDLAST2024``/``CJFD2024``, ``CAPJ``, ``CMFD202401``/``CDFD202402``,
  ``SNAD``, the same on list rows, detail links, detail pages and the ground truth.
- Page size and cap. ``pageSize`` other than 10, 20, 50: ``value="参数校验;字段【pageSize】校验失败"``.
  A search reaches ``cap_rows`` rows (6000) whatever the page size: pages shown =
  min(ceil(total / size), cap // size); a page whose first row is past the cap or the total:
  ``value="起始游标越界"``.
- Patent list rows are patent markup: ``td.inventor a``, ``td.applicant``, two ``td.date``
  (申请日, then 公开日 = the round's day = the truth's ``date``), ``td.data`` 中国专利. On a share
  of rows (``collect_missing``, default 0.3) ``a.icon-collect`` is absent and the detail link
  carries ``dbcode``/``dbname``/``filename``; ``rows_without_keys`` drops the key from both.
  ``header_rows`` (default 0) is the share of list pages whose ``tbody`` starts with a header
  row in ``<td>`` cells (序号 / 题名 / ...), which a crawler must skip.
- Detail pages carry ``input#abstract_text`` (the full abstract; an achievement's 成果简介); the
  visible ``#ChDivSummary`` / ``.abstract-text`` is cut to 100 characters + "…". Patent label
  pairs use ``.row-1 .rowtit`` / ``.row-2 .rowtit2``; the main claim is ``.claim > h5 + div``
  (one page in five the older ``div.claim-text``); a paper's CLC is ``p.clc-code``.
- Pace (``pace_limit`` requests/s, 0 = off, hidden from the crawler): warm-up, grid and detail
  requests are counted per session (``SID_kns_new``, or a detail token's session) and per IP over
  a sliding 2 s window. A session over it is blocked ``pace_block_seconds`` (30): its grid POSTs
  get the 105-byte soft block ``<div id="briefBox"><p class="no-content" value="">抱歉，暂无数据，
  请稍后重试。</p></div>`` (+3 spaces), its page GETs 302 to ``/verify/home?captchaType=
  blockPuzzle|clickWord&ident=..&returnUrl=..``. An IP over it, until quiet for
  ``pace_block_seconds``: grid POSTs get the -403 JSON (403, one in four as 200), page GETs a
  ``<form id="vericodeForm" action="/kns8s/brief/checkcode">`` page (three in ten) or the 302.
  The fixed ``turn_limit`` (15 turns per session; 0 = none; 0 by default with the person's
  check) also answers with the soft block.
- The realistic year (``--profile realistic-year``, ``--surge-rows``; off by default): patents
  only on Tuesdays and Fridays (CNIPA's publication days), papers every day (fewer at weekends),
  class sizes Zipf-skewed (sections, then each class's children), ordinary days ``--scale`` times
  CNKI's size (about 36,000 patents a publication day, 5,500 papers a weekday), and a few surge
  days of ``--surge-rows`` documents whatever the scale (patents 1, 1 and 3 times it, papers 1
  and 4), so a crawler must split them. ``/_truth`` and ``/_rounds`` follow it (benchmark:
  ``bench/requests_per_doc.py``; tests: tests/test_standin_year.py).
- ``/_stats``: ``requests`` (to CNKI's routes) and ``kinds`` (the same by route: warmup, grid,
  detail, client_id, verify, home, other), ``searches`` (grid POSTs read as a search: ``first``
  pages, of them ``uncategorised`` and ``zero``, and page ``turns``), ``challenged`` (``total`` and per form:
  soft_block, verify_redirect, json_403, json_200, vericode_form), ``challenged_by`` (session,
  ip, turn_limit, human_check), ``rejections`` (no_category, page_size, cursor), ``pace_blocks`` and the rest.
- Ground truth: ``/_truth``, ``/_rounds``, ``/_doomed`` and ``python -m standin truth``
  list only documents a correct crawler stores (no foreign 总库 rows); none of the above changes it.
- "Come back later" (``throttle`` requests/s per IP, 0 = off; PROTOCOL.md 2026 point 18): the
  grid or detail request past it closes the address's window for ``throttle_seconds`` (3) and is
  answered 429 with ``Retry-After`` in seconds (or an HTTP date: ``throttle_date``; none:
  ``throttle_silent``), and so is every request inside the window; ``/_stats`` ``throttled``
  counts them (``closed``, ``inside``, ``told``: inside, sent after the client had its 429).
- Also: detail tokens tied to their session, the old per-IP token-bucket ban, injected faults,
  latency, proxies (dead ones, auth) and a proxy provider, as before.

Probe support. ``break_`` (fixture ``break_="NAME"`` or a list, CLI ``--break NAME``, repeatable,
``/_control {"break": [...]}``) makes one assumption of ``cnkispider probe`` false:

  client-id        GenerateClientID answers 404 (so every grid POST gets the -403 JSON)
  date-filter      the PT condition is ignored: every search covers the span's first 7 days,
                   so a one-day total equals a month's
  category-filter  the category condition (CLC or CCL) is ignored: totals do not narrow
  turn-token       every page turn (pageNum > 1) gets the soft block, whatever ``turnpage`` says
  detail-fields    detail pages lose their main labelled fields: patents 申请日 and 申请人, papers
                   their authors, achievements 成果完成人
  patent-keys      as ``rows_without_keys``: patent rows carry no key at all
  census-short     a category search (CLC or CCL) loses one document in ten: the categories
                   of a day add up to less than its search without category (its census)
  references-html  the reference API answers an HTML page instead of JSON (a refusal, never
                   "no references")
"""
